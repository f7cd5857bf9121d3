import { describe, expect, it } from 'vitest';
import { canonicalJson, configHash, parseConfig } from '../../src/config/parse.ts';
import type { ConfigError, ParseResult } from '../../src/config/types.ts';
import { configMapData, errors, HELM_CONFIGMAP, ok } from './fixtures.ts';

/** The single error of a config that has exactly one. */
function onlyError(files: Record<string, string>): ConfigError {
  const errs = errors(files);
  expect(errs).toHaveLength(1);
  return errs[0] as ConfigError;
}

function warnings(r: ParseResult): readonly ConfigError[] {
  return r.warnings ?? [];
}

const CLASS = 'local:\n  hostDir: /mnt/disks\n  mountDir: /mnt/disks\n';
/** CLASS as parsed, every unset class key at its Go default. */
const DEFAULT_CLASS = {
  hostDir: '/mnt/disks',
  mountDir: '/mnt/disks',
  blockCleanerCommand: ['/scripts/quick_reset.sh'],
  volumeMode: 'Filesystem',
  namePattern: '*',
};

describe('parseConfig: the helm chart ConfigMap', () => {
  it('loads every key with the Go provisioner meaning', () => {
    const r = parseConfig(configMapData(HELM_CONFIGMAP));
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.config).toEqual({
      storageClassMap: {
        'block-disks': {
          hostDir: '/dev/disk/by-id',
          mountDir: '/dev/disk/by-id',
          blockCleanerCommand: ['/scripts/quick_reset.sh'],
          volumeMode: 'Block',
          namePattern: 'nvme-*,scsi-*',
        },
        'fast-disks': {
          hostDir: '/mnt/fast-disks',
          mountDir: '/mnt/fast-disks',
          blockCleanerCommand: ['/scripts/shred.sh', '2'],
          volumeMode: 'Filesystem',
          fsType: 'ext4',
          namePattern: '*',
          selector: [
            { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: ['worker-1', 'worker-2'] }] },
          ],
        },
      },
      nodeLabelsForPV: ['topology.kubernetes.io/zone', 'kubernetes.io/hostname'],
      useAlphaAPI: false,
      useJobForCleaning: true,
      jobTolerations: [
        { effect: 'NoSchedule', operator: 'Exists' },
        { key: 'node-role.kubernetes.io/control-plane', operator: 'Exists', effect: 'NoSchedule' },
      ],
      minResyncPeriodMs: 90 * 60_000,
      useNodeNameOnly: false,
      labelsForPV: {},
      setPVOwnerRef: true,
      removeNodeNotReadyTaint: false,
      provisionerNotReadyNodeTaintKey: '',
    });
    expect(r.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(warnings(r)).toEqual([]);
  });
});

describe('parseConfig: defaults', () => {
  it('gives the Go defaults for an empty ConfigMap, with a warning that nothing is configured', () => {
    const r = parseConfig({});
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.config).toEqual({
      storageClassMap: {},
      nodeLabelsForPV: [],
      useAlphaAPI: false,
      useJobForCleaning: false,
      jobTolerations: [],
      minResyncPeriodMs: 5 * 60_000,
      useNodeNameOnly: false,
      labelsForPV: {},
      setPVOwnerRef: false,
      removeNodeNotReadyTaint: false,
      provisionerNotReadyNodeTaintKey: '',
    });
    expect(warnings(r).map((w) => w.path)).toEqual(['storageClassMap']);
  });

  it('treats empty values (null) as absent at every level', () => {
    const c = ok({
      storageClassMap:
        'local:\n  hostDir: /mnt/disks\n  mountDir: /mnt/disks\n  blockCleanerCommand:\n  volumeMode:\n  namePattern: ~\n  fsType: null\n  accessMode:\n  selector:\n',
      nodeLabelsForPV: '',
      useAlphaAPI: '',
      useJobForCleaning: '~',
      jobTolerations: 'null',
      minResyncPeriod: '',
      labelsForPV: '# nothing\n',
      provisionerNotReadyNodeTaintKey: '',
    });
    expect(c.storageClassMap['local']).toEqual(DEFAULT_CLASS);
    expect(c.minResyncPeriodMs).toBe(300_000);
    expect(c.jobTolerations).toEqual([]);
    expect(c.nodeLabelsForPV).toEqual([]);
    expect(c.useJobForCleaning).toBe(false);
  });

  it('defaults an empty-string volumeMode and namePattern like Go', () => {
    const c = ok({ storageClassMap: `${CLASS}  volumeMode: ""\n  namePattern: ""\n  fsType: ""\n  accessMode: ""\n` });
    expect(c.storageClassMap['local']).toEqual(DEFAULT_CLASS);
  });
});

