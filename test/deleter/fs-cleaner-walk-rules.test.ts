// The Filesystem cleaner's walk rules, each forced deterministically (issue 17 point 9, mutation testing):
// node:fs is wrapped so a test acts at the exact call where the tree changes under the walk (the open of the
// volume root, the open of `..` when going back up to a level whose fd was closed, the lstat of an entry).
import * as realFs from 'node:fs';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { cleanFilesystem, MAX_OPEN_DIRS } from '../../src/deleter/fs-cleaner.ts';
import { canMount, mount, mountLine, NEEDS_ROOT, umountAll, writeMountInfo } from '../support/mountinfo.ts';

type PathArg = Parameters<typeof realFs.openSync>[0];
/**
 * `open`: runs once, right before the first openSync whose path matches `openWhen`; what it returns (if anything)
 * is opened instead. `lstat`: may change the Stats src/ sees for a path.
 */
const hook = vi.hoisted(() => ({
  openWhen: undefined as ((p: string) => boolean) | undefined,
  open: undefined as ((p: string) => string | undefined) | undefined,
  lstat: undefined as ((p: string, st: import('node:fs').Stats) => import('node:fs').Stats) | undefined,
}));
vi.mock('node:fs', async (importOriginal) => {
  const orig = await importOriginal<typeof import('node:fs')>();
  const str = (p: unknown): string => (Buffer.isBuffer(p) ? p.toString('latin1') : String(p));
  const openSync = ((p: PathArg, ...rest: unknown[]) => {
    const h = hook.open;
    let path = p;
    if (h && hook.openWhen?.(str(p))) {
      hook.open = undefined;
      path = h(str(p)) ?? p;
    }
    return (orig.openSync as (...a: unknown[]) => number)(path, ...rest);
  }) as typeof orig.openSync;
  const lstatSync = ((p: PathArg, ...rest: unknown[]) => {
    const st = (orig.lstatSync as (...a: unknown[]) => import('node:fs').Stats | undefined)(p, ...rest);
    return st && hook.lstat ? hook.lstat(str(p), st) : st;
  }) as typeof orig.lstatSync;
  return { ...orig, openSync, lstatSync, default: { ...orig, openSync, lstatSync } };
});

let dir: string;
let vol: string;
let mountInfoPath: string;
let mounts: string[];
const reset = (): void => {
  hook.openWhen = hook.open = hook.lstat = undefined;
};
beforeEach(() => {
  reset();
  mounts = [];
  dir = mkdtempSync(join(tmpdir(), 'lsp-fswalk-'));
  vol = join(dir, 'vol');
  mkdirSync(vol);
  mountInfoPath = join(dir, 'mountinfo');
  writeMountInfo(mountInfoPath, [vol]);
});
afterEach(() => {
  reset();
  umountAll(mounts);
  rmSync(dir, { recursive: true, force: true });
});

const openFds = (): number => realFs.readdirSync('/proc/self/fd').length;

/** `vol/d/d/...` (depth levels, deeper than MAX_OPEN_DIRS), a file `f` in each; returns the level paths. */
function deepChain(depth = MAX_OPEN_DIRS + 8): string[] {
  const levels: string[] = [];
  let p = vol;
  for (let i = 0; i < depth; i++) levels.push((p = join(p, 'd')));
  mkdirSync(p, { recursive: true });
  for (const l of levels) writeFileSync(join(l, 'f'), 'old data');
  return levels;
}

/** A directory outside the volume holding the same names as a level (`f`, `d`) and a precious file. */
function outside(): string {
  const o = join(dir, 'outside');
  mkdirSync(join(o, 'd'), { recursive: true });
  writeFileSync(join(o, 'f'), 'keep f');
  writeFileSync(join(o, 'precious'), 'keep me');
  return o;
}

const isDotDot = (p: string): boolean => p.endsWith('/..');
/** The path of the open child whose `..` is being opened (from /proc/self/fd/N/..). */
const childOf = (p: string): string => readlinkSync(p.slice(0, -3));

describe('going back up via `..` to a level whose fd was closed (bounded fds)', () => {
  it('a parent that is another directory now (the child was moved out of the volume) is not re-entered: nothing there is removed, the clean fails naming it', async () => {
    const levels = deepChain();
    const o = outside();
    let parent: string | undefined;
    hook.openWhen = isDotDot;
    hook.open = (p) => {
      const child = childOf(p);
      parent = dirname(child);
      // `..` of the open child is now `outside`: another (dev, ino) than the level recorded on the way down.
      renameSync(child, join(o, 'moved'));
      return undefined;
    };
    const fds = openFds();
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(hook.open).toBeUndefined();
    expect(levels).toContain(parent);
    expect(r.ok).toBe(false);
    expect(r.error).toBe(`${parent}: was moved or replaced during the clean; not re-entered`);
    expect(readdirSync(o).sort()).toEqual(['d', 'f', 'moved', 'precious']);
    expect(readFileSync(join(o, 'f'), 'utf8')).toBe('keep f');
    expect(readFileSync(join(o, 'precious'), 'utf8')).toBe('keep me');
    expect(readdirSync(join(o, 'd'))).toEqual([]);
    // The levels above the one not re-entered are untouched (their `f` is still there).
    for (const l of levels.slice(0, levels.indexOf(parent as string) + 1)) expect(readdirSync(l)).toContain('f');
    expect(openFds()).toBe(fds);
  });

  it.skipIf(!canMount)(`a parent reached on another mount (same dev and inode, a bind mount) is not re-entered (${NEEDS_ROOT})`, async () => {
    const levels = deepChain();
    let parent: string | undefined;
    const bind = join(dir, 'bind');
    hook.openWhen = isDotDot;
    hook.open = (p) => {
      parent = dirname(childOf(p));
      mkdirSync(bind);
      mount('--bind', parent, bind);
      mounts.push(bind);
      // `..` resolves to the same directory, but through another mount.
      return bind;
    };
    const fds = openFds();
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(hook.open).toBeUndefined();
    expect(levels).toContain(parent);
    expect(r.ok).toBe(false);
    expect(r.error).toBe(`${parent}: is on another mount now; not re-entered`);
    for (const l of levels.slice(0, levels.indexOf(parent as string) + 1)) expect(readdirSync(l)).toContain('f');
    expect(openFds()).toBe(fds);
  });
});

