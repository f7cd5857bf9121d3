// Benchmark: what the per-volume health check (src/health/check.ts, issue 19)
// costs per discovery period, at N real tmpfs volumes (default 500 and 2,000).
//
// For each N, in this process: `--passes` passes of each of
// - off: only what discovery already does each period (one read of /proc/self/mountinfo, the mount-point set);
// - on: one health pass over the N volumes (beginPass: one mountinfo read with options; check() per PV, one at a time);
// - on/64: the same with 64 checks in flight (what a monitor can do: the pass is safe to share);
// - on+full/64: that with a `full` threshold (one statfs per PV more);
// - idle: what the daemon does each idle period: one HealthMonitor pass over the same N PV objects, the
//   monitor and its checker kept across passes (an answer that depends on the unchanged mount table alone
//   is reused, issue 20);
// CPU (process.cpuUsage, user+system) and wall time per pass, medians.
// Syscalls per pass: when strace is installed, a child process runs K passes of
// each mode under `strace -f -c`, and (calls at K passes - calls at 0 passes) / K
// is what one pass costs, Node's start-up subtracted.
// API requests: none by construction; checked here by walking check.ts's
// imports (no module under src/kube is reachable).
//
// Needs root (tmpfs mounts). Run it in a private mount namespace so that other
// processes do not see the N mounts:
//   unshare -m --propagation private node bench/health-check.ts [--sizes 500,2000] [--passes 20]
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import type { ClassConfig } from '../src/config/types.ts';
import { createHealthChecker } from '../src/health/check.ts';
import { HealthLedger, HealthMonitor } from '../src/health/monitor.ts';
import { ANN_VOLUME_IDENTITY } from '../src/identity/identity.ts';
import { Metrics } from '../src/metrics/metrics.ts';
import { silentLogger } from '../src/util/log.ts';
import type { GenerationEnv } from '../src/volume/env.ts';
import type { HealthCheckInput } from '../src/health/types.ts';
import { readMountPoints } from '../src/host/mountinfo.ts';
import { log, median, printSection, repoRoot, table, type Section } from './lib.ts';

type Mode = 'none' | 'off' | 'on' | 'on/64' | 'on+full/64' | 'idle';
const MODES: readonly Mode[] = ['off', 'on', 'on/64', 'on+full/64', 'idle'];
/** How many checks the concurrent modes (".../64") keep in flight. */
const CONCURRENCY = 64;

export interface HealthBenchOptions {
  readonly sizes: readonly number[];
  readonly passes: number;
  /** Passes per strace child (0: no syscall count). */
  readonly stracePasses: number;
}

export const HEALTH_OPTIONS = {
  'health-sizes': { type: 'string', default: '500,2000' },
  'health-passes': { type: 'string', default: '20' },
  'health-strace-passes': { type: 'string', default: '5' },
} as const;

export function healthArgs(v: { 'health-sizes'?: string | undefined; 'health-passes'?: string | undefined; 'health-strace-passes'?: string | undefined }): HealthBenchOptions {
  return {
    sizes: (v['health-sizes'] ?? '500,2000').split(',').map(Number),
    passes: Number(v['health-passes'] ?? '20'),
    stracePasses: Number(v['health-strace-passes'] ?? '5'),
  };
}

const inputs = (paths: readonly string[], full: boolean): HealthCheckInput[] =>
  paths.map((path, i) => ({ pvName: `local-pv-${i}`, path, mode: 'Filesystem', recordedIdentity: 'mount', fullThresholdPercent: full ? 90 : undefined }));

/** The idle mode's monitor per volume set: kept across passes, as the daemon keeps it between periods. */
const idleMonitors = new Map<readonly string[], HealthMonitor>();

/**
 * What the daemon does each idle period at N healthy volumes: one HealthMonitor pass (checkPVs with 64 in
 * flight, the ledger, the gauge) over the same N PV objects, with the monitor and its checker kept from
 * the previous pass; the API and the recorder are no-ops (an idle pass sends nothing).
 */