describe('parseConfig: every key', () => {
  it('reads every top-level and class key', () => {
    const c = ok({
      storageClassMap:
        'ssd:\n  hostDir: /mnt/ssd\n  mountDir: /host/ssd\n  blockCleanerCommand: ["/scripts/dd_zero.sh", "2"]\n  volumeMode: Block\n  accessMode: ReadWriteOncePod\n  fsType: xfs\n  namePattern: "sd[b-d],nvme*"\n  selector:\n  - matchFields:\n    - key: metadata.name\n      operator: In\n      values: [node-a]\n  - matchExpressions:\n    - key: disktype\n      operator: Exists\n',
      nodeLabelsForPV: '[a.b/c, d]',
      useAlphaAPI: 'true',
      useJobForCleaning: 'true',
      jobTolerations: '- key: dedicated\n  operator: Equal\n  value: storage\n  effect: NoExecute\n  tolerationSeconds: 30\n',
      minResyncPeriod: '10m',
      useNodeNameOnly: 'true',
      labelsForPV: 'team: storage\ntier: "1"\n',
      setPVOwnerRef: 'true',
      removeNodeNotReadyTaint: 'true',
      provisionerNotReadyNodeTaintKey: 'example.com/not-ready',
    });
    expect(c).toEqual({
      storageClassMap: {
        ssd: {
          hostDir: '/mnt/ssd',
          mountDir: '/host/ssd',
          blockCleanerCommand: ['/scripts/dd_zero.sh', '2'],
          volumeMode: 'Block',
          accessMode: 'ReadWriteOncePod',
          fsType: 'xfs',
          namePattern: 'sd[b-d],nvme*',
          selector: [
            { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['node-a'] }] },
            { matchExpressions: [{ key: 'disktype', operator: 'Exists' }] },
          ],
        },
      },
      nodeLabelsForPV: ['a.b/c', 'd'],
      useAlphaAPI: true,
      useJobForCleaning: true,
      jobTolerations: [{ key: 'dedicated', operator: 'Equal', value: 'storage', effect: 'NoExecute', tolerationSeconds: 30 }],
      minResyncPeriodMs: 600_000,
      useNodeNameOnly: true,
      labelsForPV: { team: 'storage', tier: '1' },
      setPVOwnerRef: true,
      removeNodeNotReadyTaint: true,
      provisionerNotReadyNodeTaintKey: 'example.com/not-ready',
    });
  });

  it('accepts every access mode', () => {
    for (const mode of ['ReadWriteOnce', 'ReadOnlyMany', 'ReadWriteMany', 'ReadWriteOncePod']) {
      expect(ok({ storageClassMap: `${CLASS}  accessMode: ${mode}\n` }).storageClassMap['local']!.accessMode).toBe(mode);
    }
  });

  it('warns that useAlphaAPI cannot work on current API servers', () => {
    const r = parseConfig({ storageClassMap: CLASS, useAlphaAPI: 'yes' });
    expect(warnings(r).map((w) => w.path)).toEqual(['useAlphaAPI']);
  });
});

describe('parseConfig: YAML 1.1 booleans (sigs.k8s.io/yaml)', () => {
  const TRUE = ['y', 'Y', 'yes', 'Yes', 'YES', 'true', 'True', 'TRUE', 'on', 'On', 'ON'];
  const FALSE = ['n', 'N', 'no', 'No', 'NO', 'false', 'False', 'FALSE', 'off', 'Off', 'OFF'];
  const BOOL_KEYS = ['useAlphaAPI', 'useJobForCleaning', 'useNodeNameOnly', 'setPVOwnerRef', 'removeNodeNotReadyTaint'] as const;

  for (const form of TRUE) {
    it(`reads ${form} as true for every boolean key`, () => {
      for (const key of BOOL_KEYS) {
        const files: Record<string, string> = { storageClassMap: CLASS, [key]: `${form}\n` };
        if (key === 'removeNodeNotReadyTaint') files['provisionerNotReadyNodeTaintKey'] = 'a/b';
        expect(ok(files)[key]).toBe(true);
      }
    });
  }
  for (const form of FALSE) {
    it(`reads ${form} as false`, () => {
      for (const key of BOOL_KEYS) expect(ok({ storageClassMap: CLASS, [key]: form })[key]).toBe(false);
    });
  }

  it('rejects quoted booleans and other words, as Go does', () => {
    for (const text of ['"true"', "'yes'", 'enabled', '1', '[true]']) {
      const errs = errors({ storageClassMap: CLASS, useJobForCleaning: text });
      expect(errs).toHaveLength(1);
      expect(errs[0]).toMatchObject({ path: 'useJobForCleaning', file: 'useJobForCleaning', line: 1 });
      expect(errs[0]!.message).toMatch(/^expected a boolean/);
    }
  });
});

