import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cleanBlockDevice, cleanFilesystem } from '../../src/deleter/cleaner.ts';
import { canMount, mount, mountLine, mountOf, NEEDS_ROOT, umountAll, writeMountInfo } from '../support/mountinfo.ts';

let dir: string;
let mounts: string[];
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'lsp-cleaner-'));
  mounts = [];
});
afterEach(() => {
  umountAll(mounts);
  rmSync(dir, { recursive: true, force: true });
});

function populate(vol: string): void {
  mkdirSync(join(vol, 'a/b/c'), { recursive: true });
  writeFileSync(join(vol, 'a/b/c/f.txt'), 'data');
  writeFileSync(join(vol, '.hidden'), 'secret');
  mkdirSync(join(vol, '.dotdir'));
  writeFileSync(join(vol, '.dotdir/x'), 'x');
  writeFileSync(join(vol, 'top'), 'top');
}

/** A volume directory listed as a mount point in a mount table of its own (no mount needed). */
function volume(name = 'vol', extra: readonly string[] = []): { vol: string; mountInfoPath: string } {
  const vol = join(dir, name);
  mkdirSync(vol, { recursive: true });
  const mountInfoPath = join(dir, `mountinfo-${name}`);
  writeMountInfo(mountInfoPath, [vol], extra);
  return { vol, mountInfoPath };
}

/** Mounts a fresh tmpfs at `path` (created), unmounted after the test. */
function tmpfs(path: string): string {
  mkdirSync(path, { recursive: true });
  mount('-t', 'tmpfs', '-o', 'size=4m', 'lsp-test', path);
  mounts.push(path);
  return path;
}

function bind(from: string, to: string): void {
  if (!existsSync(to)) mkdirSync(to, { recursive: true });
  mount('--bind', from, to);
  mounts.push(to);
}

const bytes = (...parts: Array<string | number[]>): Buffer =>
  Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));

