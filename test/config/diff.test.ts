import { describe, expect, it } from 'vitest';
import { diffConfigs } from '../../src/config/diff.ts';
import { parseConfig } from '../../src/config/parse.ts';
import type { ProvisionerConfig } from '../../src/config/types.ts';
import { configMapData, HELM_CONFIGMAP } from './fixtures.ts';

function cfg(files: Record<string, string>): ProvisionerConfig {
  const r = parseConfig(files);
  if (!r.ok) throw new Error(JSON.stringify(r.errors));
  return r.config;
}

const base = configMapData(HELM_CONFIGMAP);
const sc = base['storageClassMap']!;

describe('diffConfigs', () => {
  it('finds nothing between equal configs, even when written differently', () => {
    const a = cfg(base);
    const b = cfg({ ...base, useJobForCleaning: 'True', setPVOwnerRef: 'on', minResyncPeriod: '90m' });
    expect(diffConfigs(a, b)).toEqual([]);
    expect(diffConfigs(a, a)).toEqual([]);
  });

  it('lists added and removed classes', () => {
    const a = cfg(base);
    const b = cfg({
      ...base,
      storageClassMap: 'fast-disks:\n  hostDir: /mnt/fast-disks\n  mountDir: /mnt/fast-disks\n  blockCleanerCommand: ["/scripts/shred.sh", "2"]\n  fsType: ext4\n  selector: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [worker-1, worker-2]}]}]\nslow:\n  hostDir: /mnt/slow\n  mountDir: /mnt/slow\n',
    });
    expect(diffConfigs(a, b)).toEqual(['storageClassMap.block-disks (removed)', 'storageClassMap.slow (added)']);
  });

  it('lists changed class fields, including ones removed back to a default', () => {
    const a = cfg(base);
    const b = cfg({
      ...base,
      storageClassMap: sc
        .replace('namePattern: "*"', 'namePattern: "sd*"')
        .replace(/ *fsType: ext4\n/, '')
        .replace('worker-2', 'worker-3')
        .replace('volumeMode: Block', 'volumeMode: Filesystem'),
    });
    expect(diffConfigs(a, b)).toEqual([
      'storageClassMap.block-disks.volumeMode',
      'storageClassMap.fast-disks.fsType',
      'storageClassMap.fast-disks.namePattern',
      'storageClassMap.fast-disks.selector',
    ]);
  });

  it('lists changed and removed top-level keys by their ConfigMap names', () => {
    const a = cfg({ ...base, labelsForPV: 'a: b' });
    const { useJobForCleaning: _u, jobTolerations: _j, ...rest } = base;
    const b = cfg({ ...rest, minResyncPeriod: '10m', useNodeNameOnly: 'yes', nodeLabelsForPV: '[x]' });
    expect(diffConfigs(a, b)).toEqual([
      'nodeLabelsForPV',
      'useJobForCleaning',
      'jobTolerations',
      'minResyncPeriod',
      'useNodeNameOnly',
      'labelsForPV',
    ]);
  });

  it('lists every class and key when there is no previous config', () => {
    const b = cfg(base);
    expect(diffConfigs(undefined, b)).toEqual([
      'storageClassMap.block-disks (added)',
      'storageClassMap.fast-disks (added)',
      'nodeLabelsForPV',
      'useAlphaAPI',
      'useJobForCleaning',
      'jobTolerations',
      'minResyncPeriod',
      'useNodeNameOnly',
      'labelsForPV',
      'setPVOwnerRef',
      'removeNodeNotReadyTaint',
      'provisionerNotReadyNodeTaintKey',
      'volumeHealth',
    ]);
  });
});
