#!/bin/bash
# Quick reset of a block device: removes every filesystem, RAID and partition
# table signature (wipefs -a), then zeroes the first and the last MiB of the
# device (partition tables, superblocks and their backups live there).
# Fast, and it needs no mkfs: the next user formats the device (kubelet does for
# fsType volumes). The data itself is NOT overwritten; use dd_zero.sh,
# blkdiscard.sh or shred.sh when the old contents must be unreadable.
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/common.sh"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  cat <<USAGE
Usage: LOCAL_PV_BLKDEVICE=/dev/xyz $0
Removes all signatures (wipefs -a) and zeroes the first and last MiB of the device.
USAGE
  exit 0
fi

validateBlockDevice
dev="${LOCAL_PV_BLKDEVICE}"
size=$(deviceSize "${dev}")
mib=$((1024 * 1024))

log "wiping signatures on ${dev} (${size} bytes)"
idle wipefs -a "${dev}"

if (( size <= 2 * mib )); then
  log "zeroing the whole device (${size} bytes)"
  zeroRange "${dev}" 0 "${size}"
else
  log "zeroing the first and the last MiB of ${dev}"
  zeroRange "${dev}" 0 "${mib}"
  zeroRange "${dev}" $((size - mib)) "${mib}"
fi
log "done"
