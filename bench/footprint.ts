// Benchmark 5, footprint (issues 12 and 20): what one daemon costs a node, run as users
// run it. `npm run build` (or the builds given by --footprint-bundle), then `node <the image's
// ENTRYPOINT node flags> dist/main.js <the DaemonSet's args>` (default QPS/burst,
// --discovery-period=10s, default log level and format), against the real control plane, N tmpfs
// mounts (size=1m) under one class. In one run:
//   - at 500 and at 2,000 volumes (PVs deleted in between): spawn -> first PV and
//     -> Nth PV (admin watch), CPU (utime+stime of /proc/<pid>/stat) from spawn to the Nth
//     PV, VmRSS and VmHWM right after, CPU over 60 s idle afterwards, VmRSS after that
//     period, where the RSS is by mapping kind (/proc/<pid>/smaps), and SIGTERM -> exit;
//     with several builds (--footprint-bundle NAME=PATH, repeatable) each size runs every
//     build in turn, --footprint-repeat times, the order alternating, so load drifts hit all;
//   - a fresh daemon with the 2,000 own PVs present, then with 10,000 PVs of
//     other nodes added: VmRSS/VmHWM 20 s after spawn (the first build only);
//   - with --footprint-real-node: the image built from this tree as the shipped DaemonSet on a
//     real node (bench/footprint-real-node.ts): the container's working set as `kubectl top` shows it;
// printed as issue 20's table: the Go provisioner's figures of issue 20 (fixed reference numbers
// measured on this machine kind, not re-measured here), each build's, the ratio and the goal.
//
//   node bench/footprint.ts [--footprint-sizes 500,2000] [--footprint-foreign 10000] [--footprint-idle-s 60]
//                           [--footprint-bundle before=/a/dist/main.js --footprint-bundle after=/b/dist/main.js]
//                           [--footprint-repeat 1] [--footprint-real-node]
//                           ['--footprint-node-args=--cpu-prof --cpu-prof-dir=/tmp/prof']
// A bundle spec is NAME=PATH[,cache=warm|cold|off]: V8's compile cache of that build (the shims of issue 20
// enable it in dist/.compile-cache): warm (default) fills it first with dist/warm-compile-cache.js as the image
// does, cold empties it before each start, off starts with NODE_DISABLE_COMPILE_CACHE=1. Each env.KEY=VALUE sets
// KEY for that build's daemon (and its cache warming) on top of the image's environment, e.g.
// `b=dist/main.js,env.MALLOC_ARENA_MAX=2` or `env.NODE_OPTIONS=--max-semi-space-size=2` (replaces the Dockerfile's);
// each arg=--FLAG adds a node flag after the ENTRYPOINT's (V8 flags that NODE_OPTIONS refuses, e.g. arg=--no-opt).
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { parse as parseYaml } from 'yaml';
import { createForeignPVs } from './informer-scale.ts';
import {
  deleteOwnPVs,
  kibToMib,
  log,
  mib,
  mountVolumes,
  printSection,
  procStatusKiB,
  PVWatch,
  repoRoot,
  secs,
  sleep,
  sumOf,
  table,
  waitControllerStarted,
  withBench,
  type Bench,
  type Daemon,
  type ProcMem,
  type Section,
} from './lib.ts';

/**
 * The Go provisioner as issue 20 measured it (built from its upstream HEAD, same control plane, 500 tmpfs
 * volumes, n=2, this machine kind): [low, high]; fixed reference numbers, not re-measured by the bench.
 */
export const GO_REFERENCE = {
  firstPvS: [0.22, 0.29],
  createsCpuS500: [1.5, 1.63],
  rssAfterCreatesMiB: [44.5, 45.4],
  rssAfterIdleMiB: [47, 48],
  idleCpuSPerMin500: [0.125, 0.15],
  createsCpuS2000: [6.48, 6.48],
  hwmMiB2000: [60.8, 60.8],
  idleCpuSPerMin2000: [0.42, 0.42],
} as const satisfies Record<string, readonly [number, number]>;

/** Issue 20's goals (≈1.5x Go): upper bounds. */
export const GOALS = {
  firstPvS: 0.45,
  createsCpuS500: 2.3,
  rssMiB500: 70,
  hwmMiB2000: 85,
  idleCpuSPerMin500: 0.2,
} as const;

/** utime + stime of a process in seconds (/proc/<pid>/stat; USER_HZ is 100 on Linux). */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the ")" of the command name: state is field 3, utime 14, stime 15.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

