import { describe, expect, it } from 'vitest';
import { formatGoFloat32, goScalarString, parseGoYaml, resolvePlain } from '../../src/config/goyaml.ts';
import type { GoValue } from '../../src/config/goyaml.ts';

/** The value a plain scalar resolves to, without line numbers. */
function plain(text: string): unknown {
  const v = resolvePlain(text, undefined);
  return 'value' in v ? [v.kind, v.value] : [v.kind];
}

/** A parsed document turned into plain data (strings for Go string coercion of scalars). */
function data(text: string): unknown {
  const r = parseGoYaml(text);
  if (r.errors.length > 0 || r.value === undefined) throw new Error(JSON.stringify(r.errors));
  const strip = (v: GoValue): unknown => {
    switch (v.kind) {
      case 'map':
        return Object.fromEntries(v.entries.map((e) => [e.key, strip(e.value)]));
      case 'seq':
        return v.items.map(strip);
      case 'null':
        return null;
      default:
        return [v.kind, goScalarString(v)];
    }
  };
  return strip(r.value);
}

describe('resolvePlain (go-yaml v2 rules)', () => {
  it('resolves every YAML 1.1 boolean and null form', () => {
    for (const t of ['y', 'Y', 'yes', 'Yes', 'YES', 'true', 'True', 'TRUE', 'on', 'On', 'ON']) expect(plain(t)).toEqual(['bool', true]);
    for (const t of ['n', 'N', 'no', 'No', 'NO', 'false', 'False', 'FALSE', 'off', 'Off', 'OFF']) expect(plain(t)).toEqual(['bool', false]);
    for (const t of ['', '~', 'null', 'Null', 'NULL']) expect(plain(t)).toEqual(['null']);
    for (const t of ['yEs', 'tRUE', 'nULL', 'NuLL', 'oN']) expect(plain(t)).toEqual(['string', t]);
  });

  it('resolves integers the way strconv.ParseInt(s, 0, 64) does after dropping underscores', () => {
    expect(plain('123')).toEqual(['int', 123n]);
    expect(plain('+5')).toEqual(['int', 5n]);
    expect(plain('-5')).toEqual(['int', -5n]);
    expect(plain('0x1F')).toEqual(['int', 31n]);
    expect(plain('0o17')).toEqual(['int', 15n]);
    expect(plain('017')).toEqual(['int', 15n]);
    expect(plain('0b101')).toEqual(['int', 5n]);
    expect(plain('-0b101')).toEqual(['int', -5n]);
    expect(plain('1_000')).toEqual(['int', 1000n]);
    expect(plain('9223372036854775807')).toEqual(['int', 9223372036854775807n]);
    expect(plain('18446744073709551615')).toEqual(['int', 18446744073709551615n]); // uint64
    expect(plain('18446744073709551616')).toEqual(['float', 18446744073709551616]);
    expect(plain('08')).toEqual(['float', 8]); // not octal, but a YAML float
  });

  it('resolves floats and leaves everything else a string', () => {
    expect(plain('1.50')).toEqual(['float', 1.5]);
    expect(plain('.5')).toEqual(['float', 0.5]);
    expect(plain('1e3')).toEqual(['float', 1000]);
    expect(plain('-.inf')).toEqual(['float', -Infinity]);
    expect(plain('.NaN')).toEqual(['float', Number.NaN]);
    for (const t of ['1e999', '2001-12-14', '1.2.3', '0x', '+', '-', '.', '1h30m', '12:30', 'abc', '0xG']) {
      expect(plain(t)).toEqual(['string', t]);
    }
  });
});

