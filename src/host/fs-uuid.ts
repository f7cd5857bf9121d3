// The UUID of a filesystem, read from its superblock on the block device (no
// exec, no blkid, no udev): what discovery records in a Filesystem PV's
// identity (src/identity/identity.ts) and what the health check compares it
// with. Three layouts are known; any other filesystem (tmpfs, overlay, nfs,
// a device this process cannot open) has no UUID here.
//
//   ext2/3/4  superblock at byte 1024: magic 0xEF53 (LE16) at +56, s_uuid (16 bytes) at +104
//   xfs       superblock at byte 0: magic "XFSB" at +0, sb_uuid (16 bytes) at +32
//   btrfs     superblock at byte 65536: magic "_BHRfS_M" at +64, fsid (16 bytes) at +32
//
// The device node of a MAJ:MIN is found through sysfs (/sys/dev/block/M:m/uevent,
// DEVNAME=...) under /dev, or through the mount's source, and used only when
// its st_rdev is that MAJ:MIN (a stale or foreign node is never read).
import { open, readFile, stat } from 'node:fs/promises';
import { deviceNumbers } from './stat.ts';

export interface FsUuidOptions {
  /** Root of sysfs (default "/sys"). */
  readonly sysfsRoot?: string | undefined;
  /** Where device nodes are (default "/dev"). */
  readonly devRoot?: string | undefined;
}

/** A filesystem type with a UUID in its superblock, and that UUID. */
export interface SuperblockId {
  readonly type: 'ext' | 'xfs' | 'btrfs';
  readonly uuid: string;
}

const EXT_SB = 1024;
const BTRFS_SB = 65536;
const READ = 4096;

/** 16 bytes as the canonical lowercase 8-4-4-4-12 form. */
export function formatUuid(b: Uint8Array): string {
  const h = Buffer.from(b).toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}

const isZero = (b: Uint8Array): boolean => b.every((x) => x === 0);

/**
 * The filesystem type and UUID in a device's first bytes: `head` is the bytes
 * at 0..4096, `btrfs` those at 65536..69632 (only consulted when `head` holds
 * neither ext nor xfs). An all-zero UUID counts as none.
 */
export function parseSuperblock(head: Uint8Array, btrfs?: Uint8Array): SuperblockId | undefined {
  const b = Buffer.from(head.buffer, head.byteOffset, head.byteLength);
  if (b.length >= EXT_SB + 120 && b.readUInt16LE(EXT_SB + 56) === 0xef53) {
    const u = b.subarray(EXT_SB + 104, EXT_SB + 120);
    return isZero(u) ? undefined : { type: 'ext', uuid: formatUuid(u) };
  }
  if (b.length >= 48 && b.toString('latin1', 0, 4) === 'XFSB') {
    const u = b.subarray(32, 48);
    return isZero(u) ? undefined : { type: 'xfs', uuid: formatUuid(u) };
  }
  if (btrfs !== undefined) {
    const s = Buffer.from(btrfs.buffer, btrfs.byteOffset, btrfs.byteLength);
    if (s.length >= 72 && s.toString('latin1', 64, 72) === '_BHRfS_M') {
      const u = s.subarray(32, 48);
      return isZero(u) ? undefined : { type: 'btrfs', uuid: formatUuid(u) };
    }
  }
  return undefined;
}

/** Reads the superblock of the block device at `devicePath` (which must be the device `major:minor`). Throws on a read error. */
export async function readSuperblockId(devicePath: string, major: number, minor: number): Promise<SuperblockId | undefined> {
  const fh = await open(devicePath, 'r');
  try {
    const st = await fh.stat({ bigint: true });
    const d = deviceNumbers(st.rdev);
    if (!st.isBlockDevice() || d.major !== major || d.minor !== minor) {
      throw new Error(`${devicePath} is not block device ${major}:${minor}`);
    }
    const head = Buffer.alloc(READ);
    const { bytesRead } = await fh.read(head, 0, READ, 0);
    const first = parseSuperblock(head.subarray(0, bytesRead));
    if (first !== undefined) return first;
    const tail = Buffer.alloc(READ);
    const r2 = await fh.read(tail, 0, READ, BTRFS_SB);
    return parseSuperblock(head.subarray(0, bytesRead), tail.subarray(0, r2.bytesRead));
  } finally {
    await fh.close();
  }
}

/** The kernel's name of a block device (DEVNAME in sysfs uevent, e.g. "loop3", "sda1", "dm-0"), or undefined when sysfs has no such device. */
export async function blockDeviceName(major: number, minor: number, sysfsRoot = '/sys'): Promise<{ name: string; partition: boolean } | undefined> {
  let text: string;
  try {
    text = await readFile(`${sysfsRoot}/dev/block/${major}:${minor}/uevent`, 'utf8');
  } catch {
    return undefined;
  }
  const name = /^DEVNAME=(.+)$/m.exec(text)?.[1];
  if (name === undefined) return undefined;
  return { name, partition: /^DEVTYPE=partition$/m.test(text) };
}

/**
 * The UUID of the filesystem on block device `major:minor`, or undefined when
 * it has none of the known layouts. Device nodes tried: /dev/<DEVNAME> (sysfs),
 * then `source` (the mount's source, e.g. "/dev/sdb1"). Throws when no node of
 * that device can be read.
 */
export async function deviceFsUuid(major: number, minor: number, source: string | undefined, opts: FsUuidOptions = {}): Promise<string | undefined> {
  const candidates: string[] = [];
  const dev = await blockDeviceName(major, minor, opts.sysfsRoot);
  if (dev !== undefined) candidates.push(`${opts.devRoot ?? '/dev'}/${dev.name}`);
  if (source?.startsWith('/') && !candidates.includes(source)) candidates.push(source);
  let lastError: unknown = new Error(`no device node found for block device ${major}:${minor}`);
  for (const c of candidates) {
    try {
      return (await readSuperblockId(c, major, minor))?.uuid;
    } catch (e) {
      lastError = e;
    }
  }
  throw lastError;
}

/** MAJ:MIN of the block device behind a btrfs mount: its source's st_rdev (btrfs files have an anonymous st_dev). */
export async function sourceDevice(source: string): Promise<{ major: number; minor: number } | undefined> {
  if (!source.startsWith('/')) return undefined;
  try {
    const st = await stat(source, { bigint: true });
    return st.isBlockDevice() ? deviceNumbers(st.rdev) : undefined;
  } catch {
    return undefined;
  }
}
