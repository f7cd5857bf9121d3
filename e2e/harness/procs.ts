// Process helpers for e2e tests.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** PIDs whose full command line contains `pattern` (pgrep -f), minus this process. */
export function pgrep(pattern: string): number[] {
  try {
    return execFileSync('pgrep', ['-f', pattern], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l !== '')
      .map(Number)
      .filter((pid) => pid !== process.pid);
  } catch (err) {
    if ((err as { status?: number }).status === 1) return []; // pgrep: nothing matched
    throw err;
  }
}

/** A Node script run as a child process whose stdout and stderr are collected. */
export interface NodeScript {
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
  readonly stdout: () => string;
  readonly stderr: () => string;
  /** SIGINT (Ctrl-C) unless it has already exited; waits for the exit. */
  readonly interrupt: () => Promise<number | null>;
}

/** Runs `node <script> <args>` (this Node) with `env` added to this process's environment. */
export function runNodeScript(script: string, args: readonly string[], env: Record<string, string>): NodeScript {
  const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  const exited = new Promise<number | null>((res) => child.on('exit', (code) => res(code)));
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return {
    child,
    exited,
    stdout: () => out,
    stderr: () => err,
    interrupt: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
      return exited;
    },
  };
}

/**
 * Whether `pid` runs: it exists and is not a zombie (an orphan's zombie stays until the init
 * process reaps it, which on some hosts takes a while).
 */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}
