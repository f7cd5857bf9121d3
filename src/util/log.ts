// Structured logs (pino), always on stderr (fd 2): stdout carries nothing but
// the output that was asked for (--dry-run YAML, --help, --version), so
// `--dry-run > pvs.yaml` is a clean manifest.
//
// Two formats (--log-format, or --logging-format as Kubernetes components spell it):
//   text  the default, everywhere: klog's text format, what the Go provisioner and every Kubernetes
//         component write, so log searches and alerts written for them keep matching:
//           I1201 20:13:30.216163      42 discoverer.ts:465] message key="value" n=3
//         severity letter (I info/debug/trace, W warn, E error, F fatal), month and day, local time with
//         microseconds, the process id right-aligned in 7 columns, the caller's file:line (from the call
//         stack: src/*.ts when run from the sources or with --enable-source-maps, the bundle's file
//         otherwise), "]", the message as written (quotes not escaped), then key=value pairs: strings
//         quoted as klog quotes them, numbers and booleans bare, objects as JSON, an error as err="<message>".
//         An error's stack frames follow on indented lines only at debug or trace level.
//   json  one JSON object per line, level names ("level":"info").
// "auto" (the old default) is text.
//
// Both formats are safe to print to a terminal and bounded, whatever a field
// holds (a block cleaner's output line, a tenant's file name, a 40 KB error):
// - every string (message, field, nested value, err.message, err.stack) is cut
//   to MAX_TEXT_BYTES (capText: head, then "[... N bytes cut ...]"), a whole
//   line to MAX_LINE_BYTES (16 KiB);
// - text: control characters (C0, DEL, C1, bidi controls, U+2028/9) are shown
//   as escapes (\n, \x1b, \u202e), in the message as in values;
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
  /** Where lines go (tests); default fd 2, written synchronously so nothing is lost on exit. */
  write?: ((line: string) => void) | undefined;
}

/** "auto" (the former default) is text: klog's format everywhere, in a pod as at a terminal. */
export function resolveLogFormat(format: LogFormat): 'json' | 'text' {
  return format === 'json' ? 'json' : 'text';
}

/** The field that carries the caller's file:line to the text format (never printed as a pair). */
const CALLER = '__caller';

/** Fields every line carries that the text format leaves out (or shows in the header). */
const TEXT_SKIP = new Set(['level', 'time', 'msg', 'pid', 'hostname', 'name', CALLER]);

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

