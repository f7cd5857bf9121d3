#!/bin/bash
# Overwrites the device ITERATIONS times (default 3) with random data, then
# once with zeros to hide the shredding (shred -n N -z).
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/common.sh"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  cat <<USAGE
Usage: LOCAL_PV_BLKDEVICE=/dev/xyz $0 [ITERATIONS]
Overwrites the device ITERATIONS times (default 3) with random data, then with zeros.
USAGE
  exit 0
fi

validateBlockDevice
dev="${LOCAL_PV_BLKDEVICE}"
count=$(iterations "${1:-}" 3)

log "shredding ${dev}: ${count} random pass(es), then zeros"
idle shred -v -f -z -n "${count}" "${dev}"
log "done"
