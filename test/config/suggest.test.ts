import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/parse.ts';
import { editDistance, nearestKey } from '../../src/config/suggest.ts';

describe('nearestKey', () => {
  it('measures edits, a swap of neighbours counting as one', () => {
    expect(editDistance('kitten', 'sitting')).toBe(3);
    expect(editDistance('hostdri', 'hostdir')).toBe(1);
    expect(editDistance('', 'abc')).toBe(3);
  });

  it('suggests the closest known key for a typo, nothing for an unrelated key', () => {
    const known = ['storageClassMap', 'useNodeNameOnly', 'useJobForCleaning', 'labelsForPV'];
    expect(nearestKey('useNodeNameOnIy', known)).toBe('useNodeNameOnly');
    expect(nearestKey('storageClasMap', known)).toBe('storageClassMap');
    expect(nearestKey('STORAGECLASSMAPS', known)).toBe('storageClassMap');
    expect(nearestKey('README.md', known)).toBeUndefined();
    expect(nearestKey('key', ['hostDir', 'fsType'])).toBeUndefined();
  });
});

describe('unknown keys in the ConfigMap', () => {
  const scm = 'fast:\n  hostDir: /mnt/fast\n  mountDir: /mnt/fast\n';
  const messages = (files: Record<string, string>): string[] => (parseConfig(files).warnings ?? []).map((w) => `${w.path}: ${w.message}`);

  it('names the nearest known top-level key', () => {
    expect(messages({ storageClassMap: scm, useNodeNameOnIy: 'true' })).toEqual([
      'useNodeNameOnIy: unknown key "useNodeNameOnIy" ignored; did you mean "useNodeNameOnly"?',
    ]);
    expect(messages({ storageClasMap: scm })).toContain('storageClasMap: unknown key "storageClasMap" ignored; did you mean "storageClassMap"?');
  });

  it('names the nearest known key inside a class, a selector and a toleration', () => {
    const files = {
      storageClassMap: `${scm}  namePatern: "sd*"\n  selector:\n  - matchExpresions: []\n`,
      jobTolerations: '- key: a\n  operater: Exists\n',
    };
    expect(messages(files)).toEqual(
      expect.arrayContaining([
        'storageClassMap.fast.namePatern: unknown key "namePatern" ignored; did you mean "namePattern"?',
        expect.stringMatching(/^storageClassMap\.fast\.selector\[0\]\.matchExpresions: unknown key "matchExpresions" ignored; did you mean "matchExpressions"\?$/),
        expect.stringMatching(/^jobTolerations\[0\]\.operater: unknown key "operater" ignored; did you mean "operator"\?$/),
      ]),
    );
  });
});
