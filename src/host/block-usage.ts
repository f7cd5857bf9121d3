// Is a block device in use on this host? Discovery asks before it creates a
// PV for a NEW block device entry (issue 17, point 4): a PV for a device in
// use is a PV whose release runs the block cleaner over someone's data (the
// disk holding `/`, a disk with a mounted partition, an LVM/dm/md member, swap).
//
// The facts, all by device number (MAJ:MIN), never by name: the daemon runs in
// a container that sees the host's devices through the discovery dir's
// symlinks (/dev/disk/by-id/... style names), so names seen in the mount table
// or /proc/swaps need not exist in its own /dev.
// - mounted: the mount table's MAJ:MIN of each mount, and the st_rdev of each
//   mount source that is a block device here (btrfs and a few others report an
//   anonymous MAJ:MIN in mountinfo, the source names the real device);
// - the device of `/` and of the kubelet's root dir (/var/lib/kubelet), as the
//   mount table shows them (the mount holding each path);
// - holders: /sys/dev/block/<MAJ:MIN>/holders not empty (dm, md, bcache, ...);
// - swap: /proc/swaps, each `partition` entry by st_rdev, and by kernel name
//   (`/dev/<name>` of the sysfs entry) when the path does not resolve here;
// - partitions: for a whole disk, each partition (sysfs subdirectories with a
//   `partition` file) is checked as the disk itself; for a partition, the whole
//   disk's own mount, swap and holders are checked too;
// - exclusive open: open(O_RDONLY|O_EXCL) and close at once; EBUSY means some
//   process (mkfs, a database on the raw device, a VM, the kernel for a mount
//   this mount namespace does not show) holds it. This is the only check that
//   sees a user in another mount namespace;
// - size 0 (an unattached loop device, an empty zram): never a volume.
import { constants } from 'node:fs';
import { open, readdir, readFile, realpath, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { describeFsError, errnoCode } from '../util/errors.ts';
import { deviceNumbers } from './stat.ts';
import { mountHolding } from './host-mounts.ts';
import type { MountPropagation } from './mountinfo.ts';

export const DEFAULT_SWAPS_PATH = '/proc/swaps';
export const DEFAULT_KUBELET_ROOT = '/var/lib/kubelet';

/** Why a block device cannot back a new PV (one Warning per device and reason). */
export type BlockBusyReason = 'empty' | 'mounted' | 'root-device' | 'kubelet-device' | 'holders' | 'swap' | 'exclusive-open';

export interface BlockBusy {
  readonly reason: BlockBusyReason;
  /** Human text, e.g. `partition 8:1 is mounted at "/"`. */
  readonly detail: string;
}

/** The per-pass host facts (read once per pass, only when a new block entry needs them). */
export interface BlockHostFacts {
  /** MAJ:MIN -> a mount point of it. */
  readonly mounted: ReadonlyMap<string, string>;
  /** MAJ:MIN -> "/" or the kubelet root dir, for the devices holding them. */
  readonly roots: ReadonlyMap<string, string>;
  /** MAJ:MIN of active swap devices (resolved here), and their /dev names. */
  readonly swapDevnos: ReadonlySet<string>;
  readonly swapNames: ReadonlySet<string>;
}

export interface BlockHostFactsOptions {
  readonly swapsPath?: string | undefined;
  readonly kubeletRoot?: string | undefined;
}

const devnoOf = (rdev: bigint): string => {
  const { major, minor } = deviceNumbers(rdev);
  return `${major}:${minor}`;
};

/** The rdev of a block device path as MAJ:MIN, or undefined (missing, not a block device). */
async function blockDevno(path: string): Promise<string | undefined> {
  try {
    const st = await stat(path, { bigint: true });
    return st.isBlockDevice() ? devnoOf(st.rdev) : undefined;
  } catch {
    return undefined;
  }
}

/** Decodes /proc/swaps' escapes (the kernel escapes space, tab, newline and backslash as \ooo). */
const unescape = (s: string): string => s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));

/** Parses /proc/swaps: the paths of `partition` entries (swap files are on a filesystem: their disk is mounted anyway). */
export function parseSwaps(text: string): string[] {
  const out: string[] = [];
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length >= 2 && f[0]?.startsWith('/')) out.push(unescape(f[0]));
  }
  return out;
}

export async function readBlockHostFacts(mounts: readonly MountPropagation[], o: BlockHostFactsOptions = {}): Promise<BlockHostFacts> {
  const mounted = new Map<string, string>();
  const add = (devno: string | undefined, where: string): void => {
    if (devno && !mounted.has(devno)) mounted.set(devno, where);
  };
  const sources = new Map<string, string[]>();
  for (const m of mounts) {
    add(m.devno, m.mountPoint);
    if (m.source.startsWith('/')) sources.set(m.source, [...(sources.get(m.source) ?? []), m.mountPoint]);
  }
  await Promise.all(
    [...sources].map(async ([src, points]) => {
      const d = await blockDevno(src);
      for (const p of points) add(d, p);
    }),
  );
  const roots = new Map<string, string>();
  for (const path of ['/', o.kubeletRoot ?? DEFAULT_KUBELET_ROOT]) {
    const m = mountHolding(mounts, path);
    if (!m) continue;
    for (const d of [m.devno, m.source.startsWith('/') ? await blockDevno(m.source) : undefined]) if (d && !roots.has(d)) roots.set(d, path);
  }
  const swapDevnos = new Set<string>();
  const swapNames = new Set<string>();
  let swaps: string[] = [];
  try {
    swaps = parseSwaps(await readFile(o.swapsPath ?? DEFAULT_SWAPS_PATH, 'utf8'));
  } catch (err) {
    if (errnoCode(err) !== 'ENOENT') throw err;
  }
  for (const s of swaps) {
    swapNames.add(s.startsWith('/dev/') ? s.slice('/dev/'.length) : s);
    const d = await blockDevno(s);
    if (d) swapDevnos.add(d);
  }
  return { mounted, roots, swapDevnos, swapNames };
}

