// The API client against the real kube-apiserver: connections are reused
// (client-node 2.0.1 alone opens a new TLS connection per request).
import { execFileSync } from 'node:child_process';
import { describe, expect, inject, it } from 'vitest';
import { createKubeClient, loadKubeConfig } from '../src/kube/client.ts';
import { Metrics } from '../src/metrics/metrics.ts';

/** Established TCP connections of this process to `port`. */
function connectionsTo(port: number): number {
  const out = execFileSync('ss', ['-Htnp', 'state', 'established', `( dport = :${port} )`], { encoding: 'utf8' });
  return out.split('\n').filter((l) => l.includes(`pid=${process.pid},`)).length;
}

describe('kube client on the real API server', () => {
  it('reuses one connection for many sequential requests, and counts every request', async () => {
    const kubeconfig = inject('provisionerKubeconfig');
    const port = Number(new URL(inject('server')).port);
    const metrics = new Metrics({ defaultMetrics: false });
    const kube = createKubeClient(loadKubeConfig({ KUBECONFIG: kubeconfig }), { qps: 1000, burst: 1000, metrics });
    const before = connectionsTo(port);
    for (let i = 0; i < 40; i++) await kube.list('storageclasses', {});
    const opened = connectionsTo(port) - before;
    expect(opened).toBeGreaterThanOrEqual(1);
    expect(opened).toBeLessThanOrEqual(2);
    expect(kube.stats().requests).toBe(40);
    const m = await metrics.registry.getSingleMetricAsString('local_volume_provisioner_kube_requests_total');
    expect(m).toContain('local_volume_provisioner_kube_requests_total{verb="list",resource="storageclasses",code="200"} 40');
  });
});
