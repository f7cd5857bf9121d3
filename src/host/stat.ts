// What a discovery-dir entry is, and how big it is. Error texts follow the Go
// provisioner's (GetVolumeMode, GetBlockCapacityByte, GetFsCapacityByte) so
// existing log greps keep working; the inner error reads like Go's os errors
// ("stat /x: no such file or directory").
import { readFile, stat, statfs } from 'node:fs/promises';
import type { VolumeMode } from '../config/types.ts';
import { describeFsError } from '../util/errors.ts';


/**
 * Filesystem for a directory, Block for a block device; both checks follow
 * symlinks. Anything else (regular file, socket, broken symlink) throws.
 */
export async function detectVolumeMode(path: string): Promise<VolumeMode> {
  let st;
  try {
    st = await stat(path);
  } catch (err) {
    throw new Error(`Directory check for ${JSON.stringify(path)} failed: ${describeFsError(err)}`, { cause: err });
  }
  if (st.isDirectory()) return 'Filesystem';
  if (st.isBlockDevice()) return 'Block';
  throw new Error(`Skipping file ${JSON.stringify(path)}: not a directory nor block device`);
}

/** Total size of the filesystem holding `path`: f_blocks * f_bsize (what the Go provisioner reports). */
export async function filesystemCapacity(path: string): Promise<bigint> {
  try {
    const s = await statfs(path, { bigint: true });
    return s.blocks * s.bsize;
  } catch (err) {
    throw new Error(`path ${JSON.stringify(path)} fs stats error: ${describeFsError(err)}`, { cause: err });
  }
}

/** Splits a Linux dev_t (glibc encoding) into major and minor numbers. */
export function deviceNumbers(rdev: bigint): { major: number; minor: number } {
  const major = ((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & 0xfffff000n);
  const minor = (rdev & 0xffn) | ((rdev >> 12n) & 0xffffff00n);
  return { major: Number(major), minor: Number(minor) };
}

export interface BlockCapacityOptions {
  /** Root of sysfs (default "/sys"); tests point it elsewhere. */
  readonly sysRoot?: string | undefined;
}

/**
 * Size in bytes of the block device at `path` (symlinks followed): the device
 * number from stat, then /sys/dev/block/<major>:<minor>/size, which the kernel
 * always gives in 512-byte sectors. No ioctl and no child process needed.
 */
export async function blockDeviceCapacity(path: string, opts: BlockCapacityOptions = {}): Promise<bigint> {
  const sysRoot = opts.sysRoot ?? '/sys';
  try {
    const st = await stat(path, { bigint: true });
    if (!st.isBlockDevice()) throw new Error('not a block device');
    const { major, minor } = deviceNumbers(st.rdev);
    const text = (await readFile(`${sysRoot}/dev/block/${major}:${minor}/size`, 'utf8')).trim();
    if (!/^\d+$/.test(text)) throw new Error(`unexpected size ${JSON.stringify(text)} in sysfs for device ${major}:${minor}`);
    return BigInt(text) * 512n;
  } catch (err) {
    throw new Error(`path ${JSON.stringify(path)} block stats error: ${describeFsError(err)}`, { cause: err });
  }
}
