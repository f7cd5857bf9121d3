// Structured logs (pino), always on stderr (fd 2): stdout carries nothing but
// the output that was asked for (--dry-run YAML, --help, --version), so
// `--dry-run > pvs.yaml` is a clean manifest.
//
// Two formats (--log-format):
//   json  one JSON object per line, level names ("level":"info"); the default in a pod
//   text  "2026-12-01T10:00:00.000Z INFO  message key=value ...", for a terminal
// "auto" (the default) is text when stderr is a terminal outside a cluster, json otherwise.
//
// Both formats are safe to print to a terminal and bounded, whatever a field
// holds (a block cleaner's output line, a tenant's file name, a 40 KB error):
// - every string (message, field, nested value, err.message, err.stack) is cut
//   to MAX_TEXT_BYTES (capText: head, then "[... N bytes cut ...]"), a whole
//   line to MAX_LINE_BYTES (16 KiB);
// - text: control characters (C0, DEL, C1, bidi controls, U+2028/9) are shown
//   as escapes (\n, \x1b, \u202e); a value with any of them, or with spaces,
//   quotes, "=" or "\", is quoted;
// - json: JSON escapes C0 itself; DEL, C1 and the bidi/line separators are
//   written as \uXXXX too (the same JSON value).
import { writeSync } from 'node:fs';
import { pino, type DestinationStream, type Logger } from 'pino';
import { capText, escapeControlChars, MAX_TEXT_BYTES } from './errors.ts';

export type { Logger };

