// What a real node (kubelet + containerd + CNI, e2e/harness/node.ts) changes on the host, as data:
// snapshotHost() records it before the node starts, diffHost() names every difference, and
// restoreHost() undoes the differences, removing only what did not exist before. The same code
// runs in the harness and in the detached watchdog (node-watchdog.ts) that restores the host
// when the test process is killed.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseMountPropagation } from '../../src/host/mountinfo.ts';

/**
 * Kernel settings the kubelet writes (setupKernelTunables, unless protectKernelDefaults) and the
 * CNI bridge plugin (ip_forward).
 */
export const watchedSysctls = [
  'vm.overcommit_memory',
  'vm.panic_on_oom',
  'kernel.panic',
  'kernel.panic_on_oops',
  'kernel.keys.root_maxkeys',
  'kernel.keys.root_maxbytes',
  'net.ipv4.ip_forward',
] as const;

/** Paths the kubelet and containerd use whatever their configured root (fixed in their code). */
export const fixedPaths = ['/var/lib/kubelet/device-plugins', '/var/log/containers', '/var/lib/cni', '/run/netns', '/run/containerd'] as const;

/** cgroup dirs the kubelet (kubepods) and containerd (k8s.io) create in each hierarchy. */
export const watchedCgroups = ['kubepods', 'k8s.io'] as const;

const cgroupRoot = '/sys/fs/cgroup';
const families = ['iptables', 'ip6tables'] as const;
type Family = (typeof families)[number];

export interface HostSnapshot {
  readonly sysctls: Record<string, string>;
  /** Per family, table name → its iptables-save block (counters and comments stripped); null when the tool is missing. */
  readonly iptables: Record<Family, Record<string, string> | null>;
  /** "mountpoint fstype propagation" per mount, in mountinfo order. */
  readonly mounts: string[];
  /** Existing cgroup dirs named in watchedCgroups, in any hierarchy. */
  readonly cgroups: string[];
  /** Network interface names. */
  readonly links: string[];
  /** Each fixed path → its entries, or null when it did not exist. */
  readonly paths: Record<string, string[] | null>;
  /** Ancestors of the fixed paths that existed (not compared; restoreHost removes the topmost new one). */
  readonly ancestors: string[];
}

