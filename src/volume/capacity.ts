// PV capacity: the Go provisioner's rounding (roundDownCapacityPretty). With
// formatQuantity (src/util/quantity.ts) the PV's spec.capacity.storage is
// byte-identical to what the Go provisioner writes.

export const KiB = 1024n;
export const MiB = 1024n * KiB;
export const GiB = 1024n * MiB;
export const TiB = 1024n * GiB;

/**
 * Rounds down to whole GiB when that leaves at least 10 of them, else to whole
 * MiB when that leaves at least 10 of them, else keeps the exact byte count.
 */
export function roundDownCapacityPretty(bytes: bigint): bigint {
  for (const unit of [GiB, MiB]) {
    const units = bytes / unit; // bigint division truncates toward zero, like Go's int64 division
    if (units >= 10n) return units * unit;
  }
  return bytes;
}
