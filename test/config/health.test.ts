// `volumeHealth` (top level) and `healthPolicy` (per class), issue 19: defaults, case-insensitive
// keys, YAML 1.1 scalars, validation with key paths, and their place in the config hash and diff.
import { describe, expect, it } from 'vitest';
import { diffConfigs } from '../../src/config/diff.ts';
import { parseConfig } from '../../src/config/parse.ts';
import { DEFAULT_HEALTH_POLICY, DEFAULT_VOLUME_HEALTH, type ProvisionerConfig } from '../../src/config/types.ts';

const CLASS = `fast:
  hostDir: /mnt/fast
  mountDir: /mnt/fast
`;

function ok(files: Record<string, string>): ProvisionerConfig {
  const r = parseConfig(files);
  if (!r.ok) throw new Error(JSON.stringify(r.errors));
  return r.config;
}

function errors(files: Record<string, string>): string[] {
  const r = parseConfig(files);
  if (r.ok) throw new Error('expected the config to be rejected');
  return r.errors.map((e) => `${e.path}: ${e.message}`);
}

describe('volumeHealth', () => {
  it('absent: undefined in the config (the defaults apply: checks on, no PV label, full off), and the hash of an older config is unchanged', () => {
    const c = ok({ storageClassMap: CLASS });
    expect(c.volumeHealth).toBeUndefined();
    expect(DEFAULT_VOLUME_HEALTH).toEqual({ enabled: true, annotatePVs: false });
    expect(c.storageClassMap['fast']!.healthPolicy).toBeUndefined();
    expect(DEFAULT_HEALTH_POLICY).toEqual({ deleteMissingAvailable: false, gracePeriodMs: 10 * 60_000 });
  });

  it('reads every key, case-insensitively, with YAML 1.1 booleans', () => {
    const c = ok({ storageClassMap: CLASS, VolumeHealth: 'Enabled: no\nANNOTATEPVS: on\nfullThresholdPercent: 85.5\n' });
    expect(c.volumeHealth).toEqual({ enabled: false, annotatePVs: true, fullThresholdPercent: 85.5 });
  });

  it('an empty map gives the defaults', () => {
    expect(ok({ storageClassMap: CLASS, volumeHealth: '{}' }).volumeHealth).toEqual({ enabled: true, annotatePVs: false });
  });

  it('rejects wrong types and an out-of-range threshold, naming the key path', () => {
    expect(errors({ storageClassMap: CLASS, volumeHealth: 'enabled: maybe\nfullThresholdPercent: 0\n' })).toEqual([
      'volumeHealth.enabled: expected a boolean (true/false, yes/no, on/off), got string "maybe"',
      'volumeHealth.fullThresholdPercent: fullThresholdPercent 0 is out of range: want a percentage above 0 and at most 100 (leave it out to turn the full condition off)',
    ]);
    expect(errors({ storageClassMap: CLASS, volumeHealth: 'fullThresholdPercent: 101' })[0]).toMatch(/^volumeHealth\.fullThresholdPercent: fullThresholdPercent 101 is out of range/);
    expect(errors({ storageClassMap: CLASS, volumeHealth: 'fullThresholdPercent: "90%"' })).toEqual([
      'volumeHealth.fullThresholdPercent: expected a number (percentage of used capacity, e.g. 90), got string "90%"',
    ]);
    expect(errors({ storageClassMap: CLASS, volumeHealth: '[1]' })[0]).toMatch(/^volumeHealth: expected a map with enabled, annotatePVs, fullThresholdPercent/);
  });

  it('warns about an unknown key inside it, with the nearest known one', () => {
    const r = parseConfig({ storageClassMap: CLASS, volumeHealth: 'anotatePVs: true' });
    expect(r.ok).toBe(true);
    expect(r.warnings?.map((w) => w.path)).toEqual(['volumeHealth.anotatePVs']);
    expect(r.warnings?.[0]?.message).toContain('annotatePVs');
  });

  it('is part of the hash and of the diff of a reload', () => {
    const a = parseConfig({ storageClassMap: CLASS });
    const b = parseConfig({ storageClassMap: CLASS, volumeHealth: 'annotatePVs: true' });
    if (!a.ok || !b.ok) throw new Error('parse failed');
    expect(a.hash).not.toBe(b.hash);
    expect(diffConfigs(a.config, b.config)).toEqual(['volumeHealth']);
  });
});

describe('storageClassMap.<class>.healthPolicy', () => {
  it('reads deleteMissingAvailable and gracePeriod (case-insensitive keys); missing keys take the defaults', () => {
    const c = ok({ storageClassMap: `${CLASS}  HealthPolicy:\n    DeleteMissingAvailable: yes\n    gracePeriod: 1h30m\n` });
    expect(c.storageClassMap['fast']!.healthPolicy).toEqual({ deleteMissingAvailable: true, gracePeriodMs: 90 * 60_000 });
    const d = ok({ storageClassMap: `${CLASS}  healthPolicy:\n    deleteMissingAvailable: true\n` });
    expect(d.storageClassMap['fast']!.healthPolicy).toEqual({ deleteMissingAvailable: true, gracePeriodMs: 10 * 60_000 });
  });

  it('rejects a bad duration, a zero grace period, a bare number and a non-boolean, with key paths', () => {
    const bad = (policy: string): string[] => errors({ storageClassMap: `${CLASS}  healthPolicy:\n${policy}` });
    expect(bad('    gracePeriod: 10 minutes\n')[0]).toMatch(/^storageClassMap\.fast\.healthPolicy\.gracePeriod: /);
    expect(bad('    gracePeriod: 0s\n')).toEqual(['storageClassMap.fast.healthPolicy.gracePeriod: gracePeriod "0s" is zero; want from 1ms to 596h31m23.647s']);
    expect(bad('    gracePeriod: 600\n')[0]).toContain('a bare number is not a duration');
    expect(bad('    deleteMissingAvailable: sometimes\n')).toEqual([
      'storageClassMap.fast.healthPolicy.deleteMissingAvailable: expected a boolean (true/false, yes/no, on/off), got string "sometimes"',
    ]);
  });

  it('a change of the policy is a change of the class in the diff of a reload', () => {
    const a = parseConfig({ storageClassMap: CLASS });
    const b = parseConfig({ storageClassMap: `${CLASS}  healthPolicy:\n    deleteMissingAvailable: true\n` });
    if (!a.ok || !b.ok) throw new Error('parse failed');
    expect(diffConfigs(a.config, b.config)).toEqual(['storageClassMap.fast.healthPolicy']);
  });
});