function idleMonitor(paths: readonly string[]): HealthMonitor {
  let m = idleMonitors.get(paths);
  if (m !== undefined) return m;
  const root = dirname(paths[0] ?? '/');
  const cls: ClassConfig = { hostDir: root, mountDir: root, blockCleanerCommand: ['/bin/true'], volumeMode: 'Filesystem', namePattern: '*' };
  const pvs: V1PersistentVolume[] = paths.map((path, i) => ({
    metadata: { name: `local-pv-${i}`, uid: `uid-${i}`, annotations: { [ANN_VOLUME_IDENTITY]: 'mount' } },
    spec: { storageClassName: 'bench', local: { path }, capacity: { storage: '1Mi' } },
    status: { phase: 'Available' },
  }));
  const env = {
    config: { storageClassMap: { bench: cls } },
    lookupClass: (c: string) => (c === 'bench' ? cls : undefined),
    node: { metadata: { name: 'bench-node', uid: 'bench-uid' } },
    recorder: { event: () => undefined },
    metrics: new Metrics({ defaultMetrics: false }),
    logger: silentLogger,
    now: Date.now,
  } as unknown as GenerationEnv;
  m = new HealthMonitor(env, { checker: createHealthChecker(), pvs: { list: () => [...pvs] }, ledger: new HealthLedger() });
  idleMonitors.set(paths, m);
  return m;
}

/** One pass of a mode; returns the number of abnormal volumes found (so the work is not optimised away). */
async function onePass(mode: Mode, paths: readonly string[]): Promise<number> {
  if (mode === 'none') return 0;
  if (mode === 'idle') {
    const r = await idleMonitor(paths).pass();
    if (r.checked !== paths.length) throw new Error(`idle: ${r.checked} of ${paths.length} volumes checked`);
    return r.changed;
  }
  if (mode === 'off') return (await readMountPoints()).size > 0 ? 0 : 1;
  const pass = await createHealthChecker().beginPass();
  let abnormal = 0;
  const all = inputs(paths, mode === 'on+full/64');
  if (mode === 'on') {
    for (const input of all) if ((await pass.check(input)).conditions.size > 0) abnormal++;
    return abnormal;
  }
  for (let i = 0; i < all.length; i += CONCURRENCY) {
    for (const h of await Promise.all(all.slice(i, i + CONCURRENCY).map((x) => pass.check(x)))) if (h.conditions.size > 0) abnormal++;
  }
  return abnormal;
}

function mountAll(root: string, n: number): string[] {
  const paths = Array.from({ length: n }, (_, i) => join(root, `vol${String(i).padStart(4, '0')}`));
  // One shell for all mounts: n execs of mount(8) from Node would dominate the set-up.
  execFileSync('sh', ['-c', 'for d in "$@"; do mkdir -p "$d" && mount -t tmpfs -o size=1m lsp-bench "$d" || exit 1; done', 'sh', ...paths], { stdio: 'inherit' });
  return paths;
}

function unmountAll(paths: readonly string[]): void {
  spawnSync('sh', ['-c', 'for d in "$@"; do umount "$d" 2>/dev/null || umount -l "$d" 2>/dev/null; done', 'sh', ...paths], { stdio: 'inherit' });
}

/** Syscall counts by name from `strace -c` output. */
function straceCounts(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    // % time  seconds  usecs/call  calls  [errors]  syscall
    const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$/.exec(line);
    if (m && m[2] !== 'total') out.set(m[2] as string, Number(m[1]));
  }
  return out;
}

function straced(mode: Mode, passes: number, root: string, n: number): Map<string, number> {
  const out = join(root, `strace-${mode.replace(/\W/g, '_')}-${passes}.txt`);
  const node = process.execPath;
  const r = spawnSync('strace', ['-f', '-c', '-o', out, node, import.meta.filename, '--child', mode, '--child-passes', String(passes), '--child-root', root, '--child-n', String(n)], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  if (r.status !== 0) throw new Error(`strace child (${mode}) exited ${r.status ?? r.signal ?? '?'}`);
  return straceCounts(readFileSync(out, 'utf8'));
}

const sum = (m: ReadonlyMap<string, number>): number => [...m.values()].reduce((a, b) => a + b, 0);

/** Per-pass syscalls of a mode (K passes minus 0 passes, over K), total and the largest few. */
function syscallsPerPass(mode: Mode, k: number, root: string, n: number, base: ReadonlyMap<string, number>): { total: number; top: string } {
  const at = straced(mode, k, root, n);
  const diff = new Map<string, number>();
  for (const [name, c] of at) diff.set(name, (c - (base.get(name) ?? 0)) / k);
  const top = [...diff]
    .filter(([, c]) => c >= 1)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 5)
    .map(([name, c]) => `${name} ${Math.round(c)}`)
    .join(', ');
  return { total: (sum(at) - sum(base)) / k, top };
}

