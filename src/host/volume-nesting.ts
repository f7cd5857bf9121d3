// Where a path lies relative to the discovered volumes (issue 17, point 3b).
//
// A tenant owns everything inside its volume: it can write files, directories
// and symlinks there (`ln -s /dev/sda evil`). So discovery must never take an
// entry from inside a volume, nor follow a symlink into one. "Inside" is
// decided on the filesystem, not on path strings alone: a path's filesystem
// position is (MAJ:MIN, root of its mount + the rest of the path), from the
// mount table; a bind mount of /mnt/d/vol1/sub at /mnt/b puts /mnt/b at
// (tmpfs of vol1, "/sub"), inside vol1 although no path string says so.
//
// The discovered volumes are the mounts whose mount point is directly in some
// class's mountDir (every class, whatever its namePattern or volume mode:
// stricter than what gets a PV, never looser). "Tenant territory" is every
// path strictly below some class's mountDir.
import { posix } from 'node:path';
import { mountHolding } from './host-mounts.ts';
import type { MountPropagation } from './mountinfo.ts';

const clean = (path: string): string => posix.normalize(path).replace(/(.)\/+$/, '$1');
/** `path` is `dir` or below it. */
export const within = (dir: string, path: string): boolean => dir === '/' || path === dir || path.startsWith(`${dir}/`);
/** `path` is strictly below `dir`. */
const below = (dir: string, path: string): boolean => path !== dir && within(dir, path);

/** The filesystem position of `path` (absolute, symlinks already resolved by the caller). */
export interface FsPosition {
  readonly devno: string;
  /** The path inside that filesystem. */
  readonly root: string;
  /** The mount holding the path. */
  readonly mount: MountPropagation;
}

export function fsPosition(mounts: readonly MountPropagation[], path: string): FsPosition | undefined {
  const p = clean(path);
  const m = mountHolding(mounts, p);
  if (!m || m.devno === '') return undefined;
  const rest = m.mountPoint === '/' ? p : p.slice(m.mountPoint.length);
  return { devno: m.devno, root: clean(posix.join(m.root || '/', rest)), mount: m };
}

/**
 * The discovered volumes: the last-listed mount at each mount point that is
 * directly inside one of `mountDirs` (the classes' mountDirs, symlinks resolved).
 */
export function discoveredVolumes(mounts: readonly MountPropagation[], mountDirs: readonly string[]): MountPropagation[] {
  const dirs = new Set(mountDirs.map(clean));
  const byPoint = new Map<string, MountPropagation>();
  for (const m of mounts) if (m.mountPoint !== '/' && dirs.has(posix.dirname(m.mountPoint))) byPoint.set(m.mountPoint, m);
  return [...byPoint.values()];
}

/**
 * The volume (other than the one mounted at `self`) that holds `path`, by path
 * or by filesystem position; undefined when none does.
 */
export function volumeHolding(
  mounts: readonly MountPropagation[],
  volumes: readonly MountPropagation[],
  path: string,
  self?: string,
): MountPropagation | undefined {
  const p = clean(path);
  const pos = fsPosition(mounts, p);
  for (const v of volumes) {
    if (v.mountPoint === self) continue;
    if (within(v.mountPoint, p)) return v;
    if (pos && v.devno === pos.devno && within(clean(v.root || '/'), pos.root)) return v;
  }
  return undefined;
}

/** The position of a volume's own mount (for an entry that is a mount point). */
export function mountPosition(volume: MountPropagation): { devno: string; root: string } {
  return { devno: volume.devno, root: clean(volume.root || '/') };
}

/** The other volume whose filesystem subtree holds (or is) the mount `entry`; undefined when none. */
export function volumeHoldingMount(volumes: readonly MountPropagation[], entry: MountPropagation): MountPropagation | undefined {
  const pos = mountPosition(entry);
  if (pos.devno === '') return undefined;
  return volumes.find((v) => v.mountPoint !== entry.mountPoint && v.devno === pos.devno && within(clean(v.root || '/'), pos.root));
}

/**
 * Why no entry of a class whose mountDir is `mountDir` (symlinks resolved) may
 * be trusted, or undefined. `others`: the other classes' mountDirs (resolved).
 */
export function discoveryDirProblem(
  mounts: readonly MountPropagation[],
  volumes: readonly MountPropagation[],
  mountDir: string,
  others: readonly string[],
): string | undefined {
  const dir = clean(mountDir);
  const outer = others.map(clean).find((o) => below(o, dir));
  if (outer !== undefined) return `it lies inside the mountDir ${JSON.stringify(outer)} of another class, where tenants' volumes live`;
  // A mount holding `dir` that lies inside a class's mountDir needs no check of its own: that mount point is
  // `dir` or one of its parents, so `dir` then lies inside that mountDir too (`outer` above).
  const v = volumeHolding(mounts, volumes, dir);
  if (v) return `it lies inside the volume mounted at ${JSON.stringify(v.mountPoint)} (same filesystem ${v.devno}, under its root ${JSON.stringify(v.root)})`;
  return undefined;
}
