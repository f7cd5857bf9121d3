// Benchmark 4, informer cost at cluster scale: 5,000 PVs of OTHER nodes in the
// cluster. The daemon's PV informer lists and watches every PV (the API has no
// server-side filter for "provisioned by me") but its filter keeps only this
// node's PVs. Same run, same own PVs:
//   1. fresh daemon, no foreign PVs: memory after settling;
//   2. 5,000 foreign PVs created (admin client, concurrent) while it runs:
//      memory again (the watch delivered 5,000 ADDED events, all filtered out);
//   3. a fresh daemon with the 5,000 present (its list returns them all):
//      memory, and the PV requests it made (expected: 1 list + 1 watch).
//
//   node bench/informer-scale.ts [--volumes N] [--foreign N]
import { parseArgs } from 'node:util';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { discoveryRun } from './discovery-scale.ts';
import {
  controlPlaneTable,
  forceGC,
  INSPECTABLE_ENV,
  groupBy,
  kibToMib,
  log,
  median,
  mib,
  printSection,
  REQUESTS,
  sleep,
  sumOf,
  table,
  waitControllerStarted,
  standalone,
  type Bench,
  type Daemon,
  type Section,
} from './lib.ts';

export interface MemSample {
  readonly phase: string;
  readonly rssKiB: number;
  readonly hwmKiB: number;
  readonly heapUsedBytes: number;
  /** VmRSS and heap used right after a forced full GC (inspector), i.e. what is retained. */
  readonly gcRssKiB: number;
  readonly gcHeapUsedBytes: number;
  /** PV requests by verb since the daemon started. */
  readonly pvRequests: Record<string, number>;
  /** Objects in the PV informer's cache (its "informer synced" debug line), if logged. */
  readonly cachedPVs: number | undefined;
}

/**
 * Median of `n` samples, 1 s apart, of the daemon's VmRSS and heap; VmHWM of the last; then VmRSS
 * and heap after a forced full GC.
 */
export async function sampleMemory(d: Daemon, phase: string, n = 5): Promise<MemSample> {
  const rss: number[] = [];
  const heap: number[] = [];
  let hwm = 0;
  let last: Awaited<ReturnType<Daemon['metrics']>> = [];
  for (let i = 0; i < n; i++) {
    if (i > 0) await sleep(1000);
    last = await d.metrics();
    const m = d.mem();
    if (m) {
      rss.push(m.rssKiB);
      hwm = m.hwmKiB;
    }
    heap.push(sumOf(last, 'nodejs_heap_size_used_bytes'));
  }
  const pv = groupBy(
    last.filter((s) => s.labels['resource'] === 'persistentvolumes'),
    REQUESTS,
    ['verb'],
  );
  await forceGC(d);
  const gcMetrics = await d.metrics();
  const gcMem = d.mem();
  const synced = d.proc
    .logLines()
    .filter((l) => l['msg'] === 'informer synced' && l['resource'] === 'persistentvolumes')
    .at(-1)?.['count'];
  return {
    phase,
    rssKiB: median(rss),
    hwmKiB: hwm,
    heapUsedBytes: median(heap),
    gcRssKiB: gcMem?.rssKiB ?? NaN,
    gcHeapUsedBytes: sumOf(gcMetrics, 'nodejs_heap_size_used_bytes'),
    pvRequests: Object.fromEntries(pv),
    cachedPVs: typeof synced === 'number' ? synced : undefined,
  };
}

function foreignPV(b: Bench, i: number): V1PersistentVolume {
  const node = `other-node-${i % 100}`;
  return {
    metadata: {
      name: `foreign-pv-${i}`,
      labels: { 'lsp-bench/foreign': 'true', 'topology.kubernetes.io/zone': 'bench-zone' },
      annotations: { 'pv.kubernetes.io/provisioned-by': `local-volume-provisioner-${node}` },
    },
    spec: {
      capacity: { storage: '375Gi' },
      local: { path: `/mnt/disks/ssd${i}` },
      accessModes: ['ReadWriteOnce'],
      persistentVolumeReclaimPolicy: 'Delete',
      storageClassName: b.className,
      volumeMode: 'Filesystem',
      nodeAffinity: { required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [node] }] }] } },
    },
  };
}

