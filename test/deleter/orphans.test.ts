import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CleanerRegistry, processStartTime } from '../../src/deleter/orphans.ts';

const alive = (pid: number): boolean => processStartTime(pid) !== undefined && !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');

describe('CleanerRegistry', () => {
  const dirs: string[] = [];
  const pids: number[] = [];
  afterEach(() => {
    for (const p of pids.splice(0)) {
      try {
        process.kill(-p, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  function groupLeader(): number {
    // A shell in its own process group with a child: like a cleaner script running dd.
    const c = spawn('sh', ['-c', 'sleep 30 & wait'], { detached: true, stdio: 'ignore' });
    c.unref();
    pids.push(c.pid!);
    return c.pid!;
  }

  function registry(): { reg: CleanerRegistry; dir: string } {
    const dir = mkdtempSync(join(tmpdir(), 'lsp-orphans-'));
    dirs.push(dir);
    return { reg: new CleanerRegistry(dir), dir };
  }

  const setOwner = (dir: string, pgid: number, owner: number, ownerStart: string): void => {
    const f = join(dir, 'cleaners', String(pgid));
    writeFileSync(f, JSON.stringify({ ...JSON.parse(readFileSync(f, 'utf8')), owner, ownerStart }));
  };

  it('records a cleaner and forgets it when it ends', () => {
    const { reg, dir } = registry();
    const pgid = groupLeader();
    reg.add(pgid, 'pv1', ['/scripts/dd_zero.sh']);
    expect(readdirSync(join(dir, 'cleaners'))).toEqual([String(pgid)]);
    reg.remove(pgid);
    expect(readdirSync(join(dir, 'cleaners'))).toEqual([]);
  });

  it('kills the whole process group of a cleaner whose daemon died', async () => {
    const { reg, dir } = registry();
    const pgid = groupLeader();
    reg.add(pgid, 'pv1', ['/scripts/dd_zero.sh']);
    setOwner(dir, pgid, 999_999_999, 'dead'); // an owner that does not exist
    expect(reg.reapOrphans()).toBe(1);
    await new Promise((r) => setTimeout(r, 200));
    expect(alive(pgid)).toBe(false);
    expect(readdirSync(join(dir, 'cleaners'))).toEqual([]);
  });

  it('leaves the cleaners of a live daemon alone', () => {
    const { reg, dir } = registry();
    const pgid = groupLeader();
    reg.add(pgid, 'pv1', ['x']); // owner: this (live) process
    expect(reg.reapOrphans()).toBe(0);
    expect(alive(pgid)).toBe(true);
    expect(readdirSync(join(dir, 'cleaners'))).toEqual([String(pgid)]);
  });

  it('never kills a reused pid (start time differs); drops the stale entry', () => {
    const { reg, dir } = registry();
    const pgid = groupLeader();
    reg.add(pgid, 'pv1', ['x']);
    const f = join(dir, 'cleaners', String(pgid));
    writeFileSync(f, JSON.stringify({ ...JSON.parse(readFileSync(f, 'utf8')), start: '1', owner: 999_999_999, ownerStart: 'dead' }));
    expect(reg.reapOrphans()).toBe(0);
    expect(alive(pgid)).toBe(true);
    expect(readdirSync(join(dir, 'cleaners'))).toEqual([]);
  });

  it('is a no-op without a state dir', () => {
    expect(new CleanerRegistry('/nonexistent/lsp-state').reapOrphans()).toBe(0);
  });
});
