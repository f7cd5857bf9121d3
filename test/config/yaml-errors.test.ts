// Issue 18, point 10: one bad YAML line used to give a cascade of parser errors in the parser's own jargon (cut off
// in `kubectl get events`). Now: the first error only, on the line to look at, in plain words with a hint; the
// parser's messages stay available (detail) for the debug log.
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/parse.ts';
import type { ConfigError } from '../../src/config/types.ts';

const SHIPPED = [
  'fast-disks:',
  '  hostDir: /mnt/disks/fast-disks',
  '  mountDir: /mnt/disks/fast-disks',
  '  blockCleanerCommand:',
  '    - "/scripts/shred.sh"',
  '    - "2"',
  '  volumeMode: Filesystem',
  '  accessMode: ReadWriteOnce',
  '  fsType: ext4',
];

/** The shipped storageClassMap with line `n` (1-based) replaced. */
const withLine = (n: number, text: string): string => [...SHIPPED.slice(0, n - 1), text, ...SHIPPED.slice(n)].join('\n') + '\n';

const errorsOf = (storageClassMap: string): readonly ConfigError[] => {
  const r = parseConfig({ storageClassMap });
  if (r.ok) throw new Error('expected an invalid config');
  return r.errors;
};

describe('a YAML syntax error is one error, on its line, with a hint', () => {
  it.each([
    [3, ' mountDir: /mnt/disks/fast-disks', 'bad indentation of a mapping entry; check that keys at the same level under storageClassMap are indented the same'],
    [3, '   mountDir: /mnt/disks/fast-disks', 'bad indentation of a mapping entry: this line is indented more than the key above it; check that keys at the same level under storageClassMap are indented the same'],
    [7, ' volumeMode: Filesystem', 'bad indentation of a mapping entry; check that keys at the same level under storageClassMap are indented the same'],
    [3, '\tmountDir: /mnt/disks/fast-disks', 'a tab used for indentation; YAML indents with spaces only'],
    [6, '   - "2"', 'bad indentation of a list item; check that the items of one list (and keys at the same level under storageClassMap) are indented the same'],
    [3, '  mountDir /mnt/disks/fast-disks', 'a key not followed by ":" on its line (a missing ":", or a line indented differently from the keys at the same level under storageClassMap)'],
  ])('line %i as %j', (n, text, what) => {
    const errors = errorsOf(withLine(n, text));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ path: 'storageClassMap', file: 'storageClassMap', line: n, message: `YAML syntax error: ${what}` });
  });

  it("keeps the parser's cascade as detail (for the debug log), not as more errors", () => {
    const [e] = errorsOf(withLine(3, ' mountDir: /mnt/disks/fast-disks'));
    expect(e!.detail).toEqual(expect.arrayContaining([expect.stringMatching(/^line 3: All mapping items must start at the same column$/)]));
    expect(e!.detail!.length).toBeGreaterThan(1);
  });
});