describe('formatGoFloat32 (strconv.FormatFloat(f, \'g\', -1, 32))', () => {
  const cases: [number, string][] = [
    [1.5, '1.5'],
    [0.1, '0.1'],
    [100, '100'],
    [123456, '123456'],
    [1e6, '1e+06'],
    [1234567, '1.234567e+06'],
    [123456789, '1.2345679e+08'],
    [16777217, '1.6777216e+07'],
    [0.0001, '0.0001'],
    [0.00001, '1e-05'],
    [3.14159265358979, '3.1415927'],
    [-2.5, '-2.5'],
    [0, '0'],
    [1e20, '1e+20'],
    [1e-40, '1e-40'],
    [Infinity, '+Inf'],
    [-Infinity, '-Inf'],
    [Number.NaN, 'NaN'],
    [1e39, '+Inf'], // beyond float32
  ];
  for (const [f, s] of cases) {
    it(`${f} -> ${s}`, () => expect(formatGoFloat32(f)).toBe(s));
  }
});

describe('parseGoYaml', () => {
  it('keeps quoted and block scalars as strings and honours !!str', () => {
    expect(data('a: "yes"\nb: \'1.50\'\nc: |\n  yes\nd: !!str yes\ne: !!str\n')).toEqual({
      a: ['string', 'yes'],
      b: ['string', '1.50'],
      c: ['string', 'yes\n'],
      d: ['string', 'yes'],
      e: ['string', ''],
    });
  });

  it('checks explicit tags against the value', () => {
    expect(data('a: !!int "5"\nb: !!float 1\nc: !!bool yes\n')).toEqual({
      a: ['int', '5'],
      b: ['float', '1'],
      c: ['bool', 'true'],
    });
    const r = parseGoYaml('a: !!int abc\n');
    expect(r.errors).toEqual([{ message: 'cannot decode "abc" as !!int', line: 1 }]);
  });

  it('follows anchors, aliases and << merges (explicit keys win)', () => {
    expect(data('base: &b {hostDir: /a, fsType: ext4}\np:\n  <<: *b\n  fsType: xfs\nq: *b\nr:\n  <<: [{a: 1}, {a: 2, b: 3}]\n')).toEqual({
      base: { hostDir: ['string', '/a'], fsType: ['string', 'ext4'] },
      p: { fsType: ['string', 'xfs'], hostDir: ['string', '/a'] },
      q: { hostDir: ['string', '/a'], fsType: ['string', 'ext4'] },
      r: { a: ['int', '1'], b: ['int', '3'] },
    });
    expect(parseGoYaml('a:\n  <<: 5\n').errors[0]!.message).toContain('map merge');
  });

  it('gives lines of keys and values, and of syntax errors', () => {
    const r = parseGoYaml('# comment\na:\n  b: 1\n  c:\n  - x\n');
    expect(r.value?.kind).toBe('map');
    if (r.value?.kind !== 'map') return;
    const a = r.value.entries[0]!;
    expect(a.keyLine).toBe(2);
    if (a.value.kind !== 'map') throw new Error('expected a map');
    expect(a.value.entries.map((e) => [e.key, e.keyLine, e.value.line])).toEqual([
      ['b', 3, 3],
      ['c', 4, 5],
    ]);
    const bad = parseGoYaml('a: 1\nb: [1, 2\n');
    expect(bad.value).toBeUndefined();
    expect(bad.errors[0]!.message).toMatch(/^YAML syntax error: /);
    expect(bad.errors[0]!.line).toBeGreaterThanOrEqual(2);
  });

  it('reads an empty or comment-only document as null', () => {
    expect(parseGoYaml('').value?.kind).toBe('null');
    expect(parseGoYaml('# nothing\n').value?.kind).toBe('null');
  });

  it('stops alias bombs quickly, without expanding them', () => {
    const levels = ['a: &a [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 1; i < 8; i++) {
      const prev = String.fromCharCode(96 + i);
      levels.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(10).fill(`*${prev}`).join(', ')}]`);
    }
    const start = performance.now();
    const r = parseGoYaml(levels.join('\n'));
    expect(r.value).toBeUndefined();
    expect(r.errors.at(-1)!.message).toContain('alias expansion');
    expect(performance.now() - start).toBeLessThan(1000);
  });

  it('rejects nesting deeper than the limit and self-referencing aliases', () => {
    expect(parseGoYaml(`${'- '.repeat(150)}x`).errors[0]!.message).toContain('nested deeper');
    expect(parseGoYaml('a: &a [*a]\n').value).toBeUndefined();
  });
});
