#!/bin/bash
# Removes everything inside the directory LOCAL_PV_FILESYSTEM (dotfiles
# included) and keeps the directory itself. Run by the cleanup Job of a
# Filesystem volume. Before anything is removed it checks the mount table
# (/proc/self/mountinfo) and refuses (exit 1, nothing deleted) when:
#   - the directory is not itself a mount point (the volume is not mounted:
#     cleaning would empty the file system underneath), or that mount is hidden
#     by a later one (its device is not the directory's st_dev, or a walk of the
#     mount tree along the path ends elsewhere);
#   - any mount point lies below the directory. `find -xdev` compares devices
#     only, so it would descend into a bind mount of the same disk (a sibling
#     volume, the disk root) and delete foreign data.
# The checks and the removal run in a private copy of the mount table
# (unshare), so a mount made meanwhile cannot be entered; afterwards the mount
# table and the directory are checked again in the caller's view and the script
# fails if a mount point or any entry is left.
# FSCLEAN_PRIVATE_NAMESPACE=1 is internal: it marks the run inside unshare.
set -euo pipefail
export LC_ALL=C
self=$(readlink -f "$0")
source "$(dirname "${self}")/common.sh"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  cat <<USAGE
Usage: LOCAL_PV_FILESYSTEM=/path/to/volume $0
Removes the contents of the directory, never the directory itself, never across mounts.
Refuses when the directory is not a mount point or has mount points below it.
USAGE
  exit 0
fi

# refuseUnlessMountedVolume VOL: VOL is a mount point in the mount table, the
# current directory (VOL, entered with cd) is on the device of that mount, a
# lookup of VOL ends on that mount (not hidden by a later mount), and no mount
# point lies below VOL.
refuseUnlessMountedVolume() {
  local vol=$1 q i top='' dev
  q=$(quote "${vol}")
  readMountInfo
  for i in "${!MI_MP[@]}"; do
    if [[ "${MI_MP[i]}" == "${vol}" ]]; then top=${i}; fi
  done
  if [[ -z "${top}" ]]; then
    errorExit "refusing to clean ${q}: it is not a mount point; the volume is not mounted, cleaning would empty the file system underneath"
  fi
  dev=$(stat -c '%Hd:%Ld' .)
  # btrfs reports a device number per subvolume in st_dev, not the one in mountinfo.
  if [[ "${MI_DEV[top]}" != "${dev}" && "${MI_FS[top]}" != btrfs ]]; then
    errorExit "refusing to clean ${q}: its device ${dev} is not the device ${MI_DEV[top]} of the mount listed at it (hidden by another mount?)"
  fi
  visibleMount "${vol}"
  if [[ "${REPLY}" != "${top}" ]]; then
    errorExit "refusing to clean ${q}: the mount listed at it is hidden by the mount at $(quote "${MI_MP[REPLY]}")"
  fi
  refuseMountsBelow "${vol}" "refusing to clean ${q}"
}

# refuseMountsBelow VOL PREFIX: fails, naming them, when mount points lie below VOL.
refuseMountsBelow() {
  mountsBelow "$1"
  if (( ${#BELOW[@]} > 0 )); then
    errorExit "$2: ${#BELOW[@]} mount point(s) below it, unmount them first: $(quoteList 5 "${BELOW[@]}")"
  fi
}

# refuseLeftovers DIR VOL: fails, naming up to 5 of them, when DIR (VOL's
# directory, by path or as ".") is not empty.
refuseLeftovers() {
  local empty entry left=()
  empty=$(find "$1" -maxdepth 0 -empty -printf x) || errorExit "cannot read $(quote "$2")"
  [[ "${empty}" == x ]] && return 0
  while IFS= read -r -d '' entry; do
    left+=("$2/${entry##*/}")
    (( ${#left[@]} <= 5 )) || break
  done < <(find "$1" -mindepth 1 -maxdepth 1 -print0)
  errorExit "entries left in $(quote "$2"): $(quoteList 5 "${left[@]}")"
}

# refuseAfterClean DIR VOL: fails when, now, a mount point lies below VOL or an
# entry is left in DIR (VOL, by path or as ".").
refuseAfterClean() {
  readMountInfo
  refuseMountsBelow "$2" "after cleaning $(quote "$2")"
  refuseLeftovers "$1" "$2"
}

validateFilesystem
resolveDir "${LOCAL_PV_FILESYSTEM}"
vol=${REPLY}

if [[ "${FSCLEAN_PRIVATE_NAMESPACE:-}" != 1 ]] && unshare --mount --propagation private true 2>/dev/null; then
  # From the checks to the end of the removal, work in a private copy of the mount table: a mount
  # made elsewhere from now on does not show up in it, so find can never descend into it.
  FSCLEAN_PRIVATE_NAMESPACE=1 unshare --mount --propagation private -- "${BASH}" "${self}"
  # Back in the caller's mount namespace: nothing was mounted below the volume meanwhile, nothing is left.
  refuseAfterClean "${vol}" "${vol}"
  log "done"
  exit 0
fi
if [[ "${FSCLEAN_PRIVATE_NAMESPACE:-}" != 1 ]]; then
  log "cannot create a private mount namespace (unshare); checking and cleaning in the current one"
fi

# Work on the directory we checked, whatever happens to the path meanwhile.
cd -P -- "${vol}" || errorExit "cannot enter $(quote "${vol}")"
refuseUnlessMountedVolume "${vol}"

log "removing the contents of $(quote "${vol}")"
status=0
idle find . -xdev -mindepth 1 -delete || status=$?
refuseAfterClean . "${vol}"
if (( status != 0 )); then
  errorExit "find exited with status ${status}"
fi
log "removed the contents of $(quote "${vol}")"
if [[ "${FSCLEAN_PRIVATE_NAMESPACE:-}" != 1 ]]; then log "done"; fi
