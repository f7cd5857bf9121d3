// The per-volume health check on real mounts and loop devices (root only):
// each condition provoked on the host, then seen by a fresh pass.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HostFixtures, isRoot } from '../../e2e/support/host.ts';
import { createHealthChecker } from '../../src/health/check.ts';
import type { HealthCheckInput, HealthCondition } from '../../src/health/types.ts';
import { discoveredIdentity, identityMismatch, pathKind } from '../../src/identity/identity.ts';

const sh = (cmd: string, args: string[]): string => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();

/** The conditions one fresh pass finds for one volume, as a plain object. */
async function conditionsOf(input: HealthCheckInput, opts: Parameters<typeof createHealthChecker>[0] = {}): Promise<Partial<Record<HealthCondition, string>>> {
  const pass = await createHealthChecker(opts).beginPass();
  return Object.fromEntries((await pass.check(input)).conditions);
}

/** The conditions of a volume once `done` holds for them, polling fresh passes for up to 60 s (the kernel acts asynchronously). */
async function eventually(input: HealthCheckInput, done: (c: Partial<Record<HealthCondition, string>>) => boolean): Promise<Partial<Record<HealthCondition, string>>> {
  let c = await conditionsOf(input);
  for (const deadline = Date.now() + 60_000; !done(c) && Date.now() < deadline; ) {
    await new Promise((r) => setTimeout(r, 50));
    c = await conditionsOf(input);
  }
  return c;
}

const fsInput = (path: string, recordedIdentity?: string, fullThresholdPercent?: number): HealthCheckInput => ({ pvName: 'local-pv-1', path, mode: 'Filesystem', recordedIdentity, fullThresholdPercent });
const blockInput = (path: string, recordedIdentity?: string): HealthCheckInput => ({ pvName: 'local-pv-b', path, mode: 'Block', recordedIdentity });

