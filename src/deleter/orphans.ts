// Block cleaners run in their own process group (so a timeout kills the whole
// tree). In a Pod they die with the container, but a daemon killed with
// SIGKILL on a plain host (systemd, a test) would leave its cleaners running,
// and the restarted daemon would start a second clean of the same device next
// to them. The registry records every running cleaner in a small file under
// --state-dir; at start-up the daemon kills the process groups of cleaners
// whose owning daemon is dead, before any new clean starts.
//
// The daemon runs as root and sends SIGKILL to process groups named in these
// files, so nothing in them is trusted (docs/cleanup.md, "State-dir trust
// rules"): the directory must be ours and private, every file is read with a
// size bound and no symlink following, every field is validated, and a group
// is killed only when its leader still is the very process that was recorded
// (same start time, same /proc/<pid>/cmdline, still leading its group) and is
// neither this daemon nor in its process group.
import { closeSync, constants, fstatSync, lstatSync, mkdirSync, openSync, opendirSync, readFileSync, readSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../util/log.ts';
import { errorMessage } from '../util/errors.ts';
import { parseJsonObject } from '../util/json.ts';

/** Largest cleaner record read (bytes); a bigger file is dropped unread. */
export const MAX_RECORD_BYTES = 64 * 1024;
/** Records looked at per start-up; the rest wait for the next start. */
export const DEFAULT_MAX_RECORDS = 1024;
/** The kernel's PID_MAX_LIMIT: no pid or process group id is larger. */
const PID_MAX_LIMIT = 4_194_304;

interface Entry {
  /** Process group id (= pid of the cleaner, spawned as a group leader). */
  pgid: number;
  /** /proc/<pid>/stat start time of the cleaner. */
  start: string;
  /** /proc/<pid>/cmdline of the cleaner when it was recorded (after exec; a script shows its interpreter). */
  cmdline: string[];
  owner: number;
  ownerStart: string;
  pv: string;
  /** The class's blockCleanerCommand (for the log). */
  command: string[];
}

/** The fields of /proc/<pid>/stat the registry needs. */
export interface ProcStat {
  /** Field 3: R, S, Z, ... */
  readonly state: string;
  /** Field 5: process group id. */
  readonly pgrp: number;
  /** Field 22: start time in clock ticks since boot. */
  readonly start: string;
}

/** Parsed /proc/<pid>/stat; undefined when the process is gone. */
export function procStat(pid: number | 'self'): ProcStat | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // comm (field 2) may hold spaces and parens: split after its closing paren.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const [state, start] = [rest[0], rest[19]];
  if (state === undefined || start === undefined) return undefined;
  return { state, pgrp: Number(rest[2]), start };
}

/** Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); undefined when the process is gone. */
export const processStartTime = (pid: number): string | undefined => procStat(pid)?.start;

/** The argv of a process (/proc/<pid>/cmdline); undefined when gone or empty (a zombie, a kernel thread). */
export function processCmdline(pid: number): string[] | undefined {
  let raw: string;
  try {
    raw = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return undefined;
  }
  if (raw === '') return undefined;
  return (raw.endsWith('\0') ? raw.slice(0, -1) : raw).split('\0');
}

const alive = (pid: number, start: string): boolean => processStartTime(pid) === start;
const isPid = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) > 1 && (v as number) <= PID_MAX_LIMIT;
const isTicks = (v: unknown): v is string => typeof v === 'string' && /^\d{1,20}$/.test(v);
const isArgv = (v: unknown): v is string[] => Array.isArray(v) && v.length > 0 && v.every((s) => typeof s === 'string');

/** The problem with a state directory we would trust, creating it (mode 0700) when missing; undefined when fine. */
export function stateDirProblem(dir: string): string | undefined {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    return `cannot create ${JSON.stringify(dir)}: ${errorMessage(err)}`;
  }
  let st;
  try {
    st = lstatSync(dir);
  } catch (err) {
    return `cannot read ${JSON.stringify(dir)}: ${errorMessage(err)}`;
  }
  const uid = process.getuid?.() ?? 0;
  if (st.isSymbolicLink()) return `${JSON.stringify(dir)} is a symlink`;
  if (!st.isDirectory()) return `${JSON.stringify(dir)} is not a directory`;
  if (st.uid !== uid) return `${JSON.stringify(dir)} is owned by uid ${st.uid}, not by this daemon (uid ${uid})`;
  if ((st.mode & 0o022) !== 0) return `${JSON.stringify(dir)} is writable by group or others (mode ${(st.mode & 0o777).toString(8).padStart(4, '0')})`;
  return undefined;
}

