import { describe, expect, it } from 'vitest';
import { globMatch, globSyntaxError, matchesNamePattern } from '../../src/util/glob.ts';

// [pattern, name, expected match, malformed?] — the cases of Go's path/filepath TestMatch table.
const goTable: readonly (readonly [string, string, boolean, boolean])[] = [
  ['abc', 'abc', true, false],
  ['*', 'abc', true, false],
  ['*c', 'abc', true, false],
  ['a*', 'a', true, false],
  ['a*', 'abc', true, false],
  ['a*', 'ab/c', false, false],
  ['a*/b', 'abc/b', true, false],
  ['a*/b', 'a/c/b', false, false],
  ['a*b*c*d*e*/f', 'axbxcxdxe/f', true, false],
  ['a*b*c*d*e*/f', 'axbxcxdxexxx/f', true, false],
  ['a*b*c*d*e*/f', 'axbxcxdxe/xxx/f', false, false],
  ['a*b*c*d*e*/f', 'axbxcxdxexxx/fff', false, false],
  ['a*b?c*x', 'abxbbxdbxebxczzx', true, false],
  ['a*b?c*x', 'abxbbxdbxebxczzy', false, false],
  ['ab[c]', 'abc', true, false],
  ['ab[b-d]', 'abc', true, false],
  ['ab[e-g]', 'abc', false, false],
  ['ab[^c]', 'abc', false, false],
  ['ab[^b-d]', 'abc', false, false],
  ['ab[^e-g]', 'abc', true, false],
  ['a\\*b', 'a*b', true, false],
  ['a\\*b', 'ab', false, false],
  ['a?b', 'a☺b', true, false],
  ['a[^a]b', 'a☺b', true, false],
  ['a???b', 'a☺b', false, false],
  ['a[^a][^a][^a]b', 'a☺b', false, false],
  ['[a-ζ]*', 'α', true, false],
  ['*[a-ζ]', 'A', false, false],
  ['a?b', 'a/b', false, false],
  ['a*b', 'a/b', false, false],
  ['[\\]a]', ']', true, false],
  ['[\\-]', '-', true, false],
  ['[x\\-]', 'x', true, false],
  ['[x\\-]', '-', true, false],
  ['[x\\-]', 'z', false, false],
  ['[\\-x]', 'x', true, false],
  ['[\\-x]', '-', true, false],
  ['[\\-x]', 'a', false, false],
  ['[]a]', ']', false, true],
  ['[-]', '-', false, true],
  ['[x-]', 'x', false, true],
  ['[x-]', '-', false, true],
  ['[x-]', 'z', false, true],
  ['[-x]', 'x', false, true],
  ['[-x]', '-', false, true],
  ['[-x]', 'a', false, true],
  ['\\', 'a', false, true],
  ['[a-b-c]', 'a', false, true],
  ['[', 'a', false, true],
  ['[^', 'a', false, true],
  ['[^bc', 'a', false, true],
  ['a[', 'a', false, true],
  ['a[', 'ab', false, true],
  ['a[', 'x', false, true],
  ['a/b[', 'x', false, true],
  ['*x', 'xxx', true, false],
];

describe('globMatch (Go filepath.Match table)', () => {
  for (const [pattern, name, want, bad] of goTable) {
    it(`${JSON.stringify(pattern)} vs ${JSON.stringify(name)}`, () => {
      if (bad) {
        expect(() => globMatch(pattern, name)).toThrow(new Error('syntax error in pattern'));
        expect(globSyntaxError(pattern)).toMatch(/^syntax error in pattern/);
      } else {
        expect(globMatch(pattern, name)).toBe(want);
        expect(globSyntaxError(pattern)).toBeUndefined();
      }
    });
  }
});