describe('parseConfig: case-insensitive keys', () => {
  it('matches ConfigMap keys, class keys, toleration keys and selector keys in any case', () => {
    const upper = ok({
      STORAGECLASSMAP:
        'local:\n  HOSTDIR: /mnt/disks\n  MountDir: /mnt/disks\n  VOLUMEMODE: Block\n  NamePattern: "nvme*"\n  blockcleanercommand: [/x]\n  SELECTOR:\n  - MATCHEXPRESSIONS:\n    - KEY: zone\n      Operator: In\n      VALUES: [a]\n',
      UseJobForCleaning: 'yes',
      jobtolerations: '- KEY: a\n  OPERATOR: Exists\n  Effect: NoExecute\n  TOLERATIONSECONDS: 5\n',
      MINRESYNCPERIOD: '1m',
      labelsforpv: 'A: b\n',
    });
    const exact = ok({
      storageClassMap:
        'local:\n  hostDir: /mnt/disks\n  mountDir: /mnt/disks\n  volumeMode: Block\n  namePattern: "nvme*"\n  blockCleanerCommand: [/x]\n  selector:\n  - matchExpressions:\n    - key: zone\n      operator: In\n      values: [a]\n',
      useJobForCleaning: 'yes',
      jobTolerations: '- key: a\n  operator: Exists\n  effect: NoExecute\n  tolerationSeconds: 5\n',
      minResyncPeriod: '1m',
      labelsForPV: 'A: b\n',
    });
    expect(upper).toEqual(exact);
    // map keys that are data (class names, label keys) keep their case
    expect(Object.keys(upper.labelsForPV)).toEqual(['A']);
  });

  it('ignores unknown keys with a warning naming their path and line', () => {
    const r = parseConfig({ storageClassMap: `${CLASS}  hostdirectory: /x\n`, 'README.md': 'hello', useJobForCleaning: 'yes' });
    expect(r.ok).toBe(true);
    expect(warnings(r)).toEqual([
      { path: 'README.md', file: 'README.md', message: 'unknown key "README.md" ignored' },
      { path: 'storageClassMap.local.hostdirectory', file: 'storageClassMap', line: 4, message: 'unknown key "hostdirectory" ignored' },
    ]);
  });

  it('keeps the last of two spellings of one field, with a warning', () => {
    const r = parseConfig({ storageClassMap: `${CLASS}  FSTYPE: ext4\n  fsType: xfs\n` });
    expect(r.ok && r.config.storageClassMap['local']!.fsType).toBe('xfs');
    expect(warnings(r).map((w) => [w.path, w.line])).toEqual([['storageClassMap.local.fsType', 5]]);
  });

  it('rejects one field given by two ConfigMap keys (Go would pick one at random)', () => {
    const errs = errors({ storageClassMap: CLASS, useJobForCleaning: 'yes', USEJOBFORCLEANING: 'no' });
    expect(errs.map((e) => e.path)).toEqual(['useJobForCleaning']);
    expect(errs[0]!.message).toContain('set by two ConfigMap keys');
  });

  it('keeps the last of two identical class names, with a warning', () => {
    const r = parseConfig({ storageClassMap: `${CLASS}other:\n  hostDir: /a\n  mountDir: /a\nlocal:\n  hostDir: /b\n  mountDir: /b\n` });
    expect(r.ok && r.config.storageClassMap['local']!.hostDir).toBe('/b');
    expect(warnings(r).map((w) => [w.path, w.line])).toEqual([['storageClassMap.local', 7]]);
  });
});

describe('parseConfig: scalars into string fields are stringified like Go', () => {
  it('turns booleans, integers and floats into Go strings', () => {
    const c = ok({
      storageClassMap: `${CLASS}  namePattern: yes\n  fsType: 123\n  blockCleanerCommand: [/scripts/shred.sh, 2, 0x10, 1.50, on, 1e6]\n`,
      // 1e6 would be "1e+06", not a valid label value (rejected: test/config/validation.test.ts)
      labelsForPV: 'c: 1.50\nd: 0755\nf: no\ng: 2001-12-14\nh:\n',
      nodeLabelsForPV: '[1, true, 3.25]',
      removeNodeNotReadyTaint: 'yes',
      provisionerNotReadyNodeTaintKey: '12',
    });
    const cls = c.storageClassMap['local']!;
    expect(cls.namePattern).toBe('true');
    expect(cls.fsType).toBe('123');
    expect(cls.blockCleanerCommand).toEqual(['/scripts/shred.sh', '2', '16', '1.5', 'true', '1e+06']);
    expect(c.labelsForPV).toEqual({ c: '1.5', d: '493', f: 'false', g: '2001-12-14', h: '' });
    expect(c.nodeLabelsForPV).toEqual(['1', 'true', '3.25']);
    expect(c.provisionerNotReadyNodeTaintKey).toBe('12');
  });

  it('stringifies non-string map keys (class names and label keys) like Go', () => {
    const c = ok({ storageClassMap: '123:\n  hostDir: /a\n  mountDir: /a\n', labelsForPV: '1.50: x\ntrue: z\ny: "y"\n' });
    expect(Object.keys(c.storageClassMap)).toEqual(['123']);
    // a plain y is a YAML 1.1 boolean, so Go reads the key `y` as "true" (the later one wins)
    expect(c.labelsForPV).toEqual({ '1.5': 'x', true: 'y' });
  });

  it('rejects maps and lists where a string is expected', () => {
    const errs = errors({
      storageClassMap: `${CLASS}  fsType: [ext4]\n  namePattern: {a: b}\n  blockCleanerCommand: [/x, {a: b}]\n`,
      labelsForPV: 'a: [1]\n',
      nodeLabelsForPV: '[a, [b]]',
      provisionerNotReadyNodeTaintKey: '{}',
    });
    expect(errs.map((e) => [e.path, e.line])).toEqual([
      ['storageClassMap.local.blockCleanerCommand[1]', 6],
      ['storageClassMap.local.fsType', 4],
      ['storageClassMap.local.namePattern', 5],
      ['nodeLabelsForPV[1]', 1],
      ['labelsForPV.a', 1],
      ['provisionerNotReadyNodeTaintKey', 1],
    ]);
    for (const e of errs) expect(e.message).toMatch(/^expected a string, got (a map|a list)$/);
  });
});

