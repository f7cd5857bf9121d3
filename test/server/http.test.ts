import { afterEach, describe, expect, it } from 'vitest';
import { Metrics } from '../../src/metrics/metrics.ts';
import { parseListenAddress, startHttpServer } from '../../src/server/http.ts';
import { Readiness } from '../../src/util/readiness.ts';
import { silentLogger } from '../../src/util/log.ts';

describe('parseListenAddress', () => {
  it('parses Go-style addresses', () => {
    expect(parseListenAddress(':8080')).toEqual({ host: undefined, port: 8080 });
    expect(parseListenAddress('127.0.0.1:0')).toEqual({ host: '127.0.0.1', port: 0 });
    expect(parseListenAddress('[::1]:9')).toEqual({ host: '::1', port: 9 });
    expect(() => parseListenAddress('8080')).toThrow(/listen-address/);
    expect(() => parseListenAddress(':99999')).toThrow(/bad port/);
  });
});

describe('HTTP endpoints', () => {
  let close: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await close?.();
    close = undefined;
  });

  it('serves metrics with the Go metric names, and readiness with the Go bodies', async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    metrics.registerProcTable(() => ({ running: 2, succeeded: 5, failed: 1 }));
    const readiness = new Readiness();
    const srv = await startHttpServer({ listenAddress: '127.0.0.1:0', metricsPath: '/metrics', metrics, readiness, logger: silentLogger });
    close = () => srv.close();
    const base = `http://127.0.0.1:${srv.port}`;

    const m = await fetch(`${base}/metrics`);
    expect(m.status).toBe(200);
    const text = await m.text();
    expect(text).toContain('local_volume_provisioner_proctable_running 2');
    expect(text).toContain('local_volume_provisioner_proctable_succeeded 5');
    expect(text).toContain('local_volume_provisioner_proctable_failed 1');
    expect(text).toContain('local_volume_provisioner_config_reload_total{result="invalid"} 0');

    let r = await fetch(`${base}/ready`);
    expect(r.status).toBe(500);
    expect(await r.text()).toBe('[-]DiscovererReadyzCheck failed: reason withheld\nready check failed\n');
    r = await fetch(`${base}/ready/DiscovererReadyzCheck`);
    expect(r.status).toBe(500);
    expect(await r.text()).toContain('discovererNotReady');

    readiness.set(true);
    r = await fetch(`${base}/ready`);
    expect(r.status).toBe(200);
    expect(await r.text()).toBe('ok');
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    expect((await fetch(`${base}/nope`)).status).toBe(404);
  });
});
