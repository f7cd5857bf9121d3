#!/bin/bash
# Shared helpers for the cleaner scripts; sourced, not run.
# The provisioner (or its cleanup Job) passes the volume in the environment:
#   LOCAL_PV_BLKDEVICE  path of the block device (Block volumes)
#   LOCAL_PV_FILESYSTEM path of the mounted directory (Filesystem volumes)

errorExit() {
  echo "ERROR: $*" >&2
  exit 1
}

log() {
  echo "$(basename "$0"): $*"
}

# Runs a command at idle I/O priority when ionice is available and allowed.
idle() {
  if command -v ionice >/dev/null 2>&1 && ionice -c 3 true >/dev/null 2>&1; then
    ionice -c 3 "$@"
  else
    "$@"
  fi
}

validateBlockDevice() {
  if [[ -z "${LOCAL_PV_BLKDEVICE:-}" ]]; then
    errorExit "LOCAL_PV_BLKDEVICE is not set"
  fi
  if [[ ! -b "${LOCAL_PV_BLKDEVICE}" ]]; then
    errorExit "LOCAL_PV_BLKDEVICE=${LOCAL_PV_BLKDEVICE} is not a block device"
  fi
}

validateFilesystem() {
  if [[ -z "${LOCAL_PV_FILESYSTEM:-}" ]]; then
    errorExit "LOCAL_PV_FILESYSTEM is not set"
  fi
  if [[ ! -d "${LOCAL_PV_FILESYSTEM}" ]]; then
    errorExit "LOCAL_PV_FILESYSTEM=${LOCAL_PV_FILESYSTEM} is not a directory"
  fi
  local real
  real=$(realpath -e "${LOCAL_PV_FILESYSTEM}") || errorExit "cannot resolve ${LOCAL_PV_FILESYSTEM}"
  if [[ "${real}" == "/" ]]; then
    errorExit "refusing to clean the root directory"
  fi
}

# Validates an optional iteration count argument; prints it (or the default).
iterations() {
  local value="${1:-$2}"
  if [[ ! "${value}" =~ ^[0-9]+$ ]] || (( value < 1 )); then
    errorExit "ITERATIONS must be a positive integer, got '${value}'"
  fi
  echo "${value}"
}

deviceSize() {
  blockdev --getsize64 "$1"
}

# zeroRange DEVICE OFFSET_BYTES LENGTH_BYTES: writes zeros, flushed to the device.
zeroRange() {
  idle dd if=/dev/zero of="$1" bs=1M seek="$2" count="$3" \
    oflag=seek_bytes iflag=count_bytes conv=notrunc,fsync status=none
}
