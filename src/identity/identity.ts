// Volume identity: what discovery found at a volume's path when it created the
// PV, recorded in the PV annotation `local-static-provisioner/volume-identity`
// (metadata only: the spec stays the Go provisioner's, byte for byte), and
// compared by the deleter's refusal checks with what is at the path now.
//
//   block:<major>:<minor>  a block device (st_rdev of the device the path resolves to)
//   mount                  a directory that is a mount point (a Filesystem volume) of a
//                          filesystem without a UUID (tmpfs), or recorded before UUIDs were
//   mount:uuid=<uuid>      a mount point of a filesystem with that UUID (ext2/3/4, xfs,
//                          btrfs: src/host/fs-uuid.ts reads it from the superblock)
//
// A Filesystem PV whose path now resolves to a block device, or a Block PV
// whose path now resolves to another device number or to a directory, is no
// longer the volume this node discovered: cleaning it would wipe something
// else (issue 17, point 3). A PV without the annotation (made by the Go
// provisioner or an older version of this one) has no recorded identity and
// keeps the earlier checks only. A `mount` PV (old or tmpfs) accepts any
// mount point there (a remounted tmpfs has a new anonymous st_dev, and is the
// same volume for the user); a `mount:uuid=` PV accepts only a filesystem with
// that UUID. The same rule (identityMismatch) makes the deleter refuse to clean
// and the health check report `replaced` (src/health/check.ts). Device numbers are taken as they are: a disk
// the kernel renumbers across a reboot is refused (kept, never cleaned) until
// an operator deletes its PV by hand; that errs on the side of the data.
import { stat, statfs } from 'node:fs/promises';
import type { VolumeMode } from '../config/types.ts';
import { deviceFsUuid, sourceDevice, type FsUuidOptions } from '../host/fs-uuid.ts';
import { DEFAULT_MOUNTINFO_PATH, readMountPropagation, type MountPropagation } from '../host/mountinfo.ts';
import { deviceNumbers } from '../host/stat.ts';
import { errorMessage } from '../util/errors.ts';

