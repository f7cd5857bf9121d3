// Benchmark 6, the fleet-scale cost model (issue 12 point 3): many provisioner
// daemons against one real control plane, and what the API server serves them.
//
// The seam: `run()` of src/main.ts, the daemon's own entry point (everything but
// argv parsing and signal wiring), called once per simulated node in THIS
// process, each with its own Options (node name, state dir, listen port 0),
// its own API client (own rate limiter, own TLS connection), informers,
// supervisor and controller generations. They share the process, the config
// directory (one ConfigMap for the whole fleet, as a DaemonSet has) and the
// control plane. The nodes have no local volumes (an empty discovery dir): the
// cluster's PVs are made by the bench, `--pvs` of them spread over the fleet's
// nodes, each as this node's provisioner makes it (provisioned-by, hostname
// affinity, and the --pv-node-label label, in both modes so both see the same
// objects). Each daemon adopts its share.
//
// Measured from the API server's own /metrics (admin identity), scraped before
// and after each phase: apiserver_request_total and apiserver_response_sizes
// (sum) by verb and resource, apiserver_watch_events_total and
// apiserver_watch_events_sizes (sum) by kind. Phases, for each mode (--modes
// off,on: without and with --pv-node-label):
//   start    the whole fleet starts (--start-concurrency daemons at a time,
//            each waited until its controller runs): per node, requests and bytes;
//   idle     --idle-s seconds with nothing changing;
//   change   --changes PVs are changed by the admin (an annotation), spread over
//            the nodes: watch events and bytes per change across the fleet;
//   reload   the shared ConfigMap directory changes (labelsForPV, a kubelet-style
//            swap): every daemon reloads; requests and bytes per node.
// Before any daemon runs, the same `change` phase gives the baseline (the KCM's
// own PV watch), subtracted from the fleet's numbers.
//
//   node bench/fleet.ts [--nodes 100] [--pvs 10000] [--changes 100] [--idle-s 60] [--modes off,on]
//                       [--start-concurrency 4] [--json FILE]
import { writeFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { parseArgs } from 'node:util';
import { PatchStrategy, setHeaderOptions, type V1PersistentVolume } from '@kubernetes/client-node';
import { componentManifests, applyManifests } from '../e2e/harness/manifests.ts';
import { createNode } from '../e2e/harness/node-agent.ts';
import { parseOptions } from '../src/flags.ts';
import { run } from '../src/main.ts';
import { createLogger } from '../src/util/log.ts';
import { PROVISIONER_NAME_PREFIX } from '../src/volume/naming.ts';
import { PV_NODE_LABEL } from '../src/volume/pv-node-label.ts';
import { delta, groupBy, log, machine, parseMetrics, printSection, sleep, table, withBench, type Bench, type Section } from './lib.ts';

export interface FleetOptions {
  readonly nodes: number;
  readonly pvs: number;
  readonly changes: number;
  readonly idleS: number;
  readonly modes: readonly ('off' | 'on')[];
  readonly startConcurrency: number;
}

/** One scrape of the API server's metrics that matter here, as "name key" -> value. */
type Scrape = Map<string, number>;

const REQ = 'apiserver_request_total';
const RESP_BYTES = 'apiserver_response_sizes_sum';
const WATCH_EVENTS = 'apiserver_watch_events_total';
const WATCH_BYTES = 'apiserver_watch_events_sizes_sum';
const OPEN = 'apiserver_longrunning_requests';
/**
 * The resources the daemon uses. Everything else is the control plane's own traffic (the KCM's informers
 * renewing their watches, its leases) or this bench's /metrics scrapes, and is left out.
 */
const DAEMON_RESOURCES = new Set(['persistentvolumes', 'storageclasses', 'nodes', 'events', 'jobs']);

/** GET `path` of the API server with the admin identity; the raw body (as sent: not decompressed). */
async function apiGet(b: Bench, path: string, headers: Record<string, string> = {}): Promise<Buffer> {
  const server = b.kc.getCurrentCluster()?.server ?? '';
  const u = new URL(path, server);
  const opts: Parameters<typeof httpsRequest>[1] = { method: 'GET', headers };
  await b.kc.applyToHTTPSOptions(opts);
  return new Promise<Buffer>((resolve, reject) => {
    const req = httpsRequest(u, opts, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const body = Buffer.concat(chunks);
        if (res.statusCode !== 200) reject(new Error(`GET ${path}: HTTP ${String(res.statusCode)}: ${body.toString('utf8', 0, 200)}`));
        else resolve(body);
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

const apiserverMetrics = async (b: Bench): Promise<string> => (await apiGet(b, '/metrics')).toString('utf8');

/**
 * What apiserver_response_sizes counts: one PV list as JSON without and with gzip (the daemon's
 * client, node-fetch, asks for gzip), body sizes as received, and the metric's delta for each.
 */
async function calibrate(b: Bench): Promise<{ plainBytes: number; gzipBytes: number; metricPlain: number; metricGzip: number; items: number }> {
  const key = `${RESP_BYTES} LIST persistentvolumes`;
  const s0 = await scrape(b);
  const plain = await apiGet(b, '/api/v1/persistentvolumes', { 'Accept-Encoding': 'identity', Accept: 'application/json' });
  const s1 = await scrape(b);
  const gz = await apiGet(b, '/api/v1/persistentvolumes', { 'Accept-Encoding': 'gzip', Accept: 'application/json' });
  const s2 = await scrape(b);
  const items = (JSON.parse(plain.toString('utf8')) as { items: unknown[] }).items.length;
  return {
    plainBytes: plain.length,
    gzipBytes: gz.length,
    metricPlain: (s1.get(key) ?? 0) - (s0.get(key) ?? 0),
    metricGzip: (s2.get(key) ?? 0) - (s1.get(key) ?? 0),
    items,
  };
}

async function scrape(b: Bench): Promise<Scrape> {
  const s = parseMetrics(await apiserverMetrics(b));
  const out: Scrape = new Map();
  const add = (name: string, keys: readonly string[]): void => {
    for (const [k, v] of groupBy(s, name, keys)) out.set(`${name} ${k}`, v);
  };
  add(REQ, ['verb', 'resource']);
  add(RESP_BYTES, ['verb', 'resource']);
  add(WATCH_EVENTS, ['resource']);
  add(WATCH_BYTES, ['resource']);
  add(OPEN, ['verb', 'resource']);
  return out;
}

/** Scrapes until two scrapes 1 s apart agree on the watch counters (the fan-out has been sent), at most `maxS` (bookmarks keep them moving). */
async function settledScrape(b: Bench, maxS = 10): Promise<Scrape> {
  let prev = await scrape(b);
  for (let i = 0; i < maxS; i++) {
    await sleep(1000);
    const cur = await scrape(b);
    const same = [...cur].every(([k, v]) => !k.startsWith('apiserver_watch') || prev.get(k) === v);
    if (same) return cur;
    prev = cur;
  }
  return prev;
}

/** The delta of one phase, split into the rows we print. */
interface PhaseCost {
  readonly requests: Map<string, number>;
  readonly responseBytes: Map<string, number>;
  readonly watchEvents: Map<string, number>;
  readonly watchBytes: Map<string, number>;
  /** Change in open long-running requests (watches) by "WATCH resource". */
  readonly openWatches: Map<string, number>;
}

function phaseCost(before: Scrape, after: Scrape): PhaseCost {
  const d = delta(before, after);
  const pick = (prefix: string): Map<string, number> =>
    new Map(
      [...d]
        .filter(([k]) => k.startsWith(`${prefix} `))
        .map(([k, v]): [string, number] => [k.slice(prefix.length + 1), v])
        .filter(([k]) => DAEMON_RESOURCES.has(k.split(' ').at(-1) ?? '')),
    );
  return {
    requests: pick(REQ),
    // A WATCH's response size is what it streamed over its whole life (recorded when it ends): counted as watch events instead.
    responseBytes: new Map([...pick(RESP_BYTES)].filter(([k]) => !k.startsWith('WATCH '))),
    watchEvents: pick(WATCH_EVENTS),
    watchBytes: pick(WATCH_BYTES),
    openWatches: new Map([...pick(OPEN)].filter(([k]) => k.startsWith('WATCH '))),
  };
}

const total = (m: ReadonlyMap<string, number>, pred: (k: string) => boolean = () => true): number =>
  [...m].filter(([k]) => pred(k)).reduce((a, [, v]) => a + v, 0);
const isPV = (k: string): boolean => k === 'persistentvolumes' || k.endsWith(' persistentvolumes');

/** What the bench's admin client itself sent during a phase (left out of the daemons' numbers). */
type AdminRequests = Readonly<Record<string, number>>;

function withoutAdmin(requests: ReadonlyMap<string, number>, admin: AdminRequests): Map<string, number> {
  const out = new Map(requests);
  for (const [k, v] of Object.entries(admin)) {
    const left = (out.get(k) ?? 0) - v;
    if (left > 0) out.set(k, left);
    else out.delete(k);
  }
  return out;
}

const fmtBytes = (n: number): string =>
  n >= 1024 ** 3 ? `${(n / 1024 ** 3).toFixed(2)} GiB` : n >= 1024 ** 2 ? `${(n / 1024 ** 2).toFixed(2)} MiB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n.toFixed(0)} B`;
const fmtN = (n: number): string => (Number.isInteger(n) ? String(n) : n.toFixed(2));
const fmtMap = (m: ReadonlyMap<string, number>, div: number, bytes = false): string =>
  [...m]
    .filter(([, v]) => v !== 0)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k} ${bytes ? fmtBytes(v / div) : fmtN(v / div)}`)
    .join(', ') || '0';

function fleetPV(b: Bench, i: number, node: string): V1PersistentVolume {
  return {
    metadata: {
      name: `fleet-pv-${String(i).padStart(6, '0')}`,
      labels: { [PV_NODE_LABEL]: node },
      annotations: { 'pv.kubernetes.io/provisioned-by': `${PROVISIONER_NAME_PREFIX}${node}` },
    },
    spec: {
      capacity: { storage: '375Gi' },
      local: { path: `/mnt/bench/disks/vol${String(i).padStart(6, '0')}` },
      accessModes: ['ReadWriteOnce'],
      persistentVolumeReclaimPolicy: 'Delete',
      storageClassName: b.className,
      volumeMode: 'Filesystem',
      nodeAffinity: { required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [node] }] }] } },
    },
  };
}

/** Runs `fn(i)` for i in [0, n) with `concurrency` in flight. */
async function pool(n: number, concurrency: number, fn: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    for (;;) {
      const i = next++;
      if (i >= n) return;
      await fn(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, concurrency) }, worker));
}

/** One simulated node: the daemon's run() in this process. */
interface Member {
  readonly node: string;
  reloads: number;
  stop: () => Promise<void>;
}

async function startMember(b: Bench, node: string, on: boolean): Promise<Member> {
  const m: Member = { node, reloads: 0, stop: () => Promise.resolve() };
  const opts = parseOptions(
    [
      '--listen-address=127.0.0.1:0',
      `--config-dir=${b.configDir}`,
      `--state-dir=${b.host.path(`state-${node}`)}`,
      `--pv-node-label=${String(on)}`,
    ],
    { MY_NODE_NAME: node, MY_NAMESPACE: 'default', KUBECONFIG: b.cp.provisionerKubeconfig, JOB_CONTAINER_IMAGE: 'bench/none' },
  );
  // Info level, but nothing is written: only the reload line is counted (and errors shown).
  const logger = createLogger({
    level: 'info',
    format: 'json',
    write: (line) => {
      if (line.includes('"configuration reloaded')) m.reloads++;
      else if (line.includes('"level":"error"')) process.stderr.write(`[${node}] ${line}`);
    },
  });
  m.stop = await run(opts, logger);
  return m;
}

interface ModeResult {
  readonly mode: 'off' | 'on';
  readonly start: PhaseCost;
  readonly idle: PhaseCost;
  readonly change: PhaseCost;
  readonly reload: PhaseCost;
  readonly startS: number;
  readonly idleS: number;
}

async function runMode(b: Bench, o: FleetOptions, nodes: readonly string[], mode: 'off' | 'on', round: { n: number }): Promise<ModeResult> {
  const on = mode === 'on';
  log(`fleet ${mode}: starting ${nodes.length} daemons, ${o.startConcurrency} at a time`);
  const members: Member[] = [];
  const stopAll = async (): Promise<void> => {
    for (const m of members.splice(0)) await m.stop().catch((e: unknown) => log(`stopping ${m.node}: ${String(e)}`));
  };
  b.defer(stopAll);
  const s0 = await settledScrape(b);
  const t = performance.now();
  await pool(nodes.length, o.startConcurrency, async (i) => {
    members.push(await startMember(b, nodes[i]!, on));
    if (members.length % 10 === 0) log(`fleet ${mode}: ${members.length} daemons running`);
  });
  const startS = (performance.now() - t) / 1000;
  const s1 = await settledScrape(b);
  log(`fleet ${mode}: all ${nodes.length} running after ${startS.toFixed(1)} s; idle ${o.idleS} s`);
  await sleep(o.idleS * 1000);
  const s2 = await scrape(b);
  const change = await changePVs(b, o, nodes, `${mode}-${++round.n}`);
  log(`fleet ${mode}: reload`);
  const s3 = await settledScrape(b);
  const before = new Map(members.map((m) => [m, m.reloads]));
  await b.writeConfig({ 'lsp-bench/reload': `r${++round.n}` });
  const deadline = Date.now() + 300_000;
  const pending = (): Member[] => members.filter((m) => m.reloads <= (before.get(m) ?? 0));
  while (pending().length > 0) {
    if (Date.now() > deadline) throw new Error(`${pending().length} daemons did not reload within 300 s`);
    await sleep(200);
  }
  const s4 = await settledScrape(b);
  await stopAll();
  return {
    mode,
    start: phaseCost(s0, s1),
    idle: phaseCost(s1, s2),
    change: change.cost,
    reload: phaseCost(s3, s4),
    startS,
    idleS: o.idleS,
  };
}

/** Seconds of each window of the change phase (the fan-out is delivered well within it). */
const CHANGE_WINDOW_S = 15;

/**
 * The admin changes `o.changes` PVs (an annotation), spread over the nodes. Watch bookmarks and renewals
 * go on meanwhile, so the cost is the window with the changes minus a window of the same length just
 * before it without any: (s2 - s1) - (s1 - s0).
 */
async function changePVs(b: Bench, o: FleetOptions, nodes: readonly string[], tag: string): Promise<{ cost: PhaseCost; admin: AdminRequests }> {
  const s0 = await scrape(b);
  await sleep(CHANGE_WINDOW_S * 1000);
  const s1 = await scrape(b);
  const t = performance.now();
  const step = Math.max(1, Math.floor(o.pvs / o.changes));
  await pool(o.changes, 8, async (i) => {
    const idx = (i * step) % o.pvs;
    const name = fleetPV(b, idx, nodes[idx % nodes.length]!).metadata?.name ?? '';
    await b.core.patchPersistentVolume(
      { name, body: { metadata: { annotations: { 'lsp-bench/touch': tag } } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
  });
  await sleep(Math.max(0, CHANGE_WINDOW_S * 1000 - (performance.now() - t)));
  const s2 = await scrape(b);
  const control = delta(s0, s1);
  const corrected: Scrape = new Map(s2);
  for (const [k, v] of control) corrected.set(k, (corrected.get(k) ?? 0) - v);
  return { cost: phaseCost(s1, corrected), admin: { 'PATCH persistentvolumes': o.changes } };
}

export async function fleet(b: Bench, o: FleetOptions): Promise<Section> {
  process.setMaxListeners(o.nodes * 4 + 20); // each daemon's run() adds a SIGHUP handler
  await applyManifests(b.cp.adminKubeconfig, componentManifests('pv-node-label'));
  const nodes = Array.from({ length: o.nodes }, (_, i) => `fleet-${String(i).padStart(4, '0')}`);
  log(`fleet: creating ${o.nodes} Nodes and ${o.pvs} PVs`);
  await pool(nodes.length, 16, async (i) => {
    await createNode(b.core, nodes[i]!, { 'topology.kubernetes.io/zone': 'bench-zone' });
  });
  const tc = performance.now();
  await pool(o.pvs, 32, async (i) => {
    await b.core.createPersistentVolume({ body: fleetPV(b, i, nodes[i % nodes.length]!) });
  });
  log(`fleet: ${o.pvs} PVs created in ${((performance.now() - tc) / 1000).toFixed(1)} s`);
  // The KCM's PV binder moves each new PV to Available (a status update, a watch event): wait for it, so no phase counts it.
  for (let available = 0; available < o.pvs; ) {
    await sleep(2000);
    const list = await b.core.listPersistentVolume({ labelSelector: PV_NODE_LABEL });
    available = list.items.filter((pv) => pv.status?.phase === 'Available').length;
    log(`fleet: ${available} of ${o.pvs} PVs Available`);
  }
  const cal = await calibrate(b);
  log(`fleet: one PV list of ${cal.items} PVs: ${cal.plainBytes} B JSON, ${cal.gzipBytes} B gzip; apiserver_response_sizes counted ${cal.metricPlain} and ${cal.metricGzip}`);
  const round = { n: 0 };
  const baseline = await changePVs(b, o, nodes, `base-${++round.n}`);
  const results: ModeResult[] = [];
  for (const mode of o.modes) results.push(await runMode(b, o, nodes, mode, round));
  return report(o, baseline.cost, results, cal);
}

function report(o: FleetOptions, baseline: PhaseCost, results: readonly ModeResult[], cal: Awaited<ReturnType<typeof calibrate>>): Section {
  const N = o.nodes;
  const baseEvents = total(baseline.watchEvents, isPV);
  const baseEventBytes = total(baseline.watchBytes, isPV);
  const admin: AdminRequests = { 'PATCH persistentvolumes': o.changes };
  const rows: (string | number)[][] = [];
  const derived: Record<string, Record<string, number>> = {};
  for (const r of results) {
    const startBytes = total(r.start.responseBytes) + total(r.start.watchBytes);
    const startPvBytes = total(r.start.responseBytes, isPV) + total(r.start.watchBytes, isPV);
    const changeEvents = total(r.change.watchEvents, isPV) - baseEvents;
    const changeBytes = total(r.change.watchBytes, isPV) - baseEventBytes;
    const idleReq = total(r.idle.requests);
    const idleBytes = total(r.idle.responseBytes) + total(r.idle.watchBytes);
    const reloadReq = total(r.reload.requests);
    const reloadBytes = total(r.reload.responseBytes) + total(r.reload.watchBytes);
    const label = r.mode === 'on' ? '`--pv-node-label=true`' : 'default (off)';
    rows.push(
      [label, 'start, per node: requests', fmtMap(r.start.requests, N)],
      [label, 'start, per node: response bytes (list/get)', fmtMap(r.start.responseBytes, N, true)],
      [label, 'start, per node: watches opened', fmtMap(r.start.openWatches, N)],
      [label, 'start, per node: watch events', fmtMap(r.start.watchEvents, N)],
      [label, 'start, per node: total bytes served (of which PVs)', `${fmtBytes(startBytes / N)} (${fmtBytes(startPvBytes / N)})`],
      [label, `one PV change: watch events to the fleet (the control plane's own ${fmtN(baseEvents / o.changes)} subtracted)`, `${fmtN(changeEvents / o.changes)} events, ${fmtBytes(changeBytes / o.changes)}`],
      [label, 'one PV change: per node', `${fmtN(changeEvents / o.changes / N)} events, ${fmtBytes(changeBytes / o.changes / N)}`],
      [label, 'ConfigMap reload, per node: requests', fmtMap(withoutAdmin(r.reload.requests, {}), N)],
      [label, 'ConfigMap reload, per node: bytes served', fmtBytes(reloadBytes / N)],
      [label, `idle ${r.idleS} s, per node: requests (ended) / watch events / bytes`, `${fmtMap(r.idle.requests, N)} / ${fmtMap(r.idle.watchEvents, N)} / ${fmtBytes(idleBytes / N)}`],
      [label, 'fleet start wall time', `${r.startS.toFixed(1)} s (${o.startConcurrency} at a time)`],
    );
    derived[r.mode] = {
      startBytesPerNode: startBytes / N,
      startPvBytesPerNode: startPvBytes / N,
      startRequestsPerNode: total(r.start.requests) / N,
      changeEventsPerChange: changeEvents / o.changes,
      changeBytesPerChange: changeBytes / o.changes,
      reloadRequestsPerNode: reloadReq / N,
      reloadBytesPerNode: reloadBytes / N,
      idleRequestsPerNodeHour: (idleReq / N) * (3600 / r.idleS),
      idleBytesPerNodeHour: (idleBytes / N) * (3600 / r.idleS),
    };
  }
  const extra = extrapolate(o, derived, results);
  const markdown = [
    `${N} daemons (run() of src/main.ts, in one process, each its own node name, API client and informers), ${o.pvs} PVs in the cluster`,
    `(${o.pvs / N} per node, each daemon adopts its share), one shared config directory, no local volumes. Numbers from the API server's`,
    `/metrics (apiserver_request_total, apiserver_response_sizes, apiserver_watch_events_total/sizes), deltas per phase divided by ${N}.`,
    `The admin's own ${o.changes} PATCH requests of the change phase are not daemons' requests (${JSON.stringify(admin)}); only the resources`,
    `the daemon uses are counted (${[...DAEMON_RESOURCES].join(', ')}): the KCM's own watches of them remain (~0.01 per node and phase). WATCH requests show up in apiserver_request_total only when they end,`,
    'so watches are counted as opened (apiserver_longrunning_requests).',
    `Calibration: one list of the ${cal.items} PVs is ${fmtBytes(cal.plainBytes)} as JSON (${fmtBytes(cal.plainBytes / cal.items)} per PV), ${fmtBytes(cal.gzipBytes)}`,
    `gzipped; apiserver_response_sizes counted ${fmtBytes(cal.metricPlain)} and ${fmtBytes(cal.metricGzip)} for them: list and get bytes below are`,
    'bytes as sent, after gzip, since the daemon asks for gzip. Watch events are never compressed (apiserver_watch_events_sizes: encoded object sizes).',
    '',
    table(['mode', 'what', 'value'], rows),
    '',
    extra,
  ].join('\n');
  return { title: 'Fleet-scale cost', markdown, data: { options: o, calibration: cal, baseline, results, derived } };
}

/** The reflector's watch timeout (src/kube/reflector.ts: 300 s plus up to 10 % jitter): mean seconds per watch. */
const WATCH_RENEW_S = 315;

/** Scales the per-node numbers to 5,000 nodes at the same PVs per node (and so 5,000 x that many PVs). */
function extrapolate(o: FleetOptions, derived: Record<string, Record<string, number>>, results: readonly ModeResult[]): string {
  const N = 5000;
  const perNode = o.pvs / o.nodes;
  const P = N * perNode;
  const rows: string[][] = [];
  for (const r of results) {
    const d = derived[r.mode]!;
    // Start: the PV part scales with what the node lists (every PV off; its own PVs on), the rest is per node.
    const pvStart = r.mode === 'off' ? (d['startPvBytesPerNode']! * P) / o.pvs : d['startPvBytesPerNode']!;
    const startPerNode = d['startBytesPerNode']! - d['startPvBytesPerNode']! + pvStart;
    const bytesPerEvent = d['changeEventsPerChange']! > 0 ? d['changeBytesPerChange']! / d['changeEventsPerChange']! : 0;
    const eventsPerChange = r.mode === 'off' ? N : d['changeEventsPerChange']!;
    const watches = total(r.start.openWatches) / o.nodes;
    const label = r.mode === 'on' ? '`--pv-node-label=true`' : 'default (off)';
    rows.push(
      [label, 'DaemonSet rollout (every node starts once)', `${fmtBytes(startPerNode * N)} (${fmtBytes(startPerNode)} per node)`],
      [label, 'one PV change', `${fmtN(eventsPerChange)} watch events, ${fmtBytes(eventsPerChange * bytesPerEvent)}`],
      [label, 'ConfigMap reload across the fleet', `${fmtN(d['reloadRequestsPerNode']! * N)} requests, ${fmtBytes(d['reloadBytesPerNode']! * N)}`],
      [
        label,
        'idle, per hour (measured rate + watch renewals)',
        `${fmtN(d['idleRequestsPerNodeHour']! * N + (watches * N * 3600) / WATCH_RENEW_S)} requests (${fmtN((watches * 3600) / WATCH_RENEW_S)} watch renewals per node), ${fmtBytes(d['idleBytesPerNodeHour']! * N)}`,
      ],
    );
  }
  return [
    `**Extrapolation to ${N} nodes** at ${perNode} PVs per node (${P} PVs): start bytes of the PV list scale with the PVs a node lists (all of them`,
    'by default, its own with the option); watch events per change with the nodes watching it (every node by default, the owner with',
    `the option); reload and idle costs are per node. Watch renewals: each watch ends after ~${WATCH_RENEW_S} s on average and is re-opened`,
    'from its resourceVersion (no list).',
    '',
    table(['mode', `${N} nodes`, 'cost'], rows),
  ].join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      nodes: { type: 'string', default: '100' },
      pvs: { type: 'string', default: '10000' },
      changes: { type: 'string', default: '100' },
      'idle-s': { type: 'string', default: '60' },
      modes: { type: 'string', default: 'off,on' },
      'start-concurrency': { type: 'string', default: '4' },
      json: { type: 'string' },
    },
  });
  const modes = values.modes.split(',').map((m) => {
    if (m !== 'off' && m !== 'on') throw new Error(`--modes: want off and/or on, got ${JSON.stringify(m)}`);
    return m;
  });
  const o: FleetOptions = {
    nodes: Number(values.nodes),
    pvs: Number(values.pvs),
    changes: Number(values.changes),
    idleS: Number(values['idle-s']),
    modes,
    startConcurrency: Number(values['start-concurrency']),
  };
  process.stdout.write(`# fleet-scale cost\n\n${new Date().toISOString()}; ${machine()}\n`);
  const section = await withBench({ name: 'fleet' }, (b) => fleet(b, o));
  printSection(section);
  if (values.json !== undefined) writeFileSync(values.json, `${JSON.stringify(section.data, (_k, v: unknown) => (v instanceof Map ? (Object.fromEntries(v) as unknown) : v), 2)}\n`);
}
