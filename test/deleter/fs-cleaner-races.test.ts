// The Filesystem cleaner's rules at the exact moments a tenant (or the kernel)
// could change the tree under it: right between the lstat of an entry and the
// open/unlink of it. node:fs is wrapped so a test can act at that moment.
import * as realFs from 'node:fs';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { cleanFilesystem } from '../../src/deleter/fs-cleaner.ts';
import { writeMountInfo } from '../support/mountinfo.ts';

/** Runs once right before src/ opens (`open`) or unlinks (`unlink`) an entry whose name is `name`. */
const hook = vi.hoisted(() => ({
  name: undefined as string | undefined,
  open: undefined as (() => void) | undefined,
  unlink: undefined as (() => void) | undefined,
}));
vi.mock('node:fs', async (importOriginal) => {
  const orig = await importOriginal<typeof import('node:fs')>();
  const named = (p: unknown): boolean =>
    hook.name !== undefined && (Buffer.isBuffer(p) ? p.toString('latin1') : String(p)).endsWith(`/${hook.name}`);
  const openSync = ((...args: Parameters<typeof orig.openSync>) => {
    const h = hook.open;
    if (h && named(args[0])) {
      hook.open = undefined;
      h();
    }
    return orig.openSync(...args);
  }) as typeof orig.openSync;
  const unlinkSync = ((p: Parameters<typeof orig.unlinkSync>[0]) => {
    const h = hook.unlink;
    if (h && named(p)) h();
    return orig.unlinkSync(p);
  }) as typeof orig.unlinkSync;
  return { ...orig, openSync, unlinkSync, default: { ...orig, openSync, unlinkSync } };
});

let dir: string;
let vol: string;
let mountInfoPath: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'lsp-fsraces-'));
  vol = join(dir, 'vol');
  mkdirSync(vol);
  mountInfoPath = join(dir, 'mountinfo');
  writeMountInfo(mountInfoPath, [vol]);
  hook.name = hook.open = hook.unlink = undefined;
});
afterEach(() => {
  hook.name = hook.open = hook.unlink = undefined;
  rmSync(dir, { recursive: true, force: true });
});

const openFds = (): number => realFs.readdirSync('/proc/self/fd').length;

/** A directory outside the volume that must never be touched. */
function outside(): string {
  const o = join(dir, 'outside');
  mkdirSync(o);
  writeFileSync(join(o, 'precious'), 'keep me');
  return o;
}

describe('cleanFilesystem: the tree changing under the walk', () => {
  it('a directory swapped for a symlink after its lstat is not followed: the target keeps its files, one error, the clean fails', async () => {
    const target = outside();
    mkdirSync(join(vol, 'a', 'sub'), { recursive: true });
    writeFileSync(join(vol, 'a', 'sub', 'f'), 'x');
    hook.name = 'sub';
    hook.open = () => {
      renameSync(join(vol, 'a', 'sub'), join(dir, 'sub-moved'));
      symlinkSync(target, join(vol, 'a', 'sub'));
    };
    const fds = openFds();
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(hook.open).toBeUndefined();
    expect(r.ok).toBe(false);
    // One error: the directory holding it is kept without a second "cannot remove" error.
    expect(r.error).toBe(`${vol}/a/sub: was replaced by a symlink or a non-directory during the clean; not followed`);
    expect(readFileSync(join(target, 'precious'), 'utf8')).toBe('keep me');
    expect(readdirSync(join(vol, 'a'))).toEqual(['sub']);
    expect(openFds()).toBe(fds);
  });

  it('a directory swapped for a file after its lstat is not entered either (ENOTDIR): one error, the clean fails', async () => {
    mkdirSync(join(vol, 'sub'));
    hook.name = 'sub';
    hook.open = () => {
      rmSync(join(vol, 'sub'), { recursive: true });
      writeFileSync(join(vol, 'sub'), 'now a file');
    };
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.ok).toBe(false);
    expect(r.error).toBe(`${vol}/sub: was replaced by a symlink or a non-directory during the clean; not followed`);
  });

  it('a directory swapped for another directory after its lstat is not entered: its files stay, one error, no fd leaks', async () => {
    const other = outside();
    mkdirSync(join(vol, 'sub'));
    hook.name = 'sub';
    hook.open = () => {
      renameSync(join(vol, 'sub'), join(dir, 'sub-moved'));
      renameSync(other, join(vol, 'sub'));
    };
    const fds = openFds();
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.ok).toBe(false);
    expect(r.error).toBe(`${vol}/sub: was replaced by another directory during the clean; not entered`);
    expect(readdirSync(join(vol, 'sub'))).toEqual(['precious']);
    expect(openFds()).toBe(fds);
  });

  it.each([
    ['ELOOP', 'was replaced by a symlink or a non-directory during the clean; not followed'],
    ['EMFILE', 'cannot open: EMFILE'],
  ])('an open of a directory failing with %s fails the clean with that reason', async (code, why) => {
    mkdirSync(join(vol, 'sub'));
    hook.name = 'sub';
    hook.open = () => {
      throw Object.assign(new Error(`${code}: open failed`), { code });
    };
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.ok).toBe(false);
    expect(r.error).toBe(`${vol}/sub: ${why}`);
    expect(readdirSync(vol)).toEqual(['sub']);
  });

  it('a directory that vanished after its lstat is simply gone: the clean succeeds', async () => {
    mkdirSync(join(vol, 'sub'));
    writeFileSync(join(vol, 'file'), 'x');
    hook.name = 'sub';
    hook.open = () => rmSync(join(vol, 'sub'), { recursive: true });
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.error).toBeUndefined();
    expect(r.ok).toBe(true);
    expect(readdirSync(vol)).toEqual([]);
  });

  it('a file that cannot be unlinked fails the clean with exactly that error; its directory is kept, not reported again', async () => {
    mkdirSync(join(vol, 'sub'));
    writeFileSync(join(vol, 'sub', 'stuck'), 'x');
    writeFileSync(join(vol, 'sub', 'other'), 'x');
    hook.name = 'stuck';
    hook.unlink = () => {
      throw Object.assign(new Error('EPERM: operation not permitted'), { code: 'EPERM' });
    };
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.ok).toBe(false);
    expect(r.error).toBe(`remove ${vol}/sub/stuck: EPERM`);
    expect(readdirSync(join(vol, 'sub'))).toEqual(['stuck']);
  });

  it('a file that is busy (a mount point the table did not list) is skipped and reported as on another mount', async () => {
    writeFileSync(join(vol, 'busy'), 'x');
    hook.name = 'busy';
    hook.unlink = () => {
      throw Object.assign(new Error('EBUSY: resource busy or locked'), { code: 'EBUSY' });
    };
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.ok).toBe(false);
    expect(r.skipped).toEqual([`${vol}/busy`]);
    expect(r.error).toBe(`1 entries are on another mount and were not removed (unmount them): ${vol}/busy`);
  });

  it('an entry removed by someone else between lstat and unlink is not an error', async () => {
    writeFileSync(join(vol, 'racy'), 'x');
    hook.name = 'racy';
    hook.unlink = () => {
      hook.unlink = undefined;
      realFs.unlinkSync(join(vol, 'racy'));
    };
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.error).toBeUndefined();
    expect(r.ok).toBe(true);
  });
});