const run = (cmd: string, args: readonly string[], input?: string): string =>
  execFileSync(cmd, args, { encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'], ...(input !== undefined ? { input } : {}) });

function sysctlPath(key: string): string {
  return join('/proc/sys', ...key.split('.'));
}

function readSysctls(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of watchedSysctls) out[k] = readFileSync(sysctlPath(k), 'utf8').trim();
  return out;
}

/** Splits iptables-save output into table blocks, without comments and with zeroed chain counters. */
export function parseIptablesSave(text: string): Record<string, string> {
  const tables: Record<string, string> = {};
  let name: string | undefined;
  let lines: string[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trimEnd();
    if (line === '' || line.startsWith('#')) continue;
    if (line.startsWith('*')) {
      name = line.slice(1);
      lines = [line];
    } else if (name !== undefined) {
      lines.push(line.replace(/^(:\S+ \S+) \[\d+:\d+\]$/, '$1 [0:0]'));
      if (line === 'COMMIT') {
        tables[name] = lines.join('\n');
        name = undefined;
      }
    }
  }
  return tables;
}

function readIptables(family: Family): Record<string, string> | null {
  try {
    return parseIptablesSave(run(`${family}-save`, []));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** Mount points from /proc/self/mountinfo with their fs type and propagation (shared/slave/private). */
export function parseMountinfo(text: string): string[] {
  return parseMountPropagation(text).map((m) => {
    const prop = m.tags.some((t) => t.startsWith('shared:')) ? 'shared' : m.tags.some((t) => t.startsWith('master:')) ? 'slave' : 'private';
    return `${m.mountPoint} ${m.fsType} ${prop}`;
  });
}

/** The mount point of a parseMountinfo() entry (it may contain spaces; fs type and propagation do not). */
export const mountPointOf = (entry: string): string => entry.split(' ').slice(0, -2).join(' ');

function readMounts(): string[] {
  return parseMountinfo(readFileSync('/proc/self/mountinfo', 'utf8'));
}

function hierarchies(): string[] {
  try {
    return readdirSync(cgroupRoot, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => join(cgroupRoot, d.name));
  } catch {
    return [];
  }
}

function readCgroups(): string[] {
  return hierarchies().flatMap((h) => watchedCgroups.map((c) => join(h, c)).filter((p) => existsSync(p)));
}

function readLinks(): string[] {
  return run('ip', ['-o', 'link', 'show'])
    .split('\n')
    .map((l) => /^\d+: ([^:@ ]+)/.exec(l)?.[1])
    .filter((n): n is string => n !== undefined)
    .sort();
}

function readPaths(): Record<string, string[] | null> {
  const out: Record<string, string[] | null> = {};
  for (const p of fixedPaths) {
    try {
      out[p] = readdirSync(p).sort();
    } catch {
      out[p] = null;
    }
  }
  return out;
}

export function snapshotHost(): HostSnapshot {
  return {
    sysctls: readSysctls(),
    iptables: { iptables: readIptables('iptables'), ip6tables: readIptables('ip6tables') },
    mounts: readMounts(),
    cgroups: readCgroups(),
    links: readLinks(),
    paths: readPaths(),
    ancestors: fixedPathAncestors(),
  };
}

export interface DiffOptions {
  /** Mount points to leave out of the comparison (mounts of other test runs on a shared machine). */
  readonly ignoreMount?: (mountPoint: string) => boolean;
}

function diffSets(what: string, b: readonly string[], a: readonly string[]): string[] {
  return [...a.filter((x) => !b.includes(x)).map((x) => `${what} added: ${x}`), ...b.filter((x) => !a.includes(x)).map((x) => `${what} gone: ${x}`)];
}

function diffIptables(before: HostSnapshot, after: HostSnapshot): string[] {
  const d: string[] = [];
  for (const fam of families) {
    const b = before.iptables[fam] ?? {};
    const a = after.iptables[fam] ?? {};
    for (const t of new Set([...Object.keys(b), ...Object.keys(a)])) {
      if (b[t] === a[t]) continue;
      const bl = (b[t] ?? '').split('\n');
      const al = (a[t] ?? '').split('\n');
      const how = b[t] === undefined ? 'created' : a[t] === undefined ? 'removed' : 'changed';
      d.push(`${fam} table ${t}: ${how} (+${al.filter((l) => !bl.includes(l)).join(' | ')}; -${bl.filter((l) => !al.includes(l)).join(' | ')})`);
    }
  }
  return d;
}

function diffPaths(before: HostSnapshot, after: HostSnapshot): string[] {
  return Object.keys(before.paths).flatMap((p) => {
    const b = before.paths[p] ?? null;
    const a = after.paths[p] ?? null;
    if (b === null) return a === null ? [] : [`path added: ${p}`];
    return a === null ? [`path gone: ${p}`] : diffSets(`entry of ${p}`, b, a);
  });
}

/** One line per difference between two snapshots; [] when the host is as before. */
export function diffHost(before: HostSnapshot, after: HostSnapshot, opts: DiffOptions = {}): string[] {
  const sysctls = Object.keys(before.sysctls)
    .filter((k) => before.sysctls[k] !== after.sysctls[k])
    .map((k) => `sysctl ${k}: ${before.sysctls[k] ?? '?'} -> ${after.sysctls[k] ?? '?'}`);
  const keep = (m: string): boolean => !(opts.ignoreMount?.(mountPointOf(m)) ?? false);
  return [
    ...sysctls,
    ...diffIptables(before, after),
    ...diffSets('mount', before.mounts.filter(keep), after.mounts.filter(keep)),
    ...diffSets('cgroup', before.cgroups, after.cgroups),
    ...diffSets('link', before.links, after.links),
    ...diffPaths(before, after),
  ];
}

// ---------------------------------------------------------------------------------------------
// Restoration

export interface RestoreOptions {
  /** Mounts under these dirs that are new since the snapshot are unmounted (deepest first). */
  readonly mountRoots: readonly string[];
  /** Links whose name this accepts and that are new are deleted (the CNI bridge, veth ends). */
  readonly ownLink: (name: string) => boolean;
  readonly log: (msg: string) => void;
}

const under = (p: string, root: string): boolean => p === root || p.startsWith(root.endsWith('/') ? root : `${root}/`);

function tryRun(log: (m: string) => void, cmd: string, args: readonly string[], input?: string): boolean {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...(input !== undefined ? { input } : {}) });
  if (r.status === 0) return true;
  log(`${cmd} ${args.join(' ')}: ${(r.stderr || r.error?.message || `exit ${String(r.status)}`).trim()}`);
  return false;
}

/** Every pid in a cgroup dir and its descendants. */
function cgroupPids(dir: string): number[] {
  const pids: number[] = [];
  const walk = (d: string): void => {
    try {
      for (const l of readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n')) if (l !== '') pids.push(Number(l));
      for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(join(d, e.name));
    } catch {
      /* gone meanwhile */
    }
  };
  walk(dir);
  return pids;
}

/** Kills every process in the cgroups created since the snapshot (the pods' containers). */
export function killNewCgroupProcesses(before: HostSnapshot, log: (m: string) => void): number {
  let n = 0;
  const pids = new Set(readCgroups().filter((c) => !before.cgroups.includes(c)).flatMap(cgroupPids)); // one process is in every hierarchy
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
      n++;
    } catch {
      /* exited */
    }
  }
  if (n > 0) log(`killed ${n} processes left in the node's cgroups`);
  return n;
}

