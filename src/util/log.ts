// Structured logs (pino), always on stderr (fd 2): stdout carries nothing but
// the output that was asked for (--dry-run YAML, --help, --version), so
// `--dry-run > pvs.yaml` is a clean manifest.
//
// Two formats (--log-format):
//   json  one JSON object per line, level names ("level":"info"); the default in a pod
//   text  "2026-12-01T10:00:00.000Z INFO  message key=value ...", for a terminal
// "auto" (the default) is text when stderr is a terminal outside a cluster, json otherwise.
//
// Lines are not written one system call each: they collect in a buffer that is
// written (synchronously, in one call) at most 100 ms later, at once past 64 KiB,
// and on process exit (SIGTERM's process.exit, a fatal start error, an uncaught
// exception), so nothing logged before an exit is lost; a SIGKILL loses at most
// the last 100 ms. Writing every line synchronously cost ~0.3 s CPU per 500 PVs
// created (docs/performance.md §6).
import { writeSync } from 'node:fs';
import { pino, type DestinationStream, type Logger } from 'pino';

export type { Logger };

export const LOG_FORMATS = ['json', 'text', 'auto'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

export interface LoggerOptions {
  level?: string | undefined;
  name?: string | undefined;
  format?: LogFormat | undefined;
  /** For "auto": KUBERNETES_SERVICE_HOST set means in a pod (the flags module reads env; default: not in a pod). */
  env?: LogEnv | undefined;
  /** Where lines go (tests); default fd 2 through the process's batched writer (stderrWriter). */
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

function textValue(v: unknown): string {
  if (typeof v === 'string') return /^[^\s"=]+$/.test(v) ? v : JSON.stringify(v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === null) return String(v);
  return JSON.stringify(v);
}

/** One pino JSON line -> one readable line ("<time> <LEVEL> <msg> k=v ..."); the stack of an err goes below it. */
export function formatTextLine(line: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line.endsWith('\n') ? line : `${line}\n`;
  }
  const str = (v: unknown): string => (typeof v === 'string' ? v : v === undefined ? '' : textValue(v));
  const parts = [str(o['time']), str(o['level']).toUpperCase().padEnd(5), str(o['msg'])];
  let stack = '';
  for (const [k, v] of Object.entries(o)) {
    if (TEXT_SKIP.has(k) || v === undefined) continue;
    if (k === 'err' && v !== null && typeof v === 'object') {
      const e = v as { message?: unknown; stack?: unknown };
      parts.push(`err=${textValue(str(e.message))}`);
      if (typeof e.stack === 'string') stack = e.stack.split('\n').slice(1).map((l) => `    ${l.trim()}\n`).join('');
      continue;
    }
    parts.push(`${k}=${textValue(v)}`);
  }
  return `${parts.join(' ')}\n${stack}`;
}

export interface BatchedWriterOptions {
  /** A pending line is written at most this much later (default 100). */
  readonly delayMs?: number | undefined;
  /** A buffer this big is written at once (default 64 KiB). */
  readonly maxBytes?: number | undefined;
  /** Writes one chunk synchronously, returning the bytes written (default: fs.writeSync). */
  readonly writeSync?: ((fd: number, buf: Buffer) => number) | undefined;
}

/**
 * Lines for one file descriptor, written in batches with synchronous writes (no
 * thread-pool round trip, order kept, flush() safe in an 'exit' handler).
 * A write error drops the batch: logging never crashes the daemon.
 */
export class BatchedWriter {
  readonly #fd: number;
  readonly #delayMs: number;
  readonly #maxBytes: number;
  readonly #writeSync: (fd: number, buf: Buffer) => number;
  #pending: string[] = [];
  #bytes = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(fd: number, opts: BatchedWriterOptions = {}) {
    this.#fd = fd;
    this.#delayMs = opts.delayMs ?? 100;
    this.#maxBytes = opts.maxBytes ?? 64 * 1024;
    this.#writeSync = opts.writeSync ?? ((f, b) => writeSync(f, b));
  }

  write(line: string): void {
    this.#pending.push(line);
    this.#bytes += line.length;
    if (this.#bytes >= this.#maxBytes) this.flush();
    else this.#timer ??= setTimeout(() => {
      this.flush();
    }, this.#delayMs).unref();
  }

  /** Writes what is pending, now. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#pending.length === 0) return;
    let buf = Buffer.from(this.#pending.join(''));
    this.#pending = [];
    this.#bytes = 0;
    let tries = 0;
    while (buf.length > 0) {
      try {
        buf = buf.subarray(this.#writeSync(this.#fd, buf));
      } catch (e) {
        // A non-blocking pipe that is full: wait a little and retry; anything else drops the batch.
        if ((e as NodeJS.ErrnoException).code !== 'EAGAIN' || ++tries > 100) return;
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
      }
    }
  }
}

let stderr: BatchedWriter | undefined;

/** The process's batched writer of fd 2, flushed on exit (one per process: one 'exit' listener). */
export function stderrWriter(): BatchedWriter {
  if (stderr === undefined) {
    const w = new BatchedWriter(2);
    process.on('exit', () => {
      w.flush();
    });
    stderr = w;
  }
  return stderr;
}

function destination(format: 'json' | 'text', write: ((line: string) => void) | undefined): DestinationStream {
  const w = write === undefined ? stderrWriter() : undefined;
  const out = write ?? ((s: string) => w?.write(s));
  return {
    write: format === 'json' ? out : (s: string) => out(formatTextLine(s)),
    // logger.flush(): what is pending goes out now (before a plain stderr line, say).
    flush: (cb?: (err?: Error) => void) => {
      w?.flush();
      cb?.();
    },
  } as DestinationStream;
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
