// Shared machinery of the benchmarks (bench/*.ts): one real control plane, the
// RBAC, a Node and a StorageClass, a kubelet-style ConfigMap directory, host
// fixtures, daemon processes, and cleanup that also runs on Ctrl-C / SIGTERM /
// an error (daemons stopped, tmpfs unmounted, control plane stopped, temp dirs
// removed). Plus small measuring helpers: memory of a pid, Prometheus text
// parsing, percentiles, markdown tables, an incremental log reader and a PV
// watch that timestamps when each PV appears in the API.
//
// Benchmarks measure and print; they never assert timings.
import { execFileSync } from 'node:child_process';
import { openSync, readSync, closeSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { CoreV1Api, KubeConfig, StorageV1Api, Watch, type V1PersistentVolume } from '@kubernetes/client-node';
import { freePort, startControlPlane, type ControlPlane, type ControlPlaneStats } from '../e2e/harness/controlplane.ts';
import { applyManifests } from '../e2e/harness/manifests.ts';
import { createNode } from '../e2e/harness/node-agent.ts';
import { HostFixtures, isRoot } from '../e2e/support/host.ts';
import { startProvisioner, type ProvisionerProcess } from '../e2e/support/provisioner.ts';
import { AtomicWriter } from '../test/support/atomic-writer.ts';

// ---------------------------------------------------------------------------------------------
// Small pure helpers

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

const t0 = performance.now();
/** Progress to stderr (stdout carries the results). */
export function log(msg: string): void {
  process.stderr.write(`[bench ${((performance.now() - t0) / 1000).toFixed(1).padStart(6)} s] ${msg}\n`);
}

/** Nearest-rank percentile of an ascending array (p in 0..100); NaN when empty. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

export interface Summary {
  readonly n: number;
  readonly min: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
  readonly mean: number;
}

export function summarize(values: readonly number[]): Summary {
  const s = [...values].sort((a, b) => a - b);
  const mean = s.length === 0 ? NaN : s.reduce((a, b) => a + b, 0) / s.length;
  return { n: s.length, min: s[0] ?? NaN, p50: percentile(s, 50), p90: percentile(s, 90), p99: percentile(s, 99), max: s.at(-1) ?? NaN, mean };
}

export function median(values: readonly number[]): number {
  return percentile([...values].sort((a, b) => a - b), 50);
}

/** A markdown table. */
export function table(head: readonly string[], rows: ReadonlyArray<readonly (string | number)[]>): string {
  const cells = rows.map((r) => r.map(String));
  const w = head.map((h, i) => Math.max(h.length, 3, ...cells.map((r) => (r[i] ?? '').length)));
  const line = (r: readonly string[]): string => `| ${r.map((c, i) => c.padEnd(w[i] ?? 0)).join(' | ')} |`;
  return [line(head), `|${w.map((n) => '-'.repeat(n + 2)).join('|')}|`, ...cells.map(line)].join('\n');
}

export const mib = (bytes: number): string => (bytes / 1024 / 1024).toFixed(1);
export const kibToMib = (kib: number | undefined): string => (kib === undefined ? 'n/a' : (kib / 1024).toFixed(1));
export const secs = (ms: number): string => (ms / 1000).toFixed(2);

// ---------------------------------------------------------------------------------------------
// Process memory and Prometheus text

export interface ProcMem {
  /** VmRSS, KiB. */
  readonly rssKiB: number;
  /** VmHWM (peak RSS), KiB. */
  readonly hwmKiB: number;
}

/** Fields of /proc/<pid>/status given in kB (VmRSS, RssAnon, ...), in KiB; undefined when the process is gone. */
export function procStatusKiB<F extends string>(pid: number, fields: readonly F[]): Record<F, number> | undefined {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return undefined;
  }
  const field = (f: string): number => Number(new RegExp(`^${f}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return Object.fromEntries(fields.map((f) => [f, field(f)])) as Record<F, number>;
}

/** /proc/<pid>/status VmRSS and VmHWM; undefined when the process is gone. */
export function procMem(pid: number): ProcMem | undefined {
  const s = procStatusKiB(pid, ['VmRSS', 'VmHWM']);
  return s && { rssKiB: s.VmRSS, hwmKiB: s.VmHWM };
}

export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** Parses the Prometheus text format (no escapes inside label values are needed here beyond \"). */
export function parseMetrics(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

/** Sum of the samples of `name` whose labels include every given label. */
export function sumOf(samples: readonly Sample[], name: string, labels: Record<string, string> = {}): number {
  let s = 0;
  for (const x of samples) {
    if (x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v)) s += x.value;
  }
  return s;
}

/** Values of `name` grouped by the given label keys ("verb resource" etc.). */
export function groupBy(samples: readonly Sample[], name: string, keys: readonly string[]): Map<string, number> {
  const g = new Map<string, number>();
  for (const x of samples) {
    if (x.name !== name) continue;
    const k = keys.map((key) => x.labels[key] ?? '').join(' ');
    g.set(k, (g.get(k) ?? 0) + x.value);
  }
  return g;
}

/** after - before, per key, dropping zero differences. */
export function delta(before: ReadonlyMap<string, number>, after: ReadonlyMap<string, number>): Map<string, number> {
  const d = new Map<string, number>();
  for (const [k, v] of after) {
    const diff = v - (before.get(k) ?? 0);
    if (diff !== 0) d.set(k, diff);
  }
  return d;
}

export const REQUESTS = 'local_volume_provisioner_kube_requests_total';

// ---------------------------------------------------------------------------------------------
// Incremental JSON log reader

export type LogLine = Record<string, unknown> & { readonly msg?: string; readonly time?: string };

/** Reads a growing JSON-lines file from where it stopped last time. */
export class LogTail {
  readonly #file: string;
  #offset = 0;
  #partial = '';

  constructor(file: string) {
    this.#file = file;
  }

  /** Lines appended since the last call. */
  read(): LogLine[] {
    let size: number;
    try {
      size = statSync(this.#file).size;
    } catch {
      return [];
    }
    if (size <= this.#offset) return [];
    const fd = openSync(this.#file, 'r');
    const buf = Buffer.alloc(size - this.#offset);
    try {
      readSync(fd, buf, 0, buf.length, this.#offset);
    } finally {
      closeSync(fd);
    }
    this.#offset = size;
    const text = this.#partial + buf.toString('utf8');
    const parts = text.split('\n');
    this.#partial = parts.pop() ?? '';
    const out: LogLine[] = [];
    for (const p of parts) {
      if (!p.startsWith('{')) continue;
      try {
        out.push(JSON.parse(p) as LogLine);
      } catch {
        /* not a log line */
      }
    }
    return out;
  }

  /** Polls until a line satisfies `pred`; returns it. */
  async waitFor(pred: (l: LogLine) => boolean, what: string, timeoutMs = 60_000, intervalMs = 10): Promise<LogLine> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      for (const l of this.read()) if (pred(l)) return l;
      if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for log line: ${what}`);
      await sleep(intervalMs);
    }
  }
}