describe('parseConfig: minResyncPeriod', () => {
  const cases: [string, number][] = [
    ['5m', 300_000],
    ['5m0s', 300_000],
    ['1h30m', 5_400_000],
    ['90s', 90_000],
    ['1.5h', 5_400_000],
    ['300ms', 300],
    ['"2m"', 120_000],
    ['0s', 0],
  ];
  for (const [text, ms] of cases) {
    it(`reads ${text}`, () => {
      expect(ok({ storageClassMap: CLASS, minResyncPeriod: text }).minResyncPeriodMs).toBe(ms);
    });
  }

  it('rejects a bare number, as Go does', () => {
    expect(onlyError({ storageClassMap: CLASS, minResyncPeriod: '300' })).toEqual({
      path: 'minResyncPeriod',
      file: 'minResyncPeriod',
      line: 1,
      message: 'expected a Go duration string such as "5m0s" or "1h30m", got number 300 (a bare number is not a duration: add a unit, e.g. 300s)',
    });
  });

  it('rejects strings that are not durations, negative durations and non-scalars', () => {
    for (const text of ['"300"', '5 minutes', '-5m', 'true', '[5m]']) {
      const errs = errors({ storageClassMap: CLASS, minResyncPeriod: `\n${text}` });
      expect(errs.map((e) => [e.path, e.line])).toEqual([['minResyncPeriod', 2]]);
    }
  });
});

describe('parseConfig: validation errors carry path, file and line', () => {
  it('reports YAML syntax errors with their line', () => {
    const e = onlyError({ storageClassMap: `${CLASS}  namePattern: [a\n  fsType: ext4\n`, useJobForCleaning: 'yes' });
    expect(e).toMatchObject({ path: 'storageClassMap', file: 'storageClassMap' });
    expect(e.message).toMatch(/^YAML syntax error/);
    expect(e.line).toBeGreaterThanOrEqual(4);
  });

  it('reports a wrong type for each kind of key', () => {
    const errs = errors({
      storageClassMap: '- a\n',
      nodeLabelsForPV: 'abc',
      useAlphaAPI: '[1]',
      jobTolerations: 'a: b',
      labelsForPV: '[a]',
    });
    expect(errs.map((e) => [e.path, e.message])).toEqual([
      ['storageClassMap', 'expected a map of storage class name to settings, got a list'],
      ['nodeLabelsForPV', 'expected a list of strings, got string "abc"'],
      ['useAlphaAPI', 'expected a boolean (true/false, yes/no, on/off), got a list'],
      ['jobTolerations', 'expected a list of tolerations, got a map'],
      ['labelsForPV', 'expected a map of strings, got a list'],
    ]);
  });

  it('reports a class that is not a map', () => {
    const e = onlyError({ storageClassMap: 'local: /mnt/disks\n' });
    expect(e).toMatchObject({ path: 'storageClassMap.local', line: 1 });
    expect(e.message).toBe('expected a storage class entry (map), got string "/mnt/disks"');
  });

  it('keeps the Go message for a missing hostDir or mountDir', () => {
    const errs = errors({ storageClassMap: 'local-storage:\n  hostDir: /mnt/disks\nempty:\n' });
    expect(errs.map((e) => [e.path, e.line])).toEqual([
      ['storageClassMap.local-storage.mountDir', 1],
      ['storageClassMap.empty.hostDir', 3],
      ['storageClassMap.empty.mountDir', 3],
    ]);
    expect(errs[0]!.message).toContain('Storage Class local-storage is misconfigured, missing HostDir or MountDir parameter');
    expect(errs[1]!.message).toContain('Storage Class empty is misconfigured, missing HostDir or MountDir parameter');
  });

  it('rejects relative paths', () => {
    const errs = errors({ storageClassMap: 'local:\n  hostDir: mnt/disks\n  mountDir: ./disks\n' });
    expect(errs.map((e) => [e.path, e.line, e.message])).toEqual([
      ['storageClassMap.local.hostDir', 2, 'hostDir "mnt/disks" must be an absolute path'],
      ['storageClassMap.local.mountDir', 3, 'mountDir "./disks" must be an absolute path'],
    ]);
  });

  it('rejects two classes sharing a hostDir or a mountDir (trailing slashes do not hide it)', () => {
    const errs = errors({
      storageClassMap: 'a:\n  hostDir: /mnt/x\n  mountDir: /m/a\nb:\n  hostDir: /mnt/x/\n  mountDir: /m/b\nc:\n  hostDir: /mnt/c\n  mountDir: /m//a\n',
    });
    expect(errs.map((e) => [e.path, e.line, e.message])).toEqual([
      ['storageClassMap.b.hostDir', 5, 'hostDir "/mnt/x/" is already used by storage class a'],
      ['storageClassMap.c.mountDir', 9, 'mountDir "/m//a" is already used by storage class a'],
    ]);
  });

  it('rejects a volumeMode other than exactly Block or Filesystem', () => {
    const e = onlyError({ storageClassMap: `${CLASS}  volumeMode: WrongFilesystem\n` });
    expect(e).toEqual({ path: 'storageClassMap.local.volumeMode', file: 'storageClassMap', line: 4, message: 'unsupported volume mode WrongFilesystem' });
    expect(onlyError({ storageClassMap: `${CLASS}  volumeMode: block\n` }).message).toBe('unsupported volume mode block');
  });

  it('rejects an empty block cleaner command', () => {
    const e = onlyError({ storageClassMap: `${CLASS}  blockCleanerCommand: []\n` });
    expect(e).toMatchObject({ path: 'storageClassMap.local.blockCleanerCommand', line: 4, message: 'Invalid empty block cleaner command for class local' });
    expect(onlyError({ storageClassMap: `${CLASS}  blockCleanerCommand: /scripts/x.sh\n` }).message).toBe(
      'expected a list of strings, got string "/scripts/x.sh"',
    );
    expect(onlyError({ storageClassMap: `${CLASS}  blockCleanerCommand:\n  - null\n` })).toMatchObject({
      path: 'storageClassMap.local.blockCleanerCommand[0]',
      line: 5,
    });
  });

  it('rejects a namePattern with a glob syntax error', () => {
    const e = onlyError({ storageClassMap: `${CLASS}  namePattern: "nvme*,sd[b"\n` });
    expect(e).toMatchObject({ path: 'storageClassMap.local.namePattern', line: 4 });
    expect(e.message).toMatch(/^namePattern piece "sd\[b": syntax error in pattern/);
  });

  it('warns about a namePattern made only of commas', () => {
    const r = parseConfig({ storageClassMap: `${CLASS}  namePattern: ",,"\n` });
    expect(r.ok).toBe(true);
    expect(warnings(r).map((w) => w.path)).toEqual(['storageClassMap.local.namePattern']);
  });

  it('rejects an unknown access mode', () => {
    const e = onlyError({ storageClassMap: `${CLASS}  accessMode: RWO\n` });
    expect(e).toMatchObject({ path: 'storageClassMap.local.accessMode', line: 4 });
    expect(e.message).toContain('unsupported access mode "RWO"');
  });

  it('rejects a storage class name that is not a Kubernetes object name', () => {
    for (const name of ['Fast', 'fast_disks', '-fast', 'a'.repeat(254)]) {
      const e = onlyError({ storageClassMap: `${name}:\n  hostDir: /a\n  mountDir: /a\n` });
      expect(e).toMatchObject({ path: `storageClassMap.${name}`, line: 1 });
      expect(e.message).toContain('is not a valid Kubernetes object name');
    }
    expect(ok({ storageClassMap: 'fast.disks-1:\n  hostDir: /a\n  mountDir: /a\n' }).storageClassMap).toHaveProperty(['fast.disks-1']);
  });

  it('rejects removeNodeNotReadyTaint without a taint key', () => {
    const e = onlyError({ storageClassMap: CLASS, removeNodeNotReadyTaint: 'true' });
    expect(e).toMatchObject({ path: 'provisionerNotReadyNodeTaintKey', file: 'removeNodeNotReadyTaint', line: 1 });
    const e2 = onlyError({ storageClassMap: CLASS, removeNodeNotReadyTaint: 'true', provisionerNotReadyNodeTaintKey: '""' });
    expect(e2).toMatchObject({ path: 'provisionerNotReadyNodeTaintKey', file: 'provisionerNotReadyNodeTaintKey', line: 1 });
    expect(ok({ storageClassMap: CLASS, removeNodeNotReadyTaint: 'false' }).removeNodeNotReadyTaint).toBe(false);
  });

  it('warns about a taint key that no taint can have', () => {
    const r = parseConfig({ storageClassMap: CLASS, removeNodeNotReadyTaint: 'true', provisionerNotReadyNodeTaintKey: 'not a key' });
    expect(r.ok).toBe(true);
    expect(warnings(r).map((w) => [w.path, w.file])).toEqual([['provisionerNotReadyNodeTaintKey', 'provisionerNotReadyNodeTaintKey']]);
  });
});

