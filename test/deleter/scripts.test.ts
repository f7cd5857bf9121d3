// Runs the cleaner scripts of deployment/scripts against real loop devices
// (root only), and fsclean.sh against real tmpfs and bind mounts (root only).
// Every loop device and mount a test makes is undone in afterEach, whatever the
// outcome; devices and mounts this test did not create are never touched.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

const SCRIPTS = fileURLToPath(new URL('../../deployment/scripts/', import.meta.url));
const SIZE = 8 * 1024 * 1024;
const MIB = 1024 * 1024;

function probeLoop(): string | undefined {
  if (process.getuid?.() !== 0) return 'not running as root';
  if (spawnSync('losetup', ['--version']).status !== 0) return 'losetup is not available';
  const d = mkdtempSync(join(tmpdir(), 'lsp-loop-probe-'));
  try {
    const img = join(d, 'probe.img');
    execFileSync('truncate', ['-s', '1M', img]);
    const r = spawnSync('losetup', ['--find', '--show', img], { encoding: 'utf8' });
    if (r.status !== 0) return `cannot attach a loop device: ${r.stderr.trim()}`;
    execFileSync('losetup', ['-d', r.stdout.trim()]);
    return undefined;
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
}

const skipReason = probeLoop();
if (skipReason) console.warn(`skipping the loop-device cleaner script tests: ${skipReason}`);

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

function runScript(name: string, env: Record<string, string>, args: string[] = [], pathPrefix?: string): Run {
  const r = spawnSync(join(SCRIPTS, name), args, {
    encoding: 'utf8',
    env: { PATH: `${pathPrefix ? `${pathPrefix}:` : ''}${process.env['PATH'] ?? '/usr/sbin:/usr/bin:/sbin:/bin'}`, ...env },
    timeout: 60_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

let work: string;
const attached: string[] = [];

beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'lsp-scripts-'));
});

afterEach(() => {
  for (const dev of attached.splice(0)) spawnSync('losetup', ['-d', dev]);
  rmSync(work, { recursive: true, force: true });
});

function attachLoop(): string {
  const img = join(work, 'disk.img');
  execFileSync('truncate', ['-s', String(SIZE), img]);
  const dev = execFileSync('losetup', ['--find', '--show', img], { encoding: 'utf8' }).trim();
  attached.push(dev);
  return dev;
}

function fillPattern(dev: string): void {
  const pattern = join(work, 'pattern.bin');
  writeFileSync(pattern, Buffer.alloc(SIZE, 0xab));
  execFileSync('dd', [`if=${pattern}`, `of=${dev}`, 'bs=1M', 'oflag=direct', 'conv=fsync', 'status=none']);
}

/** A fresh loop device full of 0xab bytes. */
function patternedLoop(): string {
  const dev = attachLoop();
  fillPattern(dev);
  return dev;
}

function readDevice(dev: string): Buffer {
  return execFileSync('dd', [`if=${dev}`, 'bs=1M', 'iflag=direct', 'status=none'], { maxBuffer: 2 * SIZE });
}

const isZero = (b: Buffer): boolean => b.every((x) => x === 0);