/** Creates `n` foreign PVs with `concurrency` requests in flight; returns the elapsed ms. */
export async function createForeignPVs(b: Bench, n: number, concurrency = 32): Promise<number> {
  const t = performance.now();
  let next = 0;
  const worker = async (): Promise<void> => {
    for (;;) {
      const i = next++;
      if (i >= n) return;
      await b.core.createPersistentVolume({ body: foreignPV(b, i) });
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return performance.now() - t;
}

export async function informerScale(b: Bench, o: { foreign: number; volumes: number }): Promise<Section> {
  log('informer: fresh daemon without foreign PVs');
  const d1 = await b.startDaemon({ tag: 'without-foreign', env: { ...INSPECTABLE_ENV } });
  await waitControllerStarted(d1);
  await sleep(5000);
  const without = await sampleMemory(d1, `fresh daemon, ${o.volumes} own PVs, no foreign PVs`);
  log(`informer: creating ${o.foreign} PVs of other nodes`);
  const createMs = await createForeignPVs(b, o.foreign);
  log(`informer: created ${o.foreign} PVs in ${(createMs / 1000).toFixed(1)} s`);
  await sleep(5000);
  const watched = await sampleMemory(d1, `same daemon after ${o.foreign} foreign PVs arrived by watch`);
  await d1.stop();
  log('informer: fresh daemon with the foreign PVs present');
  const d2 = await b.startDaemon({ tag: 'with-foreign', env: { ...INSPECTABLE_ENV } });
  await waitControllerStarted(d2);
  await sleep(5000);
  const withForeign = await sampleMemory(d2, `fresh daemon, ${o.volumes} own + ${o.foreign} foreign PVs`);
  await d2.stop();
  const cpEnd = b.cp.stats();
  const samples = [without, watched, withForeign];
  const rows = samples.map((s) => [
    s.phase,
    kibToMib(s.rssKiB),
    kibToMib(s.hwmKiB),
    mib(s.heapUsedBytes),
    kibToMib(s.gcRssKiB),
    mib(s.gcHeapUsedBytes),
    s.cachedPVs ?? 'n/a',
    Object.entries(s.pvRequests)
      .map(([k, v]) => `${k} ${v}`)
      .join(', '),
  ]);
  const dRss = (withForeign.rssKiB - without.rssKiB) / 1024;
  const dHeap = (withForeign.heapUsedBytes - without.heapUsedBytes) / 1024 / 1024;
  const dGcHeap = (withForeign.gcHeapUsedBytes - without.gcHeapUsedBytes) / 1024 / 1024;
  const dHwm = (withForeign.hwmKiB - without.hwmKiB) / 1024;
  const sign = (x: number): string => `${x >= 0 ? '+' : ''}${x.toFixed(1)}`;
  const markdown = [
    `${o.foreign} PVs of 100 other nodes created by the admin (32 requests in flight: ${(createMs / 1000).toFixed(1)} s,`,
    `${((o.foreign / createMs) * 1000).toFixed(0)} PVs/s). VmRSS and heap are medians of 5 samples 1 s apart, taken 5 s after the controller started;`,
    'then a full GC is forced through the inspector (the daemons run with `NODE_OPTIONS=--inspect=127.0.0.1:0`) and both are read again.',
    '',
    table(
      ['daemon', 'VmRSS (MiB)', 'VmHWM (MiB)', 'heap used (MiB)', 'VmRSS after GC (MiB)', 'heap used after GC (MiB)', 'PVs in its cache', 'PV requests (since start)'],
      rows,
    ),
    '',
    `Fresh daemon with vs without the ${o.foreign} foreign PVs: VmRSS ${sign(dRss)} MiB, VmHWM ${sign(dHwm)} MiB, heap used ${sign(dHeap)} MiB` +
      ` before GC, **${sign(dGcHeap)} MiB after a full GC** (retained).`,
    '',
    `Control plane after the run (${o.volumes + o.foreign} PVs in etcd):`,
    '',
    controlPlaneTable(cpEnd),
  ].join('\n');
  return { title: 'Informer cost at cluster scale', markdown, data: { samples, createMs, foreign: o.foreign, cpEnd } };
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { volumes: { type: 'string', default: '500' }, foreign: { type: 'string', default: '5000' } } });
  const volumes = Number(values.volumes);
  await standalone('informer', volumes, async (b) => {
    const { daemon } = await discoveryRun(b, { label: 'our defaults', volumes });
    await daemon.stop();
    printSection(await informerScale(b, { foreign: Number(values.foreign), volumes }));
  });
}