describe('cleanFilesystem', () => {
  it('removes every entry, dotfiles included, and keeps the directory', async () => {
    const { vol, mountInfoPath } = volume();
    populate(vol);
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.error).toBeUndefined();
    expect(r.ok).toBe(true);
    expect(r.removed).toBe(8);
    expect(existsSync(vol)).toBe(true);
    expect(readdirSync(vol)).toEqual([]);
  });

  it('removes names that are not UTF-8, hold newlines, have 255 bytes or start with dashes', async () => {
    const { vol, mountInfoPath } = volume();
    const v = `${vol}/`;
    const ffDir = bytes(v, [0xff]);
    mkdirSync(ffDir);
    writeFileSync(bytes(v, [0xff], '/inside'), 'old data');
    writeFileSync(bytes(v, [0xff], '/', [0xfe, 0x80, 0x0a]), 'old data');
    mkdirSync(bytes(v, [0xff], '/', [0xc3]));
    writeFileSync(bytes(v, [0xff], '/', [0xc3], '/deep'), 'old data');
    writeFileSync(join(vol, 'new\nline'), 'old data');
    mkdirSync(join(vol, '\n'));
    writeFileSync(join(vol, '\n', '\n\n'), 'old data');
    writeFileSync(join(vol, 'x'.repeat(255)), 'old data');
    mkdirSync(join(vol, 'é'.repeat(127)));
    writeFileSync(join(vol, 'é'.repeat(127), 'y'.repeat(255)), 'old data');
    writeFileSync(join(vol, '-rf'), 'old data');
    writeFileSync(join(vol, '--'), 'old data');
    writeFileSync(bytes(v, '-', [0xff, 0x5c]), 'old data');
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.error).toBeUndefined();
    expect(r.ok).toBe(true);
    expect(readdirSync(vol, { encoding: 'buffer' })).toEqual([]);
    expect(r.removed).toBe(14);
  });

  it('fails, naming them, when entries are left after the walk', async () => {
    const { vol, mountInfoPath } = volume();
    for (let i = 0; i < 10; i++) {
      mkdirSync(join(vol, `d${i}`));
      for (let j = 0; j < 100; j++) writeFileSync(join(vol, `d${i}`, `f${j}`), 'x');
    }
    // Written between two batches of the walk, after the root was listed.
    const late = bytes(`${vol}/late-`, [0xff, 0x0a]);
    let written = false;
    const sneak = (): void => {
      if (!existsSync(join(vol, 'd0', 'f0'))) {
        writeFileSync(late, 'arrived during the clean');
        written = true;
      } else setImmediate(sneak);
    };
    setImmediate(sneak);
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(written).toBe(true);
    expect(r.ok).toBe(false);
    expect(r.error).toBe(`1 entries are still in ${vol} after the clean: "late-\\\\xff\\\\x0a"`);
    expect(readdirSync(vol, { encoding: 'buffer' })).toEqual([Buffer.from(late.subarray(vol.length + 1))]);
  });

  it('removes symlinks without following them', async () => {
    const { vol, mountInfoPath } = volume();
    const outside = join(dir, 'outside');
    mkdirSync(outside);
    writeFileSync(join(outside, 'keep'), 'keep');
    symlinkSync(outside, join(vol, 'link-to-dir'));
    symlinkSync(join(outside, 'keep'), join(vol, 'link-to-file'));
    symlinkSync('../outside', join(vol, 'relative-link'));
    symlinkSync(join(dir, 'nowhere'), join(vol, 'dangling'));
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.ok).toBe(true);
    expect(readdirSync(vol)).toEqual([]);
    expect(readdirSync(outside)).toEqual(['keep']);
    expect(readFileSync(join(outside, 'keep'), 'utf8')).toBe('keep');
  });

  it('fails with a clear error for a missing or non-directory path', async () => {
    const r1 = await cleanFilesystem(join(dir, 'missing'));
    expect(r1.ok).toBe(false);
    expect(r1.error).toMatch(/cannot stat .*missing/);
    writeFileSync(join(dir, 'file'), 'x');
    const r2 = await cleanFilesystem(join(dir, 'file'));
    expect(r2.ok).toBe(false);
    expect(r2.error).toMatch(/is not a directory/);
  });

  it('removes nothing from a directory that is not a mount point (any more)', async () => {
    const vol = join(dir, 'vol');
    mkdirSync(vol);
    populate(vol);
    const r = await cleanFilesystem(vol); // the real mount table
    expect(r.ok).toBe(false);
    expect(r.error).toBe(`${vol} is not a mount point any more (unmounted?); nothing was removed`);
    expect(r.removed).toBe(0);
    expect(readdirSync(vol).sort()).toEqual(['.dotdir', '.hidden', 'a', 'top']);
  });

  it('removes nothing when the mount table lists another device or another mount for the path', async () => {
    const vol = join(dir, 'vol');
    mkdirSync(vol);
    populate(vol);
    const real = mountOf(vol);
    const otherDev = join(dir, 'mi-dev');
    writeMountInfo(otherDev, [], [mountLine(vol, real.id, '4095:4095')]);
    const r1 = await cleanFilesystem(vol, { mountInfoPath: otherDev });
    expect(r1.ok).toBe(false);
    expect(r1.error).toBe(`device changed: ${vol} is on device ${real.devno}, the mount table lists 4095:4095 for it; nothing was removed`);
    const otherMount = join(dir, 'mi-id');
    // Stacked mounts: the last entry for the path is the one that counts.
    writeMountInfo(otherMount, [vol], [mountLine(vol, 999_999, real.devno)]);
    const r2 = await cleanFilesystem(vol, { mountInfoPath: otherMount });
    expect(r2.ok).toBe(false);
    expect(r2.error).toBe(`${vol} is not the mount in the mount table (mount ID ${real.id}, listed 999999): unmounted or remounted; nothing was removed`);
    expect(readdirSync(vol).sort()).toEqual(['.dotdir', '.hidden', 'a', 'top']);
  });

  it('leaves entries listed as mount points in place and fails', async () => {
    const vol = join(dir, 'vol');
    mkdirSync(join(vol, 'sub/bind'), { recursive: true });
    const { mountInfoPath } = volume('vol', [mountLine(join(vol, 'sub/bind'), 1, '0:1')]);
    writeFileSync(join(vol, 'sub/bind/precious'), 'p');
    writeFileSync(join(vol, 'plain'), 'x');
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.ok).toBe(false);
    expect(r.skipped).toEqual([join(vol, 'sub/bind')]);
    expect(r.error).toMatch(/1 entries are on another mount.*sub\/bind/);
    expect(existsSync(join(vol, 'sub/bind/precious'))).toBe(true);
    expect(existsSync(join(vol, 'plain'))).toBe(false);
  });

  describe.skipIf(!canMount)(`with real mounts (${NEEDS_ROOT})`, () => {
    it('does not cross into a nested mount (tmpfs) and reports it', async () => {
      const vol = tmpfs(join(dir, 'vol'));
      const nested = tmpfs(join(vol, 'deep/nested'));
      writeFileSync(join(vol, 'f'), 'x');
      writeFileSync(join(nested, 'other-fs-file'), 'must survive');
      const r = await cleanFilesystem(vol);
      expect(r.ok).toBe(false);
      expect(r.skipped).toEqual([nested]);
      expect(readdirSync(nested)).toEqual(['other-fs-file']);
      expect(existsSync(join(vol, 'f'))).toBe(false);
      expect(readdirSync(vol)).toEqual(['deep']);
    });

    it('finds a volume whose mount point holds spaces, a newline, a backslash and non-ASCII in the mount table', async () => {
      const vol = tmpfs(join(dir, 'vol é \n\\ x'));
      populate(vol);
      const r = await cleanFilesystem(vol);
      expect(r.error).toBeUndefined();
      expect(readdirSync(vol)).toEqual([]);
    });

    it('removes nothing of the underlying directory when the volume was unmounted before the clean', async () => {
      const vol = join(dir, 'vol');
      mkdirSync(vol);
      populate(vol); // the root filesystem's directory under the mount point
      tmpfs(vol);
      writeFileSync(join(vol, 'tenant'), 'x');
      umountAll([vol]);
      const r = await cleanFilesystem(vol);
      expect(r.ok).toBe(false);
      expect(r.error).toMatch(/is not a mount point any more/);
      expect(readdirSync(vol).sort()).toEqual(['.dotdir', '.hidden', 'a', 'top']);
      expect(readFileSync(join(vol, 'a/b/c/f.txt'), 'utf8')).toBe('data');
    });

    /** A disk (tmpfs) with two volume directories, `vol` mounted by a bind mount like a real volume. */
    function disk(): { diskRoot: string; vol: string; sibling: string } {
      const diskRoot = tmpfs(join(dir, 'disk'));
      mkdirSync(join(diskRoot, 'vol'));
      const sibling = join(diskRoot, 'sibling');
      mkdirSync(join(sibling, 'sub'), { recursive: true });
      writeFileSync(join(sibling, 'sub', 'data'), 'sibling data');
      writeFileSync(join(diskRoot, 'disk-root-file'), 'disk data');
      const vol = join(dir, 'mnt', 'vol');
      bind(join(diskRoot, 'vol'), vol);
      writeFileSync(join(vol, 'tenant'), 'x');
      return { diskRoot, vol, sibling };
    }

    it('does not enter same-device bind mounts of a sibling volume or of the disk root', async () => {
      const { diskRoot, vol, sibling } = disk();
      bind(sibling, join(vol, 'a', 'sib'));
      bind(diskRoot, join(vol, 'b', 'root'));
      const r = await cleanFilesystem(vol);
      expect(r.ok).toBe(false);
      expect([...r.skipped].sort()).toEqual([join(vol, 'a', 'sib'), join(vol, 'b', 'root')]);
      expect(readFileSync(join(sibling, 'sub', 'data'), 'utf8')).toBe('sibling data');
      expect(readFileSync(join(diskRoot, 'disk-root-file'), 'utf8')).toBe('disk data');
      expect(existsSync(join(vol, 'tenant'))).toBe(false);
    });

    it('recognises a bind mount by its mount ID even when the mount table does not list it', async () => {
      const { vol, sibling } = disk();
      bind(sibling, join(vol, 'a', 'sib'));
      // The table as it was before the nested bind: only the mount ID check can stop the walk.
      const mountInfoPath = join(dir, 'mountinfo');
      const text = readFileSync('/proc/self/mountinfo', 'latin1');
      writeFileSync(mountInfoPath, text.split('\n').filter((l) => !l.includes(join(vol, 'a'))).join('\n'), 'latin1');
      const r = await cleanFilesystem(vol, { mountInfoPath });
      expect(r.ok).toBe(false);
      expect(r.skipped).toEqual([join(vol, 'a', 'sib')]);
      expect(readFileSync(join(sibling, 'sub', 'data'), 'utf8')).toBe('sibling data');
    });

    it('reports a file bind-mounted over a file of the volume (EBUSY) and keeps it', async () => {
      const { vol, sibling } = disk();
      writeFileSync(join(vol, 'over'), 'tenant');
      bind(join(sibling, 'sub', 'data'), join(vol, 'over'));
      const r = await cleanFilesystem(vol);
      expect(r.ok).toBe(false);
      expect(r.skipped).toEqual([join(vol, 'over')]);
      expect(readFileSync(join(sibling, 'sub', 'data'), 'utf8')).toBe('sibling data');
    });
  });

  it('keeps the event loop responsive while removing a large tree', async () => {
    const { vol, mountInfoPath } = volume();
    for (let i = 0; i < 20; i++) {
      mkdirSync(join(vol, `d${i}`), { recursive: true });
      for (let j = 0; j < 100; j++) writeFileSync(join(vol, `d${i}`, `f${j}`), 'x');
    }
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    const r = await cleanFilesystem(vol, { mountInfoPath });
    clearInterval(timer);
    expect(r.ok).toBe(true);
    expect(r.removed).toBe(2020);
    expect(ticks).toBeGreaterThan(0);
  });

  it('removes a tree whose paths are longer than PATH_MAX', { timeout: 60_000 }, async () => {
    const { vol, mountInfoPath } = volume();
    // 3000 levels: paths of 6000+ bytes, which no path-based call can name.
    const script = 'cd "$1" && c=$(printf "d/%.0s" $(seq 500)) && for i in 1 2 3 4 5 6; do mkdir -p "$c" && cd -P "$c" || exit 1; done; echo x > f';
    const made = spawnSync('bash', ['-c', script, 'mk', vol]);
    expect(made.status).toBe(0);
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.error).toBeUndefined();
    expect(r.removed).toBe(3001);
    expect(readdirSync(vol)).toEqual([]);
  });

  it('stops when aborted', async () => {
    const { vol, mountInfoPath } = volume();
    populate(vol);
    const ac = new AbortController();
    ac.abort();
    const r = await cleanFilesystem(vol, { mountInfoPath, signal: ac.signal });
    expect(r.ok).toBe(false);
    expect(r.error).toBe('cleanup aborted');
    expect(readdirSync(vol).length).toBeGreaterThan(0);
  });
});