describe.skipIf(skipReason !== undefined)('block cleaner scripts on a loop device', () => {
  it('dd_zero.sh zeroes the whole device (two passes)', () => {
    const dev = patternedLoop();
    expect(readDevice(dev).subarray(0, 4)).toEqual(Buffer.from([0xab, 0xab, 0xab, 0xab]));
    const r = runScript('dd_zero.sh', { LOCAL_PV_BLKDEVICE: dev }, ['2']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('pass 2 of 2');
    expect(r.stdout).toContain(`${SIZE} bytes zeroed 2 time(s)`);
    const data = readDevice(dev);
    expect(data.length).toBe(SIZE);
    expect(isZero(data)).toBe(true);
  });

  it('quick_reset.sh removes signatures and zeroes the first and last MiB', () => {
    const dev = patternedLoop();
    execFileSync('mkfs.ext4', ['-q', '-F', dev]);
    expect(execFileSync('wipefs', ['-n', '--noheadings', dev], { encoding: 'utf8' })).toContain('ext4');
    const r = runScript('quick_reset.sh', { LOCAL_PV_BLKDEVICE: dev });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('zeroing the first and the last MiB');
    expect(execFileSync('wipefs', ['-n', '--noheadings', dev], { encoding: 'utf8' }).trim()).toBe('');
    const data = readDevice(dev);
    expect(isZero(data.subarray(0, MIB))).toBe(true);
    expect(isZero(data.subarray(SIZE - MIB))).toBe(true);
  });

  it('blkdiscard.sh leaves the loop device reading zeros', () => {
    const dev = patternedLoop();
    const r = runScript('blkdiscard.sh', { LOCAL_PV_BLKDEVICE: dev });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('discarding all blocks');
    expect(isZero(readDevice(dev))).toBe(true);
  });

  it('blkdiscard.sh falls back to zeroing when discard is not supported', () => {
    const dev = patternedLoop();
    const shim = join(work, 'bin');
    mkdirSync(shim);
    writeFileSync(join(shim, 'blkdiscard'), '#!/bin/sh\necho "blkdiscard: BLKDISCARD ioctl failed: Operation not supported" >&2\nexit 1\n');
    chmodSync(join(shim, 'blkdiscard'), 0o755);
    const r = runScript('blkdiscard.sh', { LOCAL_PV_BLKDEVICE: dev }, [], shim);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('zeroed with dd');
    expect(isZero(readDevice(dev))).toBe(true);
  });

  it('shred.sh overwrites and finally zeroes the device', () => {
    const dev = patternedLoop();
    const r = runScript('shred.sh', { LOCAL_PV_BLKDEVICE: dev }, ['1']);
    expect(r.status).toBe(0);
    expect(r.stderr).toMatch(/pass 2\/2 \(000000\)/);
    expect(isZero(readDevice(dev))).toBe(true);
  });

  it('every block script refuses a path that is not a block device', () => {
    for (const s of ['quick_reset.sh', 'dd_zero.sh', 'blkdiscard.sh', 'shred.sh']) {
      const r = runScript(s, { LOCAL_PV_BLKDEVICE: work });
      expect(r.status, s).toBe(1);
      expect(r.stderr, s).toContain('is not a block device');
      const r2 = runScript(s, {});
      expect(r2.status, s).toBe(1);
      expect(r2.stderr, s).toContain('LOCAL_PV_BLKDEVICE is not set');
    }
  });

  it('dd_zero.sh and shred.sh reject a bad ITERATIONS without touching the device', () => {
    const dev = patternedLoop();
    for (const s of ['dd_zero.sh', 'shred.sh']) {
      const r = runScript(s, { LOCAL_PV_BLKDEVICE: dev }, ['1; rm -rf /']);
      expect(r.status, s).toBe(1);
      expect(r.stderr, s).toContain('ITERATIONS must be a positive integer');
    }
    expect(readDevice(dev)[0]).toBe(0xab);
  });
});

describe('cleaner script help', () => {
  it('every script prints its usage on -h and exits 0', () => {
    for (const s of ['quick_reset.sh', 'dd_zero.sh', 'blkdiscard.sh', 'shred.sh', 'fsclean.sh']) {
      const r = runScript(s, {}, ['-h']);
      expect(r.status, s).toBe(0);
      expect(r.stdout, s).toMatch(/^Usage: LOCAL_PV_/);
    }
  });
});

describe('fsclean.sh', () => {
  it('refuses a missing directory and the root directory', () => {
    expect(runScript('fsclean.sh', { LOCAL_PV_FILESYSTEM: join(work, 'nope') }).stderr).toContain('is not a directory');
    const r = runScript('fsclean.sh', { LOCAL_PV_FILESYSTEM: '/' });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('refusing to clean the root directory');
    expect(runScript('fsclean.sh', {}).stderr).toContain('LOCAL_PV_FILESYSTEM is not set');
  });
});

// fsclean.sh on real mounts: a fresh tmpfs "disk" per test (work/disk) holding volume directories
// (disk/vols/*); the volume under test is a bind mount of one of them at work/host/v1, as a local
// volume under a discovery dir. Every mount a test makes is undone in afterEach (innermost first).
const mountSkip = process.getuid?.() !== 0 ? 'not running as root' : spawnSync('mount', ['--version']).status !== 0 ? 'mount is not available' : undefined;
if (mountSkip) console.warn(`skipping the fsclean.sh mount tests: ${mountSkip}`);

describe.skipIf(mountSkip !== undefined)('fsclean.sh on mounts', () => {
  const mounts: string[] = [];
  let disk: string;

  function mount(target: string, ...args: string[]): void {
    execFileSync('mount', [...args, target]);
    mounts.push(target);
  }

  /** Mount points (decoded) at or below `dir` in this process's mount table. */
  function mountsUnder(dir: string): string[] {
    return readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((l) => l.split(' ')[4])
      .filter((mp): mp is string => mp !== undefined)
      .map((mp) => mp.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8))))
      .filter((mp) => mp === dir || mp.startsWith(`${dir}/`));
  }

  beforeEach(() => {
    disk = join(work, 'disk');
    mkdirSync(disk);
    mount(disk, '-t', 'tmpfs', '-o', 'size=16m', 'lsp-fsclean-disk');
  });

  afterEach(() => {
    for (const m of mounts.splice(0).reverse()) {
      if (spawnSync('umount', [m]).status !== 0) spawnSync('umount', ['-l', m]);
    }
    // The outer afterEach removes `work` recursively: never through a mount that is still there.
    const left = mountsUnder(work);
    if (left.length > 0) {
      work = mkdtempSync(join(tmpdir(), 'lsp-scripts-')); // leave the mounted tree alone
      throw new Error(`mounts left behind: ${left.join(', ')}`);
    }
  });

  /** Path, type and content hash of everything below `dir` (names as raw bytes), sorted. */
  function snapshot(dir: string): string[] {
    const out: string[] = [];
    const walk = (p: Buffer, rel: string): void => {
      for (const e of readdirSync(p, { withFileTypes: true, encoding: 'buffer' })) {
        const child = Buffer.concat([p, Buffer.from('/'), e.name]);
        const name = `${rel}/${e.name.toString('hex')}`;
        if (e.isDirectory()) {
          out.push(`${name} dir`);
          walk(child, name);
        } else if (e.isSymbolicLink()) out.push(`${name} link ${readlinkSync(child, 'hex')}`);
        else if (e.isFile()) out.push(`${name} file ${createHash('sha256').update(readFileSync(child)).digest('hex')}`);
        else out.push(`${name} other`);
      }
    };
    walk(Buffer.from(dir), '');
    return out.sort();
  }

  /** Writes `files` (relative path -> content) below `dir`. */
  function fill(dir: string, files: Record<string, string>): void {
    for (const [rel, content] of Object.entries(files)) {
      mkdirSync(dirname(join(dir, rel)), { recursive: true });
      writeFileSync(join(dir, rel), content);
    }
  }

  /** disk/vols/v1 (the volume, bind-mounted at `at`, default work/host/v1) and disk/vols/v2 (its sibling), both with data. */
  function volumes(at = join(work, 'host', 'v1')): { vol: string; sibling: string } {
    fill(join(disk, 'vols', 'v1'), { 'data/a': 'volume a', '.dot': 'volume dot' });
    fill(join(disk, 'vols', 'v2'), { 'data/b': 'sibling b', 'deep/er/c': 'sibling c', '.dot': 'sibling dot' });
    writeFileSync(join(disk, 'disk-root-file'), 'root');
    mkdirSync(at, { recursive: true });
    mount(at, '--bind', join(disk, 'vols', 'v1'));
    return { vol: at, sibling: join(disk, 'vols', 'v2') };
  }

  /** The path as bash's printf %q writes it in the C locale (what fsclean.sh prints). */
  const quoted = (p: string): string => execFileSync('bash', ['-c', 'printf %q "$1"', '_', p], { encoding: 'utf8', env: { LC_ALL: 'C' } });

  it('empties a volume with odd names (newline, 0xff byte, leading dash, dotfiles) and keeps the mount point', () => {
    // The volume path itself has a space, a tab, a newline and a backslash: mountinfo escapes them.
    const { vol } = volumes(join(work, 'host', 'v 1\t\n\\x'));
    const files: Record<string, string> = { 'new\nline': '1', '-rf': '2', '--help/x': '3', '.dotdir/.x': '4', '..two': '5', ' lead': '6', 'trail\n': '7', 'back\\134slash': '8' };
    for (let i = 0; i < 10; i++) for (let j = 0; j < 10; j++) files[`d${i}/sub/f${j}`] = 'x';
    fill(vol, files);
    const ff = Buffer.concat([Buffer.from(`${vol}/`), Buffer.from([0xff])]);
    mkdirSync(ff);
    writeFileSync(Buffer.concat([ff, Buffer.from('/'), Buffer.from([0xfe, 0x0a])]), 'not utf-8');
    const outside = join(disk, 'vols', 'v2', 'data', 'b');
    symlinkSync(outside, join(vol, 'link-out'));
    symlinkSync(join(disk, 'vols', 'v2'), join(vol, 'dirlink-out'));
    execFileSync('mkfifo', [join(vol, 'fifo')]);
    const diskBefore = snapshot(join(disk, 'vols', 'v2'));

    const r = runScript('fsclean.sh', { LOCAL_PV_FILESYSTEM: vol });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain(`removing the contents of ${quoted(vol)}`);
    expect(readdirSync(vol)).toEqual([]);
    expect(mountsUnder(vol)).toEqual([vol]);
    // Symlinks are removed, never followed.
    expect(snapshot(join(disk, 'vols', 'v2'))).toEqual(diskBefore);
  });

  it.each([
    ['a sibling volume of the same disk', () => join(disk, 'vols', 'v2'), 'sib ling\n\\x'],
    ['the disk root', () => disk, 'root'],
  ])('refuses a volume with a bind mount of %s inside, and deletes nothing', (_what, source, name) => {
    const { vol } = volumes();
    const at = join(vol, 'nested', name);
    mkdirSync(at, { recursive: true });
    mount(at, '--bind', source());
    const before = snapshot(disk);
    const r = runScript('fsclean.sh', { LOCAL_PV_FILESYSTEM: vol });
    expect(snapshot(disk)).toEqual(before);
    expect(r.status).toBe(1);
    expect(r.stderr.trimEnd().split('\n')).toEqual([
      `ERROR: refusing to clean ${quoted(vol)}: 1 mount point(s) below it, unmount them first: ${quoted(at)}`,
    ]);
  });

  it('refuses a volume with a nested mount of another device, deletes nothing, and lists at most 5', () => {
    const { vol } = volumes();
    const nested = Array.from({ length: 7 }, (_, i) => join(vol, `m${i}`));
    for (const n of nested) {
      mkdirSync(n);
      mount(n, '-t', 'tmpfs', '-o', 'size=1m', 'lsp-fsclean-nested');
      writeFileSync(join(n, 'keep'), 'k');
    }
    const before = snapshot(disk);
    const r = runScript('fsclean.sh', { LOCAL_PV_FILESYSTEM: vol });
    expect(snapshot(disk)).toEqual(before);
    expect(r.status).toBe(1);
    expect(r.stderr.trimEnd().split('\n')).toEqual([
      `ERROR: refusing to clean ${vol}: 7 mount point(s) below it, unmount them first: ${nested.slice(0, 5).join(' ')} ...`,
    ]);
    for (const n of nested) expect(readdirSync(n)).toEqual(['keep']);
  });

  it('refuses a volume that is not mounted (a plain directory of the parent file system)', () => {
    const { vol } = volumes();
    execFileSync('umount', [vol]);
    mounts.pop();
    fill(vol, { 'root-fs-file': 'on the parent file system', 'dir/x': 'x' });
    const before = snapshot(vol);
    const r = runScript('fsclean.sh', { LOCAL_PV_FILESYSTEM: vol });
    expect(snapshot(vol)).toEqual(before);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^ERROR: refusing to clean .*: it is not a mount point; the volume is not mounted/);
  });

  it('refuses a volume whose mount is hidden by a mount of another device on a parent directory', () => {
    const { vol } = volumes();
    const host = dirname(vol);
    mount(host, '-t', 'tmpfs', '-o', 'size=1m', 'lsp-fsclean-over');
    fill(vol, { 'other-fs-file': 'on the mount over the parent' });
    const before = snapshot(host);
    const r = runScript('fsclean.sh', { LOCAL_PV_FILESYSTEM: vol });
    expect(snapshot(host)).toEqual(before);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^ERROR: refusing to clean .*: its device \d+:\d+ is not the device \d+:\d+ of the mount listed at it/);
  });

  it('refuses a volume whose mount is hidden by a bind mount of the same device on a parent directory', () => {
    const { vol } = volumes();
    const host = dirname(vol);
    // The parent is replaced by another directory of the same disk, which has a v1 of its own.
    fill(join(disk, 'alt', 'v1'), { 'alt-file': 'not the volume' });
    mount(host, '--bind', join(disk, 'alt'));
    const before = snapshot(disk);
    const r = runScript('fsclean.sh', { LOCAL_PV_FILESYSTEM: vol });
    expect(snapshot(disk)).toEqual(before);
    expect(r.status).toBe(1);
    expect(r.stderr.trimEnd()).toBe(`ERROR: refusing to clean ${vol}: the mount listed at it is hidden by the mount at ${host}`);
  });

  /**
   * Runs fsclean.sh on `vol` through a `find` shim that bind-mounts `source` at `at` (mkdir -p) in
   * the mount namespace of this test process (the host's view) once, either just before the find
   * that removes (`delete`), or just after the emptiness check of the run in the private namespace
   * (`after-private-run`), where only the checks back in the caller's namespace can see it.
   */
  function runWithRacingMount(vol: string, source: string, at: string, when: 'delete' | 'after-private-run'): Run {
    const shim = join(work, 'bin');
    mkdirSync(shim);
    const marker = join(work, 'raced');
    const realFind = execFileSync('bash', ['-c', 'command -v find'], { encoding: 'utf8' }).trim();
    writeFileSync(
      join(shim, 'find'),
      [
        '#!/bin/bash',
        'race() {',
        '  [[ -e "$RACE_MARKER" ]] && return',
        '  nsenter --mount="/proc/$RACE_PID/ns/mnt" -- bash -c \'mkdir -p "$1" && mount --bind "$2" "$1"\' _ "$RACE_TARGET" "$RACE_SOURCE" && : > "$RACE_MARKER"',
        '}',
        'if [[ "$RACE_WHEN" == delete && " $* " == *" -delete "* ]]; then race; fi',
        `${realFind} "$@"; status=$?`,
        'if [[ "$RACE_WHEN" == after-private-run && " $* " == *" -empty "* && "${FSCLEAN_PRIVATE_NAMESPACE:-}" == 1 ]]; then race; fi',
        'exit $status',
        '',
      ].join('\n'),
    );
    chmodSync(join(shim, 'find'), 0o755);
    mounts.push(at);
    const env = { LOCAL_PV_FILESYSTEM: vol, RACE_PID: String(process.pid), RACE_SOURCE: source, RACE_TARGET: at, RACE_MARKER: marker, RACE_WHEN: when };
    const r = runScript('fsclean.sh', env, [], shim);
    expect(existsSync(marker), 'the shim made its mount').toBe(true);
    return r;
  }

  it('never descends into a bind mount made on the host while it runs (between the checks and find)', () => {
    const { vol, sibling } = volumes();
    const at = join(vol, 'late');
    mkdirSync(at);
    const before = snapshot(sibling);
    const r = runWithRacingMount(vol, sibling, at, 'delete');
    expect(snapshot(sibling)).toEqual(before);
    // The private namespace removed vol/late (a mount point only in another namespace), which
    // detached the host's bind mount of the sibling from the volume: nothing of it is left.
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(mountsUnder(vol)).toEqual([vol]);
    expect(readdirSync(vol)).toEqual([]);
  });

  it('fails, naming it, when a mount below the volume shows up on the host after the private clean', () => {
    const { vol, sibling } = volumes();
    const at = join(vol, 'late');
    const before = snapshot(sibling);
    const r = runWithRacingMount(vol, sibling, at, 'after-private-run');
    expect(snapshot(sibling)).toEqual(before);
    expect(r.status).toBe(1);
    expect(r.stderr.trimEnd().split('\n')).toEqual([`ERROR: after cleaning ${vol}: 1 mount point(s) below it, unmount them first: ${at}`]);
  });
});