describe('parseConfig: selector validation', () => {
  const sel = (body: string): Record<string, string> => ({ storageClassMap: `${CLASS}  selector:\n${body}` });

  it('rejects selectors of the wrong shape', () => {
    expect(errors({ storageClassMap: `${CLASS}  selector: zone=a\n` }).map((e) => [e.path, e.message])).toEqual([
      ['storageClassMap.local.selector', 'expected a list of node selector terms, got string "zone=a"'],
    ]);
    expect(errors(sel('  - zone\n')).map((e) => [e.path, e.line])).toEqual([['storageClassMap.local.selector[0]', 5]]);
    expect(errors(sel('  - {}\n')).map((e) => e.message)).toEqual(['empty node selector term: it would match no node']);
    expect(errors(sel('  - matchExpressions: {key: a}\n')).map((e) => e.path)).toEqual([
      'storageClassMap.local.selector[0].matchExpressions',
    ]);
  });

  it('checks operators and values', () => {
    const errs = errors(
      sel(
        [
          '  - matchExpressions:',
          '    - {key: zone, operator: in, values: [a]}', // 6
          '    - {key: zone, operator: In}', // 7
          '    - {key: zone, operator: Exists, values: [a]}', // 8
          '    - {key: cpus, operator: Gt, values: [many]}', // 9
          '    - {key: "bad key!", operator: Exists}', // 10
          '    - {key: cpus, operator: Lt, values: ["4"]}', // 11 ok
          '  - matchFields:',
          '    - {key: metadata.uid, operator: In, values: [a]}', // 13
          '    - {key: metadata.name, operator: In, values: [a, b]}', // 14
          '',
        ].join('\n'),
      ),
    );
    expect(errs.map((e) => [e.path, e.line])).toEqual([
      ['storageClassMap.local.selector[0].matchExpressions[0].operator', 6],
      ['storageClassMap.local.selector[0].matchExpressions[1].values', 7],
      ['storageClassMap.local.selector[0].matchExpressions[2].values', 8],
      ['storageClassMap.local.selector[0].matchExpressions[3].values', 9],
      ['storageClassMap.local.selector[0].matchExpressions[4].key', 10],
      ['storageClassMap.local.selector[1].matchFields[0].key', 13],
      ['storageClassMap.local.selector[1].matchFields[1].values', 14],
    ]);
    expect(errs[0]!.message).toContain('unsupported operator "in"');
  });
});

