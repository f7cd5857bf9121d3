#!/bin/bash
# Removes everything inside the directory LOCAL_PV_FILESYSTEM (dotfiles
# included) and keeps the directory itself. It never crosses into another file
# system (find -xdev): a nested mount point is left in place, which makes the
# script fail so that the volume is not handed out with foreign data in it.
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/common.sh"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  cat <<USAGE
Usage: LOCAL_PV_FILESYSTEM=/path/to/volume $0
Removes the contents of the directory, never the directory itself, never across mounts.
USAGE
  exit 0
fi

validateFilesystem
dir="${LOCAL_PV_FILESYSTEM}"

log "removing the contents of ${dir}"
status=0
idle find "${dir}" -xdev -mindepth 1 -delete || status=$?
left=$(find "${dir}" -mindepth 1 -maxdepth 1 | head -n 5)
if [[ -n "${left}" ]]; then
  errorExit "entries left in ${dir} (nested mounts?): ${left//$'\n'/, }"
fi
if (( status != 0 )); then
  errorExit "find exited with status ${status}"
fi
log "done"
