// Issue 21, point 1: the per-class deviceSelector in the ConfigMap.
import { describe, expect, it } from 'vitest';
import { diffConfigs } from '../../src/config/diff.ts';
import { parseConfig } from '../../src/config/parse.ts';

const cm = (selector: string, extra = 'volumeMode: Block'): Record<string, string> => ({
  storageClassMap: `fast:\n  hostDir: /mnt/fast\n  mountDir: /mnt/fast\n  ${extra}\n  deviceSelector:\n${selector
    .split('\n')
    .map((l) => `    ${l}`)
    .join('\n')}\n`,
});

describe('deviceSelector (issue 21, 1)', () => {
  it('reads every key, case-insensitively, sizes as Quantities', () => {
    const r = parseConfig(
      cm(['PATHS: ["/dev/disk/by-id/nvme-*", "/dev/disk/by-path/pci-*"]', 'minsize: 100Gi', 'MaxSize: 2T', 'rotational: false', 'models: ["Samsung*"]', 'vendors: [ATA]', 'maxCount: 3'].join('\n')),
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.config.storageClassMap['fast']?.deviceSelector).toEqual({
      paths: ['/dev/disk/by-id/nvme-*', '/dev/disk/by-path/pci-*'],
      minSizeBytes: 100 * 1024 ** 3,
      maxSizeBytes: 2e12,
      rotational: false,
      models: ['Samsung*'],
      vendors: ['ATA'],
      maxCount: 3,
      allowLoop: false,
    });
  });

  it('reports each bad key with its key path', () => {
    const r = parseConfig(cm(['paths: ["sda", "/dev/disk/by-id/[x"]', 'minSize: lots', 'maxSize: 1Ki', 'rotational: maybe', 'maxCount: -1', 'allowLoop: 3'].join('\n')));
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.errors.map((e) => e.path).sort()).toEqual([
      'storageClassMap.fast.deviceSelector.allowLoop',
      'storageClassMap.fast.deviceSelector.maxCount',
      'storageClassMap.fast.deviceSelector.minSize',
      'storageClassMap.fast.deviceSelector.paths[0]',
      'storageClassMap.fast.deviceSelector.paths[1]',
      'storageClassMap.fast.deviceSelector.rotational',
    ]);
  });

  it('needs paths, and rejects maxSize below minSize', () => {
    const r = parseConfig(cm('minSize: 2Gi\nmaxSize: 1Gi'));
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.errors.map((e) => [e.path, e.message.slice(0, 28)])).toEqual([
      ['storageClassMap.fast.deviceSelector.paths', 'deviceSelector needs paths: '],
      ['storageClassMap.fast.deviceSelector.maxSize', 'maxSize (1073741824 bytes) i'],
    ]);
  });

  it('a Filesystem class with a deviceSelector needs fsType (the kubelet formats the disk with it)', () => {
    const bad = parseConfig(cm('paths: [/dev/disk/by-id/*]', 'volumeMode: Filesystem'));
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.errors[0]?.message).toMatch(/needs fsType/);
    expect(parseConfig(cm('paths: [/dev/disk/by-id/*]', 'fsType: ext4')).ok).toBe(true);
  });

  it('allowLoop is accepted with a warning (tests only)', () => {
    const r = parseConfig(cm('paths: [/dev/loop*]\nallowLoop: true'));
    expect(r.ok).toBe(true);
    expect(r.warnings?.map((w) => w.path)).toEqual(['storageClassMap.fast.deviceSelector.allowLoop']);
  });

  it('is hot-reloadable: a change is a class field change like any other (new hash, field named)', () => {
    const a = parseConfig(cm('paths: [/dev/disk/by-id/nvme-*]'));
    const b = parseConfig(cm('paths: [/dev/disk/by-id/nvme-*]\nmaxCount: 1'));
    expect(a.ok && b.ok).toBe(true);
    if (!a.ok || !b.ok) return;
    expect(a.hash).not.toBe(b.hash);
    expect(diffConfigs(a.config, b.config)).toEqual(['storageClassMap.fast.deviceSelector']);
  });
});
