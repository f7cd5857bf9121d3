// Block cleaners run in their own process group (so a timeout kills the whole
// tree). In a Pod they die with the container, but a daemon killed with
// SIGKILL on a plain host (systemd, a test) would leave its cleaners running,
// and the restarted daemon would start a second clean of the same device next
// to them. The registry records every running cleaner in a small file under
// --state-dir; at start-up the daemon kills the process groups of cleaners
// whose owning daemon is dead, before any new clean starts. Process ids are
// checked against their start time, so a reused pid is never killed.
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../util/log.ts';

interface Entry {
  /** Process group id (= pid of the cleaner, spawned as a group leader). */
  pgid: number;
  /** /proc/<pid>/stat start time of the cleaner. */
  start: string;
  owner: number;
  ownerStart: string;
  pv: string;
  command: string[];
}

/** Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); undefined when the process is gone. */
export function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // comm (field 2) may hold spaces and parens: split after its closing paren.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return rest[19];
  } catch {
    return undefined;
  }
}

const alive = (pid: number, start: string): boolean => processStartTime(pid) === start;

export class CleanerRegistry {
  readonly #dir: string;
  readonly #log: Logger | undefined;
  readonly #selfStart: string;

  constructor(stateDir: string, logger?: Logger) {
    this.#dir = join(stateDir, 'cleaners');
    this.#log = logger;
    this.#selfStart = processStartTime(process.pid) ?? '';
  }

  /** Records a running cleaner; failures only log (the clean itself still runs). */
  add(pgid: number, pv: string, command: readonly string[]): void {
    const start = processStartTime(pgid);
    if (start === undefined) return;
    const e: Entry = { pgid, start, owner: process.pid, ownerStart: this.#selfStart, pv, command: [...command] };
    try {
      mkdirSync(this.#dir, { recursive: true });
      writeFileSync(join(this.#dir, String(pgid)), JSON.stringify(e));
    } catch (err) {
      this.#log?.warn({ err, dir: this.#dir }, 'cannot record a running cleaner; it would survive a SIGKILL of this daemon');
    }
  }

  remove(pgid: number): void {
    rmSync(join(this.#dir, String(pgid)), { force: true });
  }

  /** Kills the process groups of cleaners left by dead daemons; returns how many were killed. */
  reapOrphans(): number {
    let names: string[];
    try {
      names = readdirSync(this.#dir);
    } catch {
      return 0;
    }
    let killed = 0;
    for (const name of names) {
      const file = join(this.#dir, name);
      let e: Entry;
      try {
        e = JSON.parse(readFileSync(file, 'utf8')) as Entry;
      } catch {
        rmSync(file, { force: true });
        continue;
      }
      if (alive(e.owner, e.ownerStart)) continue; // another live daemon's cleaner
      if (alive(e.pgid, e.start)) {
        try {
          process.kill(-e.pgid, 'SIGKILL');
          killed++;
          this.#log?.warn({ pgid: e.pgid, pv: e.pv, command: e.command }, 'killed a cleaner left running by a daemon that died; its volume will be cleaned again');
        } catch (err) {
          this.#log?.warn({ err, pgid: e.pgid }, 'could not kill an orphaned cleaner');
          continue;
        }
      }
      rmSync(file, { force: true });
    }
    return killed;
  }
}