/** The 1/5/15-minute load averages. */
const loadavg = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/** How the image starts the daemon: node flags of the Dockerfile's ENTRYPOINT and its NODE_OPTIONS, if any. */
export function imageCommand(): { nodeArgs: string[]; env: Record<string, string> } {
  const dockerfile = readFileSync(join(repoRoot, 'Dockerfile'), 'utf8');
  const entry = /^ENTRYPOINT\s+(\[.*\])\s*$/m.exec(dockerfile)?.[1];
  if (entry === undefined) throw new Error('Dockerfile: no ENTRYPOINT [..., "node", ..., "/app/dist/main.js"] line');
  const argv = JSON.parse(entry) as string[];
  // ["/usr/bin/tini", "--", "node", <node flags>, "/app/dist/main.js"]: the flags between node and the script.
  const node = argv.indexOf('node');
  const script = argv.findIndex((a) => a.endsWith('main.js'));
  if (node < 0 || script < node) throw new Error(`Dockerfile: ENTRYPOINT ${entry} does not run node <flags> …/main.js`);
  const nodeArgs = argv.slice(node + 1, script);
  const env: Record<string, string> = {};
  const opts = /^ENV\s.*\bNODE_OPTIONS="([^"]*)"/m.exec(dockerfile)?.[1];
  if (opts !== undefined) env['NODE_OPTIONS'] = opts;
  return { nodeArgs, env };
}

/**
 * The provisioner container's args in deployment/kubernetes/daemonset.yaml, without --listen-address and
 * --state-dir (a host path: the bench gives each daemon a state dir of its own, see spawnAsUsers).
 */
export function daemonSetArgs(): string[] {
  const ds = parseYaml(readFileSync(join(repoRoot, 'deployment', 'kubernetes', 'daemonset.yaml'), 'utf8')) as {
    spec: { template: { spec: { containers: Array<{ name: string; args?: string[] }> } } };
  };
  const c = ds.spec.template.spec.containers.find((x) => x.name === 'provisioner');
  return (c?.args ?? []).filter((a) => !a.startsWith('--listen-address') && !a.startsWith('--state-dir'));
}

/** Where the memory is, after the idle period: /proc/<pid>/status and the daemon's own /metrics. */
export interface MemBreakdown {
  /** RssFile: file-backed pages (mostly the node binary), KiB. */
  readonly rssFileKiB: number;
  /** RssAnon: anonymous pages (V8 heap, malloc, stacks), KiB. */
  readonly rssAnonKiB: number;
  readonly heapUsedBytes: number;
  readonly heapTotalBytes: number;
  readonly externalBytes: number;
}

async function memBreakdown(d: Daemon): Promise<MemBreakdown | undefined> {
  const s = procStatusKiB(d.pid, ['RssFile', 'RssAnon']);
  if (s === undefined) return undefined;
  const m = await d.metrics();
  return {
    rssFileKiB: s.RssFile,
    rssAnonKiB: s.RssAnon,
    heapUsedBytes: sumOf(m, 'nodejs_heap_size_used_bytes'),
    heapTotalBytes: sumOf(m, 'nodejs_heap_size_total_bytes'),
    externalBytes: sumOf(m, 'nodejs_external_memory_bytes'),
  };
}

/** Rss of /proc/<pid>/smaps by mapping kind, KiB. */
export interface SmapsRss {
  /** `[heap]`: the brk heap (malloc: TLS, HTTP, zlib buffers, V8's C++ side). */
  readonly heap: number;
  /** Anonymous mappings (V8's JavaScript heap and code space, mmap'd malloc arenas, thread stacks). */
  readonly anon: number;
  /** Executable file mappings: of the node binary, and of other files (libc, libstdc++, ...). */
  readonly codeNode: number;
  readonly codeOther: number;
  /** Non-executable file mappings (read-only data such as ICU and the built-in snapshot, relocated data). */
  readonly fileNode: number;
  readonly fileOther: number;
  /** [vdso], [vvar], [stack] of the main thread and the like. */
  readonly other: number;
}