describe('the volume root', () => {
  it('replaced between its lstat and its open: the clean refuses, nothing is removed from either directory', async () => {
    writeFileSync(join(vol, 'old'), 'x');
    hook.openWhen = (p) => p === vol;
    hook.open = () => {
      renameSync(vol, join(dir, 'vol-before'));
      mkdirSync(vol);
      writeFileSync(join(vol, 'new'), 'y');
      return undefined;
    };
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(hook.open).toBeUndefined();
    expect(r.ok).toBe(false);
    expect(r.error).toBe(`${vol} changed while it was opened; nothing was removed`);
    expect(r.removed).toBe(0);
    expect(readdirSync(vol)).toEqual(['new']);
    expect(readdirSync(join(dir, 'vol-before'))).toEqual(['old']);
  });
});

describe('entering a directory', () => {
  it('a directory replaced by a directory outside the volume between lstat and open is not entered: its files stay', async () => {
    mkdirSync(join(vol, 'a', 'sub'), { recursive: true });
    writeFileSync(join(vol, 'a', 'sub', 'f'), 'x');
    const o = outside();
    hook.openWhen = (p) => p.endsWith('/sub');
    hook.open = () => {
      renameSync(join(vol, 'a', 'sub'), join(dir, 'sub-moved'));
      renameSync(o, join(vol, 'a', 'sub'));
      return undefined;
    };
    const fds = openFds();
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(hook.open).toBeUndefined();
    expect(r.ok).toBe(false);
    expect(r.error).toBe(`${vol}/a/sub: was replaced by another directory during the clean; not entered`);
    expect(readdirSync(join(vol, 'a', 'sub')).sort()).toEqual(['d', 'f', 'precious']);
    expect(readFileSync(join(vol, 'a', 'sub', 'precious'), 'utf8')).toBe('keep me');
    expect(openFds()).toBe(fds);
  });

  it('an entry on another device than the root (e.g. a btrfs subvolume) is neither removed nor entered, and is reported', async () => {
    writeFileSync(join(vol, 'other-dev'), 'keep');
    mkdirSync(join(vol, 'other-dev-dir'));
    writeFileSync(join(vol, 'other-dev-dir', 'f'), 'keep');
    writeFileSync(join(vol, 'plain'), 'x');
    hook.lstat = (p, st) => (/\/other-dev(-dir)?$/.test(p) ? Object.assign(Object.create(Object.getPrototypeOf(st) as object) as typeof st, st, { dev: st.dev + 1 }) : st);
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.ok).toBe(false);
    expect([...r.skipped].sort()).toEqual([`${vol}/other-dev`, `${vol}/other-dev-dir`]);
    expect(readdirSync(vol).sort()).toEqual(['other-dev', 'other-dev-dir']);
    expect(readdirSync(join(vol, 'other-dev-dir'))).toEqual(['f']);
  });
});

describe('the mount points nested under the volume (from the mount table)', () => {
  it('a mount point listed under the volume is skipped; one of a sibling path with the same prefix is not nested', async () => {
    // Listed (fake lines: plain directories, so only the table tells they are mount points).
    mkdirSync(join(vol, 'sub', 'bind'), { recursive: true });
    writeFileSync(join(vol, 'sub', 'bind', 'f'), 'keep');
    // vol2keep / vol2/m are siblings of vol sharing its prefix: "keep" and "m" in the volume are not mount points.
    mkdirSync(join(vol, 'keep'));
    writeFileSync(join(vol, 'keep', 'f'), 'x');
    mkdirSync(join(vol, 'm'));
    writeFileSync(join(vol, 'm', 'f'), 'x');
    writeMountInfo(mountInfoPath, [vol], [mountLine(join(vol, 'sub', 'bind'), 1, '0:1'), mountLine(`${vol}2keep`, 2, '0:1'), mountLine(`${vol}2/m`, 3, '0:1')]);
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.ok).toBe(false);
    expect(r.skipped).toEqual([`${vol}/sub/bind`]);
    expect(r.error).toBe(`1 entries are on another mount and were not removed (unmount them): ${vol}/sub/bind`);
    expect(readdirSync(vol)).toEqual(['sub']);
    expect(readdirSync(join(vol, 'sub'))).toEqual(['bind']);
    expect(readdirSync(join(vol, 'sub', 'bind'))).toEqual(['f']);
  });
});
