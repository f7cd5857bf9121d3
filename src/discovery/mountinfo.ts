// Mount points as seen by this process, from /proc/self/mountinfo.
//
// Line format (proc(5)): "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS".
// The kernel escapes space, tab, newline and backslash in paths as \040 \011
// \012 \134. Unlike the Go provisioner (which compares the escaped text and so
// never matches a path containing a space), we decode the escapes, so such a
// path matches the directory entry it names.
import { readFile } from 'node:fs/promises';

export const DEFAULT_MOUNTINFO_PATH = '/proc/self/mountinfo';

export interface ParsedMountInfo {
  readonly mountPoints: Set<string>;
  /** Lines that did not look like mountinfo lines (skipped). */
  readonly malformed: number;
}

/** Decodes the kernel's octal escapes (\ooo); a backslash not followed by three octal digits is kept as is. */
export function unescapeMountPath(s: string): string {
  if (!s.includes('\\')) return s;
  return s.replace(/\\([0-7]{3})/g, (_m, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/** Parses mountinfo text; malformed lines are counted and skipped, never fatal. */
export function parseMountInfo(text: string): ParsedMountInfo {
  const mountPoints = new Set<string>();
  let malformed = 0;
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const fields = line.split(' ');
    // At least the 6 fixed fields, then the "-" separator, then fstype and source.
    const sep = fields.indexOf('-', 6);
    const mountPoint = fields[4];
    if (fields.length < 9 || sep < 0 || fields.length < sep + 3 || mountPoint === undefined || !mountPoint.startsWith('/')) {
      malformed++;
      continue;
    }
    mountPoints.add(unescapeMountPath(mountPoint));
  }
  return { mountPoints, malformed };
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
export async function readMountPoints(
  path: string = DEFAULT_MOUNTINFO_PATH,
  opts: ReadMountPointsOptions = {},
): Promise<Set<string>> {
  let text = await readFile(path, 'utf8');
  for (let attempt = 0; attempt < 2; attempt++) {
    const again = await readFile(path, 'utf8');
    if (again === text) break;
    text = again;
  }
  const parsed = parseMountInfo(text);
  if (parsed.malformed > 0) opts.onMalformed?.(parsed.malformed);
  return parsed.mountPoints;
}
