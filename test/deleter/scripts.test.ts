// Runs the cleaner scripts of deployment/scripts against real loop devices
// (root only) and fsclean.sh against a temp tree. Every loop device a test
// attaches is detached in afterEach, whatever the test's outcome; devices this
// test did not create are never touched.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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

function readDevice(dev: string): Buffer {
  return execFileSync('dd', [`if=${dev}`, 'bs=1M', 'iflag=direct', 'status=none'], { maxBuffer: 2 * SIZE });
}

const isZero = (b: Buffer): boolean => b.every((x) => x === 0);

describe.skipIf(skipReason !== undefined)('block cleaner scripts on a loop device', () => {
  it('dd_zero.sh zeroes the whole device (two passes)', () => {
    const dev = attachLoop();
    fillPattern(dev);
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
    const dev = attachLoop();
    fillPattern(dev);
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
    const dev = attachLoop();
    fillPattern(dev);
    const r = runScript('blkdiscard.sh', { LOCAL_PV_BLKDEVICE: dev });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('discarding all blocks');
    expect(isZero(readDevice(dev))).toBe(true);
  });

  it('blkdiscard.sh falls back to zeroing when discard is not supported', () => {
    const dev = attachLoop();
    fillPattern(dev);
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
    const dev = attachLoop();
    fillPattern(dev);
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
    const dev = attachLoop();
    fillPattern(dev);
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
  it('removes the contents of the directory, dotfiles included, and keeps it', () => {
    const vol = join(work, 'vol');
    for (let i = 0; i < 10; i++) {
      mkdirSync(join(vol, `d${i}`, 'sub'), { recursive: true });
      for (let j = 0; j < 10; j++) writeFileSync(join(vol, `d${i}`, 'sub', `f${j}`), 'x');
    }
    writeFileSync(join(vol, '.hidden'), 'h');
    const r = runScript('fsclean.sh', { LOCAL_PV_FILESYSTEM: vol });
    expect(r.status).toBe(0);
    expect(existsSync(vol)).toBe(true);
    expect(readdirSync(vol)).toEqual([]);
  });

  it('refuses a missing directory and the root directory', () => {
    expect(runScript('fsclean.sh', { LOCAL_PV_FILESYSTEM: join(work, 'nope') }).stderr).toContain('is not a directory');
    const r = runScript('fsclean.sh', { LOCAL_PV_FILESYSTEM: '/' });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('refusing to clean the root directory');
    expect(runScript('fsclean.sh', {}).stderr).toContain('LOCAL_PV_FILESYSTEM is not set');
  });

  it.skipIf(process.getuid?.() !== 0)('does not cross into a nested mount and fails', () => {
    const vol = join(work, 'vol');
    const nested = join(vol, 'a/mnt');
    mkdirSync(nested, { recursive: true });
    writeFileSync(join(vol, 'top'), 't');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'lsp-test', nested]);
    try {
      writeFileSync(join(nested, 'keep'), 'k');
      const r = runScript('fsclean.sh', { LOCAL_PV_FILESYSTEM: vol });
      expect(r.status).toBe(1);
      expect(r.stderr).toContain('entries left in');
      expect(readdirSync(nested)).toEqual(['keep']);
      expect(existsSync(join(vol, 'top'))).toBe(false);
    } finally {
      execFileSync('umount', [nested]);
    }
  });
});
