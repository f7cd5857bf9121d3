// Benchmark 5, footprint (issue 12): what one daemon costs a node, run as users
// run it. `npm run build`, then `node <the image's ENTRYPOINT node flags>
// dist/main.js <the DaemonSet's args>` (default QPS/burst, --discovery-period=10s,
// default log level), against the real control plane, N tmpfs mounts (size=1m)
// under one class. In one run:
//   - at 500 and at 2,000 volumes (PVs deleted in between): spawn -> first PV and
//     -> Nth PV (admin watch), CPU (utime+stime of /proc/<pid>/stat) from spawn to
//     the Nth PV, VmRSS and VmHWM right after, CPU over 60 s idle afterwards,
//     VmRSS after that minute, and SIGTERM -> exit;
//   - a fresh daemon with the 2,000 own PVs present, then with 10,000 PVs of
//     other nodes added: VmRSS/VmHWM 20 s after spawn;
// printed next to the Go provisioner's figures of issue 12 (fixed reference
// numbers measured on this machine kind, not re-measured here).
//
//   node bench/footprint.ts [--footprint-sizes 500,2000] [--footprint-foreign 10000] [--footprint-idle-s 60]
//                           ['--footprint-node-args=--cpu-prof --cpu-prof-dir=/tmp/prof']
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
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

