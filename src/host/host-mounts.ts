// Can a class's mountDir see the host's volumes? In a container, a directory
// is the host's only when it is on a hostPath mount, and a volume the host
// mounts there later shows up only when that mount receives the host's mounts
// (mountPropagation: HostToContainer, a "master:N" or "shared:N" tag in
// mountinfo). One discovery root (host /mnt/disks mounted once at /mnt/disks,
// classes as directories under it) makes a new class a ConfigMap edit; a class
// outside every hostPath mount needs a DaemonSet change, which restarts the
// pods. These checks name the missing piece in one line (a Warning Event on the
// Node, see discoverer.ts).
//
// "In a container" means: the root of this mount namespace is an overlay-type
// filesystem (a container image). Run on the host itself (tests, the demo),
// every directory is the host's and only a missing mountDir is reported.
import { posix } from 'node:path';
import type { ClassConfig, ProvisionerConfig } from '../config/types.ts';
import type { MountPropagation } from './mountinfo.ts';

/** Filesystem types of a container image's root. */
const CONTAINER_ROOT_FS = new Set(['overlay', 'aufs', 'fuse.fuse-overlayfs']);

const clean = (path: string): string => posix.normalize(path).replace(/(.)\/+$/, '$1');
const within = (dir: string, path: string): boolean => dir === '/' || path === dir || path.startsWith(`${dir}/`);

/** The mount holding `path`: the last-listed entry with the longest mount point that is `path` or one of its parents. */
export function mountHolding(mounts: readonly MountPropagation[], path: string): MountPropagation | undefined {
  const p = clean(path);
  let best: MountPropagation | undefined;
  for (const m of mounts) if (within(m.mountPoint, p) && (!best || m.mountPoint.length >= best.mountPoint.length)) best = m;
  return best;
}

/** True when the root of this mount namespace is a container image (overlay-type filesystem). */
export function inContainer(mounts: readonly MountPropagation[]): boolean {
  const root = mountHolding(mounts, '/');
  return root?.mountPoint === '/' && CONTAINER_ROOT_FS.has(root.fsType);
}

const receivesHostMounts = (m: MountPropagation): boolean => m.tags.some((t) => t.startsWith('master:') || t.startsWith('shared:'));

/**
 * Discovery roots: mount points (not "/") that hold some class's mountDir as a
 * subdirectory and are no class's mountDir themselves (e.g. /mnt/disks holding
 * /mnt/disks/fast). A class put under one needs no DaemonSet change.
 */
export function discoveryRoots(config: ProvisionerConfig, mounts: readonly MountPropagation[]): string[] {
  const dirs = new Set(Object.values(config.storageClassMap).map((c) => clean(c.mountDir)));
  const roots = new Set<string>();
  for (const d of dirs) {
    const m = mountHolding(mounts, d);
    if (m && m.mountPoint !== '/' && !dirs.has(m.mountPoint)) roots.add(m.mountPoint);
  }
  return [...roots].sort();
}

/** ", or put the class under <root>" advice (a directory there needs no DaemonSet change). */
function underRoot(className: string, roots: readonly string[]): string {
  const root = roots[0];
  if (root === undefined) return ', or put the class under a directory the DaemonSet already mounts from the host';
  const dir = JSON.stringify(posix.join(root, className));
  return `, or put the class under ${JSON.stringify(root)} (hostDir and mountDir ${dir}: a new directory there needs no DaemonSet change)`;
}

/**
 * What is wrong with a class's mountDir, or undefined when it can see the
 * host's volumes. `exists`: whether mountDir could be read. `mounts`: the mount
 * table, undefined when it could not be read (then only a missing mountDir is
 * reported, without advice that depends on the mounts).
 */
export function mountDirProblem(
  className: string,
  cls: ClassConfig,
  exists: boolean,
  config: ProvisionerConfig,
  mounts: readonly MountPropagation[] | undefined,
): string | undefined {
  const what = `mountDir ${JSON.stringify(cls.mountDir)} of class ${JSON.stringify(className)}`;
  const addVolume = `add a hostPath volume for hostDir ${JSON.stringify(cls.hostDir)} to the DaemonSet, mounted at ${JSON.stringify(cls.mountDir)} with mountPropagation HostToContainer`;
  const holder = mounts && mountHolding(mounts, cls.mountDir);
  const roots = mounts ? discoveryRoots(config, mounts) : [];
  if (!exists) {
    if (holder && holder.mountPoint !== '/') {
      return `${what} does not exist; create hostDir ${JSON.stringify(cls.hostDir)} on the host (it is under the mount ${JSON.stringify(holder.mountPoint)})`;
    }
    return `${what} does not exist in the container; ${addVolume}${underRoot(className, roots)}`;
  }
  if (!mounts || !holder || !inContainer(mounts)) return undefined;
  if (holder.mountPoint === '/') {
    return `${what} is on the container's own root filesystem (${holder.fsType}), not on a hostPath mount: volumes under hostDir ${JSON.stringify(cls.hostDir)} on the host are not seen; ${addVolume}${underRoot(className, roots)}`;
  }
  if (!receivesHostMounts(holder)) {
    return `${what} is on the mount ${JSON.stringify(holder.mountPoint)}, which does not receive the host's mounts: volumes mounted on the host after the pod started are not seen; set mountPropagation HostToContainer on the volumeMount at ${JSON.stringify(holder.mountPoint)}`;
  }
  return undefined;
}