/** rmdir bottom-up; a cgroup dir has only pseudo files, so its subdirs are all that must go first. */
function removeCgroupTree(dir: string): boolean {
  try {
    for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) removeCgroupTree(join(dir, e.name));
    rmdirSync(dir);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

function restoreMounts(before: HostSnapshot, opts: RestoreOptions): void {
  const had = new Set(before.mounts.map(mountPointOf));
  // Unmounting one mount can reveal or propagate others: repeat until nothing new is left.
  for (let round = 0; round < 10; round++) {
    const extra = readMounts()
      .map(mountPointOf)
      .filter((m) => !had.has(m) && opts.mountRoots.some((r) => under(m, r)));
    if (extra.length === 0) return;
    for (const m of [...new Set(extra)].sort((a, b) => b.length - a.length)) {
      if (spawnSync('umount', [m]).status !== 0) tryRun(opts.log, 'umount', ['-l', m]);
    }
  }
}

function restoreIptables(before: HostSnapshot, opts: RestoreOptions): void {
  for (const fam of families) {
    const b = before.iptables[fam];
    const a = readIptables(fam);
    if (b === null || a === null) continue;
    for (const t of Object.keys(a)) {
      if (a[t] === b[t]) continue;
      if (b[t] !== undefined) {
        tryRun(opts.log, `${fam}-restore`, [], `${b[t]}\n`); // replaces table t only
      } else if (!tryRun(opts.log, 'nft', ['delete', 'table', fam === 'iptables' ? 'ip' : 'ip6', t])) {
        // Without nft (or with the legacy backend) a table cannot be removed: empty it at least.
        tryRun(opts.log, fam, ['-t', t, '-F']);
        tryRun(opts.log, fam, ['-t', t, '-X']);
      }
    }
  }
}

/** Removes `path` if it is new; when it existed, removes the entries that are new. */
function restorePath(before: HostSnapshot, path: string, log: (m: string) => void): void {
  const had = before.paths[path] ?? null;
  if (had === null) {
    // Remove the topmost ancestor that did not exist either (e.g. /var/lib/kubelet for device-plugins).
    let top = path;
    while (dirname(top) !== top && !before.ancestors.includes(dirname(top))) top = dirname(top);
    if (existsSync(top)) {
      rmSync(top, { recursive: true, force: true });
      log(`removed ${top}`);
    }
    return;
  }
  let now: string[];
  try {
    now = readdirSync(path);
  } catch {
    return;
  }
  for (const e of now.filter((x) => !had.includes(x))) rmSync(join(path, e), { recursive: true, force: true });
}

/** The ancestors of the fixed paths that exist now. */
function fixedPathAncestors(): string[] {
  const out = new Set<string>();
  for (const p of fixedPaths) {
    for (let a = dirname(p); ; a = dirname(a)) {
      if (existsSync(a)) out.add(a);
      if (dirname(a) === a) break;
    }
  }
  return [...out].sort();
}

/**
 * Undoes what differs from `before`: unmounts new mounts under opts.mountRoots, removes the new
 * cgroups, links, iptables tables/rules, fixed paths, and writes the sysctls back. Call it after
 * the node's processes are gone (killNewCgroupProcesses for the containers).
 */
export function restoreHost(before: HostSnapshot, opts: RestoreOptions): void {
  restoreMounts(before, opts);
  for (const c of readCgroups().filter((x) => !before.cgroups.includes(x))) {
    // A process that was just killed may still hold its cgroup for a moment.
    const deadline = Date.now() + 10_000;
    while (!removeCgroupTree(c) && Date.now() < deadline) {
      for (const pid of cgroupPids(c)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          /* exited */
        }
      }
      spawnSync('sleep', ['0.2']);
    }
    if (existsSync(c)) opts.log(`could not remove cgroup ${c}`);
  }
  for (const l of readLinks().filter((x) => !before.links.includes(x) && opts.ownLink(x))) tryRun(opts.log, 'ip', ['link', 'delete', l]);
  restoreIptables(before, opts);
  for (const k of Object.keys(before.sysctls)) {
    const want = before.sysctls[k] ?? '';
    try {
      if (readFileSync(sysctlPath(k), 'utf8').trim() !== want) writeFileSync(sysctlPath(k), `${want}\n`);
    } catch (err) {
      opts.log(`sysctl ${k}=${want}: ${(err as Error).message}`);
    }
  }
  for (const p of fixedPaths) {
    // /run/netns entries are bind mounts of network namespaces: unmount before removing.
    if (p === '/run/netns') restoreMounts(before, { ...opts, mountRoots: [p] });
    restorePath(before, p, opts.log);
  }
}