/** The Go provisioner, issue 12 (built from its sources, same control plane, same mounts, this machine kind). */
export const GO_REFERENCE = {
  500: { firstPvS: 0.29, lastPvS: 98.5, createsCpuS: 1.43, rssMiB: 46, hwmMiB: undefined, idleCpuSPerMin: 0.13 },
  2000: { firstPvS: undefined, lastPvS: 398.5, createsCpuS: 6.15, rssMiB: undefined, hwmMiB: 55, idleCpuSPerMin: 0.44 },
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

/** The provisioner container's args in deployment/kubernetes/daemonset.yaml, without --listen-address. */
export function daemonSetArgs(): string[] {
  const ds = parseYaml(readFileSync(join(repoRoot, 'deployment', 'kubernetes', 'daemonset.yaml'), 'utf8')) as {
    spec: { template: { spec: { containers: Array<{ name: string; args?: string[] }> } } };
  };
  const c = ds.spec.template.spec.containers.find((x) => x.name === 'provisioner');
  return (c?.args ?? []).filter((a) => !a.startsWith('--listen-address'));
}

/** Where the memory is, after the idle minute: /proc/<pid>/status and the daemon's own /metrics. */
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

export interface FootprintRun {
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

function spawnAsUsers(b: Bench, tag: string): Promise<Daemon> {
  const { nodeArgs, env } = imageCommand();
  return b.startDaemon({
    tag,
    script: join(repoRoot, 'dist', 'main.js'),
    nodeArgs: [...nodeArgs, ...extraNodeArgs],
    env,
    args: daemonSetArgs(),
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

/** One measured run at `volumes` mounts, no PV of this node present at the start. */
export async function footprintRun(b: Bench, volumes: number, idleS: number): Promise<FootprintRun> {
  const load0 = loadavg();
  const watch = new PVWatch(b.kc, b.ownSelector);
  await watch.start();
  if (watch.count !== 0) throw new Error(`${watch.count} PVs of this node already present`);
  try {
    log(`footprint: ${volumes} volumes, spawning the built daemon`);
    const d = await spawnAsUsers(b, `footprint-${volumes}`);
    await watch.until((c) => c >= volumes, `${volumes} PVs`, 120_000 + volumes * 500);
    const createsCpuS = cpuSeconds(d.pid);
    const after = d.mem();
    const seen = [...watch.seen.values()];
    const firstPvMs = Math.min(...seen) - d.spawnedAt;
    const lastPvMs = Math.max(...seen) - d.spawnedAt;
    log(`footprint: ${volumes} PVs after ${secs(lastPvMs)} s, ${createsCpuS.toFixed(2)} s CPU; idle ${idleS} s`);
    await sleep(5000); // the last creates' watch echoes and Events
    const c0 = cpuSeconds(d.pid);
    const i0 = performance.now();
    await sleep(idleS * 1000);
    const idleCpu = cpuSeconds(d.pid) - c0;
    const idleWindowS = (performance.now() - i0) / 1000;
    const afterIdle = d.mem();
    const breakdown = await memBreakdown(d); // after the idle CPU window: the scrape costs CPU
    const stop = await sigterm(d);
    log(`footprint: idle ${idleCpu.toFixed(2)} s CPU in ${idleWindowS.toFixed(1)} s; SIGTERM -> exit ${stop.ms.toFixed(0)} ms`);
    return {
      volumes,
      firstPvMs,
      lastPvMs,
      createsCpuS,
      after,
      idleWindowS,
      idleCpuSPerMin: (idleCpu / idleWindowS) * 60,
      afterIdle,
      breakdown,
      sigtermExitMs: stop.ms,
      exitCode: stop.code,
      load: `${load0} -> ${loadavg()}`,
    };
  } finally {
    watch.stop();
  }
}

/** A fresh daemon with whatever PVs exist: memory and CPU `settleS` after spawn, then SIGTERM -> exit. */
async function freshStart(b: Bench, phase: string, settleS: number): Promise<FootprintStart> {
  const load0 = loadavg();
  const d = await spawnAsUsers(b, 'fresh');
  await waitControllerStarted(d);
  await sleep(Math.max(0, d.spawnedAt + settleS * 1000 - Date.now()));
  const mem = d.mem();
  const cpuS = cpuSeconds(d.pid);
  const stop = await sigterm(d);
  log(`footprint: ${phase}: VmRSS ${kibToMib(mem?.rssKiB)} MiB, ${cpuS.toFixed(2)} s CPU`);
  return { phase, mem, cpuS, sigtermExitMs: stop.ms, load: `${load0} -> ${loadavg()}` };
}

const f2 = (x: number | undefined, unit = ''): string => (x === undefined ? 'not measured' : `${x.toFixed(2)}${unit}`);
const ref = (x: number | undefined, unit: string): string => (x === undefined ? 'not measured' : `${x}${unit}`);

export function footprintMarkdown(runs: readonly FootprintRun[], starts: readonly FootprintStart[], cmd: string): string {
  const head = ['', ...runs.flatMap((r) => [`Go, ${r.volumes} (issue 12)`, `ours, ${r.volumes}`])];
  const go = (r: FootprintRun): (typeof GO_REFERENCE)[500 | 2000] | undefined => (r.volumes === 500 || r.volumes === 2000 ? GO_REFERENCE[r.volumes] : undefined);
  const row = (label: string, g: (x: NonNullable<ReturnType<typeof go>>) => string, o: (r: FootprintRun) => string): string[] => [
    label,
    ...runs.flatMap((r) => {
      const gr = go(r);
      return [gr === undefined ? 'n/a' : g(gr), o(r)];
    }),
  ];
  const rows = [
    row('spawn -> first PV (s)', (g) => ref(g.firstPvS, ''), (r) => secs(r.firstPvMs)),
    row('spawn -> Nth PV (s)', (g) => ref(g.lastPvS, ''), (r) => secs(r.lastPvMs)),
    row('CPU, spawn -> Nth PV (s)', (g) => ref(g.createsCpuS, ''), (r) => r.createsCpuS.toFixed(2)),
    row('VmRSS after the creates (MiB)', (g) => ref(g.rssMiB, ''), (r) => kibToMib(r.after?.rssKiB)),
    row('VmHWM after the creates (MiB)', (g) => ref(g.hwmMiB, ''), (r) => kibToMib(r.after?.hwmKiB)),
    row('idle CPU (s/min, 10 s discovery period)', (g) => ref(g.idleCpuSPerMin, ''), (r) => f2(r.idleCpuSPerMin)),
    row('VmRSS after the idle minute (MiB)', () => 'not measured', (r) => kibToMib(r.afterIdle?.rssKiB)),
    row('  of which file-backed, RssFile (MiB)', () => 'not measured', (r) => kibToMib(r.breakdown?.rssFileKiB)),
    row('  of which anonymous, RssAnon (MiB)', () => 'not measured', (r) => kibToMib(r.breakdown?.rssAnonKiB)),
    row('  V8 heap used / total (MiB)', () => 'n/a', (r) => (r.breakdown ? `${mib(r.breakdown.heapUsedBytes)} / ${mib(r.breakdown.heapTotalBytes)}` : 'n/a')),
    row('  external memory (MiB)', () => 'n/a', (r) => (r.breakdown ? mib(r.breakdown.externalBytes) : 'n/a')),
    row('SIGTERM -> exit (ms)', () => 'not measured', (r) => `${r.sigtermExitMs.toFixed(0)} (exit ${String(r.exitCode)})`),
    row('load average (1/5/15 min), start -> end', () => '', (r) => r.load),
  ];
  return [
    `Daemon as users run it: \`${cmd}\`, default QPS/burst (20/40), one class, tmpfs mounts (size=1m).`,
    'Go columns: the Go provisioner of issue 12, measured on this machine kind (fixed reference numbers, not re-measured).',
    'CPU is utime+stime from /proc/<pid>/stat (start-up included); first/Nth PV are stamped by an admin watch.',
    '',
    table(head, rows),
    '',
    table(
      ['fresh daemon', 'VmRSS (MiB)', 'VmHWM (MiB)', 'CPU since spawn (s)', 'SIGTERM -> exit (ms)', 'load average'],
      starts.map((s) => [s.phase, kibToMib(s.mem?.rssKiB), kibToMib(s.mem?.hwmKiB), s.cpuS.toFixed(2), s.sigtermExitMs.toFixed(0), s.load]),
    ),
  ].join('\n');
}

/** Builds dist (npm run build), then the whole footprint benchmark in its own bench environment. */
export async function footprint(o: { sizes: readonly number[]; foreign: number; idleS: number; settleS?: number; nodeArgs?: readonly string[] }): Promise<Section> {
  extraNodeArgs = o.nodeArgs ?? [];
  log('footprint: npm run build');
  execFileSync('npm', ['run', 'build'], { cwd: repoRoot, stdio: ['ignore', 'ignore', 'inherit'] });
  const { nodeArgs, env } = imageCommand();
  const cmd = [...Object.entries(env).map(([k, v]) => `${k}="${v}"`), 'node', ...nodeArgs, 'dist/main.js', ...daemonSetArgs()].join(' ');
  const settleS = o.settleS ?? 20;
  return withBench({ name: 'footprint' }, async (b) => {
    const runs: FootprintRun[] = [];
    const starts: FootprintStart[] = [];
    let mounted = 0;
    const sizes = [...o.sizes].sort((x, y) => x - y);
    for (const [i, n] of sizes.entries()) {
      if (n > mounted) {
        log(`footprint: mounting ${n - mounted} more tmpfs volumes`);
        mountVolumes(b, n - mounted, mounted);
        mounted = n;
      }
      runs.push(await footprintRun(b, n, o.idleS));
      if (i < sizes.length - 1) {
        log('footprint: deleting the PVs');
        await deleteOwnPVs(b, 600_000);
      }
    }
    const own = sizes.at(-1) ?? 0;
    starts.push(await freshStart(b, `${own} own PVs present, ${settleS} s after spawn`, settleS));
    if (o.foreign > 0) {
      log(`footprint: creating ${o.foreign} PVs of other nodes`);
      await createForeignPVs(b, o.foreign);
      starts.push(await freshStart(b, `${own} own + ${o.foreign} foreign PVs present, ${settleS} s after spawn`, settleS));
    }
    return { title: 'Footprint (issue 12)', markdown: footprintMarkdown(runs, starts, cmd), data: { cmd, runs, starts } };
  });
}

export const FOOTPRINT_OPTIONS = {
  'footprint-sizes': { type: 'string', default: '500,2000' },
  'footprint-foreign': { type: 'string', default: '10000' },
  'footprint-idle-s': { type: 'string', default: '60' },
  'footprint-node-args': { type: 'string', default: '' },
} as const;

export function footprintArgs(v: { 'footprint-sizes': string; 'footprint-foreign': string; 'footprint-idle-s': string; 'footprint-node-args': string }): {
  sizes: number[];
  foreign: number;
  idleS: number;
  nodeArgs: string[];
} {
  return {
    sizes: v['footprint-sizes'].split(',').map(Number),
    foreign: Number(v['footprint-foreign']),
    idleS: Number(v['footprint-idle-s']),
    nodeArgs: v['footprint-node-args'].split(' ').filter((a) => a !== ''),
  };
}

if (import.meta.main) {
  const { values } = parseArgs({ options: FOOTPRINT_OPTIONS });
  process.stdout.write(`load average at start: ${loadavg()}\n`);
  printSection(await footprint(footprintArgs(values)));
}
