// The rules of the cleaner registry (src/deleter/orphans.ts), one by one, as found by
// mutation testing (issue 17 point 9): record validation and its boundaries, how a record
// is read, the state-dir trust rules, the kill refusals, add() and the /proc parsers.
//
// Every test runs with process.kill replaced by a recorder (beforeEach): a mutant that
// would kill something can only be seen doing so, never do it. The processes the tests
// look at are children they spawn themselves (detached: a process group of their own),
// killed in afterEach with the real process.kill.
//
// node:fs is passed through unchanged, except where a test injects a fault the kernel
// would not produce on demand: a /proc file with given content, a mkdir that does not
// happen (the path was replaced between mkdir and lstat), a record that grew after fstat.
import { spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { CleanerRegistry, MAX_RECORD_BYTES, procStat, processCmdline, processStartTime, stateDirProblem } from '../../src/deleter/orphans.ts';
import { recordOf, writeRecord as write } from '../support/cleaner-records.ts';

const faults = vi.hoisted(() => ({
  /** readFileSync of these exact paths returns the string (or throws the Error). */
  files: new Map<string, string | Error>(),
  /** mkdirSync of these exact paths does nothing. */
  skipMkdir: new Set<string>(),
  /** fstatSync of an fd open on these paths reports this size. */
  fstatSize: new Map<string, number>(),
  /** When set, the path of every readSync's fd is appended. */
  reads: undefined as string[] | undefined,
}));

vi.mock('node:fs', async (importOriginal) => {
  const orig = await importOriginal<typeof import('node:fs')>();
  const readFileSync = ((path: unknown, ...rest: unknown[]) => {
    const f = typeof path === 'string' ? faults.files.get(path) : undefined;
    if (f instanceof Error) throw f;
    if (f !== undefined) return f;
    return (orig.readFileSync as (...a: unknown[]) => unknown)(path, ...rest);
  }) as typeof orig.readFileSync;
  const mkdirSync = ((path: unknown, ...rest: unknown[]) =>
    faults.skipMkdir.has(String(path)) ? undefined : (orig.mkdirSync as (...a: unknown[]) => unknown)(path, ...rest)) as typeof orig.mkdirSync;
  const fstatSync = ((fd: number, ...rest: unknown[]) => {
    const st = (orig.fstatSync as (...a: unknown[]) => import('node:fs').Stats)(fd, ...rest);
    const size = faults.fstatSize.size > 0 ? faults.fstatSize.get(orig.readlinkSync(`/proc/self/fd/${fd}`)) : undefined;
    return size === undefined ? st : Object.assign(Object.create(Object.getPrototypeOf(st) as object) as object, st, { size });
  }) as typeof orig.fstatSync;
  const readSync = ((fd: number, ...rest: unknown[]) => {
    faults.reads?.push(orig.readlinkSync(`/proc/self/fd/${fd}`));
    return (orig.readSync as (...a: unknown[]) => number)(fd, ...rest);
  }) as typeof orig.readSync;
  const patched = { readFileSync, mkdirSync, fstatSync, readSync };
  return { ...orig, ...patched, default: { ...orig, ...patched } };
});

const isRoot = process.getuid?.() === 0;
/** A valid pid/pgid (PID_MAX_LIMIT) that no process ever has (pids are < pid_max <= PID_MAX_LIMIT). */
const NO_PID = 4_194_304;
const WAIT = { timeout: 30_000, interval: 20 };

interface Line {
  level: number;
  msg: string;
  reason?: string;
  pv?: string;
  command?: unknown;
  file?: string;
}

let logs: Line[] = [];
let kill: MockInstance<typeof process.kill>;
const dirs: string[] = [];
const groups: number[] = [];

beforeEach(() => {
  // Never a real kill from the code under test (a mutant could aim at anything).
  kill = vi.spyOn(process, 'kill').mockImplementation(() => true);
});

afterEach(() => {
  vi.restoreAllMocks();
  faults.files.clear();
  faults.skipMkdir.clear();
  faults.fstatSize.clear();
  faults.reads = undefined;
  for (const g of groups.splice(0)) {
    try {
      process.kill(-g, 'SIGKILL'); // only groups this file spawned
    } catch {
      /* gone */
    }
  }
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  logs = [];
});

const logger = () => pino({ level: 'debug' }, { write: (s: string) => logs.push(JSON.parse(s) as Line) });
const warns = (): Line[] => logs.filter((l) => l.level === 40);
const reasons = (): Array<string | undefined> => warns().map((l) => l.reason);

const tmp = (): string => {
  const d = mkdtempSync(join(tmpdir(), 'lsp-orphan-rules-'));
  dirs.push(d);
  return d;
};

function registry(maxRecords?: number): { reg: CleanerRegistry; dir: string; cleaners: string } {
  const dir = tmp();
  const reg = CleanerRegistry.open(dir, { logger: logger(), maxRecords });
  expect(reg).toBeDefined();
  return { reg: reg!, dir, cleaners: join(dir, 'cleaners') };
}

/** Spawns a command in a process group of its own (killed in afterEach); libuv returns after exec. */
function leader(cmd: string, args: string[]): number {
  const c = spawn(cmd, args, { detached: true, stdio: 'ignore' });
  c.unref();
  expect(c.pid).toBeGreaterThan(1);
  groups.push(c.pid!);
  return c.pid!;
}

const children = (pid: number): number[] =>
  readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
    .trim()
    .split(' ')
    .filter((s) => s !== '')
    .map(Number);

/** A group leader (sh) and its child (sleep), the child being no group leader. */
async function leaderAndChild(): Promise<{ leader: number; child: number }> {
  const l = leader('sh', ['-c', 'sleep 300 & wait']);
  const child = await vi.waitFor(() => {
    const c = children(l)[0];
    expect(c).toBeDefined();
    expect(processCmdline(c!)).toEqual(['sleep', '300']);
    return c!;
  }, WAIT);
  return { leader: l, child };
}

/** A zombie that leads its own process group and session (its parent, `sleep 300`, never reaps it). */
async function zombieLeader(): Promise<number> {
  const parent = leader('sh', ['-c', 'setsid sleep 0 & exec sleep 300']);
  return vi.waitFor(() => {
    const z = children(parent).find((c) => procStat(c)?.state === 'Z');
    expect(z).toBeDefined();
    expect(procStat(z!)?.pgrp).toBe(z);
    return z!;
  }, WAIT);
}

/** A valid record of a process that does not exist: reaping drops it without a word. */
const goneRecord = (): Record<string, unknown> => ({ pgid: NO_PID, start: '1', cmdline: ['x'], owner: process.pid, ownerStart: '1', pv: 'pv1', command: ['x'] });
/** The fds of this process open on anything under dir. */
const fdsUnder = (dir: string): string[] =>
  readdirSync('/proc/self/fd')
    .map((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`);
      } catch {
        return '';
      }
    })
    .filter((t) => t.startsWith(dir));

describe('record validation: a bad field drops the record, with the reason of that very check', () => {
  const PGID_RANGE = '2..4194304';
  // [what, file name (undefined: the pgid), patch, reason]
  const cases: Array<[string, string | undefined, Record<string, unknown>, string]> = [
    ['pgid 1 (every process)', '1', { pgid: 1 }, `pgid 1 is not an integer in ${PGID_RANGE}`],
    ['pgid PID_MAX_LIMIT + 1', '4194305', { pgid: 4_194_305 }, `pgid 4194305 is not an integer in ${PGID_RANGE}`],
    ['pgid as a string', '77', { pgid: '77' }, `pgid "77" is not an integer in ${PGID_RANGE}`],
    ['pgid not the file name (leading zero)', 'zero', {}, 'does not match the file name'],
    ['start with a prefix', undefined, { start: 'x123' }, 'start is not a start time'],
    ['start with a suffix', undefined, { start: '123x' }, 'start is not a start time'],
    ['start of 21 digits', undefined, { start: '1'.repeat(21) }, 'start is not a start time'],
    ['start empty', undefined, { start: '' }, 'start is not a start time'],
    ['start a number', undefined, { start: 12345 }, 'start is not a start time'],
    ['cmdline a string', undefined, { cmdline: 'sleep 300' }, 'no recorded cmdline'],
    ['cmdline empty', undefined, { cmdline: [] }, 'no recorded cmdline'],
    ['cmdline with a number', undefined, { cmdline: ['sleep', 300] }, 'no recorded cmdline'],
    ['cmdline of numbers', undefined, { cmdline: [1, 2] }, 'no recorded cmdline'],
    ['cmdline an object', undefined, { cmdline: { length: 1, 0: 'sleep' } }, 'no recorded cmdline'],
    ['owner 0', undefined, { owner: 0 }, 'owner is not a pid'],
    ['owner -1', undefined, { owner: -1 }, 'owner is not a pid'],
    ['owner PID_MAX_LIMIT + 1', undefined, { owner: 4_194_305 }, 'owner is not a pid'],
    ['owner a string', undefined, { owner: '5' }, 'owner is not a pid'],
    ['owner 1.5', undefined, { owner: 1.5 }, 'owner is not a pid'],
    ['ownerStart with a prefix', undefined, { ownerStart: 'x1' }, 'ownerStart is not a start time'],
    ['ownerStart with a suffix', undefined, { ownerStart: '1x' }, 'ownerStart is not a start time'],
    ['ownerStart a number', undefined, { ownerStart: 1 }, 'ownerStart is not a start time'],
  ];
  it.each(cases)('%s', async (_, name, patch, reason) => {
    const { reg, cleaners } = registry();
    const { leader: pgid } = await leaderAndChild();
    const file = name === 'zero' ? `0${pgid}` : (name ?? String(pgid));
    write(cleaners, file, { ...recordOf(pgid), ...patch });
    expect(reg.reapOrphans()).toBe(0);
    expect(kill).not.toHaveBeenCalled();
    expect(readdirSync(cleaners)).toEqual([]);
    expect(reasons()).toEqual([name === 'zero' ? `pgid ${pgid} ${reason}` : reason]);
  });

  it.each([
    ['{"pgid":', 'not JSON'],
    ['', 'not JSON'],
    ['5', 'not a JSON object'],
    ['"5"', 'not a JSON object'],
    ['true', 'not a JSON object'],
    ['null', 'not a JSON object'],
    ['[{"pgid":5}]', 'not a JSON object'],
  ])('the text %j: %s', (text, reason) => {
    const { reg, cleaners } = registry();
    write(cleaners, '5', text);
    expect(reg.reapOrphans()).toBe(0);
    expect(readdirSync(cleaners)).toEqual([]);
    expect(reasons()).toEqual([reason]);
  });

  it.each([
    ['pgid = PID_MAX_LIMIT', {}],
    ['start of 20 digits', { start: '9'.repeat(20) }],
    ['owner = PID_MAX_LIMIT', { owner: 4_194_304 }],
    ['owner 2', { owner: 2, ownerStart: '1' }],
  ])('accepted at the boundary: %s (then the process is gone: dropped without a warning)', (_, patch) => {
    const { reg, cleaners } = registry();
    write(cleaners, String(NO_PID), { ...goneRecord(), ...patch });
    expect(reg.reapOrphans()).toBe(0);
    expect(kill).not.toHaveBeenCalled();
    expect(readdirSync(cleaners)).toEqual([]);
    expect(warns()).toEqual([]);
  });

  it('pgid 2 passes validation (it is then judged on the process: pid 2 is no cleaner of ours)', () => {
    const { reg, cleaners } = registry();
    write(cleaners, '2', { ...goneRecord(), pgid: 2 });
    expect(reg.reapOrphans()).toBe(0);
    expect(kill).not.toHaveBeenCalled();
    for (const r of reasons()) expect(r).not.toContain('is not an integer');
  });

  it('owner 1 is a valid owner (the daemon is pid 1 in its container): a live pid 1 keeps the record', () => {
    const { reg, cleaners } = registry();
    const start1 = processStartTime(1);
    expect(start1).toBeDefined();
    write(cleaners, String(NO_PID), { ...goneRecord(), owner: 1, ownerStart: start1 });
    expect(reg.reapOrphans()).toBe(0);
    expect(readdirSync(cleaners)).toEqual([String(NO_PID)]);
    expect(warns()).toEqual([]);
  });

  it('pv is cut to 253 characters and is "" when not a string (the refusal log shows it)', async () => {
    const { leader: pgid } = await leaderAndChild();
    for (const [pv, shown] of [
      ['p'.repeat(300), 'p'.repeat(253)],
      ['pv-1', 'pv-1'],
      [7, ''],
    ] as const) {
      const { reg, cleaners } = registry();
      logs = [];
      write(cleaners, String(pgid), { ...recordOf(pgid), start: '1', pv });
      expect(reg.reapOrphans()).toBe(0);
      expect(warns().map((l) => [l.reason, l.pv])).toEqual([['the pid now belongs to another process (start time differs)', shown]]);
    }
  });

  it('command is the recorded argv, or [] when it is not one (the kill log shows it)', async () => {
    const { leader: pgid } = await leaderAndChild();
    for (const [command, shown] of [
      [['/scripts/dd_zero.sh', 'a b'], ['/scripts/dd_zero.sh', 'a b']],
      ['dd', []],
      [[1], []],
    ] as const) {
      const { reg, cleaners } = registry();
      logs = [];
      kill.mockClear();
      write(cleaners, String(pgid), { ...recordOf(pgid), command, pv: 'pv-k' });
      expect(reg.reapOrphans()).toBe(1);
      expect(kill.mock.calls).toEqual([[-pgid, 'SIGKILL']]);
      expect(readdirSync(cleaners)).toEqual([]);
      const killed = warns().filter((l) => l.msg.startsWith('killed a cleaner'));
      expect(killed.map((l) => [l.pv, l.command])).toEqual([['pv-k', shown]]);
    }
  });
});

describe('how a record is read', () => {
  it('a symlink is not followed (the target is not read nor removed)', async () => {
    const { reg, cleaners, dir } = registry();
    const { leader: pgid } = await leaderAndChild();
    write(dir, 'elsewhere', recordOf(pgid));
    symlinkSync(join(dir, 'elsewhere'), join(cleaners, String(pgid)));
    expect(reg.reapOrphans()).toBe(0);
    expect(kill).not.toHaveBeenCalled();
    expect(reasons()).toHaveLength(1);
    expect(reasons()[0]).toMatch(/^ELOOP/);
    expect(existsSync(join(dir, 'elsewhere'))).toBe(true);
  });

  it('a fifo and a directory are "not a regular file"; a directory that cannot be removed is reported', async () => {
    const { reg, cleaners } = registry();
    const mkfifo = spawn('mkfifo', [join(cleaners, '4242')], { stdio: 'ignore' });
    expect(await new Promise((r) => mkfifo.once('close', r))).toBe(0);
    mkdirSync(join(cleaners, '4243'));
    expect(reg.reapOrphans()).toBe(0);
    expect(warns().filter((l) => l.reason !== undefined).map((l) => l.reason)).toEqual(['not a regular file', 'not a regular file']);
    expect(readdirSync(cleaners)).toEqual(['4243']); // rmSync does not remove a directory
    expect(warns().filter((l) => l.msg === 'cannot remove a cleaner record').map((l) => l.file)).toEqual([join(cleaners, '4243')]);
  });

  it.skipIf(!isRoot)('a record of another uid is not ours', () => {
    const { reg, cleaners } = registry();
    write(cleaners, String(NO_PID), goneRecord());
    chownSync(join(cleaners, String(NO_PID)), 65534, 65534);
    expect(reg.reapOrphans()).toBe(0);
    expect(reasons()).toEqual(['owned by uid 65534']);
  });

  it.skipIf(!isRoot)('the owner is compared with this daemon\'s uid (getuid), not with 0', () => {
    const { reg, cleaners } = registry();
    write(cleaners, String(NO_PID), goneRecord());
    vi.spyOn(process, 'getuid').mockReturnValue(4242);
    expect(reg.reapOrphans()).toBe(0);
    expect(reasons()).toEqual(['owned by uid 0']);
  });

  it.skipIf(!isRoot)('without process.getuid (not POSIX) the uid is taken as 0', () => {
    const { reg, cleaners } = registry();
    write(cleaners, String(NO_PID), goneRecord());
    const saved = Object.getOwnPropertyDescriptor(process, 'getuid');
    Object.defineProperty(process, 'getuid', { value: undefined, configurable: true, writable: true });
    try {
      expect(reg.reapOrphans()).toBe(0);
      expect(stateDirProblem(tmp())).toBeUndefined();
    } finally {
      if (saved) Object.defineProperty(process, 'getuid', saved);
      else delete (process as { getuid?: unknown }).getuid;
    }
    expect(typeof process.getuid).toBe('function');
    expect(warns()).toEqual([]);
    expect(readdirSync(cleaners)).toEqual([]);
  });

  /** A gone record of exactly `size` bytes whose last byte is its closing brace. */
  const recordOfSize = (size: number): string => {
    const body = JSON.stringify({ ...goneRecord(), pad: '' });
    const text = body.replace('"pad":""', `"pad":"${'x'.repeat(size - body.length)}"`);
    expect(text).toHaveLength(size);
    return text;
  };

  it('a record of exactly MAX_RECORD_BYTES is read whole', () => {
    const { reg, cleaners } = registry();
    write(cleaners, String(NO_PID), recordOfSize(MAX_RECORD_BYTES));
    faults.reads = [];
    expect(reg.reapOrphans()).toBe(0);
    expect(warns()).toEqual([]); // parsed, valid, its process gone
    expect(readdirSync(cleaners)).toEqual([]);
    expect(faults.reads).toContain(join(cleaners, String(NO_PID)));
  });

  it('a record of MAX_RECORD_BYTES + 1 is too large and dropped unread', () => {
    const { reg, cleaners } = registry();
    write(cleaners, String(NO_PID), recordOfSize(MAX_RECORD_BYTES + 1));
    faults.reads = [];
    expect(reg.reapOrphans()).toBe(0);
    expect(reasons()).toEqual([`larger than ${MAX_RECORD_BYTES} bytes`]);
    expect(faults.reads).toEqual([]);
  });

  it('a record that grew after fstat is still cut at MAX_RECORD_BYTES + 1 bytes read', () => {
    const { reg, cleaners } = registry();
    write(cleaners, String(NO_PID), recordOfSize(MAX_RECORD_BYTES + 1));
    faults.fstatSize.set(join(cleaners, String(NO_PID)), 10);
    expect(reg.reapOrphans()).toBe(0);
    expect(reasons()).toEqual([`larger than ${MAX_RECORD_BYTES} bytes`]);
  });

  it('leaves no fd open: not on a record (read or written), not on the directory', async () => {
    const { reg, cleaners, dir } = registry();
    const { leader: pgid } = await leaderAndChild();
    reg.add(pgid, 'pv1', ['x']); // a live owner: kept
    write(cleaners, String(NO_PID), goneRecord());
    write(cleaners, '5', 'junk');
    expect(reg.reapOrphans()).toBe(0);
    expect(readdirSync(cleaners)).toEqual([String(pgid)]);
    expect(fdsUnder(dir)).toEqual([]);
  });
});

describe('stateDirProblem', () => {
  it('accepts a private directory of ours', () => {
    expect(stateDirProblem(tmp())).toBeUndefined();
  });

  it.each([
    [0o720, 'is writable by group or others (mode 0720)'],
    [0o702, 'is writable by group or others (mode 0702)'],
    [0o1722, 'is writable by group or others (mode 0722)'],
    [0o750, undefined],
    [0o705, undefined],
    [0o711, undefined],
    [0o1700, undefined],
  ])('mode %o: %s', (mode, problem) => {
    const d = tmp();
    chmodSync(d, mode);
    const p = stateDirProblem(d);
    if (problem === undefined) expect(p).toBeUndefined();
    else expect(p).toBe(`${JSON.stringify(d)} ${problem}`);
  });

  it('refuses a symlink to a good directory', () => {
    const root = tmp();
    mkdirSync(join(root, 'real'), { mode: 0o700 });
    symlinkSync(join(root, 'real'), join(root, 'link'));
    expect(stateDirProblem(join(root, 'link'))).toBe(`${JSON.stringify(join(root, 'link'))} is a symlink`);
  });

  it('refuses what is not a directory when it appears after mkdir (a file, a fifo)', async () => {
    const root = tmp();
    const file = join(root, 'file');
    writeFileSync(file, '');
    expect(stateDirProblem(file)).toMatch(/^cannot create /); // mkdir itself refuses a file
    faults.skipMkdir.add(file);
    expect(stateDirProblem(file)).toBe(`${JSON.stringify(file)} is not a directory`);
    const fifo = join(root, 'fifo');
    const mkfifo = spawn('mkfifo', [fifo], { stdio: 'ignore' });
    expect(await new Promise((r) => mkfifo.once('close', r))).toBe(0);
    faults.skipMkdir.add(fifo);
    expect(stateDirProblem(fifo)).toBe(`${JSON.stringify(fifo)} is not a directory`);
  });

  it('reports a directory that vanished after mkdir', () => {
    const gone = join(tmp(), 'gone');
    faults.skipMkdir.add(gone);
    expect(stateDirProblem(gone)).toMatch(new RegExp(`^cannot read ${JSON.stringify(gone).replace(/[/.]/g, '\\$&')}: ENOENT`));
  });

  it.skipIf(!isRoot)('refuses a directory of another uid', () => {
    const d = tmp();
    chownSync(d, 65534, 65534);
    expect(stateDirProblem(d)).toBe(`${JSON.stringify(d)} is owned by uid 65534, not by this daemon (uid 0)`);
  });

  it.skipIf(!isRoot)("compares the owner with this daemon's uid (getuid), not with 0", () => {
    const d = tmp();
    vi.spyOn(process, 'getuid').mockReturnValue(4242);
    expect(stateDirProblem(d)).toBe(`${JSON.stringify(d)} is owned by uid 0, not by this daemon (uid 4242)`);
  });

  it('open() refuses to run when its own start time cannot be read', () => {
    faults.files.set(`/proc/${process.pid}/stat`, Object.assign(new Error('ENOENT'), { code: 'ENOENT' }));
    expect(CleanerRegistry.open(tmp(), { logger: logger() })).toBeUndefined();
    const errors = logs.filter((l) => l.level === 50);
    expect(errors).toHaveLength(1);
    expect(errors[0]!.msg).toContain('is not used: cannot read /proc/self/stat;');
  });
});

describe('kill refusals: each with its own reason, nothing killed, the record dropped', () => {
  const refused = (reg: CleanerRegistry, cleaners: string, reason: string): void => {
    expect(reg.reapOrphans()).toBe(0);
    expect(kill).not.toHaveBeenCalled();
    expect(readdirSync(cleaners)).toEqual([]);
    expect(reasons()).toEqual([reason]);
  };

  it('this daemon', () => {
    const { reg, cleaners } = registry();
    write(cleaners, String(process.pid), recordOf(process.pid));
    refused(reg, cleaners, 'it is this daemon');
  });

  const ownGroup = procStat('self')!.pgrp;
  it.skipIf(ownGroup === process.pid)("this daemon's own process group", () => {
    const { reg, cleaners } = registry();
    // The group's leader may be gone (an orphaned process group, e.g. under a job runner whose shell exited):
    // the refusal comes before any look at the process, so a well-formed record of that pgid is enough.
    const rec = recordOf(ownGroup);
    write(cleaners, String(ownGroup), { ...rec, start: rec['start'] ?? '1', cmdline: rec['cmdline'] ?? ['sh'] });
    refused(reg, cleaners, "it is this daemon's own process group");
  });

  it('a process that is gone: dropped without a warning', () => {
    const { reg, cleaners } = registry();
    write(cleaners, String(NO_PID), goneRecord());
    expect(reg.reapOrphans()).toBe(0);
    expect(kill).not.toHaveBeenCalled();
    expect(readdirSync(cleaners)).toEqual([]);
    expect(warns()).toEqual([]);
  });

  it('the pid now belongs to another process (start time differs)', async () => {
    const { reg, cleaners } = registry();
    const { leader: pgid } = await leaderAndChild();
    write(cleaners, String(pgid), { ...recordOf(pgid), start: String(Number(processStartTime(pgid)) + 1) });
    refused(reg, cleaners, 'the pid now belongs to another process (start time differs)');
  });

  it('not a process-group leader', async () => {
    const { reg, cleaners } = registry();
    const { leader: l, child } = await leaderAndChild();
    write(cleaners, String(child), recordOf(child));
    refused(reg, cleaners, `the process is not a process-group leader (its group is ${l})`);
  });

  it.each([
    ['one argument differs', (c: string[]) => [c[0]!, '301']],
    ['the first argument differs', (c: string[]) => ['sleepy', ...c.slice(1)]],
    ['one argument more', (c: string[]) => [...c, 'more']],
    ['one argument less', (c: string[]) => c.slice(0, -1)],
  ])('its command line differs: %s', async (_, change) => {
    const { reg, cleaners } = registry();
    const pgid = leader('sleep', ['300']);
    const cmdline = processCmdline(pgid)!;
    expect(cmdline).toEqual(['sleep', '300']);
    write(cleaners, String(pgid), { ...recordOf(pgid), cmdline: change(cmdline) });
    refused(reg, cleaners, 'its command line differs from the recorded one');
    await Promise.resolve();
  });

  it('a zombie group leader (no cmdline left) is not killed', async () => {
    const { reg, cleaners } = registry();
    const z = await zombieLeader();
    write(cleaners, String(z), { ...recordOf(z), cmdline: ['sleep', '0'] });
    refused(reg, cleaners, 'its command line differs from the recorded one');
  });

  it('the very process recorded is killed (its group), and only then', async () => {
    const { reg, cleaners } = registry();
    const pgid = leader('sleep', ['300']);
    write(cleaners, String(pgid), recordOf(pgid));
    expect(reg.reapOrphans()).toBe(1);
    expect(kill.mock.calls).toEqual([[-pgid, 'SIGKILL']]);
    expect(readdirSync(cleaners)).toEqual([]);
    await Promise.resolve();
  });

  it('a kill that fails is not counted and keeps the record for the next start', () => {
    const { reg, cleaners } = registry();
    const pgid = leader('sleep', ['300']);
    write(cleaners, String(pgid), recordOf(pgid));
    kill.mockImplementation(() => {
      throw Object.assign(new Error('kill EPERM'), { code: 'EPERM' });
    });
    expect(reg.reapOrphans()).toBe(0);
    expect(kill.mock.calls).toEqual([[-pgid, 'SIGKILL']]);
    expect(readdirSync(cleaners)).toEqual([String(pgid)]);
    expect(warns().map((l) => l.msg)).toEqual(['could not kill an orphaned cleaner']);
  });

  it('/proc/self/stat unreadable: no crash, the group is still judged on its own /proc entry', () => {
    const { reg, cleaners } = registry();
    const pgid = leader('sleep', ['300']);
    write(cleaners, String(pgid), { ...recordOf(pgid), start: '1' });
    faults.files.set('/proc/self/stat', Object.assign(new Error('EACCES'), { code: 'EACCES' }));
    refused(reg, cleaners, 'the pid now belongs to another process (start time differs)');
  });
});

describe('reapOrphans', () => {
  it('looks at exactly maxRecords records', () => {
    const { reg, cleaners } = registry(3);
    for (const n of ['11', '12', '13']) write(cleaners, n, 'junk');
    expect(reg.reapOrphans()).toBe(0);
    expect(readdirSync(cleaners)).toEqual([]);
    expect(warns().filter((l) => l.msg.startsWith('more than'))).toEqual([]);
    for (const n of ['11', '12', '13', '14']) write(cleaners, n, 'junk');
    logs = [];
    expect(reg.reapOrphans()).toBe(0);
    expect(readdirSync(cleaners)).toHaveLength(1);
    expect(warns().filter((l) => l.msg.startsWith('more than 3 cleaner records'))).toHaveLength(1);
  });

  it('keeps the record of a live daemon (owner and its start time) and says nothing', async () => {
    const { reg, cleaners } = registry();
    const pgid = leader('sleep', ['300']);
    write(cleaners, String(pgid), { ...recordOf(pgid), ownerStart: processStartTime(process.pid) });
    expect(reg.reapOrphans()).toBe(0);
    expect(kill).not.toHaveBeenCalled();
    expect(readdirSync(cleaners)).toEqual([String(pgid)]);
    expect(warns()).toEqual([]);
    await Promise.resolve();
  });

  it('returns 0 when the cleaners directory is gone', () => {
    const { reg, cleaners } = registry();
    rmSync(cleaners, { recursive: true });
    expect(reg.reapOrphans()).toBe(0);
  });

  it('remove() of a record that is not there is silent', () => {
    const { reg } = registry();
    reg.remove(4242);
    expect(warns()).toEqual([]);
  });
});

describe('add()', () => {
  it('records the group leader with its start time, cmdline, the command given and this daemon as owner', () => {
    const { reg, cleaners } = registry();
    const pgid = leader('sleep', ['300']);
    const command = ['/scripts/dd_zero.sh', '--x'];
    reg.add(pgid, 'pv-a', command);
    expect(JSON.parse(readFileSync(join(cleaners, String(pgid)), 'utf8'))).toEqual({
      pgid,
      start: processStartTime(pgid),
      cmdline: ['sleep', '300'],
      owner: process.pid,
      ownerStart: processStartTime(process.pid),
      pv: 'pv-a',
      command,
    });
    expect(warns()).toEqual([]);
  });

  it('records nothing for a process that is gone, an invalid pgid, a non-leader or a zombie leader', async () => {
    const { reg, cleaners } = registry();
    const { child } = await leaderAndChild();
    const z = await zombieLeader();
    for (const p of [NO_PID, 1, 0, -1, child, z]) reg.add(p, 'pv1', ['x']);
    expect(readdirSync(cleaners)).toEqual([]);
    expect(warns()).toEqual([]);
  });

  it('does not follow a symlink planted at the record path (O_NOFOLLOW), and says so', () => {
    const { reg, cleaners, dir } = registry();
    const pgid = leader('sleep', ['300']);
    writeFileSync(join(dir, 'target'), 'untouched');
    symlinkSync(join(dir, 'target'), join(cleaners, String(pgid)));
    reg.add(pgid, 'pv1', ['x']);
    expect(readFileSync(join(dir, 'target'), 'utf8')).toBe('untouched');
    expect(warns().map((l) => l.msg)).toEqual(['cannot record a running cleaner; it would survive a SIGKILL of this daemon']);
  });
});

describe('/proc parsers', () => {
  it('procStat of this process: its pgrp and start time', () => {
    const self = procStat('self')!;
    expect(self.start).toMatch(/^\d+$/);
    expect(procStat(process.pid)).toEqual({ ...self, state: procStat(process.pid)!.state });
    expect(processStartTime(process.pid)).toBe(self.start);
  });

  it('a comm with spaces and ") (" does not shift the fields', async () => {
    const dir = tmp();
    const exe = join(dir, 'a) Z 1 (b');
    symlinkSync('/usr/bin/sleep', exe);
    const pid = leader(exe, ['300']);
    await vi.waitFor(() => expect(readFileSync(`/proc/${pid}/comm`, 'utf8')).toBe('a) Z 1 (b\n'), WAIT);
    const st = procStat(pid)!;
    expect(st.pgrp).toBe(pid);
    expect(st.state).toMatch(/^[RS]$/);
    expect(st.start).toMatch(/^\d+$/);
    expect(processCmdline(pid)).toEqual([exe, '300']);
    // and the registry handles it end to end
    const { reg, cleaners } = registry();
    write(cleaners, String(pid), recordOf(pid));
    expect(reg.reapOrphans()).toBe(1);
    expect(kill.mock.calls).toEqual([[-pid, 'SIGKILL']]);
  });

  it('a truncated stat (no start time field) is no process', () => {
    faults.files.set('/proc/99999999/stat', '99999999 (x) S 1 99999999 99999999 0 -1 4194560');
    faults.files.set('/proc/99999998/stat', '');
    expect(procStat(99999999)).toBeUndefined();
    expect(procStat(99999998)).toBeUndefined();
    faults.files.set('/proc/99999997/stat', `99999997 (x) S 1 99999997 99999997${' 0'.repeat(15)} 4242 0`);
    expect(procStat(99999997)).toEqual({ state: 'S', pgrp: 99999997, start: '4242' });
  });

  it('a zombie has no cmdline; a cmdline without its final NUL keeps its last character', async () => {
    const z = await zombieLeader();
    expect(procStat(z)!.state).toBe('Z');
    expect(processCmdline(z)).toBeUndefined();
    faults.files.set('/proc/99999999/cmdline', 'rewritten title');
    expect(processCmdline(99999999)).toEqual(['rewritten title']);
    faults.files.set('/proc/99999999/cmdline', 'a\0b c\0');
    expect(processCmdline(99999999)).toEqual(['a', 'b c']);
    expect(processCmdline(NO_PID)).toBeUndefined();
  });
});