describe.skipIf(!isRoot())('health check on real mounts', () => {
  const host = new HostFixtures('lsp-health-');
  const mountDev = (dev: string, at: string, ...opts: string[]): void => {
    host.mountDevice(dev, opts, basename(at));
  };
  const ext4 = (sizeMiB: number, name: string): string => {
    const dev = host.loopDevice(sizeMiB, name);
    sh('mkfs.ext4', ['-q', '-F', dev]);
    return dev;
  };

  afterEach(() => {
    host.cleanup();
  });

  it('tmpfs: healthy; lazily unmounted: missing (the directory still stats); mounted again: healthy (a new st_dev is not "replaced")', async () => {
    const v = host.tmpfs(4, 'vol1');
    expect(await discoveredIdentity(v, 'Filesystem')).toBe('mount');
    expect(await conditionsOf(fsInput(v, 'mount'))).toEqual({});
    sh('umount', ['-l', v]);
    expect(existsSync(v)).toBe(true);
    expect(await conditionsOf(fsInput(v, 'mount'))).toEqual({ missing: `path ${JSON.stringify(v)} is not a mount point` });
    host.tmpfs(4, 'vol1');
    expect(await conditionsOf(fsInput(v, 'mount'))).toEqual({});
  });

  it('tmpfs remounted read-only: read-only; full only with a threshold, above it', async () => {
    const v = host.tmpfs(1, 'vol2');
    writeFileSync(join(v, 'fill'), Buffer.alloc(800 * 1024, 1));
    expect(await conditionsOf(fsInput(v, 'mount'))).toEqual({});
    expect(await conditionsOf(fsInput(v, 'mount', 95))).toEqual({});
    const full = await conditionsOf(fsInput(v, 'mount', 50));
    expect(full.full).toMatch(new RegExp(`^${JSON.stringify(v).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is 7\\d\\.\\d% full \\(threshold 50%\\)$`));
    sh('mount', ['-o', 'remount,ro', v]);
    expect(await conditionsOf(fsInput(v, 'mount'))).toEqual({ 'read-only': `${JSON.stringify(v)} is mounted read-only (tmpfs lsp-e2e)` });
  });

  it('ext4 on a loop device: its UUID recorded, healthy; another ext4 (other UUID) at the same path: replaced, and the deleter\'s rule says so too', async () => {
    const dev1 = ext4(16, 'a');
    const dev2 = ext4(16, 'b');
    const uuid1 = sh('blkid', ['-o', 'value', '-s', 'UUID', dev1]);
    const uuid2 = sh('blkid', ['-o', 'value', '-s', 'UUID', dev2]);
    expect(uuid1).not.toBe(uuid2);
    const v = host.mkdir('ext');
    mountDev(dev1, v);
    const identity = await discoveredIdentity(v, 'Filesystem');
    expect(identity).toBe(`mount:uuid=${uuid1}`);
    expect(await conditionsOf(fsInput(v, identity))).toEqual({});
    expect(identityMismatch(identity, await pathKind(v), v)).toBeUndefined();
    sh('umount', [v]);
    mountDev(dev2, v);
    const why = `it was discovered as ${JSON.stringify(identity)} but ${JSON.stringify(v)} now holds filesystem UUID ${uuid2}`;
    expect(await conditionsOf(fsInput(v, identity))).toEqual({ replaced: why });
    expect(identityMismatch(identity, await pathKind(v), v)).toBe(why);
    // A tmpfs mounted there instead: no UUID at all, replaced as well.
    sh('umount', [v]);
    host.tmpfs(1, 'ext');
    expect((await conditionsOf(fsInput(v, identity))).replaced).toBe(`it was discovered as ${JSON.stringify(identity)} but ${JSON.stringify(v)} now holds a filesystem without a UUID`);
  });

  it('ext4 remounted read-only, and the loop device beneath set read-only: read-only', async () => {
    const dev = ext4(16, 'ro');
    const v = host.mkdir('ro');
    mountDev(dev, v);
    sh('mount', ['-o', 'remount,ro', v]);
    expect(await conditionsOf(fsInput(v))).toEqual({ 'read-only': `${JSON.stringify(v)} is mounted read-only (ext4 ${dev})` });
    sh('mount', ['-o', 'remount,rw', v]);
    expect(await conditionsOf(fsInput(v))).toEqual({});
    sh('blockdev', ['--setro', dev]);
    try {
      const name = basename(dev);
      expect((await conditionsOf(fsInput(v)))['read-only']).toMatch(new RegExp(`^block device ${name} \\(7:\\d+\\) beneath .* is read-only$`));
    } finally {
      sh('blockdev', ['--setrw', dev]); // the flag outlives the loop device's detach: never leave it to the next user
    }
  });

  it.skipIf(!existsSync('/sys/fs/ext4/features'))('ext4 errors counted by the kernel (trigger_fs_error): filesystem-errors with the first error time', { timeout: 90_000 }, async (ctx) => {
    const dev = ext4(16, 'err');
    const v = host.mkdir('err');
    mountDev(dev, v, 'errors=continue');
    const trigger = `/sys/fs/ext4/${basename(dev)}/trigger_fs_error`;
    if (!existsSync(trigger)) ctx.skip(); // the sysfs-fixture test below covers the rule on kernels without it
    expect(await conditionsOf(fsInput(v))).toEqual({});
    writeFileSync(trigger, 'lsp health test\n');
    // The kernel writes the error into the superblock (which errors_count shows) from a work queue: poll for it.
    const c = await eventually(fsInput(v), (x) => x['filesystem-errors'] !== undefined);
    expect(c['filesystem-errors']).toMatch(new RegExp(`^the ext4 filesystem on ${basename(dev)} \\(7:\\d+\\) at .* counted 1 errors, the first at \\d{4}-\\d\\d-\\d\\dT.*Z \\(errors_count\\)$`));
  });

  it('Block PV on a loop device symlink: healthy; another device number recorded: replaced; set read-only: read-only; detached: missing; link gone: missing', { timeout: 90_000 }, async () => {
    const dev = host.loopDevice(8, 'blk');
    const link = host.symlink(dev, 'blk-link');
    const identity = await discoveredIdentity(link, 'Block');
    expect(identity).toMatch(/^block:7:\d+$/);
    expect(await conditionsOf(blockInput(link, identity))).toEqual({});
    expect((await conditionsOf(blockInput(link, 'block:7:99999'))).replaced).toMatch(/^it was discovered as "block:7:99999" but .* now resolves to block device 7:\d+$/);
    sh('blockdev', ['--setro', dev]);
    try {
      expect(await conditionsOf(blockInput(link, identity))).toEqual({ 'read-only': `block device ${basename(dev)} (${identity.slice('block:'.length)}) is read-only` });
    } finally {
      sh('blockdev', ['--setrw', dev]);
    }
    sh('losetup', ['-d', dev]);
    // A detach waits for the last opener to close the device (udev probes it after the ro change): wait for it.
    expect(await eventually(blockInput(link, identity), (c) => c.missing !== undefined)).toEqual({
      missing: `block device ${basename(dev)} (${identity.slice('block:'.length)}) at ${JSON.stringify(link)} has no medium (size 0: a detached loop device or an ejected medium)`,
    });
    const dangling = host.symlink(host.path('no-such-dev'), 'dangling');
    expect(await conditionsOf(blockInput(dangling))).toEqual({ missing: `block device path ${JSON.stringify(dangling)} cannot be read: does not exist` });
    expect(await conditionsOf(blockInput(host.mkdir('a-dir')))).toEqual({ missing: `path ${JSON.stringify(host.path('a-dir'))} is no longer a block device` });
  });

  it('one pass reads the mount table once: a mount made after beginPass is not seen by that pass, only by the next', async () => {
    const v = host.mkdir('late');
    const checker = createHealthChecker();
    const before = await checker.beginPass();
    host.tmpfs(1, 'late');
    expect(Object.fromEntries((await before.check(fsInput(v))).conditions)).toEqual({ missing: `path ${JSON.stringify(v)} is not a mount point` });
    expect((await (await checker.beginPass()).check(fsInput(v))).conditions.size).toBe(0);
  });
});