describe('globMatch details', () => {
  it('matches the empty pattern only against the empty name', () => {
    expect(globMatch('', '')).toBe(true);
    expect(globMatch('', 'a')).toBe(false);
    expect(globMatch('*', '')).toBe(true);
    expect(globMatch('?', '')).toBe(false);
  });

  it('gives a leading dot no special meaning', () => {
    expect(globMatch('*', '.hidden')).toBe(true);
    expect(globMatch('?hidden', '.hidden')).toBe(true);
  });

  it('collapses consecutive stars and still refuses to cross /', () => {
    expect(globMatch('a**c', 'abbbc')).toBe(true);
    expect(globMatch('a**c', 'ab/bc')).toBe(false);
    expect(globMatch('*/*', 'x/y')).toBe(true);
    expect(globMatch('*', 'x/y')).toBe(false);
  });

  it('treats * inside a class as a literal', () => {
    expect(globMatch('a[*]b', 'a*b')).toBe(true);
    expect(globMatch('a[*]b', 'axb')).toBe(false);
  });

  it('lets a class (unlike ? and *) match a slash, as Go does', () => {
    expect(globMatch('a[/]b', 'a/b')).toBe(true);
    expect(globMatch('a[^x]b', 'a/b')).toBe(true);
  });

  it('escapes any character with a backslash, inside and outside classes', () => {
    expect(globMatch('\\?', '?')).toBe(true);
    expect(globMatch('\\?', 'a')).toBe(false);
    expect(globMatch('\\[x]', '[x]')).toBe(true);
    expect(globMatch('[\\^a]', '^')).toBe(true);
    expect(globMatch('\\é', 'é')).toBe(true);
  });

  it('treats ] outside a class and [ inside one as literals', () => {
    expect(globMatch('a]', 'a]')).toBe(true);
    expect(globMatch('[[]', '[')).toBe(true);
  });

  it('works on UTF-8 bytes like Go (a star may stop inside a multi-byte rune)', () => {
    // Go: "*??" skips the first byte of "€" (e2 82 ac) and each ? then eats one invalid byte.
    expect(globMatch('*??', '€')).toBe(true);
    expect(globMatch('??', '€')).toBe(false);
    expect(globMatch('?', '€')).toBe(true);
    expect(globMatch('[€]', '€')).toBe(true);
    expect(globMatch('[^€]', '€')).toBe(false);
    expect(globMatch('[😀-😂]', '😁')).toBe(true);
  });

  it('handles typical disk patterns', () => {
    expect(globMatch('nvme*', 'nvme0n1')).toBe(true);
    expect(globMatch('sd[b-d]', 'sdc')).toBe(true);
    expect(globMatch('sd[b-d]', 'sda')).toBe(false);
    expect(globMatch('disk-?', 'disk-10')).toBe(false);
  });

  it('reports a malformed pattern even when the name matches an earlier part', () => {
    expect(() => globMatch('a*[', 'a')).toThrow('syntax error in pattern');
    expect(() => globMatch('*', 'a')).not.toThrow();
    expect(globSyntaxError('x[a-')).toMatch(/^syntax error in pattern: /);
  });

  it('is linear enough on pathological patterns', () => {
    const name = 'a'.repeat(2000);
    const start = performance.now();
    expect(globMatch('*a*a*a*a*a*a*a*a*b', name)).toBe(false);
    expect(performance.now() - start).toBeLessThan(2000);
  });
});

describe('matchesNamePattern', () => {
  it('splits on commas without trimming and skips empty pieces', () => {
    expect(matchesNamePattern('nvm*,sdb*', 'sdb1')).toBe(true);
    expect(matchesNamePattern('nvm*,sdb*', 'nvme0')).toBe(true);
    expect(matchesNamePattern('nvm*,sdb*', 'sda')).toBe(false);
    expect(matchesNamePattern('nvm*, sdb*', 'sdb1')).toBe(false);
    expect(matchesNamePattern('nvm*, sdb*', ' sdb1')).toBe(true);
    expect(matchesNamePattern(',,a,', 'a')).toBe(true);
    expect(matchesNamePattern('', 'a')).toBe(false);
    expect(matchesNamePattern(',', 'a')).toBe(false);
  });

  it('throws on a malformed piece reached before any match, like Go', () => {
    expect(() => matchesNamePattern('[,a', 'a')).toThrow('syntax error in pattern');
    expect(matchesNamePattern('a,[', 'a')).toBe(true);
    expect(() => matchesNamePattern('a,[', 'b')).toThrow('syntax error in pattern');
  });
});
