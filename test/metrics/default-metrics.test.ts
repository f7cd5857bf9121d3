// Issue 12: prom-client samples the event-loop delay every 10 ms by default; 100
// wake-ups a second were half of the idle daemon's CPU. Both daemons ask for one
// sample a second.
import { afterEach, describe, expect, it, vi } from 'vitest';

const calls = vi.hoisted(() => [] as Array<Record<string, unknown> | undefined>);
vi.mock('prom-client', async (importOriginal) => {
  const orig = await importOriginal<typeof import('prom-client')>();
  return {
    ...orig,
    collectDefaultMetrics: (config?: Parameters<typeof orig.collectDefaultMetrics>[0]) => {
      calls.push(config as Record<string, unknown> | undefined);
      orig.collectDefaultMetrics(config);
    },
  };
});

const { EVENT_LOOP_PRECISION_MS, Metrics } = await import('../../src/metrics/metrics.ts');
const { NodeCleanupMetrics } = await import('../../src/node-cleanup/metrics.ts');

afterEach(() => {
  calls.length = 0;
});

describe('default metrics: event-loop delay sampled once a second', () => {
  it('the provisioner registers the default metrics with a 1000 ms event-loop resolution', async () => {
    const m = new Metrics();
    expect(EVENT_LOOP_PRECISION_MS).toBe(1000);
    expect(calls).toHaveLength(1);
    expect(calls[0]?.['eventLoopMonitoringPrecision']).toBe(1000);
    // The metric itself is still exposed.
    expect(await m.registry.metrics()).toContain('nodejs_eventloop_lag_p99_seconds');
  });

  it('node-cleanup does the same', () => {
    new NodeCleanupMetrics();
    expect(calls).toHaveLength(1);
    expect(calls[0]?.['eventLoopMonitoringPrecision']).toBe(1000);
  });
});
