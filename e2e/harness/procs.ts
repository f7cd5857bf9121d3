// Process helpers for e2e tests.
import { execFileSync } from 'node:child_process';

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
