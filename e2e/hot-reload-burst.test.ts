// Issue 5 end to end: bursts of ConfigMap swaps are coalesced, and kubelet's
// periodic touches of an unchanged ConfigMap do nothing at all.
//
// Period choice: a short --config-sync-period (500 ms) on purpose. Polls do not
// interrupt a burst of fs events: they wait for the burst's debounced check,
// which comes at most 2 s after the burst began, so a 2 s burst costs at most
// 2 restarts whatever the poll period. Touches run for a minute, as in the issue.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { AtomicWriter } from '../test/support/atomic-writer.ts';
import { generatePVName } from '../src/volume/naming.ts';
import { adminClients, uniqueName } from './harness/kube.ts';
import { createNode } from './harness/node-agent.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import {
  configFiles,
  createLocalStorageClass,
  lastReloadOkMetric,
  metric,
  reloadMetric,
  restartsMetric,
  startTestProvisioner,
  waitMetric,
  waitPV,
  type ConfigSpec,
} from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';

const { core, storage } = adminClients();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const SYNC_PERIOD_MS = 500;

/** kube_requests_total summed by "verb resource". */
function requestCounts(text: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^local_volume_provisioner_kube_requests_total\{([^}]*)\} (\S+)$/gm)) {
    const labels = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
    const key = `${labels['verb'] ?? '?'} ${labels['resource'] ?? '?'}`;
    out[key] = (out[key] ?? 0) + Number(m[2]);
  }
  return out;
}

describe.skipIf(!isRoot())('hot reload: bursts and kubelet touches', () => {
  const host = new HostFixtures('lsp-hrb-');
  const node = uniqueName('hrb-node');
  const cls = uniqueName('hrb-fs');
  let writer: AtomicWriter;
  let prov: ProvisionerProcess | undefined;
  let dir = '';
  const config = (labels: Record<string, string>): ConfigSpec => ({ classes: { [cls]: { hostDir: dir, mountDir: dir } }, labelsForPV: labels });

  beforeAll(async () => {
    await createNode(core, node);
    await createLocalStorageClass(storage, cls);
    dir = host.mkdir('fs');
    host.tmpfs(4, 'fs', 'vol0');
    writer = new AtomicWriter(host.mkdir('config'));
    await writer.write(configFiles(config({ burst: 'none' })));
    prov = await startTestProvisioner(host, writer.dir, node, inject('provisionerKubeconfig'), [
      '--discovery-period=1s',
      `--config-sync-period=${SYNC_PERIOD_MS / 1000}s`,
    ]);
    await waitPV(core, generatePVName('vol0', node, cls));
  });

  afterAll(async () => {
    await prov?.stop();
    host.cleanup();
  });

  it('one reload costs a handful of API requests: no PV, StorageClass or Node is listed again, and without Jobs no Job either', async () => {
    await sleep(1500); // let start-up Events settle
    const before = requestCounts(await prov!.metrics());
    const applied0 = await metric(prov!, reloadMetric, { result: 'applied' });
    await writer.write(configFiles(config({ burst: 'cost' })));
    prov!.child.kill('SIGHUP');
    await waitMetric(prov!, reloadMetric, { result: 'applied' }, (v) => v === applied0 + 1);
    await sleep(2500); // the new generation's first passes and the ConfigReloaded Events
    const after = requestCounts(await prov!.metrics());
    const delta = Object.fromEntries(
      Object.entries(after)
        .map(([k, v]) => [k, v - (before[k] ?? 0)] as const)
        .filter(([, v]) => v > 0),
    );
    console.log(`[hot-reload] API requests caused by one reload: ${JSON.stringify(delta)}`);
    for (const k of Object.keys(delta)) expect(k).not.toMatch(/ (persistentvolumes|storageclasses|nodes)$/);
    // useJobForCleaning is off and the first generation's one Jobs list found none: no Job request
    // (with Jobs in use, a reload adds one LIST and one WATCH of this node's Jobs).
    expect(delta['list jobs'] ?? 0).toBe(0);
    expect(delta['watch jobs'] ?? 0).toBe(0);
    // The ConfigReloaded Event on the Pod and on the Node.
    expect(Object.values(delta).reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(2);
  });

  it('a burst of 20 swaps in 2 s restarts the controller at most twice, and the last content wins', async () => {
    const restarts0 = await metric(prov!, restartsMetric);
    const applied0 = await metric(prov!, reloadMetric, { result: 'applied' });
    const t0 = Date.now();
    for (let k = 0; k < 20; k++) {
      await writer.write(configFiles(config({ burst: String(k) })));
      await sleep(Math.max(0, t0 + (k + 1) * 95 - Date.now()));
    }
    const burstMs = Date.now() - t0;
    expect(burstMs).toBeLessThan(2000);
    // The final content is applied by the debounced nudge right after the burst (or by a poll).
    await waitMetric(prov!, reloadMetric, { result: 'applied' }, (v) => v > applied0, { timeoutMs: SYNC_PERIOD_MS + 3000 });
    await sleep(SYNC_PERIOD_MS + 1000); // one more poll: nothing left to apply
    const restarts = (await metric(prov!, restartsMetric)) - restarts0;
    const applied = (await metric(prov!, reloadMetric, { result: 'applied' })) - applied0;
    console.log(`[hot-reload] 20 swaps in ${burstMs} ms -> ${restarts} controller restart(s), ${applied} config(s) applied`);
    expect(restarts).toBeGreaterThanOrEqual(1);
    expect(restarts).toBeLessThanOrEqual(2);
    expect(applied).toBe(restarts);
    expect(await metric(prov!, lastReloadOkMetric)).toBe(1);
    // The running config is the last one written.
    host.tmpfs(4, 'fs', 'after-burst');
    const pv = await waitPV(core, generatePVName('after-burst', node, cls), { timeoutMs: 15_000 });
    expect(pv.metadata?.labels).toEqual({ burst: '19' });
  });

  it('a minute of kubelet-style touches (new generations with the same bytes, mtime bumps): no restart, nothing applied, no API request', async () => {
    const before = {
      restarts: await metric(prov!, restartsMetric),
      applied: await metric(prov!, reloadMetric, { result: 'applied' }),
      unchanged: await metric(prov!, reloadMetric, { result: 'unchanged' }),
      invalid: await metric(prov!, reloadMetric, { result: 'invalid' }),
      requests: await metric(prov!, 'local_volume_provisioner_kube_requests_total'),
    };
    const generations0 = writer.generations;
    for (let s = 0; s < 60; s++) {
      await writer.touch(s % 2 === 0 ? 'generation' : 'mtime');
      await sleep(1000);
    }
    await sleep(SYNC_PERIOD_MS + 500);
    expect(writer.generations - generations0).toBe(30); // 30 full swaps happened
    expect(await metric(prov!, restartsMetric)).toBe(before.restarts);
    expect(await metric(prov!, reloadMetric, { result: 'applied' })).toBe(before.applied);
    // Identical bytes are not even handed to the supervisor: no "unchanged" either.
    expect(await metric(prov!, reloadMetric, { result: 'unchanged' })).toBe(before.unchanged);
    expect(await metric(prov!, reloadMetric, { result: 'invalid' })).toBe(before.invalid);
    expect(await metric(prov!, 'local_volume_provisioner_kube_requests_total')).toBe(before.requests);
    expect(prov!.child.exitCode).toBeNull();
  });
});
