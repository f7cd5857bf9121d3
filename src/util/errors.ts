// Error helpers shared by every module: one copy of each.

/** The message of an Error, or the value itself as a string. */
export function errorMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** The errno code of a Node system error ('ENOENT', ...), if it has one. */
export function errnoCode(err: unknown): string | undefined {
  const c: unknown = typeof err === 'object' && err !== null ? (err as { code?: unknown }).code : undefined;
  return typeof c === 'string' && c !== '' ? c : undefined;
}

/**
 * Renders a Node fs error for a one-line message.
 * - 'path' (default): like a Go *PathError, "<syscall> <path>: <description>"
 *   ("stat /x: no such file or directory"), as the Go provisioner's texts read.
 * - 'short': a short reason for a message that already names the path
 *   ("does not exist", "is not a directory", "permission denied").
 */
export function describeFsError(err: unknown, style: 'path' | 'short' = 'path'): string {
  if (style === 'short') {
    const short = SHORT.get(errnoCode(err) ?? '');
    if (short) return short;
  }
  if (!(err instanceof Error)) return String(err);
  const e = err as NodeJS.ErrnoException;
  if (style === 'path' && e.code && e.syscall) {
    // Node: "ENOENT: no such file or directory, stat '/x'"
    const m = /^[A-Z0-9_]+: (.*?), /.exec(e.message);
    const desc = m?.[1] ?? e.message;
    return e.path ? `${e.syscall} ${e.path}: ${desc}` : `${e.syscall}: ${desc}`;
  }
  return e.message;
}

const SHORT = new Map([
  ['ENOENT', 'does not exist'],
  ['ENOTDIR', 'is not a directory'],
  ['EACCES', 'permission denied'],
  ['EPERM', 'permission denied'],
]);
