// The per-volume health check (issue 19): what the host says about each local
// volume of this node, one pass at a time. A pass reads /proc/self/mountinfo
// once; a Block volume's check() then costs one stat() of its path (a Filesystem
// volume's none: the mount table answers), plus, once per
// pass per block device (many volumes share a disk), a few small sysfs reads,
// and a statfs() only when a `full` threshold is set. No exec, no API request.
//
// Conditions (src/health/types.ts):
// - missing: Filesystem: the path is not a mount point in the mount table (a
//   directory left behind by a lazy unmount still stats fine, so stat alone
//   cannot tell). Block: the path is gone or not a
//   block device, the device is gone from sysfs (hot-removed), or its size is
//   0 (a detached loop device, an ejected medium).
// - replaced: identityMismatch (src/identity/identity.ts) of the PV's
//   recorded identity with what is there: the rule the deleter's refusal uses.
//   A `mount` identity (tmpfs, PVs made before UUIDs were recorded) accepts
//   any mount point, so a remounted tmpfs (new anonymous st_dev) is not
//   replaced; a `mount:uuid=` identity needs that filesystem UUID.
// - read-only: Filesystem: the mount's options or the filesystem's super
//   options say `ro`; the device (/sys/dev/block/M:m/ro) is read-only. Block:
//   the device's ro.
// - filesystem-errors: ext2/3/4 (the ext4 driver): /sys/fs/ext4/<dev>/errors_count
//   > 0, with first_error_time. xfs exposes no error counter in sysfs
//   (/sys/fs/xfs/<dev>/ has only error-handling settings and operation
//   statistics; an xfs that hits a metadata error shuts down, and its I/O then
//   fails), so xfs has no filesystem-errors here; btrfs keeps per-device error
//   counters only behind an ioctl, not read here.
// - io-errors: the SCSI layer's ioerr_cnt (/sys/dev/block/M:m/device/ioerr_cnt,
//   the whole disk's for a partition): SCSI disks, which include SATA/SAS (libata),
//   USB mass storage and virtio-scsi. NVMe, virtio-blk, loop, dm and md devices
//   have no such counter in sysfs, so no io-errors for them.
// - full: only with fullThresholdPercent: used / (used + available to users)
//   above it, the Use% of df.
import { readFile, stat, statfs } from 'node:fs/promises';
import { sourceDevice, type FsUuidOptions } from '../host/fs-uuid.ts';
import { DEFAULT_MOUNTINFO_PATH, parseMountDetails, type MountDetails } from '../host/mountinfo.ts';
import { MountTableReader } from '../host/mount-snapshot.ts';
import { deviceNumbers } from '../host/stat.ts';
import { identityMismatch, identityUuid, mountFsUuid, type DirectoryFs, type PathKind } from '../identity/identity.ts';
import { describeFsError, errorMessage } from '../util/errors.ts';
import type { HealthCheckInput, HealthChecker, HealthCondition, HealthPass, VolumeHealth } from './types.ts';

export interface HealthCheckerOptions extends FsUuidOptions {
  /** Default /proc/self/mountinfo. */
  readonly mountInfoPath?: string | undefined;
  /** The mount table of the discovery period, shared with discovery (its path wins over mountInfoPath). */
  readonly mountTable?: MountTableReader | undefined;
  /** Why a pass or a check could not look at something (the result is then empty for it). */
  readonly onError?: ((message: string) => void) | undefined;
}

/** What sysfs says about one block device, read once per pass. */
interface DeviceFacts {
  /** False: no /sys/dev/block/M:m (the device is gone). */
  readonly present: boolean;
  readonly name?: string | undefined;
  /** Size in 512-byte sectors (undefined: unreadable). */
  readonly sectors?: bigint | undefined;
  readonly readOnly: boolean;
  readonly ioErrors?: number | undefined;
  /** ext4 driver counters (undefined: no /sys/fs/ext4/<name>). */
  readonly ext4?: { readonly errors: number; readonly firstErrorTime?: number | undefined } | undefined;
}

const EXT_TYPES = new Set(['ext2', 'ext3', 'ext4']);

/** The text of a small sysfs file, trimmed, or undefined when it cannot be read. */
async function sysRead(path: string): Promise<string | undefined> {
  try {
    return (await readFile(path, 'utf8')).trim();
  } catch {
    return undefined;
  }
}

