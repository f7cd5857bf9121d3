// Benchmark: what one clean of a Released PV costs, this tree against a baseline
// commit, in one run on one control plane and one set of mounts.
//
// For each variant (the baseline's src/main.ts, then this tree's, `--rounds`
// times interleaved) a fresh daemon discovers `--volumes` tmpfs volumes; every
// PV is bound by a pre-bound PVC and a file is written into its volume; then the
// claims are deleted one at a time and each clean is timed from the PVC DELETE to
// (a) the old PV object gone and (b) the new PV of that volume Available. The
// daemon's own request counter (kube_requests_total) over the release window,
// divided by the number of cleans, gives the API requests per clean, by verb and
// resource. `--pvcs N` unrelated claims are created first, so a check that lists
// claims pays for a cluster of that size.
//
//   node bench/clean-cost.ts [--volumes 20] [--rounds 2] [--pvcs 1000] [--baseline 8fdeac5]
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import {
  delta,
  deleteOwnPVs,
  groupBy,
  log,
  mountVolumes,
  printSection,
  repoRoot,
  REQUESTS,
  sleep,
  summarize,
  table,
  waitControllerStarted,
  withBench,
  type Bench,
  type Summary,
} from './lib.ts';

const { values } = parseArgs({
  options: {
    volumes: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '2' },
    pvcs: { type: 'string', default: '1000' },
    baseline: { type: 'string', default: '8fdeac5' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (values.help) {
  process.stdout.write('usage: node bench/clean-cost.ts [--volumes N] [--rounds N] [--pvcs N] [--baseline GIT-REF]\n');
  process.exit(0);
}
const volumes = Number(values.volumes);
const rounds = Number(values.rounds);
const foreignPvcs = Number(values.pvcs);
const NS = 'default';

interface VariantResult {
  readonly label: string;
  readonly toGone: number[];
  readonly toAvailable: number[];
  readonly requests: Map<string, number>;
  readonly cleans: number;
}

async function readPV(b: Bench, name: string): Promise<V1PersistentVolume | undefined> {
  try {
    return await b.core.readPersistentVolume({ name });
  } catch (e) {
    if ((e as { code?: number }).code === 404) return undefined;
    throw e;
  }
}

async function until<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 120_000, everyMs = 20): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

async function ownAvailable(b: Bench): Promise<V1PersistentVolume[]> {
  const list = await b.core.listPersistentVolume({ labelSelector: b.ownSelector });
  return list.items.filter((pv) => pv.status?.phase === 'Available');
}

async function runVariant(b: Bench, label: string, script: string): Promise<VariantResult> {
  await deleteOwnPVs(b);
  const d = await b.startDaemon({ tag: label, script, logLevel: 'info' });
  try {
    await waitControllerStarted(d);
    const pvs = await until(`${volumes} Available PVs (${label})`, async () => {
      const a = await ownAvailable(b);
      return a.length >= volumes ? a : undefined;
    });
    // Bind every PV by a pre-bound claim and put data into its volume.
    const claims: Array<{ claim: string; pv: V1PersistentVolume }> = [];
    for (const pv of pvs) {
      const name = pv.metadata?.name ?? '';
      const claim = `cc-${name}`.slice(0, 60);
      await b.core.createNamespacedPersistentVolumeClaim({
        namespace: NS,
        body: {
          metadata: { name: claim },
          spec: { storageClassName: b.className, volumeName: name, accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Mi' } } },
        },
      });
      claims.push({ claim, pv });
    }
    for (const { pv } of claims) {
      const name = pv.metadata?.name ?? '';
      await until(`PV ${name} Bound`, async () => ((await readPV(b, name))?.status?.phase === 'Bound' ? true : undefined));
      const entry = (pv.spec?.local?.path ?? '').split('/').pop() ?? '';
      writeFileSync(join(b.mountDir, entry, 'data'), 'tenant data\n');
    }
    await sleep(2000); // let the bind-time Events and watch echoes settle before the window opens
    const m0 = await d.metrics();
    const toGone: number[] = [];
    const toAvailable: number[] = [];
    for (const { claim, pv } of claims) {
      const name = pv.metadata?.name ?? '';
      const uid = pv.metadata?.uid ?? '';
      const t0 = performance.now();
      await b.core.deleteNamespacedPersistentVolumeClaim({ namespace: NS, name: claim });
      await until(`PV ${name} (${uid}) deleted`, async () => {
        const now = await readPV(b, name);
        return now === undefined || now.metadata?.uid !== uid ? true : undefined;
      });
      toGone.push(performance.now() - t0);
      await until(`PV ${name} Available again`, async () => {
        const now = await readPV(b, name);
        return now !== undefined && now.metadata?.uid !== uid && now.status?.phase === 'Available' ? true : undefined;
      });
      toAvailable.push(performance.now() - t0);
    }
    await sleep(2000); // Events of the last clean flushed
    const m1 = await d.metrics();
    const requests = delta(groupBy(m0, REQUESTS, ['verb', 'resource']), groupBy(m1, REQUESTS, ['verb', 'resource']));
    log(`${label}: ${claims.length} cleans, median to gone ${summarize(toGone).p50.toFixed(0)} ms`);
    return { label, toGone, toAvailable, requests, cleans: claims.length };
  } finally {
    await d.stop();
  }
}

function baselineCheckout(ref: string): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'lsp-clean-cost-base-'));
  rmSync(dir, { recursive: true });
  execFileSync('git', ['-C', repoRoot, 'worktree', 'add', '--detach', dir, ref], { stdio: 'ignore' });
  symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'));
  return {
    dir,
    remove: () => {
      execFileSync('git', ['-C', repoRoot, 'worktree', 'remove', '--force', dir], { stdio: 'ignore' });
      if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
    },
  };
}

