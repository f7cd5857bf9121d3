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

# --- Paths and the mount table (fsclean.sh) ---------------------------------
# Paths may hold any byte but NUL and '/': spaces, newlines, bytes that are not
# UTF-8. Scripts using these helpers set LC_ALL=C so that bash treats them as
# plain bytes.

# quote PATH: the path as one shell-escaped word (newlines and other control
# bytes become $'...'), so that a message stays on one line.
quote() {
  printf '%q' "$1"
}

# resolveDir PATH: sets REPLY to the canonical path (symlinks resolved). Unlike
# $(realpath ...), keeps trailing newlines of the name.
resolveDir() {
  local out
  out=$(realpath -e -- "$1" && echo x) || errorExit "cannot resolve $(quote "$1")"
  REPLY=${out%$'\n'x}
}

# decodeMountPath FIELD: sets REPLY to the path with the kernel's octal escapes
# (\040 space, \011 tab, \012 newline, \134 backslash) decoded. A backslash not
# followed by three octal digits is kept as it is.
decodeMountPath() {
  local s=$1 out='' ch
  while [[ "${s}" == *\\* ]]; do
    out+=${s%%\\*}
    s=${s#*\\}
    if [[ "${s}" =~ ^[0-7]{3} ]]; then
      printf -v ch "\\${s:0:3}"
      out+=${ch}
      s=${s:3}
    else
      out+='\'
    fi
  done
  REPLY=${out}${s}
}

# readMountInfo: parses /proc/self/mountinfo into the arrays MI_ID, MI_PARENT,
# MI_DEV (MAJ:MIN), MI_MP (decoded mount point) and MI_FS (file system type),
# one element per mount, in the kernel's order. The file is read until two reads
# agree (at most 3 reads), so a mount changing meanwhile cannot tear the table.
readMountInfo() {
  local file=/proc/self/mountinfo text again attempt id parent dev root mp rest fs
  [[ -r "${file}" ]] || errorExit "cannot read ${file}"
  text=$(<"${file}") || errorExit "cannot read ${file}"
  for attempt in 1 2; do
    again=$(<"${file}") || errorExit "cannot read ${file}"
    [[ "${again}" == "${text}" ]] && break
    text=${again}
  done
  MI_ID=() MI_PARENT=() MI_DEV=() MI_MP=() MI_FS=()
  while IFS=' ' read -r id parent dev root mp rest; do
    # "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS"
    [[ "${mp}" == /* && "${rest}" == *' - '* ]] || continue
    fs=${rest#* - }
    decodeMountPath "${mp}"
    MI_ID+=("${id}") MI_PARENT+=("${parent}") MI_DEV+=("${dev}") MI_MP+=("${REPLY}") MI_FS+=("${fs%% *}")
  done <<<"${text}"
  (( ${#MI_ID[@]} > 0 )) || errorExit "no mounts found in ${file}"
}

# visibleMount PATH: sets REPLY to the index (in MI_*) of the mount that a
# lookup of PATH (canonical, absolute) ends on, by walking the mount tree from
# the root mount the way the kernel does: a mount hidden by a later mount on the
# same path or on a parent directory is never the answer. Needs readMountInfo.
visibleMount() {
  local path=$1 i cur='' prefix=/ rest key hops=0
  local -A child=() ids=()
  for i in "${!MI_ID[@]}"; do
    key=${MI_ID[i]}
    ids[${key}]=1
    key="${MI_PARENT[i]}|${MI_MP[i]}"
    child[${key}]=${i}
  done
  # The root mount: on "/", its parent not in the table or itself (the last one if several).
  for i in "${!MI_ID[@]}"; do
    key=${MI_PARENT[i]}
    if [[ "${MI_MP[i]}" == / && ( -z "${ids[${key}]+x}" || "${key}" == "${MI_ID[i]}" ) ]]; then cur=${i}; fi
  done
  [[ -n "${cur}" ]] || errorExit "no root mount found in /proc/self/mountinfo"
  rest=${path#/}
  while :; do
    # Mounts stacked on this directory: each one's parent is the one below it.
    key="${MI_ID[cur]}|${prefix}"
    while [[ -n "${child[${key}]+x}" && "${child[${key}]}" != "${cur}" ]]; do
      cur=${child[${key}]}
      key="${MI_ID[cur]}|${prefix}"
      hops=$((hops + 1))
      (( hops <= ${#MI_ID[@]} )) || errorExit "a cycle in /proc/self/mountinfo"
    done
    [[ -n "${rest}" ]] || break
    if [[ "${prefix}" == / ]]; then prefix=''; fi
    prefix+=/${rest%%/*}
    if [[ "${rest}" == */* ]]; then rest=${rest#*/}; else rest=''; fi
  done
  REPLY=${cur}
}

# mountsBelow DIR: sets BELOW to the decoded mount points that lie strictly
# below DIR (canonical). Needs readMountInfo.
mountsBelow() {
  local i
  BELOW=()
  for i in "${!MI_MP[@]}"; do
    if [[ "${MI_MP[i]}" == "$1"/* ]]; then BELOW+=("${MI_MP[i]}"); fi
  done
}

# quoteList MAX WORD...: the first MAX words quoted and space-separated, then
# "..." when there are more.
quoteList() {
  local max=$1 out='' w n=0
  shift
  for w in "$@"; do
    if (( n == max )); then out+=' ...'; break; fi
    out+="${out:+ }$(quote "${w}")"
    n=$((n + 1))
  done
  echo "${out}"
}
