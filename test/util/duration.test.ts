import { describe, expect, it } from 'vitest';
import { parseDuration } from '../../src/util/duration.ts';

describe('parseDuration', () => {
  it('reads microseconds written us, µs (micro sign) and μs (Greek mu), as Go does', () => {
    expect(parseDuration('1500us')).toBe(1.5);
    expect(parseDuration('1500\u00b5s')).toBe(1.5);
    expect(parseDuration('1500\u03bcs')).toBe(1.5);
    expect(parseDuration('1ms500\u03bcs')).toBe(1.5);
    expect(() => parseDuration('1500xs')).toThrow(/invalid duration/);
  });
});