const fmt = (s: Summary): string => `${s.p50.toFixed(0)} / ${s.p90.toFixed(0)} / ${s.max.toFixed(0)}`;

await withBench({ name: 'clean-cost' }, async (b) => {
  const base = baselineCheckout(values.baseline);
  b.defer(base.remove);
  log(`baseline ${values.baseline} checked out at ${base.dir}`);
  mountVolumes(b, volumes);
  log(`creating ${foreignPvcs} unrelated claims`);
  for (let i = 0; i < foreignPvcs; i++) {
    await b.core.createNamespacedPersistentVolumeClaim({
      namespace: NS,
      body: {
        metadata: { name: `foreign-${i}` },
        spec: { storageClassName: 'no-such-class', accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Mi' } } },
      },
    });
  }
  const variants: Array<[string, string]> = [
    [`baseline ${values.baseline}`, join(base.dir, 'src', 'main.ts')],
    ['this tree', join(repoRoot, 'src', 'main.ts')],
  ];
  const results = new Map<string, VariantResult[]>();
  for (let r = 0; r < rounds; r++) {
    for (const [label, script] of variants) {
      const res = await runVariant(b, label, script);
      results.set(label, [...(results.get(label) ?? []), res]);
    }
  }
  const rows = [...results].map(([label, rs]) => {
    const gone = summarize(rs.flatMap((x) => x.toGone));
    const avail = summarize(rs.flatMap((x) => x.toAvailable));
    const cleans = rs.reduce((a, x) => a + x.cleans, 0);
    const req = new Map<string, number>();
    for (const x of rs) for (const [k, v] of x.requests) req.set(k, (req.get(k) ?? 0) + v);
    const total = [...req.values()].reduce((a, v) => a + v, 0);
    const kinds = [...req]
      .filter(([, v]) => v > 0)
      .sort()
      .map(([k, v]) => `${k} ${(v / cleans).toFixed(2)}`)
      .join(', ');
    return [label, cleans, fmt(gone), fmt(avail), (total / cleans).toFixed(2), kinds];
  });
  printSection({
    title: 'Cost of one clean (Released PV -> deleted -> Available again)',
    markdown: [
      `${volumes} tmpfs volumes, ${rounds} rounds per variant interleaved, ${foreignPvcs} unrelated PVCs in the cluster, in-process cleaning.`,
      '',
      table(['variant', 'cleans', 'PVC delete -> PV gone p50/p90/max (ms)', '-> new PV Available p50/p90/max (ms)', 'API requests / clean', 'by verb and resource / clean'], rows),
    ].join('\n'),
    data: Object.fromEntries(results),
  });
});