/** Reads a record: a regular file of ours, no symlink, never a fifo or device, at most MAX_RECORD_BYTES. */
function readRecord(file: string): string {
  const fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error('not a regular file');
    if (st.uid !== (process.getuid?.() ?? 0)) throw new Error(`owned by uid ${st.uid}`);
    if (st.size > MAX_RECORD_BYTES) throw new Error(`larger than ${MAX_RECORD_BYTES} bytes`);
    const buf = Buffer.alloc(MAX_RECORD_BYTES + 1);
    let n = 0;
    for (let r; n < buf.length && (r = readSync(fd, buf, n, buf.length - n, n)) > 0; ) n += r;
    if (n > MAX_RECORD_BYTES) throw new Error(`larger than ${MAX_RECORD_BYTES} bytes`);
    return buf.toString('utf8', 0, n);
  } finally {
    closeSync(fd);
  }
}

/** A validated record, or the reason it is not one. */
function parseRecord(name: string, text: string): Entry | string {
  const e = parseJsonObject(text);
  if (typeof e === 'string') return e;
  if (!isPid(e['pgid'])) return `pgid ${JSON.stringify(e['pgid'])} is not an integer in 2..${PID_MAX_LIMIT}`;
  if (String(e['pgid']) !== name) return `pgid ${e['pgid']} does not match the file name`;
  if (!isTicks(e['start'])) return 'start is not a start time';
  if (!isArgv(e['cmdline'])) return 'no recorded cmdline';
  if (!Number.isSafeInteger(e['owner']) || (e['owner'] as number) < 1 || (e['owner'] as number) > PID_MAX_LIMIT) return 'owner is not a pid';
  if (!isTicks(e['ownerStart'])) return 'ownerStart is not a start time';
  const pv = typeof e['pv'] === 'string' ? e['pv'].slice(0, 253) : '';
  const command = isArgv(e['command']) ? e['command'] : [];
  return { pgid: e['pgid'], start: e['start'], cmdline: e['cmdline'], owner: e['owner'] as number, ownerStart: e['ownerStart'], pv, command };
}

const sameArgv = (a: readonly string[], b: readonly string[]): boolean => a.length === b.length && a.every((s, i) => s === b[i]);

/** Why the process group of this orphan's record must not be killed; undefined when it may be. */
function killRefusal(e: Entry): string | undefined {
  if (e.pgid === process.pid) return 'it is this daemon';
  if (e.pgid === procStat('self')?.pgrp) return "it is this daemon's own process group";
  const st = procStat(e.pgid);
  if (st === undefined) return 'the process is gone';
  if (st.start !== e.start) return 'the pid now belongs to another process (start time differs)';
  if (st.pgrp !== e.pgid) return `the process is not a process-group leader (its group is ${st.pgrp})`;
  const cmdline = processCmdline(e.pgid);
  if (cmdline === undefined || !sameArgv(cmdline, e.cmdline)) return 'its command line differs from the recorded one';
  return undefined;
}

export interface RegistryOptions {
  readonly logger?: Logger | undefined;
  /** Records looked at per start-up (default DEFAULT_MAX_RECORDS). */
  readonly maxRecords?: number | undefined;
}

export class CleanerRegistry {
  readonly #dir: string;
  readonly #log: Logger | undefined;
  readonly #maxRecords: number;
  readonly #selfStart: string;

  private constructor(dir: string, selfStart: string, o: RegistryOptions) {
    this.#dir = dir;
    this.#log = o.logger;
    this.#maxRecords = o.maxRecords ?? DEFAULT_MAX_RECORDS;
    this.#selfStart = selfStart;
  }

