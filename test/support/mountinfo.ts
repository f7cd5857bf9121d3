// Mount table helpers for cleaner tests.
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, constants, fstatSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';

export const isRoot = process.getuid?.() === 0;
export const canMount = isRoot && spawnSync('mount', ['--version']).status === 0;
export const NEEDS_ROOT = 'needs root and mount(8) to create mounts';

/** Escapes a path as the kernel does in mountinfo (space, tab, newline, backslash). */
export const escapeMountPath = (p: string | Buffer): string =>
  Buffer.from(p)
    .toString('latin1')
    .replace(/[ \t\n\\]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, '0')}`);

/** The mount ID and MAJ:MIN of the mount a directory is on (no mount needed). */
export function mountOf(dir: string): { id: number; devno: string } {
  const fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    const m = /^mnt_id:\s*(\d+)/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'latin1'));
    const dev = BigInt(fstatSync(fd).dev);
    const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
    const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
    return { id: Number(m?.[1]), devno: `${major}:${minor}` };
  } finally {
    closeSync(fd);
  }
}

export function mountLine(mountPoint: string, id: number, devno: string): string {
  return `${id} 1 ${devno} / ${escapeMountPath(mountPoint)} rw,relatime - tmpfs fake rw`;
}

/**
 * Writes `file`: the real mount table, then a line for each of `paths` claiming it is a mount point with the
 * mount ID and MAJ:MIN of the mount it really is on (so the cleaner's checks pass without mounting), then `extra`.
 */
export function writeMountInfo(file: string, paths: readonly string[], extra: readonly string[] = []): void {
  const lines = paths.map((p) => {
    const m = mountOf(p);
    return mountLine(p, m.id, m.devno);
  });
  writeFileSync(file, Buffer.concat([readFileSync('/proc/self/mountinfo'), Buffer.from([...lines, ...extra, ''].join('\n'), 'latin1')]));
}

/** Unmounts, ignoring "not mounted"; deepest first when given several. */
export function umountAll(points: readonly string[]): void {
  for (const p of [...points].reverse()) spawnSync('umount', ['-l', p]);
}

export const mount = (...args: string[]): void => {
  execFileSync('mount', args);
};

/** `mount <args...> <target>` (target created), remembered in `mounts` for umountAll. */
export function mountAt(mounts: string[], target: string, ...args: string[]): string {
  mkdirSync(target, { recursive: true });
  mount(...args, target);
  mounts.push(target);
  return target;
}
