// The parsed, validated provisioner configuration. Objects of these types are
// produced only by src/config/parse.ts and are deeply frozen: a running
// controller generation can hold one without fear of it changing underneath.
import type { V1NodeSelectorTerm, V1Toleration } from '@kubernetes/client-node';

export type VolumeMode = 'Filesystem' | 'Block';

/** One entry of `storageClassMap` (the Go provisioner's MountConfig). */
export interface ClassConfig {
  /** Path of the discovery directory on the host; written into PV spec.local.path. */
  readonly hostDir: string;
  /** Path of the same directory inside the provisioner container; scanned for volumes. */
  readonly mountDir: string;
  /** argv of the block cleaner; defaults to ["/scripts/quick_reset.sh"]. */
  readonly blockCleanerCommand: readonly string[];
  /** Desired PV volumeMode (default Filesystem). */
  readonly volumeMode: VolumeMode;
  /** PV access mode; undefined means ReadWriteOnce when the PV is created. */
  readonly accessMode?: string | undefined;
  /** spec.local.fsType; undefined or "" means not set. */
  readonly fsType?: string | undefined;
  /** Comma-separated Go filepath.Match patterns (default "*"). */
  readonly namePattern: string;
  /** Extra node selector terms, ORed with the hostname term. */
  readonly selector?: readonly V1NodeSelectorTerm[] | undefined;
  /** `healthPolicy` (issue 19); undefined: every action off (DEFAULT_HEALTH_POLICY). */
  readonly healthPolicy?: HealthPolicy | undefined;
  /** Raw disks the daemon links into mountDir itself (issue 21; src/devices). Unset: only hand-made entries. */
  readonly deviceSelector?: DeviceSelector | undefined;
}

/** Per class `healthPolicy`: what the health monitor may do about an unhealthy volume of the class. */
export interface HealthPolicy {
  /** Delete an Available PV whose volume has been `missing` longer than gracePeriodMs (never a Bound or Released one). */
  readonly deleteMissingAvailable: boolean;
  readonly gracePeriodMs: number;
}

/**
 * Which whole disks of the node a class takes (issue 21). Every set filter must match; a matching disk is
 * still linked only when it is blank and unused (src/devices/eligibility.ts).
 */
export interface DeviceSelector {
  /** Go filepath.Match patterns of stable device names (absolute: /dev/disk/by-id/nvme-*, /dev/disk/by-path/...). */
  readonly paths: readonly string[];
  /** Smallest and largest size in bytes (inclusive; a number: exact up to 8 PiB, and the config hash needs JSON). */
  readonly minSizeBytes?: number | undefined;
  readonly maxSizeBytes?: number | undefined;
  /** true: only rotating disks; false: only non-rotating; unset: both. */
  readonly rotational?: boolean | undefined;
  /** Go filepath.Match patterns of /sys/block/<d>/device/model and .../vendor (trimmed); unset: any. */
  readonly models?: readonly string[] | undefined;
  readonly vendors?: readonly string[] | undefined;
  /** Most disks this class links on this node (links it already made count); unset: no limit. */
  readonly maxCount?: number | undefined;
  /** Tests only: loop devices may be selected (by their /dev/loopN name). Default false. */
  readonly allowLoop: boolean;
}

/** Top-level `volumeHealth` (issue 19). */
export interface VolumeHealthConfig {
  /** Check every PV of this node each discovery period, report changes (Events, gauge). */
  readonly enabled: boolean;
  /** Write the health onto the PV (label and annotation); opt-in, as PVs then differ from the Go provisioner's. */
  readonly annotatePVs: boolean;
  /** Report `full` above this percentage of used capacity; undefined: off. */
  readonly fullThresholdPercent?: number | undefined;
}

/** The whole ConfigMap (the Go provisioner's ProvisionerConfiguration). */
export interface ProvisionerConfig {
  readonly storageClassMap: Readonly<Record<string, ClassConfig>>;
  readonly nodeLabelsForPV: readonly string[];
  readonly useAlphaAPI: boolean;
  readonly useJobForCleaning: boolean;
  readonly jobTolerations: readonly V1Toleration[];
  /** minResyncPeriod in milliseconds (default 5m). */
  readonly minResyncPeriodMs: number;
  readonly useNodeNameOnly: boolean;
  readonly labelsForPV: Readonly<Record<string, string>>;
  readonly setPVOwnerRef: boolean;
  readonly removeNodeNotReadyTaint: boolean;
  readonly provisionerNotReadyNodeTaintKey: string;
  /** `volumeHealth`; undefined when the ConfigMap has no such key (DEFAULT_VOLUME_HEALTH then). */
  readonly volumeHealth?: VolumeHealthConfig | undefined;
}

/** One problem found while parsing or validating; all of them are reported at once. */
export interface ConfigError {
  /** Key path, e.g. "storageClassMap.fast-disks.hostDir". */
  readonly path: string;
  readonly message: string;
  /** ConfigMap key (file name) the problem is in, when known. */
  readonly file?: string | undefined;
  /** 1-based line inside that file, when the YAML gives one. */
  readonly line?: number | undefined;
  /** A YAML syntax error's further parser messages (mostly consequences of the first): logged at debug only. */
  readonly detail?: readonly string[] | undefined;
}

/**
 * Outcome of parsing. `warnings` (unknown keys, duplicate keys, settings that
 * cannot work) never block a config; parseConfig always fills it in.
 */
export type ParseResult =
  | {
      readonly ok: true;
      readonly config: ProvisionerConfig;
      readonly hash: string;
      readonly warnings?: readonly ConfigError[] | undefined;
    }
  | { readonly ok: false; readonly errors: readonly ConfigError[]; readonly warnings?: readonly ConfigError[] | undefined };

export const DEFAULT_BLOCK_CLEANER_COMMAND: readonly string[] = Object.freeze(['/scripts/quick_reset.sh']);
export const DEFAULT_NAME_PATTERN = '*';
export const DEFAULT_MIN_RESYNC_PERIOD_MS = 5 * 60 * 1000;
export const DEFAULT_CONFIG_DIR = '/etc/provisioner/config';

export const DEFAULT_HEALTH_GRACE_PERIOD_MS = 10 * 60 * 1000;
export const DEFAULT_HEALTH_POLICY: HealthPolicy = Object.freeze({ deleteMissingAvailable: false, gracePeriodMs: DEFAULT_HEALTH_GRACE_PERIOD_MS });
export const DEFAULT_VOLUME_HEALTH: VolumeHealthConfig = Object.freeze({ enabled: true, annotatePVs: false });
