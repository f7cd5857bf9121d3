// What a cleaner reports (both in-process cleaners return one, and never throw).
// Its own module so fs-cleaner.ts and cleaner.ts do not import each other.

export interface CleanResult {
  readonly ok: boolean;
  /** Why the clean failed (undefined when ok). */
  readonly error?: string | undefined;
  readonly durationMs: number;
  /** Filesystem: paths left in place because they are on another mount (a path over 256 bytes keeps its head and tail). */
  readonly skipped: readonly string[];
  /** Filesystem: number of entries removed. */
  readonly removed: number;
  /** Block: exit code of the command, when it exited. */
  readonly exitCode?: number | undefined;
  /** Block: the signal that ended the command, when one did. */
  readonly signal?: string | undefined;
  readonly timedOut?: boolean | undefined;
  /** Block: the last lines of the command's output (bounded). */
  readonly stdout: readonly string[];
  readonly stderr: readonly string[];
}
