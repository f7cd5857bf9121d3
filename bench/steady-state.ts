// Benchmark 2, steady state: with every PV present and nothing changing, how
// many API requests and how much CPU does one discovery loop cost? Deltas of
// kube_requests_total and process_cpu_seconds_total over ~10 loops at
// --discovery-period=1s. The loop count is window / period (the daemon logs no
// line per pass), so CPU per loop is an upper bound: it also holds timers, GC
// and the two /metrics scrapes of the measurement.
//
//   node bench/steady-state.ts [--volumes N] [--loops N]
import { parseArgs } from 'node:util';
import { discoveryRun } from './discovery-scale.ts';
import { delta, groupBy, log, printSection, REQUESTS, sleep, standalone, sumOf, table, type Daemon, type Section } from './lib.ts';

export interface SteadyState {
  readonly loops: number;
  readonly windowMs: number;
  readonly requests: number;
  readonly requestsByKind: Record<string, number>;
  readonly cpuSeconds: number;
  readonly requestsPerLoop: number;
  readonly cpuMsPerLoop: number;
  readonly volumes: number;
}

/** Measures `loops` discovery loops of a running daemon (period `periodMs`) after a settle time. */
export async function steadyState(d: Daemon, o: { loops?: number; periodMs?: number; settleMs?: number; volumes: number }): Promise<Section & { data: SteadyState }> {
  const loops = o.loops ?? 10;
  const periodMs = o.periodMs ?? 1000;
  await sleep(o.settleMs ?? 3000); // Events flushed, the last create's watch echo processed
  log(`steady state: measuring ~${loops} loops`);
  const m0 = await d.metrics();
  const t0 = performance.now();
  await sleep(loops * periodMs);
  const m1 = await d.metrics();
  const windowMs = performance.now() - t0;
  const byKind = delta(groupBy(m0, REQUESTS, ['verb', 'resource']), groupBy(m1, REQUESTS, ['verb', 'resource']));
  const requests = [...byKind.values()].reduce((a, b) => a + b, 0);
  const cpuSeconds = sumOf(m1, 'process_cpu_seconds_total') - sumOf(m0, 'process_cpu_seconds_total');
  const n = windowMs / periodMs;
  const data: SteadyState = {
    loops: n,
    windowMs,
    requests,
    requestsByKind: Object.fromEntries(byKind),
    cpuSeconds,
    requestsPerLoop: requests / n,
    cpuMsPerLoop: (cpuSeconds * 1000) / n,
    volumes: o.volumes,
  };
  log(`steady state: ${requests} requests, ${(cpuSeconds * 1000).toFixed(0)} ms CPU in ${(windowMs / 1000).toFixed(1)} s`);
  const markdown = [
    `${o.volumes} PVs of this node present, ${o.volumes} mounts, nothing changing, \`--discovery-period=${periodMs / 1000}s\`.`,
    '',
    table(
      ['window (s)', 'loops (window / period)', 'API requests', 'requests / loop', 'CPU (ms)', 'CPU / loop (ms)'],
      [[(windowMs / 1000).toFixed(1), n.toFixed(1), requests, data.requestsPerLoop.toFixed(2), (cpuSeconds * 1000).toFixed(0), data.cpuMsPerLoop.toFixed(1)]],
    ),
    requests > 0 ? `\nRequests in the window: ${[...byKind].map(([k, v]) => `${k} ${v}`).join(', ')}.` : '',
  ].join('\n');
  return { title: 'Steady state', markdown, data };
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { volumes: { type: 'string', default: '500' }, loops: { type: 'string', default: '10' } } });
  const volumes = Number(values.volumes);
  await standalone('steady', volumes, async (b) => {
    const { daemon } = await discoveryRun(b, { label: 'our defaults', volumes });
    printSection(await steadyState(daemon, { volumes, loops: Number(values.loops) }));
  });
}
