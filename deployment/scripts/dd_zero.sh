#!/bin/bash
# Overwrites the whole block device with zeros, ITERATIONS times (default 1).
# Succeeds only when every byte of the device was written: dd is told the exact
# size and fails on a short write.
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/common.sh"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  cat <<USAGE
Usage: LOCAL_PV_BLKDEVICE=/dev/xyz $0 [ITERATIONS]
Writes zeros over the whole device ITERATIONS times (default 1).
USAGE
  exit 0
fi

validateBlockDevice
dev="${LOCAL_PV_BLKDEVICE}"
count=$(iterations "${1:-}" 1)
size=$(deviceSize "${dev}")

for ((i = 1; i <= count; i++)); do
  log "zeroing ${dev} (${size} bytes), pass ${i} of ${count}"
  zeroRange "${dev}" 0 "${size}"
done
log "done: ${size} bytes zeroed ${count} time(s)"
