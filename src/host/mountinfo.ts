// Mount points as seen by this process, from /proc/self/mountinfo.
//
// Line format (proc(5)): "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS".
// The kernel escapes space, tab, newline and backslash in paths as \040 \011
// \012 \134. Unlike the Go provisioner (which compares the escaped text and so
// never matches a path containing a space), we decode the escapes, so such a
// path matches the directory entry it names.
//
// Two views of the same file:
// - readMountPoints/parseMountInfo: the set of mount points, decoded as UTF-8
//   (discovery, the deleter's per-pass check);
// - readMountTable/parseMountEntries: every entry with its mount ID, parent ID
//   and MAJ:MIN, the mount point kept byte-exact (one char per byte, "latin1")
//   so a path that is not UTF-8 still compares correctly (the cleaner's
//   fresh check right before a clean);
// - readMountPropagation/parseMountPropagation: mount point (UTF-8), filesystem
//   type and propagation tags (shared:N, master:N), to tell whether a class's
//   mountDir is on a mount that receives the host's mounts (src/host/host-mounts.ts).
import { readFile } from 'node:fs/promises';

export const DEFAULT_MOUNTINFO_PATH = '/proc/self/mountinfo';

export interface ParsedMountInfo {
  readonly mountPoints: Set<string>;
  /** Lines that did not look like mountinfo lines (skipped). */
  readonly malformed: number;
}

/** One mountinfo line. */
export interface MountEntry {
  readonly id: number;
  readonly parentId: number;
  /** MAJ:MIN of the mounted filesystem (st_dev of its files). */
  readonly major: number;
  readonly minor: number;
  /** The mount point, escapes decoded, one char per byte (see toBytePath). */
  readonly mountPointBytes: string;
}

export interface ParsedMountTable {
  readonly entries: MountEntry[];
  readonly malformed: number;
}