  /**
   * The registry in `<stateDir>/cleaners`, both directories created with mode 0700 when missing.
   * Undefined (one error logged) when either is a symlink, not ours, or writable by group/others:
   * the daemon then runs without it and kills nothing on the word of an untrusted directory.
   */
  static open(stateDir: string, o: RegistryOptions = {}): CleanerRegistry | undefined {
    const dir = join(stateDir, 'cleaners');
    const selfStart = processStartTime(process.pid);
    const problem = stateDirProblem(stateDir) ?? stateDirProblem(dir) ?? (selfStart === undefined ? 'cannot read /proc/self/stat' : undefined);
    if (problem !== undefined || selfStart === undefined) {
      o.logger?.error(
        { stateDir },
        `--state-dir ${JSON.stringify(stateDir)} is not used: ${problem}; block cleaners run unrecorded and those of a killed daemon are not stopped`,
      );
      return undefined;
    }
    return new CleanerRegistry(dir, selfStart, o);
  }

  /** Records a running cleaner (a process-group leader); failures only log (the clean itself still runs). */
  add(pgid: number, pv: string, command: readonly string[]): void {
    const st = isPid(pgid) ? procStat(pgid) : undefined;
    const cmdline = processCmdline(pgid);
    if (st === undefined || cmdline === undefined || st.pgrp !== pgid) return; // gone already, or no group to kill later
    const e: Entry = { pgid, start: st.start, cmdline, owner: process.pid, ownerStart: this.#selfStart, pv, command: [...command] };
    try {
      const fd = openSync(join(this.#dir, String(pgid)), constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o600);
      try {
        writeSync(fd, JSON.stringify(e));
      } finally {
        closeSync(fd);
      }
    } catch (err) {
      this.#log?.warn({ err, dir: this.#dir }, 'cannot record a running cleaner; it would survive a SIGKILL of this daemon');
    }
  }

  remove(pgid: number): void {
    this.#drop(String(pgid));
  }

  #drop(name: string): void {
    try {
      rmSync(join(this.#dir, name), { force: true });
    } catch (err) {
      this.#log?.warn({ err, file: join(this.#dir, name) }, 'cannot remove a cleaner record');
    }
  }

  /** Kills the process groups of cleaners left by dead daemons; returns how many were killed. */
  reapOrphans(): number {
    let killed = 0;
    let seen = 0;
    let dir;
    try {
      dir = opendirSync(this.#dir);
    } catch {
      return 0;
    }
    try {
      for (let d = dir.readSync(); d !== null; d = dir.readSync()) {
        if (seen++ >= this.#maxRecords) {
          this.#log?.warn({ dir: this.#dir, max: this.#maxRecords }, `more than ${this.#maxRecords} cleaner records; the rest are left for the next start`);
          break;
        }
        if (this.#reap(d.name)) killed++;
      }
    } finally {
      dir.closeSync();
    }
    return killed;
  }

  /** Handles one record; true when its process group was killed. */
  #reap(name: string): boolean {
    const file = join(this.#dir, name);
    let e: Entry | string;
    try {
      e = parseRecord(name, readRecord(file));
    } catch (err) {
      e = errorMessage(err);
    }
    if (typeof e === 'string') {
      this.#log?.warn({ file, reason: e }, `ignoring cleaner record ${JSON.stringify(file)}: ${e}; nothing is killed`);
      this.#drop(name);
      return false;
    }
    if (alive(e.owner, e.ownerStart)) return false; // another live daemon's cleaner
    const refusal = killRefusal(e);
    if (refusal !== undefined) {
      if (refusal !== 'the process is gone') {
        this.#log?.warn({ file, pgid: e.pgid, pv: e.pv, reason: refusal }, `not killing the cleaner of record ${JSON.stringify(file)}: ${refusal}`);
      }
      this.#drop(name);
      return false;
    }
    try {
      process.kill(-e.pgid, 'SIGKILL');
    } catch (err) {
      this.#log?.warn({ err, pgid: e.pgid }, 'could not kill an orphaned cleaner');
      return false;
    }
    this.#log?.warn({ pgid: e.pgid, pv: e.pv, command: e.command }, 'killed a cleaner left running by a daemon that died; its volume will be cleaned again');
    this.#drop(name);
    return true;
  }
}
