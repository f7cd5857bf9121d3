// Go durations (src/util/duration.ts): the microsecond unit in its three spellings. The regular expression
// names µ by escapes so that the bundle stays ASCII (test/build/bundle.test.ts).
import { describe, expect, it } from 'vitest';
import { parseDuration } from '../../src/util/duration.ts';

describe('parseDuration', () => {
  it('reads microseconds as us, with MICRO SIGN (U+00B5) and with GREEK SMALL LETTER MU (U+03BC)', () => {
    expect(parseDuration('1500us')).toBe(1.5);
    expect(parseDuration('1500\u00b5s')).toBe(1.5);
    expect(parseDuration('1500\u03bcs')).toBe(1.5);
    expect(parseDuration('1m2s3ms4\u00b5s')).toBe(62_003.004);
    expect(() => parseDuration('3\u00b5')).toThrow(/invalid duration/);
  });
});