describe('parseConfig: jobTolerations validation', () => {
  it('accepts the usual shapes', () => {
    const c = ok({
      storageClassMap: CLASS,
      jobTolerations: '- operator: Exists\n- key: a\n  value: b\n  effect: PreferNoSchedule\n- key: c\n  operator: Exists\n  effect: NoExecute\n  tolerationSeconds: 0\n',
    });
    expect(c.jobTolerations).toEqual([
      { operator: 'Exists' },
      { key: 'a', value: 'b', effect: 'PreferNoSchedule' },
      { key: 'c', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 0 },
    ]);
  });

  it('rejects bad operators, effects and combinations', () => {
    const errs = errors({
      storageClassMap: CLASS,
      jobTolerations: [
        '- key: a', // 1
        '  operator: Equals', // 2
        '- key: a', // 3
        '  effect: NoScheduleNow', // 4
        '- key: a', // 5
        '  operator: Exists', // 6
        '  value: b', // 7
        '- value: b', // 8: empty key needs Exists
        '- key: a', // 9
        '  effect: NoSchedule', // 10
        '  tolerationSeconds: 5', // 11
        '- key: a', // 12
        '  effect: NoExecute', // 13
        '  tolerationSeconds: soon', // 14
        '- null', // 15
        '- just-a-string', // 16
        '',
      ].join('\n'),
    });
    expect(errs.map((e) => [e.path, e.line])).toEqual([
      ['jobTolerations[0].operator', 2],
      ['jobTolerations[1].effect', 4],
      ['jobTolerations[2].value', 7],
      ['jobTolerations[3].operator', 8],
      ['jobTolerations[4].tolerationSeconds', 11],
      ['jobTolerations[5].tolerationSeconds', 14],
      ['jobTolerations[6]', 15],
      ['jobTolerations[7]', 16],
    ]);
    expect(errs.every((e) => e.file === 'jobTolerations')).toBe(true);
  });
});

describe('parseConfig: everything at once', () => {
  it('reports every problem in one pass', () => {
    const r = parseConfig({
      storageClassMap: 'Bad_Name:\n  hostDir: rel\n  volumeMode: block\n  namePattern: "["\n  accessMode: RWX\n  blockCleanerCommand: []\n',
      useJobForCleaning: 'maybe',
      minResyncPeriod: '300',
      jobTolerations: '- effect: Sometimes\n  operator: Exists\n',
      removeNodeNotReadyTaint: 'on',
      labelsForPV: 'a: [1]\n',
      setPVOwnerRef: '{',
      'notes.txt': 'ignored',
    });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.errors.map((e) => e.path)).toEqual([
      'setPVOwnerRef',
      'storageClassMap.Bad_Name',
      'storageClassMap.Bad_Name.hostDir',
      'storageClassMap.Bad_Name.mountDir',
      'storageClassMap.Bad_Name.blockCleanerCommand',
      'storageClassMap.Bad_Name.volumeMode',
      'storageClassMap.Bad_Name.accessMode',
      'storageClassMap.Bad_Name.namePattern',
      'useJobForCleaning',
      'jobTolerations[0].effect',
      'minResyncPeriod',
      'labelsForPV.a',
      'provisionerNotReadyNodeTaintKey',
    ]);
    expect(warnings(r).map((w) => w.path)).toEqual(['notes.txt']);
  });
});

