// The catalogue of Event reasons: every reason the daemon and the node-cleanup
// controller record is defined here and only here, so `kubectl get events
// --field-selector reason=...` greps, alerts and docs/operations.md have one
// source. test/kube/reasons.test.ts checks that docs/operations.md lists each one.

// Discovery (on the Node, or on the PV for a mode change).
export const REASON_STORAGE_CLASS = 'StorageClassMissing';
export const REASON_NOT_DISCOVERED = 'VolumeNotDiscovered';
export const REASON_DISCOVERY_FAILED = 'DiscoveryFailed';
/** An entry inside another volume, or a symlink a tenant could have written / pointing into a volume (issue 17, 3b). */
export const REASON_DISCOVERY_REFUSED = 'VolumeDiscoveryRefused';
/** A block device that is mounted, held, swap, the device of / or the kubelet root, opened O_EXCL, or 0 bytes (issue 17, 4). */
export const REASON_BLOCK_IN_USE = 'BlockDeviceInUse';
/** A disk matching a class's deviceSelector that is not blank, is in use or is not a whole disk (issue 21): not linked. */
export const REASON_DEVICE_REFUSED = 'RawDeviceRefused';
/** A disk linked into a deviceSelector class's directory (issue 21). */
export const REASON_DEVICE_LINKED = 'RawDeviceLinked';
/** A link the daemon made for a deviceSelector class, removed: it no longer matches and no PV uses it (issue 21). */
export const REASON_DEVICE_UNLINKED = 'RawDeviceUnlinked';
/** The PV name of a volume is taken by a PV this node does not see (labelled for another node) or did not make. */
export const REASON_PV_NAME_TAKEN = 'PVNameTaken';

// Deleter and cleanup Jobs (on the PV; CleanupJobsForbidden on the Pod and Node).
export const REASON_FAILED_DELETE = 'VolumeFailedDelete';
export const REASON_DELETE = 'VolumeDelete';
export const REASON_UNSUPPORTED_POLICY = 'VolumeUnsupportedReclaimPolicy';
export const REASON_UNKNOWN_POLICY = 'VolumeUnknownReclaimPolicy';
export const REASON_VOLUME_MISSING = 'VolumeMissing';
export const REASON_CLEAN_REFUSED = 'VolumeCleanRefused';
export const REASON_JOBS_FORBIDDEN = 'CleanupJobsForbidden';

// Config reloads (on the Pod and Node).
export const REASON_CONFIG_INVALID = 'ConfigInvalid';
export const REASON_CONFIG_NO_KNOWN_KEY = 'ConfigNoKnownKey';
export const REASON_CONFIG_RELOADED = 'ConfigReloaded';
/** A valid config with warnings (a misspelt key, ...): the warnings, naming the keys. */
export const REASON_CONFIG_WARNING = 'ConfigWarning';
/** The problem of the last ConfigInvalid or ConfigWarning is gone, without a new config being applied. */
export const REASON_CONFIG_RECOVERED = 'ConfigRecovered';
export const REASON_CONTROLLER_START_FAILED = 'ControllerStartFailed';
/** A storage class left the config while PVs of this node still name it (issue 18, 13). */
export const REASON_STORAGE_CLASS_REMOVED = 'StorageClassRemoved';

// Volume health (issue 19): on the PV, the bound PVC and each Pod using it (the reasons of CSI's
// external-health-monitor), a summary on the Node when a pass has more changes than its Event budget,
// and the policy's delete of an Available PV whose volume is missing (on the PV).
export const REASON_VOLUME_ABNORMAL = 'VolumeConditionAbnormal';
export const REASON_VOLUME_NORMAL = 'VolumeConditionNormal';
export const REASON_VOLUME_HEALTH_SUMMARY = 'VolumeHealthChanged';
export const REASON_MISSING_VOLUME_DELETED = 'MissingVolumeDeleted';

// The node-cleanup controller (on the PVC).
export const REASON_NODE_DELETED = 'ReferencedNodeDeleted';

/** Every reason above, for tests and docs. */
export const EVENT_REASONS: readonly string[] = [
  REASON_STORAGE_CLASS,
  REASON_NOT_DISCOVERED,
  REASON_DISCOVERY_FAILED,
  REASON_DISCOVERY_REFUSED,
  REASON_BLOCK_IN_USE,
  REASON_PV_NAME_TAKEN,
  REASON_DEVICE_REFUSED,
  REASON_DEVICE_LINKED,
  REASON_DEVICE_UNLINKED,
  REASON_FAILED_DELETE,
  REASON_DELETE,
  REASON_UNSUPPORTED_POLICY,
  REASON_UNKNOWN_POLICY,
  REASON_VOLUME_MISSING,
  REASON_CLEAN_REFUSED,
  REASON_JOBS_FORBIDDEN,
  REASON_CONFIG_INVALID,
  REASON_CONFIG_NO_KNOWN_KEY,
  REASON_CONFIG_RELOADED,
  REASON_CONFIG_WARNING,
  REASON_CONFIG_RECOVERED,
  REASON_CONTROLLER_START_FAILED,
  REASON_STORAGE_CLASS_REMOVED,
  REASON_VOLUME_ABNORMAL,
  REASON_VOLUME_NORMAL,
  REASON_VOLUME_HEALTH_SUMMARY,
  REASON_MISSING_VOLUME_DELETED,
  REASON_NODE_DELETED,
];
