// Benchmark 1, discovery scale: 500 tmpfs mounts -> 500 PVs, timed from the
// daemon's spawn to the 500th PV visible in the API (an admin watch timestamps
// each PV as it appears). Run twice on the same mounts in the same run: with the
// Go provisioner's client limits (--kube-api-qps=5 --kube-api-burst=10) and with
// our defaults (20/40); the PVs are deleted and the daemon restarted in between.
//
//   node bench/discovery-scale.ts [--volumes N]
import { parseArgs } from 'node:util';
import {
  deleteOwnPVs,
  lineTime,
  log,
  mib,
  kibToMib,
  printSection,
  PVWatch,
  secs,
  sumOf,
  table,
  waitControllerStarted,
  standalone,
  controlPlaneTable,
  type Bench,
  type Daemon,
  type Section,
} from './lib.ts';

export interface DiscoveryRun {
  readonly label: string;
  readonly qps: number;
  readonly burst: number;
  readonly volumes: number;
  /** Spawn -> the last PV visible in the API (admin watch). */
  readonly totalMs: number;
  /** Spawn -> the daemon's "configuration loaded; local controller started" log line. */
  readonly startupMs: number;
  /** First -> last "Created PV" log line of the daemon. */
  readonly createWindowMs: number;
  /** (volumes - 1) / createWindow. */
  readonly createsPerSec: number;
  /** PV creates the daemon counted (apiserver_requests_total{method="create"}). */
  readonly creates: number;
  /** Every request it sent (kube_requests_total). */
  readonly requests: number;
  readonly rssKiB: number | undefined;
  readonly hwmKiB: number | undefined;
  readonly metricRssBytes: number;
  readonly heapUsedBytes: number;
}

/**
 * Starts a daemon with the given limits and waits until `volumes` PVs of this node are in the
 * API. Returns the numbers and the daemon, still running.
 */
export async function discoveryRun(
  b: Bench,
  o: { label: string; qps?: number; burst?: number; volumes: number; timeoutMs?: number },
): Promise<{ run: DiscoveryRun; daemon: Daemon }> {
  const watch = new PVWatch(b.kc, b.ownSelector);
  await watch.start();
  try {
    if (watch.count !== 0) throw new Error(`${watch.count} PVs of this node exist before the run`);
    const args = o.qps !== undefined ? [`--kube-api-qps=${o.qps}`, `--kube-api-burst=${o.burst ?? o.qps * 2}`] : [];
    log(`discovery (${o.label}): starting the daemon ${args.join(' ') || '(default limits)'}`);
    const d = await b.startDaemon({ tag: o.label, args });
    await watch.until((c) => c >= o.volumes, `${o.volumes} PVs`, o.timeoutMs ?? 300_000);
    const last = Math.max(...watch.seen.values());
    const started = await waitControllerStarted(d);
    // The whole log file (not the tail, which waitControllerStarted has consumed) for the creates.
    const created = d.proc
      .logLines()
      .filter((l) => typeof l['msg'] === 'string' && l['msg'].startsWith('Created PV '))
      .map((l) => Date.parse(String(l['time'])));
    await new Promise((r) => setTimeout(r, 500)); // let the counters settle
    const m = await d.metrics();
    const mem = d.mem();
    const window = created.length > 1 ? Math.max(...created) - Math.min(...created) : NaN;
    const run: DiscoveryRun = {
      label: o.label,
      qps: o.qps ?? 20,
      burst: o.burst ?? 40,
      volumes: o.volumes,
      totalMs: last - d.spawnedAt,
      startupMs: lineTime(started) - d.spawnedAt,
      createWindowMs: window,
      createsPerSec: (created.length - 1) / (window / 1000),
      creates: sumOf(m, 'local_volume_provisioner_apiserver_requests_total', { method: 'create' }),
      requests: sumOf(m, 'local_volume_provisioner_kube_requests_total'),
      rssKiB: mem?.rssKiB,
      hwmKiB: mem?.hwmKiB,
      metricRssBytes: sumOf(m, 'process_resident_memory_bytes'),
      heapUsedBytes: sumOf(m, 'nodejs_heap_size_used_bytes'),
    };
    log(`discovery (${o.label}): ${o.volumes} PVs in ${secs(run.totalMs)} s (${run.createsPerSec.toFixed(1)} creates/s)`);
    return { run, daemon: d };
  } finally {
    watch.stop();
  }
}

export function discoveryTable(runs: readonly DiscoveryRun[]): string {
  const rows = runs.map((r) => [
    `${r.label} (${r.qps}/${r.burst})`,
    secs(r.totalMs),
    secs(r.startupMs),
    secs(r.createWindowMs),
    r.createsPerSec.toFixed(1),
    r.creates,
    r.requests,
    kibToMib(r.rssKiB),
    kibToMib(r.hwmKiB),
    mib(r.heapUsedBytes),
  ]);
  return table(
    [
      'limits (qps/burst)',
      'spawn -> all PVs (s)',
      'spawn -> controller (s)',
      'first -> last create (s)',
      'creates/s',
      'PV creates',
      'API requests',
      'VmRSS (MiB)',
      'VmHWM (MiB)',
      'heap used (MiB)',
    ],
    rows,
  );
}

/**
 * The whole benchmark on an environment that already has `volumes` mounts: Go limits, delete,
 * our limits. Returns the section and the second daemon (running, all PVs present).
 */
export async function discoveryScale(b: Bench, volumes: number): Promise<{ section: Section; daemon: Daemon; runs: DiscoveryRun[] }> {
  const go = await discoveryRun(b, { label: 'Go client defaults', qps: 5, burst: 10, volumes });
  await go.daemon.stop();
  const delMs = await deleteOwnPVs(b);
  log(`deleted ${volumes} PVs in ${secs(delMs)} s`);
  const ours = await discoveryRun(b, { label: 'our defaults', volumes });
  const runs = [go.run, ours.run];
  const ratio = go.run.totalMs / ours.run.totalMs;
  const markdown = [
    `${volumes} tmpfs mounts (size=1m) under one directory, one storage class, daemon started with the mounts already present`,
    `(\`--discovery-period=1s\`); time from spawning the daemon to the last PV seen by an admin watch.`,
    '',
    discoveryTable(runs),
    '',
    `Ratio (5/10 vs 20/40), spawn -> all PVs: **${ratio.toFixed(2)}x**; creates/s: ${(ours.run.createsPerSec / go.run.createsPerSec).toFixed(2)}x.`,
  ].join('\n');
  return { section: { title: 'Discovery scale', markdown, data: { volumes, runs, ratio } }, daemon: ours.daemon, runs };
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { volumes: { type: 'string', default: '500' } } });
  const volumes = Number(values.volumes);
  await standalone('discovery', volumes, async (b) => {
    const { section } = await discoveryScale(b, volumes);
    printSection(section);
    printSection({ title: 'Control plane (start-up)', markdown: controlPlaneTable(b.cpStartStats), data: b.cpStartStats });
  });
}
