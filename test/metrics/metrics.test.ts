import type { V1PersistentVolume } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { capacityBreakDown, capacityByMode, Metrics } from '../../src/metrics/metrics.ts';
import { VERSION } from '../../src/util/version.ts';
import { GO_METRICS, parseExposition } from '../../e2e/support/go-metrics.ts';

const pv = (name: string, storage: string, mode?: 'Block' | 'Filesystem', deleting = false): V1PersistentVolume => ({
  metadata: { name, ...(deleting ? { deletionTimestamp: new Date() } : {}) },
  spec: { capacity: { storage }, ...(mode ? { volumeMode: mode } : {}) },
});

describe('metrics: parity with the Go provisioner', () => {
  it('registers every Go metric eagerly with its type, label names and buckets', async () => {
    const m = new Metrics({ defaultMetrics: false });
    m.registerProcTable(() => ({ running: 0, succeeded: 0, failed: 0 }));
    for (const g of GO_METRICS) {
      const metric = m.registry.getSingleMetric(g.name);
      expect(metric, g.name).toBeDefined();
      const internals = metric as unknown as { labelNames: readonly string[]; upperBounds?: readonly number[] };
      expect([...internals.labelNames], g.name).toEqual(g.labels);
      expect((await metric!.get()).type, g.name).toBe(g.type);
      if (g.buckets) expect(internals.upperBounds, g.name).toEqual(g.buckets);
    }
  });

  it('exposes the Go buckets on /metrics', async () => {
    const m = new Metrics({ defaultMetrics: false });
    m.apiserverRequestsDuration.observe({ method: 'create' }, 0.2);
    const scraped = parseExposition(await m.registry.metrics()).get('local_volume_provisioner_apiserver_requests_duration_seconds');
    expect(scraped?.type).toBe('histogram');
    expect(scraped?.buckets).toEqual([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]);
    expect([...(scraped?.labels ?? [])]).toEqual(['method']);
  });

  it('exports build_info{version,node_version} = 1', async () => {
    const m = new Metrics({ defaultMetrics: false });
    expect(await m.registry.metrics()).toContain(`local_volume_provisioner_build_info{version="${VERSION}",node_version="${process.version}"} 1`);
  });

  it('capacityBreakDown matches the Go vectors', () => {
    const GiB = 1024 ** 3;
    expect([0, 1, 500 * GiB, 500 * GiB + 1, 1000 * GiB + 1].map(capacityBreakDown)).toEqual(['0G', '500G', '500G', '1000G', '1500G']);
  });
});

describe('metrics: persistentvolume_capacity_bytes', () => {
  it('sums the capacity of PVs by volume mode, leaving out PVs being deleted', () => {
    expect(
      capacityByMode([pv('a', '12Mi'), pv('b', '10Gi', 'Filesystem'), pv('c', '24Mi', 'Block'), pv('d', '1Gi', 'Block', true), pv('e', 'junk')]),
    ).toEqual({ Block: 24 * 2 ** 20, Filesystem: 12 * 2 ** 20 + 10 * 2 ** 30 });
  });

  it('is read from the PV source at every scrape: steady state, after a delete, after a re-create', async () => {
    const m = new Metrics({ defaultMetrics: false });
    const pvs = new Map([
      ['a', pv('a', '12Mi')],
      ['b', pv('b', '24Mi', 'Block')],
    ]);
    m.registerCapacitySource(() => pvs.values());
    const gauge = async (): Promise<Record<string, number>> =>
      Object.fromEntries((await m.capacityBytes.get()).values.map((v) => [String(v.labels.mode), v.value]));
    expect(await gauge()).toEqual({ Block: 24 * 2 ** 20, Filesystem: 12 * 2 ** 20 });
    expect(await gauge()).toEqual({ Block: 24 * 2 ** 20, Filesystem: 12 * 2 ** 20 }); // steady state: unchanged, not 0
    pvs.delete('b');
    expect(await gauge()).toEqual({ Block: 0, Filesystem: 12 * 2 ** 20 });
    pvs.set('b', pv('b', '24Mi', 'Block'));
    expect(await gauge()).toEqual({ Block: 24 * 2 ** 20, Filesystem: 12 * 2 ** 20 });
  });
});