/** Epoch ms of a pino line's ISO `time`. */
export const lineTime = (l: LogLine): number => Date.parse(String(l.time));

// ---------------------------------------------------------------------------------------------
// A PV watch: when did each PV (matching a label selector) appear in the API?

export class PVWatch {
  readonly #kc: KubeConfig;
  readonly #core: CoreV1Api;
  readonly #selector: string;
  /** name -> epoch ms the watch (or a list) first saw it. */
  readonly seen = new Map<string, number>();
  #abort: AbortController | undefined;
  #stopped = false;
  #waiters: Array<() => void> = [];

  constructor(kc: KubeConfig, labelSelector: string) {
    this.#kc = kc;
    this.#core = kc.makeApiClient(CoreV1Api);
    this.#selector = labelSelector;
  }

  get count(): number {
    return this.seen.size;
  }

  async start(): Promise<void> {
    const list = await this.#core.listPersistentVolume({ labelSelector: this.#selector });
    const now = Date.now();
    const names = new Set<string>();
    for (const pv of list.items) {
      const n = pv.metadata?.name ?? '';
      names.add(n);
      if (!this.seen.has(n)) this.seen.set(n, now);
    }
    for (const n of [...this.seen.keys()]) if (!names.has(n)) this.seen.delete(n);
    this.#notify();
    if (this.#stopped) return;
    this.#abort = await new Watch(this.#kc).watch(
      '/api/v1/persistentvolumes',
      { labelSelector: this.#selector, resourceVersion: list.metadata?.resourceVersion ?? '', allowWatchBookmarks: true },
      (type: string, obj: V1PersistentVolume) => {
        const n = obj.metadata?.name;
        if (n === undefined) return;
        if (type === 'ADDED' || type === 'MODIFIED') {
          if (!this.seen.has(n)) this.seen.set(n, Date.now());
        } else if (type === 'DELETED') this.seen.delete(n);
        this.#notify();
      },
      () => {
        // Watch ended (timeout, error): list again and re-watch; the list fills any gap.
        if (!this.#stopped) setTimeout(() => void this.start().catch((e: unknown) => log(`PV watch restart failed: ${String(e)}`)), 200);
      },
    );
  }

  #notify(): void {
    for (const w of this.#waiters.splice(0)) w();
  }

  /** Resolves when `pred(count)` holds; rejects after the timeout. */
  async until(pred: (count: number) => boolean, what: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!pred(this.count)) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (have ${this.count})`);
      await Promise.race([new Promise<void>((r) => this.#waiters.push(r)), sleep(Math.min(left, 1000))]);
    }
  }

  stop(): void {
    this.#stopped = true;
    this.#abort?.abort();
    this.#notify();
  }
}

// ---------------------------------------------------------------------------------------------
// Daemons

export interface Daemon {
  readonly proc: ProvisionerProcess;
  readonly pid: number;
  /** Epoch ms just before spawn. */
  readonly spawnedAt: number;
  readonly logs: LogTail;
  readonly args: readonly string[];
  metrics(): Promise<Sample[]>;
  mem(): ProcMem | undefined;
  stop(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// The bench environment

export interface BenchOptions {
  /** Short name used in temp dir and object names. */
  readonly name: string;
}

export interface Bench {
  readonly cp: ControlPlane;
  readonly kc: KubeConfig;
  readonly core: CoreV1Api;
  readonly storage: StorageV1Api;
  readonly host: HostFixtures;
  readonly nodeName: string;
  readonly className: string;
  /** Host-side dir the discovery volumes are mounted under (the class's mountDir). */
  readonly mountDir: string;
  /** Label every PV of this node carries (labelsForPV), as a selector. */
  readonly ownSelector: string;
  readonly configDir: string;
  readonly writer: AtomicWriter;
  /** Control-plane stats right after start-up. */
  readonly cpStartStats: ControlPlaneStats;
  /** Writes the ConfigMap (kubelet swap) with labelsForPV = the own label plus `extraLabels`. */
  writeConfig(extraLabels?: Record<string, string>): Promise<void>;
  /**
   * Starts the daemon (node src/main.ts, or `script` with `nodeArgs`) as the restricted identity, with
   * --discovery-period=1s unless `args` sets one, at debug level unless `logLevel` says otherwise.
   */
  startDaemon(opts: {
    tag: string;
    args?: readonly string[];
    env?: Record<string, string>;
    script?: string;
    nodeArgs?: readonly string[];
    logLevel?: string | null;
  }): Promise<Daemon>;
  /** Registers a cleanup (run in reverse order at the end, on error and on signals). */
  defer(fn: () => void | Promise<void>): void;
  /**
   * Mounts a tmpfs of `sizeMiB` at each path (created if needed) with one shell, much faster than
   * one spawn per mount; every path is unmounted by the teardown (one umount call) and on exit.
   */
  mountTmpfs(paths: readonly string[], sizeMiB: number): void;
}

export const OWN_LABEL = 'lsp-bench/node';

/** The testplane binary: LSP_TESTPLANE_BINARY when set (skips the build check), else the harness default. */
function binaryOverride(): string | undefined {
  const b = process.env['LSP_TESTPLANE_BINARY'];
  return b !== undefined && b !== '' ? b : undefined;
}

/**
 * Runs `fn` with a fresh environment and always tears it down: on return, on a throw, and on
 * SIGINT/SIGTERM (exit code 130/143). A synchronous last-resort hook kills daemons and unmounts
 * on process exit.
 */
export async function withBench<T>(opts: BenchOptions, fn: (b: Bench) => Promise<T>): Promise<T> {
  if (!isRoot()) throw new Error('the benchmarks need root: they mount tmpfs volumes');
  const cleanups: Array<() => void | Promise<void>> = [];
  const daemons = new Set<Daemon>();
  let host: HostFixtures | undefined;
  let cp: ControlPlane | undefined;
  const mounts: string[] = [];
  const unmountAll = (): void => {
    if (mounts.length === 0) return;
    const paths = mounts.splice(0);
    try {
      execFileSync('umount', paths, { stdio: 'ignore' });
    } catch {
      // Some failed (busy, or never mounted): lazily unmount whatever is still mounted.
      const still = new Set(readFileSync('/proc/self/mounts', 'utf8').split('\n').map((l) => l.split(' ')[1]));
      for (const p of paths) {
        if (!still.has(p)) continue;
        try {
          execFileSync('umount', ['-l', p], { stdio: 'ignore' });
        } catch {
          /* gone */
        }
      }
    }
  };
  let tearing: Promise<void> | undefined;
  const teardown = (): Promise<void> => {
    tearing ??= (async () => {
      log('cleaning up: daemons, mounts, control plane, temp dirs');
      for (const d of daemons) await d.stop().catch(() => undefined);
      for (const c of cleanups.reverse()) {
        try {
          await c();
        } catch (e) {
          log(`cleanup step failed: ${String(e)}`);
        }
      }
      unmountAll();
      host?.cleanup();
      await cp?.stop();
      log('cleanup done');
    })();
    return tearing;
  };
  const onSignal = (sig: NodeJS.Signals): void => {
    log(`${sig}: stopping`);
    void teardown().finally(() => process.exit(sig === 'SIGINT' ? 130 : 143));
  };
  const lastResort = (): void => {
    for (const d of daemons) {
      try {
        d.proc.child.kill('SIGKILL');
      } catch {
        /* gone */
      }
    }
    unmountAll();
    host?.cleanup();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.on('exit', lastResort);

  try {
    const binary = binaryOverride();
    cp = await startControlPlane({ log: (m) => log(m), ...(binary !== undefined ? { binary } : {}) });
    const cpStartStats = cp.stats();
    await applyManifests(cp.adminKubeconfig);
    const kc = new KubeConfig();
    kc.loadFromFile(cp.adminKubeconfig);
    const core = kc.makeApiClient(CoreV1Api);
    const storage = kc.makeApiClient(StorageV1Api);
    const nodeName = `bench-${opts.name}`;
    const className = 'bench-local';
    await createNode(core, nodeName, { 'topology.kubernetes.io/zone': 'bench-zone' });
    await storage.createStorageClass({
      body: {
        metadata: { name: className },
        provisioner: 'kubernetes.io/no-provisioner',
        volumeBindingMode: 'WaitForFirstConsumer',
        reclaimPolicy: 'Delete',
      },
    });
    host = new HostFixtures(`lsp-bench-${opts.name}-`);
    const h = host;
    const mountDir = h.mkdir('disks');
    const configDir = h.path('config');
    const writer = new AtomicWriter(configDir);
    const writeConfig = (extra: Record<string, string> = {}): Promise<void> => {
      const labels = { [OWN_LABEL]: nodeName, ...extra };
      return writer.write({
        storageClassMap: `${className}:\n  hostDir: /mnt/bench/disks\n  mountDir: ${mountDir}\n`,
        useNodeNameOnly: 'true\n',
        labelsForPV: Object.entries(labels)
          .map(([k, v]) => `${k}: ${JSON.stringify(v)}\n`)
          .join(''),
      });
    };
    await writeConfig();
    let n = 0;
    const b: Bench = {
      cp,
      kc,
      core,
      storage,
      host: h,
      nodeName,
      className,
      mountDir,
      ownSelector: `${OWN_LABEL}=${nodeName}`,
      configDir,
      writer,
      cpStartStats,
      writeConfig,
      defer: (f) => cleanups.push(f),
      mountTmpfs(paths, sizeMiB) {
        mounts.push(...paths);
        execFileSync('sh', ['-ec', `for p in "$@"; do mkdir -p "$p"; mount -t tmpfs -o size=${sizeMiB}m lsp-bench "$p"; done`, 'sh', ...paths], {
          stdio: ['ignore', 'ignore', 'pipe'],
        });
      },
      async startDaemon(o) {
        const port = await freePort();
        const logFile = h.path(`daemon-${++n}-${o.tag}.log`);
        const own = o.args ?? [];
        const args = own.some((a) => a.startsWith('--discovery-period')) ? [...own] : ['--discovery-period=1s', ...own];
        const spawnedAt = Date.now();
        const proc = startProvisioner({
          configDir,
          nodeName,
          kubeconfig: b.cp.provisionerKubeconfig,
          port,
          logFile,
          args,
          ...(o.env ? { env: o.env } : {}),
          ...(o.script !== undefined ? { script: o.script } : {}),
          ...(o.nodeArgs ? { nodeArgs: o.nodeArgs } : {}),
          ...(o.logLevel !== undefined ? { logLevel: o.logLevel } : {}),
        });
        const pid = proc.child.pid ?? 0;
        const d: Daemon = {
          proc,
          pid,
          spawnedAt,
          args,
          logs: new LogTail(logFile),
          metrics: async () => parseMetrics(await proc.metrics()),
          mem: () => procMem(pid),
          stop: async () => {
            await proc.stop();
            daemons.delete(d);
          },
        };
        daemons.add(d);
        return d;
      },
    };
    return await fn(b);
  } finally {
    await teardown();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    process.off('exit', lastResort);
  }
}

/** Mounts `n` tmpfs volumes (size=1m) under b.mountDir, numbered from `from`; returns their names. */
export function mountVolumes(b: Bench, n: number, from = 0): string[] {
  const names = Array.from({ length: n }, (_, i) => `vol${String(from + i).padStart(4, '0')}`);
  b.mountTmpfs(names.map((x) => join(b.mountDir, x)), 1);
  return names;
}

/** A benchmark file run alone: a fresh environment with `volumes` mounts (no PVs yet). */
export function standalone(name: string, volumes: number, fn: (b: Bench) => Promise<void>): Promise<void> {
  return withBench({ name }, async (b) => {
    log(`mounting ${volumes} tmpfs volumes`);
    mountVolumes(b, volumes);
    await fn(b);
  });
}

/** Deletes every PV carrying this node's bench label and waits until the API has none left. */
export async function deleteOwnPVs(b: Bench, timeoutMs = 120_000): Promise<number> {
  const t = Date.now();
  await b.core.deleteCollectionPersistentVolume({ labelSelector: b.ownSelector });
  for (;;) {
    const left = (await b.core.listPersistentVolume({ labelSelector: b.ownSelector })).items.length;
    if (left === 0) return Date.now() - t;
    if (Date.now() - t > timeoutMs) throw new Error(`${left} PVs still present ${timeoutMs} ms after deletecollection`);
    await sleep(250);
  }
}

/** Waits until the daemon's generation `gen` has logged its start; returns that line. */
export function waitControllerStarted(d: Daemon, gen = 1, timeoutMs = 120_000): Promise<LogLine> {
  return d.logs.waitFor(
    (l) => typeof l.msg === 'string' && l.msg.startsWith('configuration ') && l.msg.includes('local controller') && (l['controllerGeneration'] ?? l['generation']) === gen,
    `generation ${gen} started`,
    timeoutMs,
    25,
  );
}

/** NODE_OPTIONS for a daemon whose heap forceGC() can collect: the inspector on a free loopback port. */
export const INSPECTABLE_ENV: Readonly<Record<string, string>> = { NODE_OPTIONS: '--inspect=127.0.0.1:0' };

/**
 * Runs a full garbage collection in a daemon started with INSPECTABLE_ENV, through the inspector
 * protocol (HeapProfiler.collectGarbage), so heap numbers taken next show retained memory only.
 */
export async function forceGC(d: Daemon, timeoutMs = 30_000): Promise<void> {
  const url = /Debugger listening on (ws:\/\/\S+)/.exec(d.proc.logs())?.[1];
  if (url === undefined) throw new Error('the daemon has no inspector (start it with INSPECTABLE_ENV)');
  const ws = new WebSocket(url);
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer to HeapProfiler.collectGarbage within ${timeoutMs} ms`)), timeoutMs);
      ws.addEventListener('open', () => ws.send(JSON.stringify({ id: 1, method: 'HeapProfiler.collectGarbage' })));
      ws.addEventListener('message', (ev) => {
        const msg = JSON.parse(String(ev.data)) as { id?: number; error?: { message?: string } };
        if (msg.id !== 1) return;
        clearTimeout(timer);
        if (msg.error) reject(new Error(`collectGarbage failed: ${msg.error.message ?? 'unknown'}`));
        else resolve();
      });
      ws.addEventListener('error', () => {
        clearTimeout(timer);
        reject(new Error(`inspector connection to ${url} failed`));
      });
    });
  } finally {
    ws.close();
  }
}

