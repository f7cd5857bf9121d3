#!/bin/bash
# Discards (TRIM/UNMAP) every block of the device with blkdiscard.
# When the device does not support discard (some disks, some loop devices whose
# backing file system cannot punch holes), it falls back to zeroing: first the
# kernel's zero-out (blkdiscard -z, BLKZEROOUT), then plain dd.
# Note: after a discard, many SSDs read back zeros but the standard does not
# promise it (no "deterministic read zero after TRIM" on every device). Use
# dd_zero.sh when reading zeros back is a requirement.
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/common.sh"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  cat <<USAGE
Usage: LOCAL_PV_BLKDEVICE=/dev/xyz $0
Discards all blocks of the device; zeroes it when discard is not supported.
USAGE
  exit 0
fi

validateBlockDevice
dev="${LOCAL_PV_BLKDEVICE}"

log "discarding all blocks of ${dev}"
if idle blkdiscard -v "${dev}"; then
  log "done"
  exit 0
fi
log "discard failed or is not supported; zeroing ${dev} instead"
if idle blkdiscard -z -v "${dev}"; then
  log "done (zeroed with blkdiscard -z)"
  exit 0
fi
size=$(deviceSize "${dev}")
log "blkdiscard -z failed too; writing ${size} zero bytes with dd"
zeroRange "${dev}" 0 "${size}"
log "done (zeroed with dd)"