/** An integer in decimal or 0x-hex (ioerr_cnt is hex), or undefined. */
function sysInt(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  if (/^0x[0-9a-f]+$/i.test(text)) return parseInt(text.slice(2), 16);
  return /^\d+$/.test(text) ? Number(text) : undefined;
}

async function deviceFacts(sys: string, major: number, minor: number): Promise<DeviceFacts> {
  const dir = `${sys}/dev/block/${major}:${minor}`;
  const uevent = await sysRead(`${dir}/uevent`);
  if (uevent === undefined) return { present: false, readOnly: false };
  const name = /^DEVNAME=(.+)$/m.exec(uevent)?.[1];
  const partition = /^DEVTYPE=partition$/m.test(uevent);
  const [size, ro, ioerr] = await Promise.all([
    sysRead(`${dir}/size`),
    sysRead(`${dir}/ro`),
    // A partition has no device/ of its own: the disk's is its parent directory's.
    sysRead(partition ? `${dir}/../device/ioerr_cnt` : `${dir}/device/ioerr_cnt`),
  ]);
  let ext4: DeviceFacts['ext4'];
  if (name !== undefined) {
    // The ext4 driver names its sysfs directory after the device, with "/" as "!" (cciss/c0d0 -> cciss!c0d0).
    const extDir = `${sys}/fs/ext4/${name.replaceAll('/', '!')}`;
    const errors = sysInt(await sysRead(`${extDir}/errors_count`));
    if (errors !== undefined) {
      ext4 = { errors, firstErrorTime: errors > 0 ? sysInt(await sysRead(`${extDir}/first_error_time`)) : undefined };
    }
  }
  return {
    present: true,
    name,
    sectors: size !== undefined && /^\d+$/.test(size) ? BigInt(size) : undefined,
    readOnly: ro === '1',
    ioErrors: sysInt(ioerr),
    ext4,
  };
}

const devLabel = (f: DeviceFacts, major: number, minor: number): string => (f.name === undefined ? `${major}:${minor}` : `${f.name} (${major}:${minor})`);

/**
 * A Filesystem volume's last answer, by input object (checkPVs keeps one input object per PV object): while the
 * mount table is unchanged (the same MountDetails object at the path, or still none), a volume that needs no
 * read besides the table (no block device beneath, no recorded UUID, no `full` threshold) has the same answer.
 */
type Memo = WeakMap<HealthCheckInput, { readonly m: MountDetails | undefined; readonly health: VolumeHealth }>;

/** True when a Filesystem volume's answer depends on the mount table's line alone (see Memo). */
function tableOnly(input: HealthCheckInput, m: MountDetails | undefined): boolean {
  if (m === undefined) return true; // missing
  if (input.fullThresholdPercent !== undefined) return false;
  if (input.recordedIdentity !== undefined && identityUuid(input.recordedIdentity) !== undefined) return false;
  if (m.fsType === 'btrfs') return false;
  const major = Number(m.devno.split(':')[0]);
  return !(major > 0);
}

class Pass implements HealthPass {
  readonly #o: HealthCheckerOptions;
  readonly #sys: string;
  readonly #memo: Memo;
  readonly #mounts: ReadonlyMap<string, MountDetails> | undefined;
  readonly #mountError: string | undefined;
  readonly #devices = new Map<string, Promise<DeviceFacts>>();
  readonly #uuids = new Map<string, Promise<DirectoryFs>>();
  readonly #btrfsSources = new Map<string, Promise<{ major: number; minor: number } | undefined>>();

  constructor(o: HealthCheckerOptions, memo: Memo, mounts: ReadonlyMap<string, MountDetails> | undefined, mountError: string | undefined) {
    this.#o = o;
    this.#memo = memo;
    this.#sys = o.sysfsRoot ?? '/sys';
    this.#mountError = mountError;
    this.#mounts = mounts;
  }

  #device(major: number, minor: number): Promise<DeviceFacts> {
    const key = `${major}:${minor}`;
    let p = this.#devices.get(key);
    if (p === undefined) {
      p = deviceFacts(this.#sys, major, minor);
      this.#devices.set(key, p);
    }
    return p;
  }

