import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  blockDeviceCapacity,
  detectVolumeMode,
  deviceNumbers,
  filesystemCapacity,
} from '../../src/host/stat.ts';
import { describeFsError } from '../../src/util/errors.ts';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'volume-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A block device node present on this machine, if any (for the real-device checks). */
const realBlockDevice = ['/dev/loop0', '/dev/vda', '/dev/sda', '/dev/nvme0n1'].find((p) => existsSync(p));

describe('detectVolumeMode', () => {
  it('directory -> Filesystem, also through a symlink', async () => {
    await mkdir(join(dir, 'd'));
    await symlink(join(dir, 'd'), join(dir, 'link'));
    await expect(detectVolumeMode(join(dir, 'd'))).resolves.toBe('Filesystem');
    await expect(detectVolumeMode(join(dir, 'link'))).resolves.toBe('Filesystem');
  });

  it('regular file -> Go "not a directory nor block device" error', async () => {
    const p = join(dir, 'file');
    await writeFile(p, 'x');
    await expect(detectVolumeMode(p)).rejects.toThrow(`Skipping file "${p}": not a directory nor block device`);
  });

  it('broken symlink / missing path -> Go "Directory check" error with a Go-style cause', async () => {
    const p = join(dir, 'broken');
    await symlink(join(dir, 'nowhere'), p);
    await expect(detectVolumeMode(p)).rejects.toThrow(
      `Directory check for "${p}" failed: stat ${p}: no such file or directory`,
    );
  });

  it.skipIf(!realBlockDevice)('block device (and a symlink to it) -> Block', async () => {
    const dev = realBlockDevice!;
    await symlink(dev, join(dir, 'blk'));
    await expect(detectVolumeMode(dev)).resolves.toBe('Block');
    await expect(detectVolumeMode(join(dir, 'blk'))).resolves.toBe('Block');
  });
});

describe('filesystemCapacity', () => {
  it('is blocks * bsize of statfs', async () => {
    const got = await filesystemCapacity(dir);
    const s = await (await import('node:fs/promises')).statfs(dir, { bigint: true });
    expect(got).toBe(s.blocks * s.bsize);
    expect(got > 0n).toBe(true);
  });
  it('wraps errors with the Go text', async () => {
    const p = join(dir, 'missing');
    await expect(filesystemCapacity(p)).rejects.toThrow(`path "${p}" fs stats error: statfs ${p}: no such file or directory`);
  });
});

describe('deviceNumbers', () => {
  it('decodes glibc dev_t', () => {
    expect(deviceNumbers(0x0801n)).toEqual({ major: 8, minor: 1 });
    expect(deviceNumbers(0xfd00n)).toEqual({ major: 253, minor: 0 });
    expect(deviceNumbers(0x0700n)).toEqual({ major: 7, minor: 0 });
    // major 259 (NVMe, > 255) minor 300 (> 255): makedev = (minor&0xff) | (major&0xfff)<<8 | (minor&~0xff)<<12
    const dev = (300n & 0xffn) | ((259n & 0xfffn) << 8n) | ((300n & ~0xffn) << 12n);
    expect(deviceNumbers(dev)).toEqual({ major: 259, minor: 300 });
    // major above 4095 uses the high bits
    const big = ((5000n & 0xfffn) << 8n) | ((5000n & ~0xfffn) << 32n) | 7n;
    expect(deviceNumbers(big)).toEqual({ major: 5000, minor: 7 });
  });
});

describe('blockDeviceCapacity', () => {
  it('rejects a non-block path with the Go text', async () => {
    await mkdir(join(dir, 'd'));
    await expect(blockDeviceCapacity(join(dir, 'd'))).rejects.toThrow(
      `path "${join(dir, 'd')}" block stats error: not a block device`,
    );
    const missing = join(dir, 'missing');
    await expect(blockDeviceCapacity(missing)).rejects.toThrow(
      `path "${missing}" block stats error: stat ${missing}: no such file or directory`,
    );
  });

  it.skipIf(!realBlockDevice)('reads sectors from a (fake) sysfs and multiplies by 512', async () => {
    const dev = realBlockDevice!;
    const { major, minor } = deviceNumbers((await stat(dev, { bigint: true })).rdev);
    const sys = join(dir, 'sys');
    await mkdir(join(sys, 'dev', 'block', `${major}:${minor}`), { recursive: true });
    await writeFile(join(sys, 'dev', 'block', `${major}:${minor}`, 'size'), '40960\n');
    await expect(blockDeviceCapacity(dev, { sysRoot: sys })).resolves.toBe(40960n * 512n);

    await writeFile(join(sys, 'dev', 'block', `${major}:${minor}`, 'size'), 'junk\n');
    await expect(blockDeviceCapacity(dev, { sysRoot: sys })).rejects.toThrow(/block stats error: unexpected size "junk"/);
  });

  it.skipIf(!realBlockDevice || !existsSync('/sys/dev/block'))('agrees with the real sysfs', async () => {
    const dev = realBlockDevice!;
    const { major, minor } = deviceNumbers((await stat(dev, { bigint: true })).rdev);
    const sectors = BigInt((await readFile(`/sys/dev/block/${major}:${minor}/size`, 'utf8')).trim());
    await expect(blockDeviceCapacity(dev)).resolves.toBe(sectors * 512n);
  });
});

describe('describeFsError', () => {
  it('renders non-errno errors plainly', () => {
    expect(describeFsError(new Error('boom'))).toBe('boom');
    expect(describeFsError('x')).toBe('x');
  });
});