describe('parseConfig: hash', () => {
  const base = configMapData(HELM_CONFIGMAP);
  const baseHash = (): string => {
    const r = parseConfig(base);
    if (!r.ok) throw new Error('fixture must parse');
    return r.hash;
  };
  const hashOf = (files: Record<string, string>): string => {
    const r = parseConfig(files);
    if (!r.ok) throw new Error(JSON.stringify(r.errors));
    return r.hash;
  };

  it('equals configHash(config) and is stable across calls', () => {
    const r = parseConfig(base);
    expect(r.ok && r.hash === configHash(r.config)).toBe(true);
    expect(hashOf(base)).toBe(baseHash());
  });

  it('ignores comments, whitespace, key order, key case, quoting, yes-vs-true and file order', () => {
    const variant: Record<string, string> = {
      STORAGECLASSMAP: [
        '# the classes',
        'block-disks:   # second in the chart, first here',
        '  NamePattern: nvme-*,scsi-*',
        '  volumeMode: "Block"',
        "  mountDir: '/dev/disk/by-id'",
        '  hostDir: /dev/disk/by-id',
        '  blockCleanerCommand: ~',
        'fast-disks: {hostDir: /mnt/fast-disks, mountDir: /mnt/fast-disks, blockCleanerCommand: [/scripts/shred.sh, 2],',
        '  fsType: ext4, namePattern: "*", volumeMode: Filesystem,',
        '  selector: [{matchExpressions: [{values: [worker-1, worker-2], operator: In, key: kubernetes.io/hostname}]}]}',
        '',
      ].join('\n'),
      useJobForCleaning: 'true  # was "yes"',
      setPVOwnerRef: 'On',
      minResyncPeriod: '90m',
      nodeLabelsForPV: '[topology.kubernetes.io/zone, kubernetes.io/hostname]',
      jobTolerations: '- {operator: Exists, effect: NoSchedule}\n- {effect: NoSchedule, operator: Exists, key: node-role.kubernetes.io/control-plane}\n',
      useAlphaAPI: 'false',
      labelsForPV: '{}',
    };
    const reversed = Object.fromEntries(Object.entries(variant).reverse());
    expect(hashOf(variant)).toBe(baseHash());
    expect(hashOf(reversed)).toBe(baseHash());
  });

  it('changes with any semantic change', () => {
    const changes: Record<string, string>[] = [
      { ...base, useJobForCleaning: 'no' },
      { ...base, useAlphaAPI: 'true' },
      { ...base, minResyncPeriod: '1h31m' },
      { ...base, labelsForPV: 'a: b' },
      { ...base, nodeLabelsForPV: '[kubernetes.io/hostname]' },
      { ...base, storageClassMap: base['storageClassMap']!.replace('namePattern: "*"', 'namePattern: "sd*"') },
      { ...base, storageClassMap: base['storageClassMap']!.replace('- "2"', '- "3"') },
      { ...base, storageClassMap: base['storageClassMap']!.replace('worker-2', 'worker-3') },
      { ...base, storageClassMap: base['storageClassMap']!.replace('fsType: ext4', 'fsType: xfs') },
      { ...base, provisionerNotReadyNodeTaintKey: 'a/b' },
      { ...base, jobTolerations: '[]' },
    ];
    const seen = new Set([baseHash()]);
    for (const files of changes) {
      const h = hashOf(files);
      expect(seen.has(h)).toBe(false);
      seen.add(h);
    }
    const { jobTolerations: _dropped, ...withoutKey } = base;
    expect(hashOf(withoutKey)).not.toBe(baseHash());
  });

  it('is computed from canonical JSON with sorted keys', () => {
    const c = ok({ storageClassMap: CLASS });
    const json = canonicalJson(c);
    expect(json.startsWith('{"jobTolerations":[],"labelsForPV":{},"minResyncPeriodMs":300000,')).toBe(true);
    expect(json).toContain('"local":{"blockCleanerCommand":["/scripts/quick_reset.sh"],"hostDir":"/mnt/disks","mountDir":"/mnt/disks","namePattern":"*","volumeMode":"Filesystem"}');
    expect(JSON.parse(json)).toEqual(c);
  });
});

describe('parseConfig: results are fresh and frozen', () => {
  it('deep-freezes the config', () => {
    const c = ok(configMapData(HELM_CONFIGMAP));
    const check = (v: unknown): void => {
      if (v !== null && typeof v === 'object') {
        expect(Object.isFrozen(v)).toBe(true);
        for (const child of Object.values(v)) check(child);
      }
    };
    check(c);
    expect(() => {
      (c.storageClassMap['fast-disks']!.blockCleanerCommand as string[]).push('x');
    }).toThrow(TypeError);
    expect(() => {
      (c as { useAlphaAPI: boolean }).useAlphaAPI = true;
    }).toThrow(TypeError);
  });

  it('builds a new object on every call and never merges earlier results', () => {
    const files = configMapData(HELM_CONFIGMAP);
    const a = ok(files);
    const b = ok(files);
    expect(b).not.toBe(a);
    expect(b.storageClassMap).not.toBe(a.storageClassMap);
    expect(b).toEqual(a);
    // removing a class and a key is seen (upstream merged into the old struct and missed both)
    const { labelsForPV: _l, ...rest } = { ...files, labelsForPV: 'x: z' };
    const withLabels = ok({ ...files, labelsForPV: 'x: z' });
    expect(withLabels.labelsForPV).toEqual({ x: 'z' });
    const removed = ok({ ...rest, storageClassMap: 'only:\n  hostDir: /o\n  mountDir: /o\n' });
    expect(Object.keys(removed.storageClassMap)).toEqual(['only']);
    expect(removed.labelsForPV).toEqual({});
  });

  it('does not share the default block cleaner command array between results', () => {
    const a = ok({ storageClassMap: CLASS });
    const b = ok({ storageClassMap: CLASS });
    expect(a.storageClassMap['local']!.blockCleanerCommand).not.toBe(b.storageClassMap['local']!.blockCleanerCommand);
  });
});