  #uuid(m: MountDetails): Promise<DirectoryFs> {
    const key = `${m.fsType}\0${m.devno}\0${m.source}`;
    let p = this.#uuids.get(key);
    if (p === undefined) {
      p = mountFsUuid(m, this.#o).then(
        (uuid): DirectoryFs => ({ uuid }),
        (e: unknown): DirectoryFs => ({ error: errorMessage(e) }),
      );
      this.#uuids.set(key, p);
    }
    return p;
  }

  /** The block device beneath a mount: its MAJ:MIN when that is a real device, or a btrfs mount's source device. */
  async #mountDevice(m: MountDetails): Promise<{ major: number; minor: number } | undefined> {
    if (m.fsType === 'btrfs') {
      let p = this.#btrfsSources.get(m.source);
      if (p === undefined) {
        p = sourceDevice(m.source);
        this.#btrfsSources.set(m.source, p);
      }
      return p;
    }
    const [major, minor] = m.devno.split(':').map(Number);
    // Major 0: an anonymous device (tmpfs, overlay, nfs...): no block device beneath.
    if (major === undefined || minor === undefined || !(major > 0)) return undefined;
    return { major, minor };
  }

  known(input: HealthCheckInput): VolumeHealth | undefined {
    if (input.mode === 'Block' || this.#mounts === undefined) return undefined;
    const memo = this.#memo.get(input);
    return memo !== undefined && memo.m === this.#mounts.get(input.path) ? memo.health : undefined;
  }

  async check(input: HealthCheckInput): Promise<VolumeHealth> {
    const known = this.known(input);
    if (known !== undefined) return known;
    const conditions = new Map<HealthCondition, string>();
    try {
      if (input.mode === 'Block') await this.#block(input, conditions);
      else await this.#filesystem(input, conditions);
    } catch (e) {
      this.#o.onError?.(`health check of PV ${JSON.stringify(input.pvName)} at ${JSON.stringify(input.path)} failed: ${errorMessage(e)}`);
      return { conditions };
    }
    const health: VolumeHealth = { conditions };
    if (input.mode !== 'Block' && this.#mounts !== undefined) {
      const m = this.#mounts.get(input.path);
      if (tableOnly(input, m)) this.#memo.set(input, { m, health });
    }
    return health;
  }

  async #block(input: HealthCheckInput, out: Map<HealthCondition, string>): Promise<void> {
    const where = JSON.stringify(input.path);
    let st;
    try {
      st = await stat(input.path, { bigint: true });
    } catch (e) {
      out.set('missing', `block device path ${where} cannot be read: ${describeFsError(e, 'short')}`);
      return;
    }
    if (!st.isBlockDevice()) {
      out.set('missing', `path ${where} is no longer a block device`);
      return;
    }
    const { major, minor } = deviceNumbers(st.rdev);
    const f = await this.#device(major, minor);
    if (!f.present) {
      out.set('missing', `block device ${major}:${minor} at ${where} is gone (not in sysfs)`);
      return;
    }
    if (f.sectors === 0n) {
      out.set('missing', `block device ${devLabel(f, major, minor)} at ${where} has no medium (size 0: a detached loop device or an ejected medium)`);
      return;
    }
    if (input.recordedIdentity !== undefined) {
      const why = identityMismatch(input.recordedIdentity, { kind: 'block', major, minor }, input.path);
      if (why !== undefined) out.set('replaced', why);
    }
    if (f.readOnly) out.set('read-only', `block device ${devLabel(f, major, minor)} is read-only`);
    this.#ioErrors(f, major, minor, out);
  }

  #ioErrors(f: DeviceFacts, major: number, minor: number, out: Map<HealthCondition, string>): void {
    if (f.ioErrors !== undefined && f.ioErrors > 0) out.set('io-errors', `block device ${devLabel(f, major, minor)} counted ${f.ioErrors} I/O errors (ioerr_cnt)`);
  }

  async #filesystem(input: HealthCheckInput, out: Map<HealthCondition, string>): Promise<void> {
    const where = JSON.stringify(input.path);
    if (this.#mounts === undefined) {
      this.#o.onError?.(`cannot check PV ${JSON.stringify(input.pvName)}: the mount table could not be read: ${this.#mountError ?? 'unknown error'}`);
      return;
    }
    const m = this.#mounts.get(input.path);
    if (m === undefined) {
      out.set('missing', `path ${where} is not a mount point`);
      return;
    }
    // A path in the mount table is a mount point: its kind is taken from the table, not from a stat() per
    // volume (an async stat costs ~50 µs of CPU, most of a pass at 2,000 volumes: docs/performance.md §10).
    // A mount point that is a file or a device node (a bind mount of one) is not a volume discovery makes,
    // and the deleter's guard stats the path itself before it cleans anything.
    let now: PathKind = { kind: 'directory' };
    if (input.recordedIdentity !== undefined) {
      // The UUID is read (once per filesystem per pass) only for a PV that recorded one.
      if (now.kind === 'directory' && identityUuid(input.recordedIdentity) !== undefined) now = { kind: 'directory', fs: await this.#uuid(m) };
      const why = identityMismatch(input.recordedIdentity, now, input.path);
      if (why !== undefined) out.set('replaced', why);
    }
    if (m.mountOptions.includes('ro')) out.set('read-only', `${where} is mounted read-only (${m.fsType} ${m.source})`);
    else if (m.superOptions.includes('ro')) out.set('read-only', `the ${m.fsType} filesystem at ${where} is read-only (${m.source})`);
    await this.#beneath(m, where, out);
    if (input.fullThresholdPercent !== undefined) await this.#full(input.path, input.fullThresholdPercent, out);
  }

  /** read-only, filesystem-errors and io-errors of the block device beneath a mount. */
  async #beneath(m: MountDetails, where: string, out: Map<HealthCondition, string>): Promise<void> {
    const dev = await this.#mountDevice(m);
    if (dev === undefined) return;
    const f = await this.#device(dev.major, dev.minor);
    if (!f.present) return;
    const label = devLabel(f, dev.major, dev.minor);
    if (f.readOnly && !out.has('read-only')) out.set('read-only', `block device ${label} beneath ${where} is read-only`);
    if (EXT_TYPES.has(m.fsType) && f.ext4 !== undefined && f.ext4.errors > 0) {
      const first = f.ext4.firstErrorTime ? `, the first at ${new Date(f.ext4.firstErrorTime * 1000).toISOString()}` : '';
      out.set('filesystem-errors', `the ${m.fsType} filesystem on ${label} at ${where} counted ${f.ext4.errors} errors${first} (errors_count)`);
    }
    this.#ioErrors(f, dev.major, dev.minor, out);
  }

  /** full: used / (used + available) above the threshold, as df's Use%. */
  async #full(path: string, threshold: number, out: Map<HealthCondition, string>): Promise<void> {
    const where = JSON.stringify(path);
    try {
      const s = await statfs(path, { bigint: true });
      const used = s.blocks - s.bfree;
      const total = used + s.bavail;
      if (total === 0n) return;
      const pct = Number((used * 10000n) / total) / 100;
      if (pct > threshold) out.set('full', `${where} is ${pct.toFixed(1)}% full (threshold ${threshold}%)`);
    } catch (e) {
      this.#o.onError?.(`cannot read the capacity of ${where}: ${describeFsError(e, 'short')}`);
    }
  }
}

