// The discovery-root and display rules of src/config/paths.ts asserted directly (mutation testing,
// docs/cleanup.md "Mutation testing"); validation.test.ts covers them through parseConfig.
import { describe, expect, it } from 'vitest';
import { normalizeDir, quoteForDisplay, systemDirProblem, unprintableCharacter } from '../../src/config/paths.ts';

describe('systemDirProblem', () => {
  it('refuses the root directory itself', () => {
    expect(systemDirProblem('/')).toEqual({ root: '/', what: 'the root directory' });
  });

  it('names the /lib* root a path lies under, and why', () => {
    const os = 'part of the operating system';
    expect(systemDirProblem('/lib')).toEqual({ root: '/lib', what: os });
    expect(systemDirProblem('/lib64/modules/6.1')).toEqual({ root: '/lib64', what: os });
    expect(systemDirProblem('/libx32')).toEqual({ root: '/libx32', what: os });
    expect(systemDirProblem('/library')).toEqual({ root: '/library', what: os }); // prefix rule: every /lib* name
    expect(systemDirProblem('/mnt/lib')).toBeUndefined();
  });

  it('normalizeDir keeps "/" and drops one trailing slash', () => {
    expect(normalizeDir('/')).toBe('/');
    expect(normalizeDir('/mnt/d/')).toBe('/mnt/d');
    expect(normalizeDir('//mnt//d//')).toBe('/mnt/d');
  });
});

describe('quoteForDisplay', () => {
  it('escapes DEL, C1, bidi and format characters and line separators as \\uXXXX (JSON.stringify leaves them raw)', () => {
    expect(quoteForDisplay('a\u007fb')).toBe('"a\\u007fb"');
    expect(quoteForDisplay('a\u0085b')).toBe('"a\\u0085b"');
    expect(quoteForDisplay('/mnt/\u202edisks')).toBe('"/mnt/\\u202edisks"');
    expect(quoteForDisplay('\u2028')).toBe('"\\u2028"');
    expect(quoteForDisplay('\ufeff')).toBe('"\\ufeff"');
    expect(quoteForDisplay('/mnt/d\n')).toBe('"/mnt/d\\n"');
  });

  it('escapes a format character outside the BMP as \\u{...} (one escape, not two surrogates)', () => {
    expect(quoteForDisplay('/mnt/\u{e0001}x')).toBe('"/mnt/\\u{e0001}x"');
    expect(quoteForDisplay('\u{1d173}')).toBe('"\\u{1d173}"');
  });

  it('leaves printable text of any script as JSON.stringify writes it', () => {
    expect(quoteForDisplay('/mnt/disks/é漢 😀')).toBe(JSON.stringify('/mnt/disks/é漢 😀'));
  });

  it('unprintableCharacter gives the first such character and its index', () => {
    expect(unprintableCharacter('/mnt/\u202e/\u0007')).toEqual({ code: 'U+202E', index: 5 });
    expect(unprintableCharacter('/mnt/\u{e0001}')).toEqual({ code: 'U+E0001', index: 5 });
    expect(unprintableCharacter('/mnt/disks')).toBeUndefined();
  });
});
