import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseCli } from '../../src/util/daemon.ts';
import { VERSION } from '../../src/util/version.ts';

interface Opts {
  help: boolean;
  version: boolean;
  x: string;
}
const parse = (argv: readonly string[]): Opts => {
  if (argv.includes('--bad')) throw new Error('invalid value for --bad');
  return { help: argv.includes('--help'), version: argv.includes('--version'), x: argv[0] ?? '' };
};

afterEach(() => {
  vi.restoreAllMocks();
});

describe('parseCli', () => {
  it('returns the options, or the exit code after printing help, version or the error', () => {
    const out = vi.spyOn(process.stdout, 'write').mockReturnValue(true);
    const err = vi.spyOn(process.stderr, 'write').mockReturnValue(true);
    expect(parseCli('tool', ['a'], parse, 'HELP\n')).toEqual({ help: false, version: false, x: 'a' });
    expect(parseCli('tool', ['--help'], parse, 'HELP\n')).toBe(0);
    expect(out).toHaveBeenLastCalledWith('HELP\n');
    expect(parseCli('tool', ['--version'], parse, 'HELP\n')).toBe(0);
    expect(out).toHaveBeenLastCalledWith(`tool ${VERSION}\n`);
    expect(parseCli('tool', ['--bad'], parse, 'HELP\n')).toBe(2);
    expect(err).toHaveBeenLastCalledWith('tool: invalid value for --bad\nRun with --help for usage.\n');
  });
});