export const ANN_VOLUME_IDENTITY = 'local-static-provisioner/volume-identity';
export const IDENTITY_MOUNT = 'mount';
const UUID_PREFIX = 'mount:uuid=';
const UUID_FORM = /^mount:uuid=([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

/**
 * The filesystem holding a directory, as far as its UUID goes: `uuid`
 * undefined for one without (tmpfs), `error` when it could not be read.
 */
export type DirectoryFs = { readonly uuid: string | undefined } | { readonly error: string };

/** What a path resolves to now (symlinks followed). */
export type PathKind =
  | { readonly kind: 'block'; readonly major: number; readonly minor: number }
  /** fs: what filesystem holds it; undefined when the caller did not look (compared as for `mount`). */
  | { readonly kind: 'directory'; readonly fs?: DirectoryFs | undefined }
  | { readonly kind: 'other' }
  | { readonly kind: 'missing'; readonly error: unknown };

export const blockIdentity = (major: number, minor: number): string => `block:${major}:${minor}`;

/** The identity of a mount point of a filesystem with (uuid) or without (undefined) a UUID. */
export const mountIdentity = (uuid: string | undefined): string => (uuid === undefined ? IDENTITY_MOUNT : `${UUID_PREFIX}${uuid}`);

/** The UUID a recorded identity names, or undefined when it names none. */
export const identityUuid = (recorded: string): string | undefined => UUID_FORM.exec(recorded)?.[1];

const BTRFS_MAGIC = 0x9123683en;
const UUID_FS_TYPES = new Set(['ext2', 'ext3', 'ext4', 'xfs']);

/**
 * The UUID of the filesystem of a mount (mountinfo's type, MAJ:MIN and
 * source), or undefined for a type without one. ext and xfs: the device is
 * the mount's MAJ:MIN; btrfs (anonymous MAJ:MIN): the mount's source. Throws
 * when the device cannot be read.
 */
export async function mountFsUuid(m: Pick<MountPropagation, 'fsType' | 'devno' | 'source'>, opts: FsUuidOptions = {}): Promise<string | undefined> {
  if (UUID_FS_TYPES.has(m.fsType)) {
    const [major, minor] = m.devno.split(':').map(Number);
    if (major === undefined || minor === undefined || !(major > 0)) return undefined;
    return deviceFsUuid(major, minor, m.source, opts);
  }
  if (m.fsType === 'btrfs') {
    const d = await sourceDevice(m.source);
    if (d === undefined) throw new Error(`btrfs source ${JSON.stringify(m.source)} is not a block device here`);
    return deviceFsUuid(d.major, d.minor, m.source, opts);
  }
  return undefined;
}

export interface IdentityOptions extends FsUuidOptions {
  /** The mount table, when the caller has it (discovery reads one per pass); read from mountInfoPath otherwise (btrfs only). */
  readonly mounts?: readonly MountPropagation[] | undefined;
  readonly mountInfoPath?: string | undefined;
}

/** The topmost mount at `path` (the one stat sees), or undefined. */
export function mountAt(mounts: readonly MountPropagation[], path: string): MountPropagation | undefined {
  for (let i = mounts.length - 1; i >= 0; i--) if (mounts[i]?.mountPoint === path) return mounts[i];
  return undefined;
}

/** The filesystem holding a directory whose st_dev is `dev` (see DirectoryFs); never throws. */
async function directoryFs(path: string, dev: bigint, opts: IdentityOptions): Promise<DirectoryFs> {
  try {
    const { major, minor } = deviceNumbers(dev);
    if (major !== 0) return { uuid: await deviceFsUuid(major, minor, undefined, opts) };
    // An anonymous st_dev: tmpfs and the like (no UUID), or btrfs (its device is the mount's source).
    if ((await statfs(path, { bigint: true })).type !== BTRFS_MAGIC) return { uuid: undefined };
    const mounts = opts.mounts ?? (await readMountPropagation(opts.mountInfoPath ?? DEFAULT_MOUNTINFO_PATH));
    const m = mounts.find((x) => x.devno === `${major}:${minor}` && x.fsType === 'btrfs');
    if (m === undefined) return { error: `no btrfs mount with device ${major}:${minor} in the mount table` };
    return { uuid: await mountFsUuid(m, opts) };
  } catch (e) {
    return { error: errorMessage(e) };
  }
}

/** stat() of the path (symlinks followed), as a PathKind, a directory with its filesystem's UUID; never throws. */
export async function pathKind(path: string, opts: IdentityOptions = {}): Promise<PathKind> {
  try {
    const st = await stat(path, { bigint: true });
    if (st.isBlockDevice()) return { kind: 'block', ...deviceNumbers(st.rdev) };
    if (st.isDirectory()) return { kind: 'directory', fs: await directoryFs(path, st.dev, opts) };
    return { kind: 'other' };
  } catch (error) {
    return { kind: 'missing', error };
  }
}

/**
 * The identity discovery records for an entry it found in this mode (a
 * Filesystem entry is only ever a mount point: discovery checked that):
 * `mount:uuid=<uuid>` for a filesystem with a UUID (the topmost mount at the
 * path in `opts.mounts`, or in the mount table read now), `mount` for one without or
 * whose UUID cannot be read (a container without the host's /dev: the PV is
 * made, with the weaker identity). Throws when a Block entry is no longer a
 * block device.
 */
export async function discoveredIdentity(path: string, mode: VolumeMode, opts: IdentityOptions = {}): Promise<string> {
  if (mode === 'Filesystem') {
    try {
      const m = mountAt(opts.mounts ?? (await readMountPropagation(opts.mountInfoPath ?? DEFAULT_MOUNTINFO_PATH)), path);
      return m === undefined ? IDENTITY_MOUNT : mountIdentity(await mountFsUuid(m, opts));
    } catch {
      return IDENTITY_MOUNT;
    }
  }
  const now = await pathKind(path, opts);
  if (now.kind !== 'block') throw new Error(`path ${JSON.stringify(path)} is no longer a block device`);
  return blockIdentity(now.major, now.minor);
}

/** The recorded identity of a PV, or undefined when it has none (Go provisioner, older versions). */
export const recordedIdentity = (pv: { metadata?: { annotations?: Record<string, string> } }): string | undefined =>
  pv.metadata?.annotations?.[ANN_VOLUME_IDENTITY];

/**
 * Why what is at the path now is not the recorded identity, or undefined when
 * it is. A missing path, and a directory that is no longer a mount point for
 * a recorded `mount`, are not a mismatch here: the volume vanished, and the
 * deleter reports it as VolumeMissing (and cleans it once it is mounted again).
 */
export function identityMismatch(recorded: string, now: PathKind, path: string): string | undefined {
  const where = JSON.stringify(path);
  const rec = JSON.stringify(recorded);
  if (now.kind === 'missing') return undefined;
  if (recorded === IDENTITY_MOUNT) {
    if (now.kind === 'block') return `it was discovered as ${rec} but ${where} now resolves to block device ${now.major}:${now.minor}`;
    if (now.kind !== 'directory') return `it was discovered as ${rec} but ${where} is now neither a directory nor a block device`;
    return undefined; // a directory: a mount point (the volume), or a vanished one (VolumeMissing, see above)
  }
  const uuid = identityUuid(recorded);
  if (uuid !== undefined) {
    if (now.kind === 'block') return `it was discovered as ${rec} but ${where} now resolves to block device ${now.major}:${now.minor}`;
    if (now.kind !== 'directory') return `it was discovered as ${rec} but ${where} is now neither a directory nor a block device`;
    // A vanished mount leaves the directory on the filesystem below it: another UUID (or none), a mismatch
    // here; the deleter reports VolumeMissing before it asks (it checks the mount table first).
    const fs = now.fs;
    if (fs === undefined) return undefined;
    if ('error' in fs) return `it was discovered as ${rec} but the filesystem UUID at ${where} cannot be read: ${fs.error}`;
    if (fs.uuid === undefined) return `it was discovered as ${rec} but ${where} now holds a filesystem without a UUID`;
    if (fs.uuid !== uuid) return `it was discovered as ${rec} but ${where} now holds filesystem UUID ${fs.uuid}`;
    return undefined;
  }
  const m = /^block:(\d+):(\d+)$/.exec(recorded);
  if (!m) return `its identity annotation ${rec} is not one this provisioner writes`;
  if (now.kind !== 'block') return `it was discovered as ${rec} but ${where} is now ${now.kind === 'directory' ? 'a directory' : 'not a block device'}`;
  if (`${now.major}:${now.minor}` !== `${m[1] ?? ''}:${m[2] ?? ''}`) {
    return `it was discovered as ${rec} but ${where} now resolves to block device ${now.major}:${now.minor}`;
  }
  return undefined;
}
