// Structured logs (pino), always on stderr (fd 2): stdout carries nothing but
// the output that was asked for (--dry-run YAML, --help, --version), so
// `--dry-run > pvs.yaml` is a clean manifest.
//
// Two formats (--log-format):
//   json  one JSON object per line, level names ("level":"info"); the default in a pod
//   text  "2026-12-01T10:00:00.000Z INFO  message key=value ...", for a terminal
// "auto" (the default) is text when stderr is a terminal outside a cluster, json otherwise.
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

function destination(format: 'json' | 'text', write: ((line: string) => void) | undefined): DestinationStream {
  if (write === undefined) {
    if (format === 'json') return pino.destination({ dest: 2, sync: true });
    write = (s) => void writeSync(2, s);
  }
  const out = write;
  return { write: format === 'json' ? out : (s: string) => out(formatTextLine(s)) };
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