export const LOG_FORMATS = ['json', 'text', 'auto'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

export interface LoggerOptions {
  level?: string | undefined;
  name?: string | undefined;
  format?: LogFormat | undefined;
  /** For "auto": KUBERNETES_SERVICE_HOST set means in a pod (the flags module reads env; default: not in a pod). */
  env?: LogEnv | undefined;
  /** Where lines go (tests); default fd 2, written synchronously so nothing is lost on exit. */
  write?: ((line: string) => void) | undefined;
}

/** The environment "auto" looks at, as the flags module read it. */
export type LogEnv = Readonly<{ KUBERNETES_SERVICE_HOST?: string | undefined }>;

/** "auto" -> text at a terminal outside a pod, json anywhere else. */
export function resolveLogFormat(format: LogFormat, env: LogEnv, isTTY = process.stderr.isTTY === true): 'json' | 'text' {
  if (format !== 'auto') return format;
  return isTTY && !env['KUBERNETES_SERVICE_HOST'] ? 'text' : 'json';
}

/** Fields every line carries that the text format leaves out (or shows elsewhere). */
const TEXT_SKIP = new Set(['level', 'time', 'msg', 'pid', 'hostname', 'name']);

const MAX_STACK_FRAMES = 50;

/** A whole log line: longer only when it carries several capped strings. */
export const MAX_LINE_BYTES = 4 * MAX_TEXT_BYTES;

/** `v` with every string in it capped to `max` bytes (a parsed JSON log line: plain data). */
function capStrings(v: unknown, max = MAX_TEXT_BYTES): unknown {
  if (typeof v === 'string') return capText(v, max);
  if (Array.isArray(v)) return v.map((x) => capStrings(x, max));
  if (v !== null && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[capText(k, max)] = capStrings(x, max);
    return out;
  }
  return v;
}

const PLAIN_VALUE = /^[^\s"=\\]+$/;

/** Shown as is when printable, else quoted (JSON) with every control character escaped; at most MAX_TEXT_BYTES. */
function textValue(v: unknown): string {
  let quoted: string;
  if (typeof v === 'string') {
    if (PLAIN_VALUE.test(v) && escapeControlChars(v) === v) return capText(v);
    quoted = JSON.stringify(v);
  } else if (typeof v === 'number' || typeof v === 'boolean' || v === null) {
    return String(v);
  } else {
    quoted = JSON.stringify(capStrings(v)) ?? typeof v;
  }
  return capText(escapeControlChars(quoted), MAX_TEXT_BYTES, 1); // the tail byte keeps the closing quote or brace
}

/** A message or stack line: control characters escaped, at most MAX_TEXT_BYTES. */
const textPlain = (s: string): string => capText(escapeControlChars(s));

/** One pino JSON line -> one readable line ("<time> <LEVEL> <msg> k=v ..."); the stack of an err goes below it. */
export function formatTextLine(line: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return `${textPlain(line.endsWith('\n') ? line.slice(0, -1) : line)}\n`;
  }
  const str = (v: unknown): string => (typeof v === 'string' ? textPlain(v) : v === undefined ? '' : textValue(v));
  const parts = [str(o['time']), str(o['level']).toUpperCase().padEnd(5), str(o['msg'])];
  let stack = '';
  for (const [k, v] of Object.entries(o)) {
    if (TEXT_SKIP.has(k) || v === undefined) continue;
    if (k === 'err' && v !== null && typeof v === 'object') {
      const e = v as { message?: unknown; stack?: unknown };
      parts.push(`err=${textValue(typeof e.message === 'string' ? e.message : str(e.message))}`);
      if (typeof e.stack === 'string') {
        // The frames only: the message (the stack's first lines, of any size) is in err= already.
        stack = e.stack
          .split('\n')
          .filter((l) => /^\s+at /.test(l))
          .slice(0, MAX_STACK_FRAMES)
          .map((l) => `    ${capText(textPlain(l.trim()), 512)}\n`)
          .join('');
      }
      continue;
    }
    parts.push(`${capText(escapeControlChars(k), 256)}=${textValue(v)}`);
  }
  const text = `${parts.join(' ')}\n${stack}`;
  return Buffer.byteLength(text) <= MAX_LINE_BYTES ? text : `${capText(text.slice(0, -1), MAX_LINE_BYTES - 1)}\n`;
}

// Raw in JSON.stringify's output, but terminal/bidi controls: written as \uXXXX (C0 is escaped by JSON already).
const JSON_UNSAFE = /[\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const JSON_UNSAFE_TEST = new RegExp(JSON_UNSAFE.source);

/**
 * One pino JSON line, safe and bounded: every string capped to MAX_TEXT_BYTES (and harder, 512 bytes, when the
 * line would still exceed MAX_LINE_BYTES), DEL/C1/bidi controls escaped. A line short enough that no string in
 * it can exceed the cap, without such characters (nearly all), is returned as is.
 */
export function boundJsonLine(line: string): string {
  let out = line;
  if (line.length * 3 > MAX_TEXT_BYTES) {
    try {
      const o: unknown = JSON.parse(line);
      out = `${JSON.stringify(capStrings(o))}\n`;
      if (Buffer.byteLength(out) > MAX_LINE_BYTES) out = `${JSON.stringify(capStrings(o, 512))}\n`;
    } catch {
      out = `${JSON.stringify({ msg: capText(line) })}\n`; // not JSON (never from pino): still one bounded line
    }
  }
  return JSON_UNSAFE_TEST.test(out) ? out.replace(JSON_UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`) : out;
}

function destination(format: 'json' | 'text', write: ((line: string) => void) | undefined): DestinationStream {
  if (write === undefined) {
    if (format === 'json') {
      // SonicBoom (synchronous) as before, for its EAGAIN retries on a non-blocking stderr; pino.flush reaches it.
      const sb = pino.destination({ dest: 2, sync: true });
      const stream: DestinationStream & { flush: (cb: (err?: Error) => void) => void } = {
        write: (s: string) => void sb.write(boundJsonLine(s)),
        flush: (cb) => sb.flush(cb),
      };
      return stream;
    }
    write = (s) => void writeSync(2, s);
  }
  const out = write;
  return { write: format === 'json' ? (s: string) => out(boundJsonLine(s)) : (s: string) => out(formatTextLine(s)) };
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const format = resolveLogFormat(opts.format ?? 'auto', opts.env ?? {});
  return pino(
    {
      name: opts.name ?? 'local-volume-provisioner',
      level: opts.level ?? 'info',
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination(format, opts.write),
  );
}

/** A logger that drops everything (unit tests). */
export const silentLogger: Logger = pino({ level: 'silent' });