/** Markdown of the control plane's stats. */
export function controlPlaneTable(s: ControlPlaneStats): string {
  const rows = Object.entries(s.components).map(([name, c]) => [
    name,
    secs(c.readyMs),
    kibToMib(c.rssKiB),
    kibToMib(c.peakRssKiB),
  ]);
  rows.push(['total', secs(s.startupMs), kibToMib(s.totalRssKiB), '']);
  return table(['component', 'ready after (s)', 'RSS (MiB)', 'peak RSS (MiB)'], rows);
}

/** One benchmark's printable result. */
export interface Section {
  readonly title: string;
  readonly markdown: string;
  readonly data: unknown;
}

export function printSection(s: Section): void {
  process.stdout.write(`\n## ${s.title}\n\n${s.markdown}\n`);
}

/** Machine description for the report. */
export function machine(): string {
  const cpus = readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.*)$/m)?.[1] ?? 'unknown CPU';
  const nproc = readFileSync('/proc/cpuinfo', 'utf8').match(/^processor\s*:/gm)?.length ?? 0;
  const memKiB = Number(/^MemTotal:\s+(\d+)/m.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1] ?? 0);
  return `${nproc} CPUs (${cpus}), ${(memKiB / 1024 / 1024).toFixed(1)} GiB RAM, Node ${process.version}, kernel ${readFileSync('/proc/sys/kernel/osrelease', 'utf8').trim()}`;
}

export const repoRoot = join(import.meta.dirname, '..');