export interface BlockUsageOptions {
  /** Root of sysfs (default "/sys"). */
  readonly sysRoot?: string | undefined;
  /** Whether some process holds the device exclusively (default: open O_RDONLY|O_EXCL, EBUSY means held). */
  readonly heldExclusively?: ((path: string) => Promise<boolean>) | undefined;
}

/** Opens `path` O_RDONLY|O_EXCL|O_NONBLOCK and closes it at once: EBUSY means another holder. */
export async function heldExclusively(path: string): Promise<boolean> {
  let fh;
  try {
    fh = await open(path, constants.O_RDONLY | constants.O_EXCL | constants.O_NONBLOCK);
  } catch (err) {
    if (errnoCode(err) === 'EBUSY') return true;
    throw err;
  }
  await fh.close();
  return false;
}

/** One sysfs block device: its MAJ:MIN, kernel name and directory. */
interface SysDev {
  readonly devno: string;
  readonly name: string;
  readonly dir: string;
}

/** Whether `path` exists (symlinks followed); any error counts as no. */
export async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

async function sysDev(dir: string, devno?: string): Promise<SysDev> {
  const d = devno ?? (await readFile(join(dir, 'dev'), 'utf8')).trim();
  return { devno: d, name: basename(dir), dir };
}

async function holdersOf(dev: SysDev): Promise<string[]> {
  try {
    return (await readdir(join(dev.dir, 'holders'))).sort();
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return [];
    throw err;
  }
}

/**
 * Every reason the block device at `path` (symlinks followed) cannot back a new
 * PV; empty when it is free. `size` is its size in bytes (already read from sysfs).
 * Throws when a fact cannot be read (the caller refuses the entry then).
 */
export async function blockDeviceUsage(path: string, size: bigint, facts: BlockHostFacts, o: BlockUsageOptions = {}): Promise<BlockBusy[]> {
  const sysRoot = o.sysRoot ?? '/sys';
  const st = await stat(path, { bigint: true });
  if (!st.isBlockDevice()) throw new Error(`${JSON.stringify(path)} is not a block device`);
  const devno = devnoOf(st.rdev);
  const out: BlockBusy[] = [];
  const note = (reason: BlockBusyReason, detail: string): void => {
    if (!out.some((b) => b.reason === reason && b.detail === detail)) out.push({ reason, detail });
  };
  if (size === 0n) note('empty', `device ${devno} has size 0 (an unattached loop device or an empty device)`);

  const self = await sysDev(await realpath(join(sysRoot, 'dev', 'block', devno)), devno);
  const isPartition = await exists(join(self.dir, 'partition'));
  // The device, its partitions (a whole disk) or its whole disk (a partition).
  const related: Array<{ dev: SysDev; what: string; direct: boolean }> = [{ dev: self, what: `device ${devno} (${self.name})`, direct: true }];
  if (isPartition) {
    const disk = await sysDev(dirname(self.dir));
    related.push({ dev: disk, what: `its whole disk ${disk.devno} (${disk.name})`, direct: false });
  } else {
    for (const entry of (await readdir(self.dir, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (!entry.isDirectory() || !(await exists(join(self.dir, entry.name, 'partition')))) continue;
      const part = await sysDev(join(self.dir, entry.name));
      related.push({ dev: part, what: `its partition ${part.devno} (${part.name})`, direct: false });
    }
  }
  for (const { dev, what } of related) {
    const at = facts.mounted.get(dev.devno);
    if (at !== undefined) note('mounted', `${what} is mounted at ${JSON.stringify(at)}`);
    const root = facts.roots.get(dev.devno);
    if (root !== undefined) note(root === '/' ? 'root-device' : 'kubelet-device', `${what} holds ${JSON.stringify(root)}`);
    if (facts.swapDevnos.has(dev.devno) || facts.swapNames.has(dev.name)) note('swap', `${what} is active swap`);
    const holders = await holdersOf(dev);
    if (holders.length > 0) note('holders', `${what} is held by ${holders.join(', ')} (${join('/sys/class/block', dev.name, 'holders')})`);
  }
  try {
    if (await (o.heldExclusively ?? heldExclusively)(path)) note('exclusive-open', `device ${devno} is opened exclusively (O_EXCL) by another process`);
  } catch (err) {
    // Whoever may not open it cannot tell that nobody holds it: refused too.
    note('exclusive-open', `device ${devno} could not be opened to check for an exclusive holder (${describeFsError(err, 'short')})`);
  }
  return out;
}