describe('parseConfig: never throws', () => {
  // Small deterministic PRNG so a failure is reproducible.
  function rng(seed: number): () => number {
    let s = seed >>> 0;
    return () => {
      s = (s * 1664525 + 1013904223) >>> 0;
      return s / 2 ** 32;
    };
  }
  const ALPHABET = 'ab:- \n\t[]{}",\'*&!|>#%@`?~\\01.yY\u00e9\u20ac\ud83d';

  it('survives random garbage and random edits of a real config', () => {
    const rand = rng(42);
    const base = configMapData(HELM_CONFIGMAP);
    const keys = [...Object.keys(base), 'storageclassmap', 'junk'];
    for (let i = 0; i < 300; i++) {
      const files: Record<string, string> = { ...base };
      const key = keys[Math.floor(rand() * keys.length)]!;
      const src = files[key] ?? '';
      if (rand() < 0.5) {
        let garbage = '';
        const n = Math.floor(rand() * 80);
        for (let j = 0; j < n; j++) garbage += ALPHABET[Math.floor(rand() * ALPHABET.length)];
        files[key] = garbage;
      } else {
        const at = Math.floor(rand() * (src.length + 1));
        const cut = Math.floor(rand() * 5);
        files[key] = src.slice(0, at) + ALPHABET[Math.floor(rand() * ALPHABET.length)]! + src.slice(at + cut);
      }
      const r = parseConfig(files);
      expect(typeof r.ok).toBe('boolean');
      if (!r.ok) {
        expect(r.errors.length).toBeGreaterThan(0);
        for (const e of r.errors) expect(typeof e.message).toBe('string');
      }
    }
  });

  it('survives alias bombs, deep nesting and odd inputs', () => {
    const bomb = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]', 'b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]', 'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]', 'd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]', 'e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]', 'f: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]', ''].join('\n');
    const inputs: Record<string, string>[] = [
      { labelsForPV: bomb },
      { storageClassMap: '['.repeat(5000) },
      { storageClassMap: `${'- '.repeat(300)}x` },
      { storageClassMap: 'a: *nope' },
      { storageClassMap: '---\na: 1\n---\nb: 2\n' },
      { storageClassMap: '\u0000\u0001' },
      { storageClassMap: '? [a, b]\n: c\n' },
      { storageClassMap: '<<: 5\n' },
      { labelsForPV: '!!int abc' },
      { useJobForCleaning: '!!bool 3' },
    ];
    for (const files of inputs) {
      const r = parseConfig(files);
      expect(r.ok).toBe(false);
    }
  });
});

describe('parseConfig: hostile values', () => {
  it.each(['/', '//', '/./', '/mnt/..', '/../..', '///.//'])('rejects hostDir and mountDir %j, the root directory', (root) => {
    for (const k of ['hostDir', 'mountDir']) {
      const other = k === 'hostDir' ? 'mountDir' : 'hostDir';
      const errs = errors({ storageClassMap: `local:\n  ${other}: /mnt/disks\n  ${k}: "${root}"\n` });
      expect(errs).toEqual([
        {
          path: `storageClassMap.local.${k}`,
          file: 'storageClassMap',
          line: 3,
          message: `${k} ${JSON.stringify(root)} is the root directory: every directory under / would become a volume and be wiped when released`,
        },
      ]);
    }
  });

  it('still accepts directories right under the root', () => {
    expect(ok({ storageClassMap: 'local:\n  hostDir: /disks/\n  mountDir: /mnt\n' }).storageClassMap['local']).toMatchObject({ hostDir: '/disks/', mountDir: '/mnt' });
  });

  it('rejects a NUL byte in every string that becomes a path, an argv item, a label or a name', () => {
    const nul = 'contains a NUL byte (\\0), which no path, command or name may contain';
    const errs = errors({
      storageClassMap: 'local:\n  hostDir: "/mnt/disks\\0/x"\n  mountDir: /mnt/disks\n  blockCleanerCommand: ["/bin/sh", "-c\\x00rm"]\n  fsType: "ext4\\0"\n',
      labelsForPV: '"a\\0": b\nc: "d\\0"\n',
      nodeLabelsForPV: '- "zone\\0"\n',
    });
    expect(errs.map((e) => [e.path, e.line, e.message])).toEqual([
      ['storageClassMap.local.hostDir', 2, `the value ${nul}`],
      ['storageClassMap.local.blockCleanerCommand[1]', 4, `the value ${nul}`],
      ['storageClassMap.local.fsType', 5, `the value ${nul}`],
      ['nodeLabelsForPV[0]', 1, `the value ${nul}`],
      ['labelsForPV.a\0', 1, `the key ${nul}`],
      ['labelsForPV.c', 2, `the value ${nul}`],
    ]);
  });

  it('rejects a raw NUL byte in a file as go-yaml does, naming file and line', () => {
    expect(onlyError({ storageClassMap: 'local:\n  hostDir: /mnt/a\0b\n  mountDir: /mnt/disks\n' })).toEqual({
      path: 'storageClassMap',
      file: 'storageClassMap',
      line: 2,
      message: 'character U+0000 is not allowed in YAML (control characters are not allowed)',
    });
  });

  it('rejects minResyncPeriod longer than a timer can wait, or out of Go range, with its key path', () => {
    for (const [text, message] of [
      ['1000000h', 'minResyncPeriod "1000000h" is longer than 596h31m23.647s, the longest timer Node.js supports; want 0 or from 1ms to 596h31m23.647s'],
      ['596h31m23.648s', 'minResyncPeriod "596h31m23.648s" is longer than 596h31m23.647s, the longest timer Node.js supports; want 0 or from 1ms to 596h31m23.647s'],
      ['1ns', 'minResyncPeriod "1ns" is shorter than 1ms; want 0 or from 1ms to 596h31m23.647s'],
      ['9999999999h', 'invalid duration "9999999999h": out of range'],
    ] as const) {
      expect(errors({ storageClassMap: CLASS, minResyncPeriod: text })).toEqual([{ path: 'minResyncPeriod', file: 'minResyncPeriod', line: 1, message }]);
    }
    expect(ok({ storageClassMap: CLASS, minResyncPeriod: '596h31m23.647s' }).minResyncPeriodMs).toBe(2 ** 31 - 1);
  });
});
