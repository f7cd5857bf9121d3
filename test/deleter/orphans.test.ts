import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CleanerRegistry, MAX_RECORD_BYTES, procStat, processCmdline, processStartTime, type RegistryOptions } from '../../src/deleter/orphans.ts';
import { recordOf, writeRecord } from '../support/cleaner-records.ts';

const alive = (pid: number): boolean => {
  const st = procStat(pid);
  return st !== undefined && st.state !== 'Z';
};
const isRoot = process.getuid?.() === 0;

describe('CleanerRegistry', () => {
  const dirs: string[] = [];
  const pids: number[] = [];
  let logs: Array<{ level: number; msg: string }> = [];
  afterEach(() => {
    vi.restoreAllMocks();
    for (const p of pids.splice(0)) {
      try {
        process.kill(-p, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    logs = [];
  });

  const logger = (): RegistryOptions['logger'] => pino({ level: 'debug' }, { write: (s: string) => logs.push(JSON.parse(s) as { level: number; msg: string }) });
  const logged = (level: 'warn' | 'error', text: string): boolean => logs.some((l) => l.level === (level === 'warn' ? 40 : 50) && l.msg.includes(text));

  function groupLeader(): number {
    // A shell in its own process group with a child: like a cleaner script running dd.
    const c = spawn('sh', ['-c', 'sleep 30 & wait'], { detached: true, stdio: 'ignore' });
    c.unref();
    pids.push(c.pid!);
    return c.pid!;
  }

  const tmp = (): string => {
    const d = mkdtempSync(join(tmpdir(), 'lsp-orphans-'));
    dirs.push(d);
    return d;
  };

  function registry(o: RegistryOptions = {}): { reg: CleanerRegistry; dir: string; cleaners: string } {
    const dir = tmp();
    const reg = CleanerRegistry.open(dir, { logger: logger(), ...o });
    expect(reg).toBeDefined();
    return { reg: reg!, dir, cleaners: join(dir, 'cleaners') };
  }

  /** process.kill replaced by a recorder: a bug can never kill the test runner or the machine. */
  const fakeKill = (): ReturnType<typeof vi.spyOn> => vi.spyOn(process, 'kill').mockImplementation(() => true);

  it('records a cleaner with its real command line, mode 0600, and forgets it when it ends', () => {
    const { reg, cleaners } = registry();
    const pgid = groupLeader();
    reg.add(pgid, 'pv1', ['/scripts/dd_zero.sh']);
    expect(readdirSync(cleaners)).toEqual([String(pgid)]);
    const rec = JSON.parse(readFileSync(join(cleaners, String(pgid)), 'utf8')) as Record<string, unknown>;
    expect(rec['cmdline']).toEqual(['sh', '-c', 'sleep 30 & wait']);
    expect(rec['start']).toBe(processStartTime(pgid));
    expect(statSync(join(cleaners, String(pgid))).mode & 0o777).toBe(0o600);
    reg.remove(pgid);
    expect(readdirSync(cleaners)).toEqual([]);
  });

  it('kills the whole process group of a cleaner whose daemon died', async () => {
    const { reg, cleaners } = registry();
    const pgid = groupLeader();
    const kill = vi.spyOn(process, 'kill'); // calls through
    reg.add(pgid, 'pv1', ['/scripts/dd_zero.sh']);
    writeRecord(cleaners, String(pgid), { ...recordOf(pgid), ownerStart: '1' });
    expect(reg.reapOrphans()).toBe(1);
    expect(kill.mock.calls).toEqual([[-pgid, 'SIGKILL']]);
    await vi.waitFor(() => expect(alive(pgid)).toBe(false), { timeout: 30_000 });
    expect(readdirSync(cleaners)).toEqual([]);
  });

  it('leaves the cleaners of a live daemon alone', () => {
    const { reg, cleaners } = registry();
    const pgid = groupLeader();
    const kill = fakeKill();
    reg.add(pgid, 'pv1', ['x']); // owner: this (live) process
    expect(reg.reapOrphans()).toBe(0);
    expect(kill).not.toHaveBeenCalled();
    expect(alive(pgid)).toBe(true);
    expect(readdirSync(cleaners)).toEqual([String(pgid)]);
  });

  it('is a no-op on an empty state dir', () => {
    expect(registry().reg.reapOrphans()).toBe(0);
  });

  describe('hostile records are never killed (process.kill is not called) and are dropped', () => {
    // Each would make the old code kill something: pgid 0 = its own group, 1 = every process,
    // a negative pgid = a single pid, a string = its numeric value.
    const pgids: Array<[string, unknown]> = [
      ['0', 0],
      ['1', 1],
      ['-1', -1],
      ['-5', -5],
      ['1.5', 1.5],
      ['123', '123'],
      ['9007199254740993', 2 ** 53 + 1],
      ['1e+300', 1e300],
      ['4194305', 4_194_305],
      ['null', null],
    ];
    it.each(pgids)('pgid %s', (name, pgid) => {
      const { reg, cleaners } = registry();
      const kill = fakeKill();
      const real = typeof pgid === 'number' && Number.isInteger(pgid) ? Math.abs(pgid) : 1;
      // start time and cmdline of the process the value points at (when there is one), owner dead.
      writeRecord(cleaners, name, { ...recordOf(real), pgid });
      expect(reg.reapOrphans()).toBe(0);
      expect(kill).not.toHaveBeenCalled();
      expect(readdirSync(cleaners)).toEqual([]);
      expect(logged('warn', 'ignoring cleaner record')).toBe(true);
    });

    it.each([
      ['owner', { owner: -1 }],
      ['owner', { owner: 1.5 }],
      ['ownerStart', { ownerStart: 'dead' }],
      ['start', { start: 12345 }],
      ['start', { start: undefined }],
      ['cmdline', { cmdline: undefined }],
      ['cmdline', { cmdline: [] }],
      ['cmdline', { cmdline: [1, 2] }],
    ])('a bad %s field: %j', (_, patch) => {
      const { reg, cleaners } = registry();
      const pgid = groupLeader();
      const kill = fakeKill();
      writeRecord(cleaners, String(pgid), { ...recordOf(pgid), ...patch });
      expect(reg.reapOrphans()).toBe(0);
      expect(kill).not.toHaveBeenCalled();
      expect(alive(pgid)).toBe(true);
    });

    it('not JSON, a JSON array, a file named after another pgid', () => {
      const { reg, cleaners } = registry();
      const pgid = groupLeader();
      const kill = fakeKill();
      writeRecord(cleaners, String(pgid), '{"pgid":');
      writeRecord(cleaners, '77', [recordOf(pgid)]);
      writeRecord(cleaners, '78', recordOf(pgid));
      expect(reg.reapOrphans()).toBe(0);
      expect(kill).not.toHaveBeenCalled();
      expect(readdirSync(cleaners)).toEqual([]);
      expect(alive(pgid)).toBe(true);
    });
  });

  describe('records of real processes that must survive', () => {
    it('the pid was reused (start time differs)', () => {
      const { reg, cleaners } = registry();
      const pgid = groupLeader();
      const kill = fakeKill();
      writeRecord(cleaners, String(pgid), { ...recordOf(pgid), start: '1' });
      expect(reg.reapOrphans()).toBe(0);
      expect(kill).not.toHaveBeenCalled();
      expect(alive(pgid)).toBe(true);
      expect(readdirSync(cleaners)).toEqual([]);
      expect(logged('warn', 'start time differs')).toBe(true);
    });

    it('its /proc/<pid>/cmdline is not the recorded one', () => {
      const { reg, cleaners } = registry();
      const pgid = groupLeader();
      const kill = fakeKill();
      writeRecord(cleaners, String(pgid), { ...recordOf(pgid), cmdline: ['/scripts/dd_zero.sh'] });
      expect(reg.reapOrphans()).toBe(0);
      expect(kill).not.toHaveBeenCalled();
      expect(alive(pgid)).toBe(true);
      expect(logged('warn', 'command line differs')).toBe(true);
    });

    it('it is not a process-group leader (a member of another group)', async () => {
      const { reg, cleaners } = registry();
      const leader = groupLeader();
      const child = await vi.waitFor(
        () => {
          const c = Number(readFileSync(`/proc/${leader}/task/${leader}/children`, 'utf8').trim().split(' ')[0]);
          expect(c).toBeGreaterThan(1);
          // Past its exec: before it, the forked shell's command line is not yet the one to record.
          expect(processCmdline(c)?.[0]).toBe('sleep');
          return c;
        },
        { timeout: 30_000 },
      );
      const kill = fakeKill();
      writeRecord(cleaners, String(child), recordOf(child));
      expect(reg.reapOrphans()).toBe(0);
      expect(kill).not.toHaveBeenCalled();
      expect(alive(child)).toBe(true);
      expect(logged('warn', 'not a process-group leader')).toBe(true);
    });

    it("this daemon's own pid and its own process group", () => {
      const { reg, cleaners } = registry();
      const kill = fakeKill();
      const ownGroup = procStat('self')!.pgrp;
      writeRecord(cleaners, String(process.pid), recordOf(process.pid));
      writeRecord(cleaners, String(ownGroup), recordOf(ownGroup));
      expect(reg.reapOrphans()).toBe(0);
      expect(kill).not.toHaveBeenCalled();
      expect(readdirSync(cleaners)).toEqual([]);
    });

    it('a record bigger than 64 KiB, a symlink, a fifo and a directory are not read as records', () => {
      const { reg, cleaners, dir } = registry();
      const [a, b, c] = [groupLeader(), groupLeader(), groupLeader()];
      const kill = fakeKill();
      writeRecord(cleaners, String(a), JSON.stringify(recordOf(a)) + ' '.repeat(MAX_RECORD_BYTES));
      writeRecord(dir, 'elsewhere', recordOf(b));
      symlinkSync(join(dir, 'elsewhere'), join(cleaners, String(b)));
      expect(spawnSync('mkfifo', [join(cleaners, String(c))]).status).toBe(0); // a blocking read would hang this test
      mkdirSync(join(cleaners, '424242'));
      expect(reg.reapOrphans()).toBe(0);
      expect(kill).not.toHaveBeenCalled();
      for (const p of [a, b, c]) expect(alive(p)).toBe(true);
      expect(existsSync(join(dir, 'elsewhere'))).toBe(true); // the symlink's target is not touched
    });

    it('looks at a bounded number of records per start', () => {
      const { reg, cleaners } = registry({ maxRecords: 3 });
      for (let i = 2; i < 7; i++) writeRecord(cleaners, String(i), 'junk');
      expect(reg.reapOrphans()).toBe(0);
      expect(readdirSync(cleaners)).toHaveLength(2);
      expect(logged('warn', 'more than 3 cleaner records')).toBe(true);
    });
  });

  describe('the state dir must be trusted', () => {
    const refused = (stateDir: string, why: string): void => {
      expect(CleanerRegistry.open(stateDir, { logger: logger() })).toBeUndefined();
      const errors = logs.filter((l) => l.level === 50);
      expect(errors).toHaveLength(1);
      expect(errors[0]!.msg).toContain(why);
      expect(errors[0]!.msg).toContain(JSON.stringify(stateDir));
    };

    it('creates a missing state dir and its cleaners/ subdir with mode 0700', () => {
      const stateDir = join(tmp(), 'a', 'state');
      expect(CleanerRegistry.open(stateDir)).toBeDefined();
      expect(statSync(stateDir).mode & 0o777).toBe(0o700);
      expect(statSync(join(stateDir, 'cleaners')).mode & 0o777).toBe(0o700);
    });

    it('refuses a state dir writable by others (0777) and kills nothing on its word', () => {
      const stateDir = tmp();
      mkdirSync(join(stateDir, 'cleaners'), { mode: 0o700 });
      const pgid = groupLeader();
      writeRecord(join(stateDir, 'cleaners'), String(pgid), recordOf(pgid));
      chmodSync(stateDir, 0o777);
      refused(stateDir, 'is writable by group or others (mode 0777)');
      expect(alive(pgid)).toBe(true);
    });

    it('refuses a cleaners/ subdir writable by group (0770)', () => {
      const stateDir = tmp();
      mkdirSync(join(stateDir, 'cleaners'));
      chmodSync(join(stateDir, 'cleaners'), 0o770);
      refused(join(stateDir), 'cleaners" is writable by group or others');
    });

    it('refuses a state dir that is a symlink (even to a good dir), and a cleaners/ symlink', () => {
      const root = tmp();
      mkdirSync(join(root, 'real'), { mode: 0o700 });
      symlinkSync(join(root, 'real'), join(root, 'link'));
      refused(join(root, 'link'), 'is a symlink');
      logs = [];
      mkdirSync(join(root, 'state'), { mode: 0o700 });
      symlinkSync(join(root, 'real'), join(root, 'state', 'cleaners'));
      refused(join(root, 'state'), 'cleaners" is a symlink');
    });

    it('refuses a state path that is a file', () => {
      const f = join(tmp(), 'file');
      writeFileSync(f, '');
      refused(f, 'cannot create');
    });

    it.skipIf(!isRoot)('refuses a state dir owned by another user', () => {
      const stateDir = tmp();
      chmodSync(stateDir, 0o700);
      chownSync(stateDir, 65534, 65534);
      refused(stateDir, 'is owned by uid 65534');
    });
  });

  it('a record with pgid 0 does not make the daemon SIGKILL its own process group (run in a child process)', async () => {
    // The old code sent SIGKILL to -0, its own group: the child is detached (a group of its own,
    // which it checks first) so only it can die, and the test sees how it ended.
    const { cleaners, dir } = registry();
    writeRecord(cleaners, '0', { pgid: 0, owner: process.pid, ownerStart: '1', pv: 'pv1', command: ['x'] });
    const mod = join(import.meta.dirname, '..', '..', 'src', 'deleter', 'orphans.ts');
    const script = `import { CleanerRegistry, procStat } from ${JSON.stringify(mod)};
      if (procStat('self').pgrp !== process.pid) process.exit(3);
      const n = CleanerRegistry.open(${JSON.stringify(dir)}).reapOrphans();
      console.log('survived ' + n);`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { detached: true, stdio: ['ignore', 'pipe', 'inherit'] });
    pids.push(child.pid!);
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    const [code, signal] = await new Promise<[number | null, string | null]>((resolve) => child.once('close', (c, s) => resolve([c, s])));
    expect({ code, signal, stdout: stdout.trim() }).toEqual({ code: 0, signal: null, stdout: 'survived 0' });
  });
});
