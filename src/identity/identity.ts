// Volume identity: what discovery found at a volume's path when it created the
// PV, recorded in the PV annotation `local-static-provisioner/volume-identity`
// (metadata only: the spec stays the Go provisioner's, byte for byte), and
// compared by the deleter's refusal checks with what is at the path now.
//
//   block:<major>:<minor>  a block device (st_rdev of the device the path resolves to)
//   mount                  a directory that is a mount point (a Filesystem volume)
//
// A Filesystem PV whose path now resolves to a block device, or a Block PV
// whose path now resolves to another device number or to a directory, is no
// longer the volume this node discovered: cleaning it would wipe something
// else (issue 17, point 3). A PV without the annotation (made by the Go
// provisioner or an older version of this one) has no recorded identity and
// keeps the earlier checks only. Device numbers are taken as they are: a disk
// the kernel renumbers across a reboot is refused (kept, never cleaned) until
// an operator deletes its PV by hand; that errs on the side of the data.
import { stat } from 'node:fs/promises';
import type { VolumeMode } from '../config/types.ts';
import { deviceNumbers } from '../host/stat.ts';

export const ANN_VOLUME_IDENTITY = 'local-static-provisioner/volume-identity';
export const IDENTITY_MOUNT = 'mount';

/** What a path resolves to now (symlinks followed). */
export type PathKind =
  | { readonly kind: 'block'; readonly major: number; readonly minor: number }
  | { readonly kind: 'directory' }
  | { readonly kind: 'other' }
  | { readonly kind: 'missing'; readonly error: unknown };

export const blockIdentity = (major: number, minor: number): string => `block:${major}:${minor}`;

/** stat() of the path (symlinks followed), as a PathKind; never throws. */
export async function pathKind(path: string): Promise<PathKind> {
  try {
    const st = await stat(path, { bigint: true });
    if (st.isBlockDevice()) return { kind: 'block', ...deviceNumbers(st.rdev) };
    if (st.isDirectory()) return { kind: 'directory' };
    return { kind: 'other' };
  } catch (error) {
    return { kind: 'missing', error };
  }
}

/**
 * The identity discovery records for an entry it found in this mode (a
 * Filesystem entry is only ever a mount point: discovery checked that).
 * Throws when a Block entry is no longer a block device.
 */
export async function discoveredIdentity(path: string, mode: VolumeMode): Promise<string> {
  if (mode === 'Filesystem') return IDENTITY_MOUNT;
  const now = await pathKind(path);
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
  const m = /^block:(\d+):(\d+)$/.exec(recorded);
  if (!m) return `its identity annotation ${rec} is not one this provisioner writes`;
  if (now.kind !== 'block') return `it was discovered as ${rec} but ${where} is now ${now.kind === 'directory' ? 'a directory' : 'not a block device'}`;
  if (`${now.major}:${now.minor}` !== `${m[1] ?? ''}:${m[2] ?? ''}`) {
    return `it was discovered as ${rec} but ${where} now resolves to block device ${now.major}:${now.minor}`;
  }
  return undefined;
}
