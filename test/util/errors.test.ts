import { describe, expect, it } from 'vitest';
import { capText, escapeControlChars, MAX_TEXT_BYTES } from '../../src/util/errors.ts';

describe('capText', () => {
  it('returns a text within the bound unchanged', () => {
    expect(capText('short')).toBe('short');
    const exact = 'é'.repeat(MAX_TEXT_BYTES / 2);
    expect(capText(exact)).toBe(exact);
  });

  it('cuts a long text to the bound with a marker saying how much was cut, never splitting a character', () => {
    for (const ch of ['x', 'é', '€', '😀']) {
      const text = ch.repeat(40_000);
      const total = Buffer.byteLength(text);
      const out = capText(text);
      expect(Buffer.byteLength(out)).toBeLessThanOrEqual(MAX_TEXT_BYTES);
      expect(Buffer.byteLength(out)).toBeGreaterThan(MAX_TEXT_BYTES - 30);
      const m = /^(.*)\[\.\.\. (\d+) bytes cut \.\.\.\]$/su.exec(out);
      expect(m, ch).not.toBeNull();
      const head = m?.[1] ?? '';
      expect(head).toBe(ch.repeat(head.length / ch.length)); // whole characters only
      expect(Buffer.byteLength(head) + Number(m?.[2])).toBe(total);
    }
  });

  it('keeps the tail when asked', () => {
    const out = capText(`/mnt/vol/${'d/'.repeat(5000)}file`, 256, 128);
    expect(Buffer.byteLength(out)).toBeLessThanOrEqual(256);
    expect(out).toMatch(/^\/mnt\/vol\/d\/d\/.*\[\.\.\. \d+ bytes cut \.\.\.\].*d\/file$/);
  });
});

describe('escapeControlChars', () => {
  it('escapes C0, DEL, C1, line separators and bidi controls, and leaves other text alone', () => {
    expect(escapeControlChars('a\u001b[2J\u0007\r\n\t\u007f\u009b\u2028\u202e\u2066\u200f\u061c é€😀')).toBe(
      'a\\x1b[2J\\x07\\r\\n\\t\\x7f\\x9b\\u2028\\u202e\\u2066\\u200f\\u061c é€😀',
    );
  });
});