/** Decodes the kernel's octal escapes (\ooo); a backslash not followed by three octal digits is kept as is. */
export function unescapeMountPath(s: string): string {
  if (!s.includes('\\')) return s;
  return s.replace(/\\([0-7]{3})/g, (_m, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/** A path as the bytes the kernel sees (UTF-8), one char per byte: comparable with MountEntry.mountPointBytes. */
export const toBytePath = (path: string): string => Buffer.from(path, 'utf8').toString('latin1');

/** st_dev as Node reports it (glibc makedev) for a MAJ:MIN pair. */
export function makeDev(major: number, minor: number): number {
  const ma = BigInt(major);
  const mi = BigInt(minor);
  return Number(((ma & 0xfffff000n) << 32n) | ((ma & 0xfffn) << 8n) | ((mi & 0xffffff00n) << 12n) | (mi & 0xffn));
}

/** MAJ:MIN of an st_dev as Node reports it (for messages). */
export function formatDev(dev: number): string {
  const d = BigInt(dev);
  const major = ((d >> 8n) & 0xfffn) | ((d >> 32n) & ~0xfffn);
  // glibc gnu_dev_minor masks with 0xffffff00 (32 bits): an unbounded ~0xffn would pull a major above 12 bits into the minor.
  const minor = (d & 0xffn) | ((d >> 12n) & 0xffffff00n);
  return `${major}:${minor}`;
}

/** The fields of a well-formed line (mount point still escaped), or undefined. */
function splitLine(line: string): string[] | undefined {
  const fields = line.split(' ');
  // At least the 6 fixed fields, then the "-" separator, then fstype and source.
  const sep = fields.indexOf('-', 6);
  const mountPoint = fields[4];
  if (fields.length < 9 || sep < 0 || fields.length < sep + 3 || mountPoint === undefined || !mountPoint.startsWith('/')) return undefined;
  return fields;
}

function eachLine(text: string, fn: (fields: string[]) => boolean): number {
  let malformed = 0;
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const fields = splitLine(line);
    if (!fields || !fn(fields)) malformed++;
  }
  return malformed;
}

/** Parses mountinfo text; malformed lines are counted and skipped, never fatal. */
export function parseMountInfo(text: string): ParsedMountInfo {
  const mountPoints = new Set<string>();
  const malformed = eachLine(text, (f) => {
    mountPoints.add(unescapeMountPath(f[4] as string));
    return true;
  });
  return { mountPoints, malformed };
}

const UINT = /^\d+$/;
const DEVNO = /^(\d+):(\d+)$/;

/** Parses mountinfo decoded as latin1 (one char per byte); lines without numeric IDs or MAJ:MIN are malformed. */
export function parseMountEntries(text: string): ParsedMountTable {
  const entries: MountEntry[] = [];
  const malformed = eachLine(text, (f) => {
    const [id, parent, devno, , mountPoint] = f;
    const dev = DEVNO.exec(devno ?? '');
    if (!UINT.test(id ?? '') || !UINT.test(parent ?? '') || !dev) return false;
    entries.push({
      id: Number(id),
      parentId: Number(parent),
      major: Number(dev[1]),
      minor: Number(dev[2]),
      mountPointBytes: unescapeMountPath(mountPoint as string),
    });
    return true;
  });
  return { entries, malformed };
}

/** One mountinfo line: where, what filesystem, and how mounts propagate into it. */
export interface MountPropagation {
  /** The mount point, escapes decoded (UTF-8). */
  readonly mountPoint: string;
  readonly fsType: string;
  /** MAJ:MIN of the mounted filesystem ("" when malformed). */
  readonly devno: string;
  /** The directory of that filesystem mounted here ("/" for a whole filesystem; a bind mount's source directory). */
  readonly root: string;
  /** The mount source (e.g. "/dev/sda1", "tmpfs"), escapes decoded. */
  readonly source: string;
  /** The optional fields: "shared:N" (peer group), "master:N" (receives from N), "propagate_from:N", "unbindable". Empty: private. */
  readonly tags: readonly string[];
}

/** Parses mountinfo text into mount point, filesystem type, propagation tags, MAJ:MIN, root and source; malformed lines are skipped. */
export function parseMountPropagation(text: string): MountPropagation[] {
  const out: MountPropagation[] = [];
  eachLine(text, (f) => {
    out.push(propagationOf(f));
    return true;
  });
  return out;
}

/** The MountPropagation fields of a well-formed line's fields. */
function propagationOf(f: string[]): MountPropagation {
  const sep = f.indexOf('-', 6);
  return {
    mountPoint: unescapeMountPath(f[4] as string),
    fsType: f[sep + 1] ?? '',
    tags: f.slice(6, sep),
    devno: DEVNO.test(f[2] ?? '') ? (f[2] as string) : '',
    root: unescapeMountPath(f[3] ?? ''),
    source: unescapeMountPath(f[sep + 2] ?? ''),
  };
}

export interface ReadMountPointsOptions {
  /** Called with the number of malformed lines when there are any. */
  readonly onMalformed?: ((count: number) => void) | undefined;
}

/**
 * Reads the mount table. Like the Go mounter, the file is read until two
 * consecutive reads agree (at most 3 reads), so a mount changing during the
 * read cannot produce a torn table; the last read is used if they never agree.
 */
export async function readStable(path: string, o: { readonly known?: Buffer | undefined; readonly onRead?: (() => void) | undefined } = {}): Promise<Buffer> {
  const read = (): Promise<Buffer> => {
    o.onRead?.();
    return readFile(path);
  };
  let data = await read();
  // A first read equal to a table read whole before (`known`) is that whole table: no second read.
  if (o.known?.equals(data)) return data;
  for (let attempt = 0; attempt < 2; attempt++) {
    const again = await read();
    if (again.equals(data)) break;
    data = again;
  }
  return data;
}

export async function readMountPoints(
  path: string = DEFAULT_MOUNTINFO_PATH,
  opts: ReadMountPointsOptions = {},
): Promise<Set<string>> {
  const parsed = parseMountInfo((await readStable(path)).toString('utf8'));
  if (parsed.malformed > 0) opts.onMalformed?.(parsed.malformed);
  return parsed.mountPoints;
}

/** A fresh read of the whole mount table (no cache), byte-exact mount points. */
export async function readMountTable(path: string = DEFAULT_MOUNTINFO_PATH): Promise<ParsedMountTable> {
  return parseMountEntries((await readStable(path)).toString('latin1'));
}

/** The mount table with filesystem types and propagation tags (see parseMountPropagation). */
export async function readMountPropagation(path: string = DEFAULT_MOUNTINFO_PATH): Promise<MountPropagation[]> {
  return parseMountPropagation((await readStable(path)).toString('utf8'));
}

/** A mountinfo line with its options (the health check, src/health/check.ts). */
export interface MountDetails extends MountPropagation {
  /** The per-mount options (field 6: "rw,relatime", "ro,nosuid", ...). */
  readonly mountOptions: readonly string[];
  /** The filesystem's (super block) options, after the source ("rw,size=1024k", "ro,errors=remount-ro"). */
  readonly superOptions: readonly string[];
}

/** Parses mountinfo text like parseMountPropagation, with the per-mount and super options. */
export function parseMountDetails(text: string): MountDetails[] {
  const out: MountDetails[] = [];
  eachLine(text, (f) => {
    const sep = f.indexOf('-', 6);
    out.push({ ...propagationOf(f), mountOptions: (f[5] ?? '').split(','), superOptions: (f[sep + 3] ?? '').split(',') });
    return true;
  });
  return out;
}

/** The mount table with options (see parseMountDetails), read until stable like the others. */
export async function readMountDetails(path: string = DEFAULT_MOUNTINFO_PATH): Promise<MountDetails[]> {
  return parseMountDetails((await readStable(path)).toString('utf8'));
}
