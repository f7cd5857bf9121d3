// Checks on the discovery directories of storage classes (hostDir, mountDir).
// Every child of such a directory that is a mount point (Filesystem) or a
// block device (Block) becomes a PV, and a released PV is wiped as root: a
// directory that holds the system's own mounts or devices, or that lies inside
// another class's volumes, turns them into PVs to be wiped. Paths are compared
// as strings after posix.normalize ("..", ".", "//", trailing "/"); symlinks
// on the host are not resolved (the config is checked without the host).
import { posix } from 'node:path';

/** posix.normalize without a trailing "/" (except for "/" itself). Input: an absolute path. */
export function normalizeDir(dir: string): string {
  const n = posix.normalize(dir);
  return n.length > 1 && n.endsWith('/') ? n.slice(0, -1) : n;
}

interface SystemDir {
  readonly path: string;
  /** true: the directory and everything under it; false: the directory itself only. */
  readonly subtree: boolean;
  readonly what: string;
}

const OS = 'part of the operating system';
const PSEUDO = 'a kernel pseudo file system';
const RUNTIME = 'runtime state of the node (network namespaces, container mounts)';
const CONTAINERS = 'the kubelet\'s or a container runtime\'s state (pod volumes, container root file systems)';
const DEVICES = 'every device of the node';
const PARENT = 'a parent of system directories, which are often mount points of their own';

/**
 * Directories no class may discover in (docs/configuration.md, "Discovery
 * roots refused"). /lib* is matched by prefix below. /tmp, /mnt, /srv, /data,
 * /home, /opt, /media and /var/lib/<your own dir> stay allowed, and so does
 * everything under /dev/disk (by-id, by-path, a udev rule's own directory),
 * /dev/mapper and a volume group's /dev/<vg>.
 */
const SYSTEM_DIRS: readonly SystemDir[] = [
  { path: '/proc', subtree: true, what: PSEUDO },
  { path: '/sys', subtree: true, what: PSEUDO },
  { path: '/dev', subtree: false, what: 'the device directory: the disk of / and every other device of the node would become a PV' },
  { path: '/dev/shm', subtree: true, what: PSEUDO },
  { path: '/dev/pts', subtree: true, what: PSEUDO },
  { path: '/dev/mqueue', subtree: true, what: PSEUDO },
  { path: '/dev/hugepages', subtree: true, what: PSEUDO },
  { path: '/dev/fd', subtree: true, what: 'the daemon\'s own open files' },
  { path: '/dev/block', subtree: true, what: DEVICES },
  { path: '/dev/char', subtree: true, what: DEVICES },
  { path: '/dev/cpu', subtree: true, what: 'CPU devices' },
  { path: '/dev/net', subtree: true, what: 'network devices' },
  { path: '/dev/bus', subtree: true, what: 'bus devices' },
  { path: '/dev/input', subtree: true, what: 'input devices' },
  { path: '/dev/snd', subtree: true, what: 'sound devices' },
  { path: '/dev/dri', subtree: true, what: 'graphics devices' },
  { path: '/dev/vfio', subtree: true, what: 'VFIO devices' },
  { path: '/etc', subtree: true, what: OS },
  { path: '/boot', subtree: true, what: OS },
  { path: '/usr', subtree: true, what: OS },
  { path: '/bin', subtree: true, what: OS },
  { path: '/sbin', subtree: true, what: OS },
  { path: '/run', subtree: true, what: RUNTIME },
  { path: '/var/run', subtree: true, what: RUNTIME },
  { path: '/var/lock', subtree: true, what: RUNTIME },
  { path: '/var', subtree: false, what: PARENT },
  { path: '/var/lib', subtree: false, what: PARENT },
  { path: '/var/lib/kubelet', subtree: true, what: CONTAINERS },
  { path: '/var/lib/containerd', subtree: true, what: CONTAINERS },
  { path: '/var/lib/docker', subtree: true, what: CONTAINERS },
  { path: '/var/lib/containers', subtree: true, what: CONTAINERS },
  { path: '/var/lib/rancher', subtree: true, what: CONTAINERS },
  { path: '/var/lib/k0s', subtree: true, what: CONTAINERS },
  { path: '/var/lib/lxc', subtree: true, what: CONTAINERS },
  { path: '/var/lib/lxd', subtree: true, what: CONTAINERS },
  { path: '/var/lib/etcd', subtree: true, what: 'the etcd data directory' },
  { path: '/var/lib/snapd', subtree: true, what: 'snap packages (each one a mount point)' },
  { path: '/var/snap', subtree: true, what: 'snap packages\' data (microk8s keeps its kubelet and containerd there)' },
  { path: '/snap', subtree: true, what: 'snap packages (each one a mount point)' },
];

/** "/lib", "/lib32", "/lib64", "/libx32", ... */
const LIB = /^\/lib[^/]*(\/|$)/;

/**
 * Why a discovery directory is refused, or undefined when it is allowed.
 * `n` is absolute and normalised (normalizeDir).
 */
export function systemDirProblem(n: string): { readonly root: string; readonly what: string } | undefined {
  if (n === '/') return { root: '/', what: 'the root directory' };
  if (LIB.test(n)) return { root: `/${n.split('/')[1]!}`, what: OS };
  for (const s of SYSTEM_DIRS) {
    if (n === s.path || (s.subtree && n.startsWith(`${s.path}/`))) return { root: s.path, what: s.what };
  }
  return undefined;
}

/**
 * Control characters (C0, DEL, C1), format characters (bidi embeddings,
 * overrides and isolates, LRM/RLM, zero-width characters, BOM, ...), line and
 * paragraph separators, and lone surrogates. None belongs in a path, and each
 * can make a log line or `kubectl describe` show another path than the real one.
 */
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}]/u;
const UNPRINTABLE_ALL = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}]/gu;

/** The first unprintable character of `s` as "U+XXXX" with its index, or undefined. */
export function unprintableCharacter(s: string): { readonly code: string; readonly index: number } | undefined {
  const m = UNPRINTABLE.exec(s);
  if (m === null) return undefined;
  return { code: codePoint(m[0]), index: m.index };
}

function codePoint(ch: string): string {
  return `U+${ch.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
}

/** JSON-quoted, with every unprintable character (DEL, C1, bidi and format ones too) escaped as \uXXXX. */
export function quoteForDisplay(s: string): string {
  return JSON.stringify(s).replace(UNPRINTABLE_ALL, (ch) => {
    const cp = ch.codePointAt(0)!;
    return cp > 0xffff ? `\\u{${cp.toString(16)}}` : `\\u${cp.toString(16).padStart(4, '0')}`;
  });
}