/** Classifies the mappings of /proc/<pid>/smaps (text) by kind and sums their Rss. */
export function smapsRss(smaps: string, nodeBinary: string): SmapsRss {
  const r = { heap: 0, anon: 0, codeNode: 0, codeOther: 0, fileNode: 0, fileOther: 0, other: 0 };
  let kind: keyof typeof r = 'other';
  for (const line of smaps.split('\n')) {
    // A mapping header: "start-end perms offset dev inode [path]".
    const h = /^[0-9a-f]+-[0-9a-f]+ (\S{4}) \S+ \S+ (\d+)\s*(.*)$/.exec(line);
    if (h) {
      const [, perms = '', inode = '0', path = ''] = h;
      if (path === '[heap]') kind = 'heap';
      else if (path === '' || path.startsWith('[anon')) kind = 'anon';
      else if (path.startsWith('[')) kind = 'other';
      else if (inode === '0') kind = 'anon'; // e.g. /dev/zero, memfd without inode number: not file pages
      else if (perms.includes('x')) kind = path === nodeBinary ? 'codeNode' : 'codeOther';
      else kind = path === nodeBinary ? 'fileNode' : 'fileOther';
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) r[kind] += Number(rss[1]);
  }
  return r;
}

function readSmaps(pid: number, nodeBinary: string): SmapsRss | undefined {
  try {
    return smapsRss(readFileSync(`/proc/${pid}/smaps`, 'utf8'), nodeBinary);
  } catch {
    return undefined;
  }
}

/** One build to measure: a dist/main.js and how its compile cache is used. */
export interface Build {
  readonly name: string;
  /** Absolute path of its dist/main.js. */
  readonly main: string;
  readonly cache: 'warm' | 'cold' | 'off';
  /** Environment set for this build on top of the image's (env.KEY=VALUE options; NODE_OPTIONS replaces the image's). */
  readonly env?: Readonly<Record<string, string>>;
  /** Node flags for this build after the ENTRYPOINT's (arg=FLAG options). */
  readonly nodeArgs?: readonly string[];
}

