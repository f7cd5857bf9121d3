// Records in a cleaner registry's state dir (src/deleter/orphans.ts), written by hand, for the
// registry's tests (test/deleter/orphans*.test.ts).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { processCmdline, processStartTime } from '../../src/deleter/orphans.ts';

/** The record of a live process as add() writes it, its owner dead (this pid, another start time). */
export const recordOf = (pid: number): Record<string, unknown> => ({
  pgid: pid,
  start: processStartTime(pid),
  cmdline: processCmdline(pid),
  owner: process.pid,
  ownerStart: '1',
  pv: 'pv1',
  command: ['/scripts/dd_zero.sh'],
});

/** Writes rec (JSON, or a string as it is) as the file name under cleaners. */
export const writeRecord = (cleaners: string, name: string, rec: unknown): void => {
  writeFileSync(join(cleaners, name), typeof rec === 'string' ? rec : JSON.stringify(rec));
};