/** A mount table's lines by mount point; later lines are mounted on top: the last one is what is seen. */
function detailsByPoint(text: string): ReadonlyMap<string, MountDetails> {
  const byPoint = new Map<string, MountDetails>();
  for (const m of parseMountDetails(text)) byPoint.set(m.mountPoint, m);
  return byPoint;
}

/**
 * A checker: each beginPass() takes the mount table of the period (opts.mountTable: the one discovery
 * read, or read now) and the pass answers check() per PV from it. The table is read until two reads
 * agree, except that a read equal to the table held already is taken at once, and a text parsed
 * before is not parsed again: a pass of a quiet host costs at most one read of /proc/self/mountinfo and
 * no parse (src/host/mount-snapshot.ts).
 */
export function createHealthChecker(opts: HealthCheckerOptions = {}): HealthChecker {
  const own = opts.mountTable === undefined ? new MountTableReader(opts.mountInfoPath ?? DEFAULT_MOUNTINFO_PATH) : undefined;
  const memo: Memo = new WeakMap();
  return {
    async beginPass(): Promise<HealthPass> {
      const reader = opts.mountTable ?? own!;
      own?.newPeriod();
      try {
        return new Pass(opts, memo, (await reader.current()).view(detailsByPoint), undefined);
      } catch (e) {
        const why = `cannot read ${reader.path}: ${describeFsError(e, 'short')}`;
        opts.onError?.(why);
        return new Pass(opts, memo, undefined, why);
      }
    },
  };
}
