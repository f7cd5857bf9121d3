// Volume health (issue 19): the vocabulary shared by the per-volume check
// (check.ts: reads the host) and the monitor (monitor.ts: tracks changes,
// reports them as Events and metrics, applies a class's health policy).
import type { VolumeMode } from '../config/types.ts';

/**
 * One abnormal condition of a local volume. A healthy volume has none.
 * - missing: the path is no longer a mount point (Filesystem) or no longer resolves to a block device (Block)
 * - replaced: something other than what discovery recorded is there (another device or filesystem UUID)
 * - read-only: the filesystem is mounted read-only, or the block device is read-only
 * - filesystem-errors: the kernel counts filesystem errors for it (ext4 errors_count, ...)
 * - io-errors: the block device beneath it counts I/O errors
 * - full: used capacity above the configured threshold (informational)
 */
export type HealthCondition = 'missing' | 'replaced' | 'read-only' | 'filesystem-errors' | 'io-errors' | 'full';

export const HEALTH_CONDITIONS: readonly HealthCondition[] = Object.freeze([
  'missing',
  'replaced',
  'read-only',
  'filesystem-errors',
  'io-errors',
  'full',
]);

/** What the monitor asks about one PV of this node. */
export interface HealthCheckInput {
  readonly pvName: string;
  /** The volume's path inside this container (the class's mountDir + the entry name). */
  readonly path: string;
  readonly mode: VolumeMode;
  /** The PV's recorded identity annotation (src/identity), undefined for PVs without one. */
  readonly recordedIdentity?: string | undefined;
  /** Report `full` above this percentage of used capacity; undefined: off. */
  readonly fullThresholdPercent?: number | undefined;
}

/** The result of one check: every abnormal condition found, each with a one-line human message. */
export interface VolumeHealth {
  readonly conditions: ReadonlyMap<HealthCondition, string>;
}

/** One pass over many volumes: begin() reads what is shared (the mount table) once per pass. */
export interface HealthChecker {
  /** Starts a pass: reads /proc/self/mountinfo (and anything else shared) once. */
  beginPass(): Promise<HealthPass>;
}

export interface HealthPass {
  /** Never throws: a failure to read is itself a condition or an empty result with a logged reason. */
  check(input: HealthCheckInput): Promise<VolumeHealth>;
  /**
   * The answer without any read, when it is known already: the same input object as in an earlier pass,
   * and nothing it depends on can have changed (the same mount table, no device, UUID or capacity to
   * read). The very object returned then, so a caller can tell "unchanged" by identity. Optional.
   */
  known?(input: HealthCheckInput): VolumeHealth | undefined;
}