describe('cleanBlockDevice', () => {
  it('runs the argv with LOCAL_PV_BLKDEVICE and no shell interpolation', async () => {
    const evil = `${dir}/$(touch ${dir}/pwned)`;
    const lines: string[] = [];
    const r = await cleanBlockDevice({
      command: ['bash', '-c', 'echo "dev=$LOCAL_PV_BLKDEVICE"; echo warn >&2'],
      devicePath: evil,
      onLine: (s, l) => lines.push(`${s}:${l}`),
    });
    expect(r.ok).toBe(true);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toEqual([`dev=${evil}`]);
    expect(r.stderr).toEqual(['warn']);
    expect(lines).toContain(`stdout:dev=${evil}`);
    expect(existsSync(join(dir, 'pwned'))).toBe(false);
  });

  it('reports a non-zero exit with the last output line', async () => {
    const r = await cleanBlockDevice({ command: ['bash', '-c', 'echo "no device" >&2; exit 10'], devicePath: '/dev/null' });
    expect(r.ok).toBe(false);
    expect(r.exitCode).toBe(10);
    expect(r.error).toBe('block cleaner command "bash" exited with code 10: no device');
  });

  it('reports a command that does not exist or is not executable', async () => {
    const r = await cleanBlockDevice({ command: [join(dir, 'no-such-cleaner.sh')], devicePath: '/dev/null' });
    expect(r.ok).toBe(false);
    expect(r.error).toMatch(/no-such-cleaner\.sh" was not found/);
    writeFileSync(join(dir, 'noexec.sh'), '#!/bin/sh\n');
    const r2 = await cleanBlockDevice({ command: [join(dir, 'noexec.sh')], devicePath: '/dev/null' });
    expect(r2.ok).toBe(false);
    expect(r2.error).toMatch(/is not executable/);
    const r3 = await cleanBlockDevice({ command: [], devicePath: '/dev/null' });
    expect(r3.error).toMatch(/empty/);
  });

  it('keeps only the last lines of a verbose command', async () => {
    const r = await cleanBlockDevice({ command: ['bash', '-c', 'for i in $(seq 1 500); do echo line$i; done'], devicePath: '/dev/null', maxLines: 5 });
    expect(r.ok).toBe(true);
    expect(r.stdout).toEqual(['line496', 'line497', 'line498', 'line499', 'line500']);
  });

  it('kills the whole process group on timeout, even children ignoring SIGTERM', async () => {
    const marker = `lsp-test-hang-${process.pid}-${Date.now()}`;
    const script = `trap "" TERM; (trap "" TERM; exec -a ${marker} sleep 1000) & (exec -a ${marker} sleep 1000) & wait`;
    const t0 = Date.now();
    const r = await cleanBlockDevice({ command: ['bash', '-c', script, marker], devicePath: '/dev/null', timeoutMs: 300, forceKillAfterMs: 300 });
    expect(r.ok).toBe(false);
    expect(r.timedOut).toBe(true);
    expect(r.error).toMatch(/timed out after 300 ms/);
    expect(Date.now() - t0).toBeLessThan(5000);
    const left = spawnSync('pgrep', ['-f', marker], { encoding: 'utf8' });
    expect(left.stdout.trim()).toBe('');
    expect(left.status).toBe(1);
  });

  it('kills the group when cancelled', async () => {
    const marker = `lsp-test-cancel-${process.pid}-${Date.now()}`;
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 200);
    const r = await cleanBlockDevice({ command: ['bash', '-c', `(exec -a ${marker} sleep 1000) & wait`, marker], devicePath: '/dev/null', signal: ac.signal });
    expect(r.ok).toBe(false);
    expect(r.error).toMatch(/cancelled/);
    expect(spawnSync('pgrep', ['-f', marker]).status).toBe(1);
  });
});
