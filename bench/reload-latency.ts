// Benchmark 3, reload latency.
//
// (a) The real daemon (fs.watch nudge + 5 s poll, the defaults): 50 kubelet-style
//     swaps of the ConfigMap directory (AtomicWriter), each changing labelsForPV.
//     Latency = swap (taken just before AtomicWriter.write) -> the daemon's log line
//     "configuration reloaded; local controller restarted" for the new generation
//     (pino `time`, ms, same clock). Also: the API requests one reload causes
//     (kube_requests_total delta over all swaps / swaps).
// (b) In process, the same ConfigWatcher + Supervisor with a no-op generation,
//     once with the directory watch and once polling only (watch: false). The
//     daemon has no flag to turn fs.watch off, so (b) is how polling-only is
//     measured. Before each swap a random pause (uniform in [0, poll period))
//     puts the swap at a random phase of the poll timer.
//
//   node bench/reload-latency.ts [--volumes N] [--swaps N] [--poll-ms N]
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Supervisor } from '../src/controller/supervisor.ts';
import { Metrics } from '../src/metrics/metrics.ts';
import { silentLogger } from '../src/util/log.ts';
import { ConfigWatcher } from '../src/watcher/config-watcher.ts';
import { AtomicWriter } from '../test/support/atomic-writer.ts';
import { discoveryRun } from './discovery-scale.ts';
import {
  delta,
  groupBy,
  lineTime,
  log,
  printSection,
  REQUESTS,
  sleep,
  summarize,
  table,
  standalone,
  waitControllerStarted,
  type Bench,
  type Daemon,
  type LogLine,
  type Section,
  type Summary,
} from './lib.ts';

const fmt = (s: Summary): Array<string | number> => [s.n, s.p50.toFixed(0), s.p90.toFixed(0), s.p99.toFixed(0), s.min.toFixed(0), s.max.toFixed(0), s.mean.toFixed(0)];
const HEAD = ['n', 'p50 (ms)', 'p90 (ms)', 'p99 (ms)', 'min (ms)', 'max (ms)', 'mean (ms)'];

export interface DaemonReload {
  readonly swaps: number;
  /** Swap -> "configuration reloaded; local controller restarted". */
  readonly latency: Summary;
  /** Swap -> "stopping the local controller for a new configuration" (detection + parse + diff). */
  readonly detect: Summary;
  /** That stop line -> the reloaded line (old generation stopped, new one started). */
  readonly restart: Summary;
  /** Requests per reload, by "verb resource" (PV creates excluded). */
  readonly requestsPerReload: Record<string, number>;
  readonly pvCreates: number;
}

const isMsg = (l: LogLine, prefix: string): boolean => typeof l.msg === 'string' && l.msg.startsWith(prefix);

/** (a): swaps the config of a running daemon `swaps` times. */
export async function reloadDaemon(b: Bench, d: Daemon, o: { swaps: number; maxGapMs?: number }): Promise<DaemonReload> {
  const current = Math.max(
    0,
    ...d.proc.logLines().flatMap((l) => {
      const gen = l['controllerGeneration'] ?? l['generation']; // the field's name since issue 18, and before
      return isMsg(l, 'configuration ') && typeof gen === 'number' ? [gen] : [];
    }),
  );
  if (current < 1) throw new Error('the daemon has not started a controller yet');
  await sleep(3000); // settle: Events of the start flushed
  const m0 = await d.metrics();
  const latency: number[] = [];
  const detect: number[] = [];
  const restart: number[] = [];
  for (let i = 1; i <= o.swaps; i++) {
    await sleep(Math.random() * (o.maxGapMs ?? 500));
    d.logs.read(); // drop older lines
    const gen = current + i;
    const t0 = Date.now();
    await b.writeConfig({ 'lsp-bench/reload': `r${i}` });
    let stopping: LogLine | undefined;
    const applied = await d.logs.waitFor(
      (l) => {
        if (stopping === undefined && isMsg(l, 'stopping the local controller')) stopping = l;
        return isMsg(l, 'configuration reloaded') && (l['controllerGeneration'] ?? l['generation']) === gen;
      },
      `generation ${gen} applied`,
      30_000,
      10,
    );
    latency.push(lineTime(applied) - t0);
    if (stopping !== undefined) {
      detect.push(lineTime(stopping) - t0);
      restart.push(lineTime(applied) - lineTime(stopping));
    }
  }
  await sleep(3000); // let the new Job informers list+watch and the Events go out
  const m1 = await d.metrics();
  const byKind = delta(groupBy(m0, REQUESTS, ['verb', 'resource']), groupBy(m1, REQUESTS, ['verb', 'resource']));
  const pvCreates = byKind.get('create persistentvolumes') ?? 0;
  byKind.delete('create persistentvolumes');
  const requestsPerReload = Object.fromEntries([...byKind].map(([k, v]) => [k, v / o.swaps]));
  const s = summarize(latency);
  log(`reload (daemon): p50 ${s.p50} ms, p99 ${s.p99} ms over ${s.n} swaps`);
  return { swaps: o.swaps, latency: s, detect: summarize(detect), restart: summarize(restart), requestsPerReload, pvCreates };
}

