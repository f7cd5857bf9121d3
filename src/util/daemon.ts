// Process plumbing shared by the entry points (local-volume-provisioner and
// local-volume-node-cleanup): start the daemon, stop it gracefully on
// SIGTERM/SIGINT (forced exit after a grace period), log unhandled rejections
// instead of crashing, and turn main()'s result into the exit code.
import { VERSION } from './version.ts';
import type { Logger } from './log.ts';

/**
 * Parses the command line; on --help, --version or a bad flag prints what it
 * should and returns the exit code instead of options.
 */
export function parseCli<O extends { help: boolean; version: boolean }>(
  name: string,
  argv: readonly string[],
  parse: (argv: readonly string[]) => O,
  help: string,
): O | number {
  let opts: O;
  try {
    opts = parse(argv);
  } catch (e) {
    process.stderr.write(`${name}: ${(e as Error).message}\nRun with --help for usage.\n`);
    return 2;
  }
  if (opts.help) {
    process.stdout.write(help);
    return 0;
  }
  if (opts.version) {
    process.stdout.write(`${name} ${VERSION}\n`);
    return 0;
  }
  return opts;
}

/** Stops what start() wired; resolves when nothing is left running. */
export type StopFn = () => Promise<void>;

/**
 * Starts the daemon and keeps it running until SIGTERM or SIGINT, which call its
 * stop function and exit (0, or 1 on a stop error or after `graceMs`). Returns 1
 * when start() fails (after one log line and one stderr line), -1 while running.
 */
export async function runDaemon(name: string, logger: Logger, start: () => Promise<StopFn>, graceMs = 30_000): Promise<number> {
  let stop: StopFn | undefined;
  let exiting = false;
  const shutdown = (signal: string): void => {
    if (exiting) return;
    exiting = true;
    logger.info({ signal }, 'shutting down');
    const force = setTimeout(() => process.exit(1), graceMs);
    force.unref();
    void (stop ? stop() : Promise.resolve()).then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'error while shutting down');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  process.on('unhandledRejection', (err) => logger.error({ err }, 'unhandled promise rejection (ignored)'));
  try {
    stop = await start();
  } catch (e) {
    logger.fatal({ err: e }, (e as Error).message);
    process.stderr.write(`${name}: ${(e as Error).message}\n`);
    return 1;
  }
  return -1; // keep running
}

/** Runs main(argv) and exits with its code; a negative code keeps the process running. */
export function runCli(name: string, main: (argv: readonly string[]) => Promise<number>): void {
  main(process.argv.slice(2)).then(
    (code) => {
      if (code >= 0) process.exit(code);
    },
    (err: unknown) => {
      process.stderr.write(`${name}: ${String(err)}\n`);
      process.exit(1);
    },
  );
}
