// The in-process cleaners. Neither ever throws: each returns a CleanResult.
//
// Filesystem (fs-cleaner.ts): removes every entry inside the volume's mount
// point, keeps the mount point itself, and deletes nothing that is not on
// that one mount.
//
// Block: runs the class's blockCleanerCommand as an argv (no shell, nothing of
// the PV is interpolated) with LOCAL_PV_BLKDEVICE=<container path>. A timeout
// or an abort kills the command's whole process group (execa killDescendants),
// escalating to SIGKILL after a grace delay.
import { capText, errorMessage as errMsg } from '../util/errors.ts';

import type { CleanResult } from './clean-result.ts';

export type { CleanResult } from './clean-result.ts';
export { cleanFilesystem, type FilesystemCleanOptions } from './fs-cleaner.ts';

export const DEFAULT_CLEAN_TIMEOUT_MS = 60 * 60 * 1000;
export const DEFAULT_FORCE_KILL_AFTER_MS = 10_000;
export const DEFAULT_MAX_OUTPUT_LINES = 50;
const MAX_LINE_CHARS = 2000;

export interface BlockCleanOptions {
  /** The class's blockCleanerCommand: argv[0] is the program. */
  readonly command: readonly string[];
  /** Path of the device inside this container; passed as LOCAL_PV_BLKDEVICE. */
  readonly devicePath: string;
  readonly timeoutMs?: number | undefined;
  /** Grace period between SIGTERM and SIGKILL (default 10 s). */
  readonly forceKillAfterMs?: number | undefined;
  readonly signal?: AbortSignal | undefined;
  /** Lines of stdout/stderr kept in the result (the last ones; default 50 each). */
  readonly maxLines?: number | undefined;
  /** Called for every output line (e.g. to log it). */
  readonly onLine?: ((stream: 'stdout' | 'stderr', line: string) => void) | undefined;
  /** Told when the cleaner's process group starts and ends (see orphans.ts). */
  readonly onSpawn?: ((pgid: number) => void) | undefined;
  readonly onExit?: ((pgid: number) => void) | undefined;
}

/** Runs the block cleaner command; resolves with the outcome, never rejects. */
export async function cleanBlockDevice(opts: BlockCleanOptions): Promise<CleanResult> {
  const start = Date.now();
  const max = opts.maxLines ?? DEFAULT_MAX_OUTPUT_LINES;
  const out: Record<'stdout' | 'stderr', string[]> = { stdout: [], stderr: [] };
  const collector = (stream: 'stdout' | 'stderr') =>
    function* (line: unknown): Generator<never, void, unknown> {
      const text = String(line).slice(0, MAX_LINE_CHARS);
      const buf = out[stream];
      buf.push(text);
      if (buf.length > max) buf.shift();
      try {
        opts.onLine?.(stream, text);
      } catch {
        // a logging callback must not break the cleanup
      }
      yield* []; // the lines are consumed here, not buffered by execa
    };
  const fail = (error: string, extra: Partial<CleanResult> = {}): CleanResult => ({
    ok: false,
    error: capText(error),
    durationMs: Date.now() - start,
    skipped: [],
    removed: 0,
    stdout: out.stdout,
    stderr: out.stderr,
    ...extra,
  });
  const [file, ...args] = opts.command;
  if (file === undefined || file === '') return fail('the block cleaner command is empty');
  const timeoutMs = opts.timeoutMs ?? DEFAULT_CLEAN_TIMEOUT_MS;
  try {
    // Loaded at the first block clean, not at start (execa and its dependencies: 3.2 MiB of RSS, issue 20).
    const { execa } = await import('execa');
    const sub = execa(file, args, {
      timeout: timeoutMs,
      killDescendants: true,
      forceKillAfterDelay: opts.forceKillAfterMs ?? DEFAULT_FORCE_KILL_AFTER_MS,
      ...(opts.signal ? { cancelSignal: opts.signal } : {}),
      env: { LOCAL_PV_BLKDEVICE: opts.devicePath },
      stdin: 'ignore',
      stdout: { transform: collector('stdout') },
      stderr: { transform: collector('stderr') },
      reject: false,
    });
    const pgid = sub.pid;
    if (pgid !== undefined) opts.onSpawn?.(pgid);
    const r = await sub.finally(() => {
      if (pgid !== undefined) opts.onExit?.(pgid);
    });
    const extra = { exitCode: r.exitCode, signal: r.signal, timedOut: r.timedOut };
    if (!r.failed) {
      return { ok: true, durationMs: Date.now() - start, skipped: [], removed: 0, stdout: out.stdout, stderr: out.stderr, ...extra };
    }
    const cmd = JSON.stringify(file);
    if (r.code === 'ENOENT') return fail(`block cleaner command ${cmd} was not found`, extra);
    if (r.code === 'EACCES') return fail(`block cleaner command ${cmd} is not executable`, extra);
    if (r.timedOut) return fail(`block cleaner command ${cmd} timed out after ${timeoutMs} ms and was killed (${r.signal ?? 'SIGTERM'})`, extra);
    if (r.isCanceled) return fail(`block cleaner command ${cmd} was cancelled and killed`, extra);
    if (r.signal) return fail(`block cleaner command ${cmd} was killed by ${r.signal}`, extra);
    if (r.exitCode !== undefined) {
      const tail = out.stderr.at(-1) ?? out.stdout.at(-1);
      return fail(`block cleaner command ${cmd} exited with code ${r.exitCode}${tail ? `: ${tail}` : ''}`, extra);
    }
    return fail(`block cleaner command ${cmd} failed: ${r.shortMessage ?? r.message}`, extra);
  } catch (e) {
    return fail(`block cleaner command ${JSON.stringify(file)} could not run: ${errMsg(e)}`);
  }
}