// sysfs and mountinfo fixtures: the counters that a test cannot make the kernel raise safely (SCSI ioerr_cnt),
// and the same rules for ext4 errors, a partition and a vanished device, without root.
describe('health check on sysfs fixtures', () => {
  let tmp: string;
  beforeEach(() => {
    tmp = mkdtempSync(join(tmpdir(), 'lsp-health-sys-'));
  });
  afterEach(() => {
    rmSync(tmp, { recursive: true, force: true });
  });

  const file = (path: string, text: string): void => {
    mkdirSync(join(path, '..'), { recursive: true });
    writeFileSync(path, text);
  };
  /** A whole disk sdb (8:16) with partition sdb1 (8:17), laid out like sysfs: /sys/dev/block/M:m are symlinks. */
  function disk(sys: string, opts: { ioerr?: string; errors?: string; firstErrorTime?: string; ro?: string } = {}): void {
    const sdb = join(sys, 'devices/pci0/host0/target0/0:0:0:0/block/sdb');
    file(join(sdb, 'uevent'), 'MAJOR=8\nMINOR=16\nDEVNAME=sdb\nDEVTYPE=disk\n');
    file(join(sdb, 'size'), '2048\n');
    file(join(sdb, 'ro'), '0\n');
    file(join(sdb, 'device/ioerr_cnt'), `${opts.ioerr ?? '0x0'}\n`);
    file(join(sdb, 'sdb1/uevent'), 'MAJOR=8\nMINOR=17\nDEVNAME=sdb1\nDEVTYPE=partition\n');
    file(join(sdb, 'sdb1/size'), '2000\n');
    file(join(sdb, 'sdb1/ro'), `${opts.ro ?? '0'}\n`);
    mkdirSync(join(sys, 'dev/block'), { recursive: true });
    symlinkSync('../../devices/pci0/host0/target0/0:0:0:0/block/sdb', join(sys, 'dev/block/8:16'));
    symlinkSync('../../devices/pci0/host0/target0/0:0:0:0/block/sdb/sdb1', join(sys, 'dev/block/8:17'));
    file(join(sys, 'fs/ext4/sdb1/errors_count'), `${opts.errors ?? '0'}\n`);
    if (opts.firstErrorTime !== undefined) file(join(sys, 'fs/ext4/sdb1/first_error_time'), `${opts.firstErrorTime}\n`);
  }
  /** A mountinfo with an ext4 on sdb1 mounted at `at`. */
  function mountinfo(at: string, fsType = 'ext4', mountOpts = 'rw,relatime', superOpts = 'rw'): string {
    const p = join(tmp, 'mountinfo');
    writeFileSync(p, `22 1 0:21 / / rw - tmpfs root rw\n90 22 8:17 / ${at} ${mountOpts} shared:5 - ${fsType} /dev/sdb1 ${superOpts}\n`);
    return p;
  }

  it('ext4 errors_count > 0 on a partition: filesystem-errors with first_error_time; its disk\'s SCSI ioerr_cnt (hex): io-errors', async () => {
    const sys = join(tmp, 'sys');
    disk(sys, { errors: '3', firstErrorTime: '1700000000', ioerr: '0x1f' });
    const v = join(tmp, 'vol');
    mkdirSync(v);
    expect(await conditionsOf(fsInput(v), { sysfsRoot: sys, mountInfoPath: mountinfo(v) })).toEqual({
      'filesystem-errors': `the ext4 filesystem on sdb1 (8:17) at ${JSON.stringify(v)} counted 3 errors, the first at 2023-11-14T22:13:20.000Z (errors_count)`,
      'io-errors': 'block device sdb1 (8:17) counted 31 I/O errors (ioerr_cnt)',
    });
  });

  it('zero counters: healthy; errors_count of an xfs mount is not read (ext only); super options ro and a read-only partition: read-only', async () => {
    const sys = join(tmp, 'sys');
    disk(sys, { errors: '2', ro: '1' });
    const v = join(tmp, 'vol');
    mkdirSync(v);
    expect(await conditionsOf(fsInput(v), { sysfsRoot: sys, mountInfoPath: mountinfo(v, 'xfs') })).toEqual({ 'read-only': `block device sdb1 (8:17) beneath ${JSON.stringify(v)} is read-only` });
    expect(await conditionsOf(fsInput(v), { sysfsRoot: sys, mountInfoPath: mountinfo(v, 'xfs', 'rw,relatime', 'ro,attr2') })).toEqual({ 'read-only': `the xfs filesystem at ${JSON.stringify(v)} is read-only (/dev/sdb1)` });
    rmSync(sys, { recursive: true });
    disk(sys);
    expect(await conditionsOf(fsInput(v), { sysfsRoot: sys, mountInfoPath: mountinfo(v) })).toEqual({});
  });

  it.skipIf(!isRoot())('Block PV on a device node whose device is gone from sysfs: missing; present with ioerr_cnt: io-errors', async () => {
    const sys = join(tmp, 'sys');
    const node = join(tmp, 'sdb');
    execFileSync('mknod', [node, 'b', '8', '16']);
    expect(await conditionsOf(blockInput(node, 'block:8:16'), { sysfsRoot: sys })).toEqual({ missing: `block device 8:16 at ${JSON.stringify(node)} is gone (not in sysfs)` });
    disk(sys, { ioerr: '0x2' });
    expect(await conditionsOf(blockInput(node, 'block:8:16'), { sysfsRoot: sys })).toEqual({ 'io-errors': 'block device sdb (8:16) counted 2 I/O errors (ioerr_cnt)' });
  });

  it('a pass reads each device\'s sysfs once (volumes share a disk): a counter raised mid-pass shows in the next pass only', async () => {
    const sys = join(tmp, 'sys');
    disk(sys);
    const v = join(tmp, 'vol');
    mkdirSync(v);
    const checker = createHealthChecker({ sysfsRoot: sys, mountInfoPath: mountinfo(v) });
    const pass = await checker.beginPass();
    expect((await pass.check(fsInput(v))).conditions.size).toBe(0);
    writeFileSync(join(sys, 'fs/ext4/sdb1/errors_count'), '5\n');
    expect((await pass.check({ ...fsInput(v), pvName: 'local-pv-2' })).conditions.size).toBe(0);
    expect([...(await (await checker.beginPass()).check(fsInput(v))).conditions.keys()]).toEqual(['filesystem-errors']);
  });

  it('an unreadable mount table: no throw, no condition, the reason reported; a check never throws', async () => {
    const errors: string[] = [];
    const pass = await createHealthChecker({ mountInfoPath: join(tmp, 'none'), onError: (m) => errors.push(m) }).beginPass();
    expect((await pass.check(fsInput(tmp))).conditions.size).toBe(0);
    expect(errors[0]).toBe(`cannot read ${join(tmp, 'none')}: does not exist`);
    expect(errors[1]).toMatch(/^cannot check PV "local-pv-1": the mount table could not be read/);
  });
});