/** (b): ConfigWatcher + Supervisor in this process, generation start is a no-op. */
export async function reloadInProcess(o: { watch: boolean; pollMs: number; swaps: number; maxGapMs: number }): Promise<Summary> {
  const dir = await mkdtemp(join(tmpdir(), 'lsp-bench-reload-'));
  const writer = new AtomicWriter(join(dir, 'config'));
  const files = (i: number): Record<string, string> => ({
    storageClassMap: 'bench-local:\n  hostDir: /mnt/bench/disks\n  mountDir: /mnt/bench/disks\n',
    useNodeNameOnly: 'true\n',
    labelsForPV: `lsp-bench/reload: "r${i}"\n`,
  });
  const started: Array<{ generation: number; at: number }> = [];
  let wake: (() => void) | undefined;
  const supervisor = new Supervisor({
    start: (_config, ctx) => {
      started.push({ generation: ctx.generation, at: performance.now() });
      wake?.();
      return Promise.resolve({ stop: () => Promise.resolve() });
    },
    hotReload: true,
    metrics: new Metrics({ defaultMetrics: false }),
    recorder: { event: () => undefined },
    refs: [],
    logger: silentLogger,
  });
  const watcher = new ConfigWatcher({
    dir: writer.dir,
    pollIntervalMs: o.pollMs,
    watch: o.watch,
    onResult: (res) => supervisor.handle(res),
    logger: silentLogger,
  });
  const latency: number[] = [];
  try {
    await writer.write(files(0));
    await watcher.start();
    if (started.length !== 1) throw new Error(`the first config did not start a generation (${started.length})`);
    for (let i = 1; i <= o.swaps; i++) {
      await sleep(Math.random() * o.maxGapMs);
      const want = i + 1;
      const t0 = performance.now();
      await writer.write(files(i));
      const deadline = Date.now() + o.pollMs * 3 + 5000;
      while (started.at(-1)!.generation < want) {
        if (Date.now() > deadline) throw new Error(`generation ${want} did not start (watch ${o.watch})`);
        await new Promise<void>((r) => {
          wake = r;
          setTimeout(r, 100);
        });
      }
      latency.push(started.at(-1)!.at - t0);
    }
  } finally {
    await watcher.stop();
    await supervisor.stop();
    await rm(dir, { recursive: true, force: true });
  }
  const s = summarize(latency);
  log(`reload (in-process, watch ${o.watch}, poll ${o.pollMs} ms): p50 ${s.p50.toFixed(0)} ms, p99 ${s.p99.toFixed(0)} ms`);
  return s;
}

export async function reloadLatency(b: Bench, d: Daemon, o: { swaps: number; pollMs: number }): Promise<Section> {
  log(`reload: ${o.swaps} swaps in the real daemon`);
  const real = await reloadDaemon(b, d, { swaps: o.swaps });
  log(`reload: ${o.swaps} swaps in a real daemon with --config-watch=false (polling only, default 5 s period)`);
  await d.stop(); // one daemon per node at a time
  const pollDaemon = await b.startDaemon({ tag: 'poll-only', args: ['--config-watch=false'] });
  await waitControllerStarted(pollDaemon);
  const realPoll = await reloadDaemon(b, pollDaemon, { swaps: o.swaps, maxGapMs: 5000 });
  await pollDaemon.stop();
  log(`reload: ${o.swaps} swaps in process, directory watch`);
  const watched = await reloadInProcess({ watch: true, pollMs: o.pollMs, swaps: o.swaps, maxGapMs: o.pollMs });
  log(`reload: ${o.swaps} swaps in process, polling only`);
  const polled = await reloadInProcess({ watch: false, pollMs: o.pollMs, swaps: o.swaps, maxGapMs: o.pollMs });
  const perReload = Object.entries(real.requestsPerReload);
  const total = perReload.reduce((a, [, v]) => a + v, 0);
  const markdown = [
    `Real daemon: defaults (\`--config-sync-period=5s\`, directory watch on), ${o.swaps} AtomicWriter swaps, each changing \`labelsForPV\`,`,
    `random pause 0-500 ms between swaps; latency = swap -> the daemon's "configuration reloaded" log line (new generation started).`,
    `In process: ConfigWatcher + Supervisor with a no-op generation, poll period ${o.pollMs} ms, random pause in [0, ${o.pollMs}) ms before each swap.`,
    '',
    table(
      ['measurement', ...HEAD],
      [
        ['daemon: swap -> new controller running', ...fmt(real.latency)],
        ['daemon: swap -> old controller stopping (detection)', ...fmt(real.detect)],
        ['daemon: stopping -> new controller running', ...fmt(real.restart)],
        ['daemon, `--config-watch=false` (poll 5 s): swap -> new controller running', ...fmt(realPoll.latency)],
        [`in process, directory watch (poll ${o.pollMs} ms)`, ...fmt(watched)],
        [`in process, polling only (poll ${o.pollMs} ms)`, ...fmt(polled)],
      ],
    ),
    '',
    `API requests per reload (daemon, over ${o.swaps} reloads, PV creates excluded: ${real.pvCreates}): **${total.toFixed(2)}**` +
      (perReload.length > 0 ? ` — ${perReload.map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', ')}.` : '.'),
  ].join('\n');
  return { title: 'Reload latency', markdown, data: { real, realPoll, watched, polled, pollMs: o.pollMs } };
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: { volumes: { type: 'string', default: '500' }, swaps: { type: 'string', default: '50' }, 'poll-ms': { type: 'string', default: '1000' } },
  });
  const volumes = Number(values.volumes);
  await standalone('reload', volumes, async (b) => {
    const { daemon } = await discoveryRun(b, { label: 'our defaults', volumes });
    printSection(await reloadLatency(b, daemon, { swaps: Number(values.swaps), pollMs: Number(values['poll-ms']) }));
  });
}
