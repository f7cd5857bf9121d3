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

/**
 * The most UTF-8 bytes of an error text (or any other string) that may reach a log line, a stored cleanup
 * result or a metric label. Events are cut harder, to the API's 1024 bytes (src/kube/events.ts).
 */
export const MAX_TEXT_BYTES = 4096;

/**
 * `text` bounded to `maxBytes` UTF-8 bytes. A longer one keeps its head (and its last `tailBytes` bytes, when
 * asked) around a marker that says how much was left out: `[... 36864 bytes cut ...]`. Never splits a character.
 */
export function capText(text: string, maxBytes: number = MAX_TEXT_BYTES, tailBytes = 0): string {
  if (text.length * 3 <= maxBytes) return text; // fast path: at most 3 UTF-8 bytes per UTF-16 unit
  const buf = Buffer.from(text, 'utf8');
  if (buf.length <= maxBytes) return text;
  // The marker's length with the largest possible count, so the result never exceeds maxBytes.
  const markerBytes = cutMarker(buf.length).length;
  const tailWanted = Math.max(0, Math.min(tailBytes, maxBytes - markerBytes));
  let tail = buf.length - tailWanted;
  while (tail < buf.length && isContinuation(buf[tail])) tail++;
  let head = Math.max(0, maxBytes - markerBytes - (buf.length - tail));
  while (head > 0 && isContinuation(buf[head])) head--;
  return `${buf.toString('utf8', 0, head)}${cutMarker(tail - head)}${buf.toString('utf8', tail)}`;
}

const cutMarker = (bytes: number): string => `[... ${bytes} bytes cut ...]`;
const isContinuation = (b: number | undefined): boolean => b !== undefined && (b & 0xc0) === 0x80;

// C0 controls, DEL, C1 controls, the Unicode line/paragraph separators and the
// bidirectional marks, overrides and isolates: anything that can break a line,
// move the cursor, recolour a terminal or reorder the text a reader sees.
// (Events, text logs; JSON logs escape the same set as \uXXXX, src/util/log.ts.)
// eslint-disable-next-line no-control-regex
const UNSAFE_CHARS = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const NAMED_ESCAPES: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** Replaces control characters with visible escapes (\n, \r, \t, \xHH, \uHHHH). */
export function escapeControlChars(text: string): string {
  return text.replace(UNSAFE_CHARS, (c) => {
    const named = NAMED_ESCAPES[c];
    if (named) return named;
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
