// checkOverlappingDirs of src/config/parse.ts, one error per pair of classes (mutation testing,
// docs/cleanup.md "Mutation testing"); validation.test.ts, rule 20, has the main cases.
import { describe, expect, it } from 'vitest';
import { errors } from './fixtures.ts';

const classes = (c: Record<string, readonly [string, string]>): string =>
  Object.entries(c)
    .map(([name, [h, m]]) => `${name}:\n  hostDir: ${h}\n  mountDir: ${m}\n`)
    .join('');

describe('checkOverlappingDirs: one error per pair of classes', () => {
  it('two classes nested in each other both ways (hostDir of each inside the other\'s mountDir) are one error, on the first', () => {
    const errs = errors({ storageClassMap: classes({ a: ['/x/h', '/y'], b: ['/y/h', '/x'] }) });
    expect(errs.map((e) => e.path)).toEqual(['storageClassMap.a.hostDir']);
    expect(errs[0]!.message).toMatch(/^hostDir "\/x\/h" of storage class a lies inside mountDir "\/x" of storage class b: /);
  });

  it('every overlapping pair is reported, not only the first one', () => {
    const errs = errors({ storageClassMap: classes({ a: ['/mnt/a', '/c/a'], b: ['/mnt/a/x', '/c/b'], c: ['/srv/c', '/c/c'], d: ['/srv/c/y', '/c/d'] }) });
    expect(errs.map((e) => e.path)).toEqual(['storageClassMap.b.hostDir', 'storageClassMap.d.hostDir']);
  });

  it('the same directory as hostDir of one class and mountDir of another is reported on the later class only', () => {
    for (const [c, path] of [
      [{ a: ['/mnt/d', '/c/a'], b: ['/h/b', '/mnt/d'] }, 'storageClassMap.b.mountDir'],
      [{ a: ['/h/a', '/mnt/d'], b: ['/mnt/d', '/c/b'] }, 'storageClassMap.b.hostDir'],
    ] as const) {
      const errs = errors({ storageClassMap: classes(c) });
      expect(errs.map((e) => e.path)).toEqual([path]);
      expect(errs[0]!.message).toContain(' is ');
    }
  });
});
