// Structured JSON logs (pino) to stdout. LOG_LEVEL selects the level (default info).
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(opts: { level?: string; name?: string } = {}): Logger {
  return pino({
    name: opts.name ?? 'local-volume-provisioner',
    level: opts.level ?? process.env['LOG_LEVEL'] ?? 'info',
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
  });
}

/** A logger that drops everything (unit tests). */
export const silentLogger: Logger = pino({ level: 'silent' });