/** NAME=PATH[,cache=warm|cold|off][,env.KEY=VALUE ...][,arg=FLAG ...] (see the header). */
export function parseBuild(spec: string): Build {
  const [head = '', ...opts] = spec.split(',');
  const eq = head.indexOf('=');
  if (eq <= 0 || eq === head.length - 1) throw new Error(`--footprint-bundle ${JSON.stringify(spec)}: expected NAME=PATH[,cache=warm|cold|off][,env.KEY=VALUE][,arg=FLAG]`);
  let cache: Build['cache'] = 'warm';
  const env: Record<string, string> = {};
  const nodeArgs: string[] = [];
  for (const o of opts) {
    const m = /^cache=(warm|cold|off)$/.exec(o);
    const e = /^env\.([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(o);
    if (m) cache = m[1] as Build['cache'];
    else if (e) env[e[1]!] = e[2]!;
    else if (o.startsWith('arg=--')) nodeArgs.push(o.slice(4));
    else throw new Error(`--footprint-bundle ${JSON.stringify(spec)}: unknown option ${JSON.stringify(o)} (cache=warm|cold|off, env.KEY=VALUE, arg=--FLAG)`);
  }
  return {
    name: head.slice(0, eq),
    main: resolve(head.slice(eq + 1)),
    cache,
    ...(Object.keys(env).length > 0 ? { env } : {}),
    ...(nodeArgs.length > 0 ? { nodeArgs } : {}),
  };
}

export interface FootprintRun {
  readonly build: string;
  readonly volumes: number;
  readonly firstPvMs: number;
  readonly lastPvMs: number;
  /** CPU seconds from spawn to the Nth PV seen by the watch (start-up included). */
  readonly createsCpuS: number;
  readonly after: ProcMem | undefined;
  readonly idleWindowS: number;
  readonly idleCpuSPerMin: number;
  readonly afterIdle: ProcMem | undefined;
  readonly breakdown: MemBreakdown | undefined;
  readonly smaps: SmapsRss | undefined;
  readonly sigtermExitMs: number;
  readonly exitCode: number | null;
  readonly load: string;
}

export interface FootprintStart {
  readonly phase: string;
  readonly mem: ProcMem | undefined;
  readonly cpuS: number;
  readonly sigtermExitMs: number;
  readonly load: string;
}

/** Extra node flags for every footprint daemon (--footprint-node-args, e.g. --cpu-prof --cpu-prof-dir=DIR). */
let extraNodeArgs: readonly string[] = [];

/** Fills or empties the build's compile cache as its spec says (before each start). */
function prepareCache(build: Build): void {
  const dist = dirname(build.main);
  const warm = join(dist, 'warm-compile-cache.js');
  if (build.cache === 'cold') rmSync(join(dist, '.compile-cache'), { recursive: true, force: true });
  else if (build.cache === 'warm' && existsSync(warm)) {
    const { nodeArgs, env } = imageCommand();
    execFileSync(process.execPath, [...nodeArgs, ...(build.nodeArgs ?? []), warm], { env: { PATH: process.env['PATH'] ?? '', ...env, ...build.env }, stdio: ['ignore', 'ignore', 'inherit'] });
  }
}

/**
 * Starts `build` as the image does. `jsonLogs`: JSON log lines (what waitControllerStarted reads) instead of the
 * default klog text that users get (issue 18).
 */
function spawnAsUsers(b: Bench, build: Build, tag: string, jsonLogs = false): Promise<Daemon> {
  const { nodeArgs, env } = imageCommand();
  prepareCache(build);
  return b.startDaemon({
    tag: `${build.name}-${tag}`,
    script: build.main,
    nodeArgs: [...nodeArgs, ...(build.nodeArgs ?? []), ...extraNodeArgs],
    env: { ...env, ...build.env, ...(jsonLogs ? {} : { LOG_FORMAT: '' }), ...(build.cache === 'off' ? { NODE_DISABLE_COMPILE_CACHE: '1' } : {}) },
    // In the bench's temp dir (removed at the end), not the DaemonSet's host path.
    args: [...daemonSetArgs(), `--state-dir=${b.host.path('state')}`],
    logLevel: null,
  });
}

/** SIGTERM -> exit, in ms; the exit code. */
async function sigterm(d: Daemon): Promise<{ ms: number; code: number | null }> {
  const t = performance.now();
  d.proc.child.kill('SIGTERM');
  const code = await d.proc.exited;
  const ms = performance.now() - t;
  await d.stop(); // already gone: forgets it
  return { ms, code };
}

/** One measured run of `build` at `volumes` mounts, no PV of this node present at the start. */
export async function footprintRun(b: Bench, build: Build, volumes: number, idleS: number): Promise<FootprintRun> {
  const load0 = loadavg();
  const watch = new PVWatch(b.kc, b.ownSelector);
  await watch.start();
  if (watch.count !== 0) throw new Error(`${watch.count} PVs of this node already present`);
  try {
    log(`footprint: ${build.name}, ${volumes} volumes, spawning the built daemon`);
    const d = await spawnAsUsers(b, build, String(volumes));
    await watch.until((c) => c >= volumes, `${volumes} PVs`, 120_000 + volumes * 500);
    const createsCpuS = cpuSeconds(d.pid);
    const after = d.mem();
    const seen = [...watch.seen.values()];
    const firstPvMs = Math.min(...seen) - d.spawnedAt;
    const lastPvMs = Math.max(...seen) - d.spawnedAt;
    log(`footprint: ${build.name}: ${volumes} PVs after ${secs(lastPvMs)} s, first after ${secs(firstPvMs)} s, ${createsCpuS.toFixed(2)} s CPU; idle ${idleS} s`);
    await sleep(5000); // the last creates' watch echoes and Events
    const c0 = cpuSeconds(d.pid);
    const i0 = performance.now();
    await sleep(idleS * 1000);
    const idleCpu = cpuSeconds(d.pid) - c0;
    const idleWindowS = (performance.now() - i0) / 1000;
    const afterIdle = d.mem();
    const smaps = readSmaps(d.pid, process.execPath);
    const breakdown = await memBreakdown(d); // after the idle CPU window: the scrape costs CPU
    const stop = await sigterm(d);
    log(`footprint: ${build.name}: idle ${idleCpu.toFixed(2)} s CPU in ${idleWindowS.toFixed(1)} s, VmRSS ${kibToMib(afterIdle?.rssKiB)} MiB; SIGTERM -> exit ${stop.ms.toFixed(0)} ms`);
    return {
      build: build.name,
      volumes,
      firstPvMs,
      lastPvMs,
      createsCpuS,
      after,
      idleWindowS,
      idleCpuSPerMin: (idleCpu / idleWindowS) * 60,
      afterIdle,
      breakdown,
      smaps,
      sigtermExitMs: stop.ms,
      exitCode: stop.code,
      load: `${load0} -> ${loadavg()}`,
    };
  } finally {
    watch.stop();
  }
}

/** A fresh daemon with whatever PVs exist: memory and CPU `settleS` after spawn, then SIGTERM -> exit. */
async function freshStart(b: Bench, build: Build, phase: string, settleS: number): Promise<FootprintStart> {
  const load0 = loadavg();
  const d = await spawnAsUsers(b, build, 'fresh', true);
  await waitControllerStarted(d);
  await sleep(Math.max(0, d.spawnedAt + settleS * 1000 - Date.now()));
  const mem = d.mem();
  const cpuS = cpuSeconds(d.pid);
  const stop = await sigterm(d);
  log(`footprint: ${build.name}: ${phase}: VmRSS ${kibToMib(mem?.rssKiB)} MiB, ${cpuS.toFixed(2)} s CPU`);
  return { phase: `${build.name}: ${phase}`, mem, cpuS, sigtermExitMs: stop.ms, load: `${load0} -> ${loadavg()}` };
}

/** "a" or "a–b" (min–max of the values, `digits` decimals). */
export function range(values: readonly number[], digits: number): string {
  const v = values.filter((x) => Number.isFinite(x));
  if (v.length === 0) return 'n/a';
  const lo = Math.min(...v).toFixed(digits);
  const hi = Math.max(...v).toFixed(digits);
  return lo === hi ? lo : `${lo}–${hi}`;
}

const mid = (values: readonly number[]): number => (Math.min(...values) + Math.max(...values)) / 2;

/** ours / Go, midpoints of both ranges, as "2.7×". */
export function ratio(ours: readonly number[], go: readonly number[]): string {
  const v = ours.filter((x) => Number.isFinite(x));
  if (v.length === 0 || go.length === 0) return 'n/a';
  return `${(mid(v) / mid(go)).toFixed(2)}×`;
}

/** Goal check over every run: "met", "not met", or "met in k of n". */
export function met(ours: readonly number[], goal: number | undefined): string {
  const v = ours.filter((x) => Number.isFinite(x));
  if (goal === undefined) return '';
  if (v.length === 0) return 'n/a';
  const k = v.filter((x) => x <= goal).length;
  return k === v.length ? 'met' : k === 0 ? 'not met' : `met in ${k} of ${v.length}`;
}

/** What the working-set row needs of a real-node measurement (bench/footprint-real-node.ts). */
export interface WorkingSetRow {
  readonly volumes: number;
  /** Container working set (cgroup usage - inactive_file), MiB, after the creates and after the idle period. */
  readonly afterCreatesMiB: number;
  readonly afterIdleMiB: number;
  /** The same container's processes' VmRSS, MiB, after the idle period. */
  readonly vmRssAfterIdleMiB: number;
  readonly cgroup: string;
}

const kib = (x: number | undefined): number => (x === undefined ? NaN : x / 1024);

/** Issue 20's table: one row per measure, the Go figures, the goal, and per build: ours, ratio, met. */
export function issueTable(builds: readonly string[], runs: readonly FootprintRun[], idleS: number, workingSet?: WorkingSetRow): string {
  const of = (build: string, volumes: number): FootprintRun[] => runs.filter((r) => r.build === build && r.volumes === volumes);
  const goalText = (g: number | undefined, unit: string): string => (g === undefined ? '—' : `≤ ${g}${unit}`);
  const goRange = (g: readonly number[]): string => range(g, g[0] !== undefined && g[0] < 1 ? 3 : 2).replace(/(\.\d*?)0+(?=–|$)/g, '$1').replace(/\.(?=–|$)/g, '');
  type Line = { label: string; volumes: number; go: readonly number[] | undefined; goal: number | undefined; unit: string; digits: number; value: (r: FootprintRun) => number };
  const lines: Line[] = [
    { label: 'spawn → first PV (s)', volumes: 500, go: GO_REFERENCE.firstPvS, goal: GOALS.firstPvS, unit: ' s', digits: 2, value: (r) => r.firstPvMs / 1000 },
    { label: 'CPU spawn → 500th PV (s)', volumes: 500, go: GO_REFERENCE.createsCpuS500, goal: GOALS.createsCpuS500, unit: ' s', digits: 2, value: (r) => r.createsCpuS },
    { label: 'VmRSS after the creates (MiB)', volumes: 500, go: GO_REFERENCE.rssAfterCreatesMiB, goal: GOALS.rssMiB500, unit: ' MiB', digits: 1, value: (r) => kib(r.after?.rssKiB) },
    { label: `VmRSS after the idle period, ${idleS} s (MiB)`, volumes: 500, go: GO_REFERENCE.rssAfterIdleMiB, goal: GOALS.rssMiB500, unit: ' MiB', digits: 1, value: (r) => kib(r.afterIdle?.rssKiB) },
    { label: 'idle CPU, 10 s period (s/min)', volumes: 500, go: GO_REFERENCE.idleCpuSPerMin500, goal: GOALS.idleCpuSPerMin500, unit: ' s/min', digits: 2, value: (r) => r.idleCpuSPerMin },
    { label: '500 PVs created after (s, wall)', volumes: 500, go: undefined, goal: undefined, unit: '', digits: 1, value: (r) => r.lastPvMs / 1000 },
    { label: '2,000 volumes: CPU spawn → 2,000th PV (s)', volumes: 2000, go: GO_REFERENCE.createsCpuS2000, goal: undefined, unit: '', digits: 2, value: (r) => r.createsCpuS },
    { label: '2,000 volumes: VmHWM (MiB)', volumes: 2000, go: GO_REFERENCE.hwmMiB2000, goal: GOALS.hwmMiB2000, unit: ' MiB', digits: 1, value: (r) => kib(r.after?.hwmKiB) },
    { label: '2,000 volumes: idle CPU (s/min)', volumes: 2000, go: GO_REFERENCE.idleCpuSPerMin2000, goal: undefined, unit: '', digits: 2, value: (r) => r.idleCpuSPerMin },
  ];
  const head = ['row', 'Go (issue 20)', 'goal', ...builds.flatMap((b) => [b, '×Go', 'goal?'])];
  const rows: string[][] = [];
  for (const l of lines) {
    if (!builds.some((b) => of(b, l.volumes).length > 0)) continue;
    rows.push([
      l.label,
      l.go === undefined ? '—' : goRange(l.go),
      goalText(l.goal, l.unit),
      ...builds.flatMap((b) => {
        const v = of(b, l.volumes).map(l.value);
        return v.length === 0 ? ['not run', '', ''] : [range(v, l.digits), l.go === undefined ? '' : ratio(v, l.go), met(v, l.goal)];
      }),
    ]);
  }
  if (workingSet !== undefined) {
    const ws = [workingSet.afterCreatesMiB, workingSet.afterIdleMiB];
    rows.push([
      `working set, kubectl top (${workingSet.cgroup}: usage − inactive_file), real node, ${workingSet.volumes} volumes: after the creates / after the idle period (MiB)`,
      `not measured (VmRSS ${goRange(GO_REFERENCE.rssAfterCreatesMiB)} / ${goRange(GO_REFERENCE.rssAfterIdleMiB)})`,
      goalText(GOALS.rssMiB500, ' MiB'),
      ...builds.flatMap((_, i) =>
        i === 0
          ? [`${workingSet.afterCreatesMiB.toFixed(1)} / ${workingSet.afterIdleMiB.toFixed(1)} (VmRSS ${workingSet.vmRssAfterIdleMiB.toFixed(1)})`, ratio(ws, [...GO_REFERENCE.rssAfterCreatesMiB, ...GO_REFERENCE.rssAfterIdleMiB]), met(ws, GOALS.rssMiB500)]
          : ['(image of this tree only)', '', ''],
      ),
    ]);
  }
  return table(head, rows);
}

/** Per build and size, after the idle period: where the RSS is (smaps), MiB; ranges over the runs. */
export function smapsTable(builds: readonly string[], runs: readonly FootprintRun[]): string {
  const sizes = [...new Set(runs.map((r) => r.volumes))].sort((a, b) => a - b);
  const cols = builds.flatMap((b) => sizes.map((n) => ({ b, n, rs: runs.filter((r) => r.build === b && r.volumes === n && r.smaps !== undefined) }))).filter((c) => c.rs.length > 0);
  const kinds: Array<[string, (s: SmapsRss) => number]> = [
    ['anonymous (V8 heap and code space, mmap arenas, stacks)', (s) => s.anon],
    ['[heap] (malloc: TLS, HTTP, V8 C++ side)', (s) => s.heap],
    ['code of the node binary (r-x)', (s) => s.codeNode],
    ['other file of the node binary (ICU, snapshot, data)', (s) => s.fileNode],
    ['code of other files (libc, libstdc++, ...)', (s) => s.codeOther],
    ['other file mappings', (s) => s.fileOther],
    ['[stack], [vdso], ...', (s) => s.other],
    ['total', (s) => s.anon + s.heap + s.codeNode + s.fileNode + s.codeOther + s.fileOther + s.other],
  ];
  return table(
    ['Rss by mapping (MiB)', ...cols.map((c) => `${c.b}, ${c.n}`)],
    kinds.map(([label, f]) => [label, ...cols.map((c) => range(c.rs.map((r) => (r.smaps ? f(r.smaps) / 1024 : NaN)), 1))]),
  );
}

/** Every measured value, run by run. */
export function runsTable(runs: readonly FootprintRun[]): string {
  return table(
    ['build', 'volumes', 'first PV (s)', 'Nth PV (s)', 'CPU to Nth (s)', 'VmRSS / VmHWM after (MiB)', 'idle CPU (s/min)', 'VmRSS after idle (MiB)', 'RssFile / RssAnon (MiB)', 'V8 heap used / total (MiB)', 'SIGTERM -> exit (ms)', 'load average'],
    runs.map((r) => [
      r.build,
      r.volumes,
      secs(r.firstPvMs),
      secs(r.lastPvMs),
      r.createsCpuS.toFixed(2),
      `${kibToMib(r.after?.rssKiB)} / ${kibToMib(r.after?.hwmKiB)}`,
      r.idleCpuSPerMin.toFixed(2),
      kibToMib(r.afterIdle?.rssKiB),
      r.breakdown ? `${kibToMib(r.breakdown.rssFileKiB)} / ${kibToMib(r.breakdown.rssAnonKiB)}` : 'n/a',
      r.breakdown ? `${mib(r.breakdown.heapUsedBytes)} / ${mib(r.breakdown.heapTotalBytes)}` : 'n/a',
      `${r.sigtermExitMs.toFixed(0)} (exit ${String(r.exitCode)})`,
      r.load,
    ]),
  );
}

export function footprintMarkdown(o: {
  builds: readonly Build[];
  runs: readonly FootprintRun[];
  starts: readonly FootprintStart[];
  cmd: string;
  idleS: number;
  workingSet?: WorkingSetRow | undefined;
}): string {
  const names = o.builds.map((b) => b.name);
  return [
    `Daemon as users run it: \`${o.cmd}\`, default QPS/burst (20/40), default log level and format, one class, tmpfs mounts (size=1m).`,
    `Builds: ${o.builds.map((b) => `${b.name} = \`${b.main}\` (${existsSync(join(dirname(b.main), 'warm-compile-cache.js')) ? `compile cache ${b.cache}` : 'no compile cache in this build'}${b.env ? `, ${Object.entries(b.env).map(([k, v]) => `${k}=${v}`).join(' ')}` : ''}${b.nodeArgs ? `, node ${b.nodeArgs.join(' ')}` : ''})`).join('; ')}.`,
    'Go column: the Go provisioner as issue 20 measured it on this machine kind (fixed reference numbers, not re-measured); ×Go is ours over Go, midpoints of the ranges.',
    'CPU is utime+stime from /proc/<pid>/stat (start-up included); first/Nth PV are stamped by an admin watch. Ranges are min–max over the runs.',
    '',
    issueTable(names, o.runs, o.idleS, o.workingSet),
    '',
    'Where the RSS is after the idle period (/proc/<pid>/smaps, Rss by mapping):',
    '',
    smapsTable(names, o.runs),
    '',
    'Run by run (in the order they ran):',
    '',
    runsTable(o.runs),
    '',
    table(
      ['fresh daemon', 'VmRSS (MiB)', 'VmHWM (MiB)', 'CPU since spawn (s)', 'SIGTERM -> exit (ms)', 'load average'],
      o.starts.map((s) => [s.phase, kibToMib(s.mem?.rssKiB), kibToMib(s.mem?.hwmKiB), s.cpuS.toFixed(2), s.sigtermExitMs.toFixed(0), s.load]),
    ),
  ].join('\n');
}

/** The order of the builds in repeat `i`: as given, then reversed, and so on (interleaved). */
export function runOrder<T>(builds: readonly T[], i: number): T[] {
  return i % 2 === 0 ? [...builds] : [...builds].reverse();
}

export interface FootprintOptions {
  sizes: readonly number[];
  foreign: number;
  idleS: number;
  settleS?: number;
  nodeArgs?: readonly string[];
  /** Builds to measure; none: `npm run build` in this tree, as "this tree". */
  builds?: readonly Build[];
  repeat?: number;
  /** Also measure the image of this tree on a real node (working set). */
  realNode?: boolean;
}

/** Builds dist (npm run build) unless builds are given, then the whole footprint benchmark in its own bench environment. */
export async function footprint(o: FootprintOptions): Promise<Section> {
  extraNodeArgs = o.nodeArgs ?? [];
  let builds = o.builds ?? [];
  if (builds.length === 0) {
    log('footprint: npm run build');
    execFileSync('npm', ['run', 'build'], { cwd: repoRoot, stdio: ['ignore', 'ignore', 'inherit'] });
    builds = [{ name: 'this tree', main: join(repoRoot, 'dist', 'main.js'), cache: 'warm' }];
  }
  for (const b of builds) if (!existsSync(b.main)) throw new Error(`footprint: build ${b.name}: ${b.main} does not exist`);
  const { nodeArgs, env } = imageCommand();
  const cmd = [...Object.entries(env).map(([k, v]) => `${k}="${v}"`), 'node', ...nodeArgs, 'dist/main.js', ...daemonSetArgs()].join(' ');
  const settleS = o.settleS ?? 20;
  const repeat = o.repeat ?? 1;
  const section = await withBench({ name: 'footprint' }, async (b) => {
    const runs: FootprintRun[] = [];
    const starts: FootprintStart[] = [];
    let mounted = 0;
    const sizes = [...o.sizes].sort((x, y) => x - y);
    for (const n of sizes) {
      if (n > mounted) {
        log(`footprint: mounting ${n - mounted} more tmpfs volumes`);
        mountVolumes(b, n - mounted, mounted);
        mounted = n;
      }
      for (let i = 0; i < repeat; i++) {
        for (const build of runOrder(builds, i)) {
          if (runs.length > 0) {
            log('footprint: deleting the PVs');
            await deleteOwnPVs(b, 600_000);
          }
          const r = await footprintRun(b, build, n, o.idleS);
          runs.push(r);
          log(`footprint: run ${JSON.stringify(r)}`); // the raw numbers, kept in the log should a later step fail
        }
      }
    }
    // The PVs of the last run stay for the fresh starts.
    const own = sizes.at(-1) ?? 0;
    const first = builds[0];
    if (first !== undefined) {
      try {
        starts.push(await freshStart(b, first, `${own} own PVs present, ${settleS} s after spawn`, settleS));
        if (o.foreign > 0) {
          log(`footprint: creating ${o.foreign} PVs of other nodes`);
          await createForeignPVs(b, o.foreign);
          starts.push(await freshStart(b, first, `${own} own + ${o.foreign} foreign PVs present, ${settleS} s after spawn`, settleS));
        }
      } catch (e) {
        // The runs above are what the table is made of: printed without the fresh starts.
        log(`footprint: fresh start failed: ${String(e)}`);
      }
    }
    return { runs, starts };
  });
  let workingSet: WorkingSetRow | undefined;
  let realNodeText = '';
  if (o.realNode === true) {
    const { realNodeWorkingSet, realNodeMarkdown } = await import('./footprint-real-node.ts');
    const r = await realNodeWorkingSet({ volumes: 500, idleS: o.idleS });
    workingSet = r;
    realNodeText = `\n\nThe working-set row, in full:\n\n${realNodeMarkdown(r)}`;
  }
  const data = { cmd, builds, ...section, workingSet };
  const markdown = footprintMarkdown({ builds, runs: section.runs, starts: section.starts, cmd, idleS: o.idleS, workingSet }) + realNodeText;
  return { title: 'Footprint (issue 20)', markdown, data };
}

export const FOOTPRINT_OPTIONS = {
  'footprint-sizes': { type: 'string', default: '500,2000' },
  'footprint-foreign': { type: 'string', default: '10000' },
  'footprint-idle-s': { type: 'string', default: '60' },
  'footprint-node-args': { type: 'string', default: '' },
  'footprint-bundle': { type: 'string', multiple: true, default: [] as string[] },
  'footprint-repeat': { type: 'string', default: '1' },
  'footprint-real-node': { type: 'boolean', default: false },
} as const;

export function footprintArgs(v: {
  'footprint-sizes': string;
  'footprint-foreign': string;
  'footprint-idle-s': string;
  'footprint-node-args': string;
  'footprint-bundle': string[];
  'footprint-repeat': string;
  'footprint-real-node': boolean;
}): FootprintOptions {
  const builds = v['footprint-bundle'].map(parseBuild);
  const names = builds.map((b) => b.name);
  if (new Set(names).size !== names.length) throw new Error(`--footprint-bundle: names must differ (${names.join(', ')})`);
  return {
    sizes: v['footprint-sizes'].split(',').map(Number),
    foreign: Number(v['footprint-foreign']),
    idleS: Number(v['footprint-idle-s']),
    nodeArgs: v['footprint-node-args'].split(' ').filter((a) => a !== ''),
    builds,
    repeat: Number(v['footprint-repeat']),
    realNode: v['footprint-real-node'],
  };
}

if (import.meta.main) {
  const { values } = parseArgs({ options: FOOTPRINT_OPTIONS });
  process.stdout.write(`load average at start: ${loadavg()}\n`);
  printSection(await footprint(footprintArgs(values)));
}
