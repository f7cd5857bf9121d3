// Child processes of a test: wait for a "ready" line, kill and reap in afterEach.
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';

/** Resolves once the child wrote `ready\n` on stdout; throws when it exited first. */
export async function waitReady(child: ChildProcess): Promise<void> {
  let out = '';
  for await (const chunk of child.stdout ?? []) {
    out += String(chunk);
    if (out.includes('ready\n')) return;
  }
  throw new Error(`the child exited before it was ready (code ${child.exitCode})`);
}

/** SIGKILLs the child if it still runs and waits for its exit. */
export async function killAndReap(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGKILL');
  await exited;
}

/**
 * The script of a symlink racer (`node -e <script> <vol> <target> ...args`): over and over, it fills a fresh
 * `<vol>/.racerN` (`fill`: JS statements that fill the directory `d`, with `args` in scope, throwing on failure),
 * renames it to `<vol>/x`, waits `dirUs`, renames it back and puts a symlink to `<target>` at `x`, waits `linkUs`
 * (JS expressions of the round number `i`, in microseconds). Writes `ready` first.
 */
export function swapRacer(fill: string, dirUs: string, linkUs: string): string {
  return `
const fs = require('node:fs');
const [vol, target, ...args] = process.argv.slice(1);
const x = vol + '/x';
const spin = (us) => { const t = process.hrtime.bigint(); while (process.hrtime.bigint() - t < BigInt(us * 1000)); };
const quiet = (f) => { try { f(); return true; } catch { return false; } };
process.stdout.write('ready\\n');
for (let i = 0; ; i++) {
  const d = vol + '/.racer' + (i % 4);
  quiet(() => fs.rmSync(d, { recursive: true, force: true }));
  if (!quiet(() => { ${fill} })) continue;
  quiet(() => fs.unlinkSync(x));
  if (!quiet(() => fs.renameSync(d, x))) continue;
  spin(${dirUs});
  quiet(() => fs.renameSync(x, d));
  quiet(() => fs.symlinkSync(target, x));
  spin(${linkUs});
}
`;
}
