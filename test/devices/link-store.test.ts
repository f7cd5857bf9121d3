// Issue 21, 3: the record of the links the daemon made survives a restart; a record it cannot trust is ignored
// (its links are then kept as if hand-made, never removed).
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DEVICE_LINKS_FILE, DeviceLinkStore } from '../../src/devices/link-store.ts';

const dirs: string[] = [];
const stateDir = (): string => {
  const d = mkdtempSync(join(tmpdir(), 'lsp-links-'));
  chmodSync(d, 0o700);
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const rec = { className: 'raw', link: '/mnt/disks/raw/nvme-A', target: '/dev/disk/by-id/nvme-A', devno: '259:0' };

describe('DeviceLinkStore (issue 21, 3)', () => {
  it('keeps the records across a restart, privately', () => {
    const dir = stateDir();
    DeviceLinkStore.open(dir, 'node-1').add(rec);
    expect(DeviceLinkStore.open(dir, 'node-1').list()).toEqual([rec]);
    const file = join(dir, DEVICE_LINKS_FILE);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toMatchObject({ version: 1, node: 'node-1', links: [rec] });
    const s = DeviceLinkStore.open(dir, 'node-1');
    s.remove(rec.link);
    expect(DeviceLinkStore.open(dir, 'node-1').list()).toEqual([]);
  });

  it("ignores another node's record, a file others may write, and malformed entries", () => {
    const dir = stateDir();
    DeviceLinkStore.open(dir, 'node-1').add(rec);
    expect(DeviceLinkStore.open(dir, 'node-2').list()).toEqual([]);
    const file = join(dir, DEVICE_LINKS_FILE);
    chmodSync(file, 0o666);
    expect(DeviceLinkStore.open(dir, 'node-1').list()).toEqual([]);
    chmodSync(file, 0o600);
    writeFileSync(file, JSON.stringify({ version: 1, node: 'node-1', links: [rec, { ...rec, link: 'relative' }, { link: '/x' }] }));
    expect(DeviceLinkStore.open(dir, 'node-1').list()).toEqual([rec]);
  });

  it('lives in memory when the state dir cannot be trusted', () => {
    const dir = stateDir();
    chmodSync(dir, 0o777);
    const s = DeviceLinkStore.open(dir, 'node-1');
    s.add(rec);
    expect(s.list()).toEqual([rec]);
    chmodSync(dir, 0o700);
    expect(DeviceLinkStore.open(dir, 'node-1').list()).toEqual([]);
  });
});