/** A klog value: a string quoted (Go's %q, control characters escaped), a number or boolean bare, anything else as JSON. */
function textValue(v: unknown): string {
  let quoted: string;
  if (typeof v === 'string') {
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

const LEVEL_LETTERS: Readonly<Record<string, string>> = { trace: 'I', debug: 'I', info: 'I', warn: 'W', error: 'E', fatal: 'F' };

const pad = (n: number, width: number, fill = '0'): string => String(n).padStart(width, fill);

/** klog's header: "Lmmdd hh:mm:ss.uuuuuu <pid, 7 columns> file:line] " (local time, as klog writes it). */
export function klogHeader(level: string, timeMicros: number, pid: number, caller: string): string {
  const d = new Date(Math.floor(timeMicros / 1000));
  const micros = ((timeMicros % 1_000_000) + 1_000_000) % 1_000_000;
  return (
    `${LEVEL_LETTERS[level] ?? 'I'}${pad(d.getMonth() + 1, 2)}${pad(d.getDate(), 2)} ` +
    `${pad(d.getHours(), 2)}:${pad(d.getMinutes(), 2)}:${pad(d.getSeconds(), 2)}.${pad(micros, 6)} ` +
    `${pad(pid, 7, ' ')} ${caller}] `
  );
}

export interface TextLineOptions {
  /** Print an error's stack frames below the line (debug and trace level). */
  stack?: boolean | undefined;
}

/** One pino JSON line -> one klog text line; with `stack`, an err's stack frames go below it, indented. */
export function formatTextLine(line: string, opts: TextLineOptions = {}): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return `${textPlain(line.endsWith('\n') ? line.slice(0, -1) : line)}\n`;
  }
  const str = (v: unknown): string => (typeof v === 'string' ? textPlain(v) : v === undefined ? '' : textValue(v));
  const time = typeof o['time'] === 'number' ? o['time'] : Date.parse(String(o['time'])) * 1000;
  const pid = typeof o['pid'] === 'number' ? o['pid'] : process.pid;
  const caller = typeof o[CALLER] === 'string' ? capText(escapeControlChars(o[CALLER]), 256) : '???:1';
  const parts = [str(o['msg'])];
  let stack = '';
  for (const [k, v] of Object.entries(o)) {
    if (TEXT_SKIP.has(k) || v === undefined) continue;
    if (k === 'err' && v !== null && typeof v === 'object') {
      const e = v as { message?: unknown; stack?: unknown };
      parts.push(`err=${textValue(typeof e.message === 'string' ? e.message : str(e.message))}`);
      if (opts.stack === true && typeof e.stack === 'string') {
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
  const text = `${klogHeader(String(o['level']), Number.isFinite(time) ? time : Date.now() * 1000, pid, caller)}${parts.join(' ')}\n${stack}`;
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

function destination(format: 'json' | 'text', write: ((line: string) => void) | undefined, stack: boolean): DestinationStream {
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
  return { write: format === 'json' ? (s: string) => out(boundJsonLine(s)) : (s: string) => out(formatTextLine(s, { stack })) };
}

const FRAME = /\(?([^()\s]+):(\d+):\d+\)?$/;

/** "file:line" of a stack frame line, or undefined. */
function frameCaller(frame: string | undefined): string | undefined {
  const m = frame === undefined ? null : FRAME.exec(frame);
  if (m === null) return undefined;
  const file = m[1]!.slice(m[1]!.lastIndexOf('/') + 1);
  return `${file}:${m[2]}`;
}

/** Frames of the stack, from the mixin (pino calls it synchronously while logging) up to the caller. */
function stackFrames(frames = 16): string[] {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = frames;
  const holder: { stack?: string } = {};
  Error.captureStackTrace(holder);
  Error.stackTraceLimit = limit;
  return (holder.stack ?? '').split('\n').slice(1);
}

const rawCallSites = (_: Error, sites: NodeJS.CallSite[]): NodeJS.CallSite[] => sites;

/**
 * Whether something may map stack trace positions: --enable-source-maps, or an Error.prepareStackTrace other than
 * Node's own (ErrorPrepareStackTrace, Node 22+), such as a test runner's.
 */
const stacksMapped = (): boolean => process.sourceMapsEnabled || Error.prepareStackTrace?.name !== 'ErrorPrepareStackTrace';

/**
 * What stackFrames(depth + 2)[depth] names as "file:line", from V8's call sites: Node formats every captured frame
 * as text (function, type and method names, positions; ~0.1 ms per log line in the daemon, three lines per created
 * PV), this reads one frame's file and line. Only where nothing maps positions (see stacksMapped): the formatted
 * frames carry the mapped ones.
 */
function siteCaller(depth: number): string | undefined {
  const limit = Error.stackTraceLimit;
  // eslint-disable-next-line @typescript-eslint/unbound-method -- put back as it was, never called here
  const prepare = Error.prepareStackTrace;
  const holder: { stack?: unknown } = {};
  let sites: unknown;
  Error.stackTraceLimit = depth + 2;
  Error.prepareStackTrace = rawCallSites;
  try {
    Error.captureStackTrace(holder);
    sites = holder.stack; // formatted when first read: with rawCallSites, while it is set
  } finally {
    Error.prepareStackTrace = prepare;
    Error.stackTraceLimit = limit;
  }
  const site = Array.isArray(sites) ? (sites[depth] as NodeJS.CallSite | undefined) : undefined;
  const file = site?.getFileName();
  const line = site?.getLineNumber();
  if (!file || typeof line !== 'number') return undefined;
  return `${file.slice(file.lastIndexOf('/') + 1)}:${line}`;
}

let callerDepth: number | undefined;

/** Logs once through `probe`: a function declaration, which the bundler keeps (it inlined an arrow function). */
function klogCallerProbe(probe: Logger): void {
  probe.info('probe');
}

/**
 * How many frames lie between the mixin and the code that called logger.info() and friends: found once by
 * logging from a function of a known name through a throw-away logger (pino's call path is the same for every
 * logger and child), so it holds for the sources and the bundle alike.
 */
function findCallerDepth(): number {
  if (callerDepth !== undefined) return callerDepth;
  let depth = -1;
  const probe = pino({ level: 'info', mixin: () => {
    depth = stackFrames().findIndex((f) => f.includes('klogCallerProbe'));
    return {};
  } }, { write: () => undefined });
  klogCallerProbe(probe);
  callerDepth = depth;
  return depth;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const format = resolveLogFormat(opts.format ?? 'text');
  const level = opts.level ?? 'info';
  const text = format === 'text';
  const depth = text ? findCallerDepth() : -1;
  return pino(
    {
      name: opts.name ?? 'local-volume-provisioner',
      level,
      base: { pid: process.pid },
      // text: microseconds since the epoch for klog's header; json: ISO time as before.
      timestamp: text ? () => `,"time":${Math.round((performance.timeOrigin + performance.now()) * 1000)}` : pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      // stackFrames and siteCaller are called from the mixin itself: `depth` counts the frames from them.
      ...(text
        ? { mixin: () => ({ [CALLER]: (depth < 0 ? undefined : stacksMapped() ? frameCaller(stackFrames(depth + 2)[depth]) : siteCaller(depth)) ?? '???:1' }) }
        : {}),
    },
    destination(format, opts.write, level === 'debug' || level === 'trace'),
  );
}

/** A logger that drops everything (unit tests). */
export const silentLogger: Logger = pino({ level: 'silent' });
