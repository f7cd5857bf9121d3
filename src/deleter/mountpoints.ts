// A small /proc/self/mountinfo reader for the deleter's safety checks: is the
// volume path still a mount point, and which mount points lie under it.
// (src/discovery has its own, richer reader for discovery; this one only needs
// the decoded mount point paths.)
import { readFile } from 'node:fs/promises';

export const MOUNTINFO_PATH = '/proc/self/mountinfo';

/** Decodes the octal escapes the kernel writes for space, tab, newline and backslash ("\040"). */
export function unescapeMountPath(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_m, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/** Mount point paths (field 5) of a mountinfo text; malformed lines are skipped. */
export function parseMountPoints(text: string): Set<string> {
  const out = new Set<string>();
  for (const line of text.split('\n')) {
    const fields = line.split(' ');
    if (fields.length < 10) continue;
    const mp = fields[4];
    if (mp?.startsWith('/')) out.add(unescapeMountPath(mp));
  }
  return out;
}

export async function readMountPoints(path: string = MOUNTINFO_PATH): Promise<Set<string>> {
  return parseMountPoints(await readFile(path, 'utf8'));
}