/** The modules check.ts reaches through relative imports (to show no API client is among them). */
function reachable(entry: string): Set<string> {
  const seen = new Set<string>();
  const todo = [entry];
  while (todo.length > 0) {
    const f = todo.pop() as string;
    if (seen.has(f)) continue;
    seen.add(f);
    for (const m of readFileSync(f, 'utf8').matchAll(/^import\s[^;]*?from\s+'(\.[^']+)'/gms)) {
      const spec = m[1] as string;
      if (spec.endsWith('.ts')) todo.push(resolve(dirname(f), spec));
    }
  }
  return seen;
}

export async function healthCheckBench(opts: HealthBenchOptions): Promise<Section> {
  const kube = [...reachable(join(repoRoot, 'src/health/check.ts'))].filter((f) => f.includes('/src/kube/'));
  if (kube.length > 0) throw new Error(`check.ts reaches the API client: ${kube.join(', ')}`);
  const hasStrace = opts.stracePasses > 0 && spawnSync('strace', ['-V'], { stdio: 'ignore' }).status === 0;
  const rows: (string | number)[][] = [];
  const data: Record<string, unknown>[] = [];
  for (const n of opts.sizes) {
    const root = mkdtempSync(join(tmpdir(), 'lsp-bench-health-'));
    let paths: string[] = [];
    try {
      log(`health-check: mounting ${n} tmpfs volumes`);
      paths = mountAll(root, n);
      const baseLines = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').length - 1;
      const base = hasStrace ? straced('none', 0, root, n) : new Map<string, number>();
      for (const mode of MODES) {
        for (let i = 0; i < 3; i++) await onePass(mode, paths); // warm-up (JIT, page cache)
        const cpu: number[] = [];
        const wall: number[] = [];
        let abnormal = 0;
        for (let i = 0; i < opts.passes; i++) {
          const c0 = process.cpuUsage();
          const t0 = performance.now();
          abnormal += await onePass(mode, paths);
          wall.push(performance.now() - t0);
          const c = process.cpuUsage(c0);
          cpu.push((c.user + c.system) / 1000);
        }
        if (abnormal > 0) throw new Error(`${mode}: ${abnormal} abnormal results over healthy tmpfs volumes`);
        const sys = hasStrace ? syscallsPerPass(mode, opts.stracePasses, root, n, base) : undefined;
        log(`health-check: ${n} volumes, ${mode}: CPU ${median(cpu).toFixed(1)} ms, wall ${median(wall).toFixed(1)} ms${sys ? `, ${Math.round(sys.total)} syscalls` : ''}`);
        rows.push([n, baseLines, mode, median(cpu).toFixed(1), median(wall).toFixed(1), ((median(cpu) * 1000) / n).toFixed(1), sys ? Math.round(sys.total) : 'n/a', sys?.top ?? '', 0]);
        data.push({ volumes: n, mountinfoLines: baseLines, mode, cpuMsP50: median(cpu), wallMsP50: median(wall), cpuMs: cpu, wallMs: wall, syscallsPerPass: sys?.total, topSyscalls: sys?.top, apiRequests: 0 });
      }
    } finally {
      unmountAll(paths);
      rmSync(root, { recursive: true, force: true });
    }
  }
  const markdown = table(['volumes', 'mountinfo lines', 'mode', 'CPU/pass (ms, p50)', 'wall/pass (ms, p50)', 'CPU/volume (µs)', 'syscalls/pass', 'largest (per pass)', 'API requests'], rows);
  return { title: 'Health check (issue 19)', markdown, data };
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      sizes: { type: 'string', default: '500,2000' },
      passes: { type: 'string', default: '20' },
      'strace-passes': { type: 'string', default: '5' },
      child: { type: 'string' },
      'child-passes': { type: 'string', default: '0' },
      'child-root': { type: 'string', default: '' },
      'child-n': { type: 'string', default: '0' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: false,
  });
  // A child under strace: K passes of one mode, nothing else.
  if (values.help) {
    process.stdout.write('usage: unshare -m --propagation private node bench/health-check.ts [--sizes 500,2000] [--passes 20] [--strace-passes 5]\n');
    process.exit(0);
  }
  if (typeof values.child === 'string') {
    const n = Number(values['child-n']);
    const root = String(values['child-root']);
    const paths = Array.from({ length: n }, (_, i) => join(root, `vol${String(i).padStart(4, '0')}`));
    if (!paths.every((p) => existsSync(p))) throw new Error('child: volumes missing');
    for (let i = 0; i < Number(values['child-passes']); i++) await onePass(values.child as Mode, paths);
  } else {
    printSection(
      await healthCheckBench({
        sizes: String(values.sizes).split(',').map(Number),
        passes: Number(values.passes),
        stracePasses: Number(values['strace-passes']),
      }),
    );
  }
}
