// The node-cleanup controller against the in-memory API server: caches, Node delete
// events, the deletion delay (fake timers drive it and Date.now), the API re-check
// and the preconditions of every delete.
import type { V1NodeSelectorTerm, V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { KubeError } from '../../src/kube/port.ts';
import { NodeCleanupController } from '../../src/node-cleanup/controller.ts';
import { REASON_NODE_DELETED } from '../../src/kube/reasons.ts';
import { NodeCleanupMetrics } from '../../src/node-cleanup/metrics.ts';
import { FakeRecorder } from '../deleter/helpers.ts';
import { FakeKube } from '../support/fake-kube.ts';

const HOST = 'kubernetes.io/hostname';
const SC = 'local-fast';
const NS = 'apps';
const DELAY = 60_000;
const SCAN = 25_000; // not a divisor of DELAY: no periodic pass at the moment a delay ends

let fake: FakeKube;
let recorder: FakeRecorder;
let metrics: NodeCleanupMetrics;
let controller: NodeCleanupController | undefined;

const hostTerm = (...names: string[]): V1NodeSelectorTerm => ({ matchExpressions: [{ key: HOST, operator: 'In', values: names }] });
const zoneTerm: V1NodeSelectorTerm = { matchExpressions: [{ key: 'topology.kubernetes.io/zone', operator: 'In', values: ['z1'] }] };

function putNode(name: string, hostname = name): void {
  fake.put('nodes', { metadata: { name, labels: { [HOST]: hostname } } });
}

interface PVSpec {
  terms?: V1NodeSelectorTerm[];
  node?: string;
  sc?: string;
  phase?: string;
  reclaim?: string;
  local?: boolean;
}

function putPV(name: string, o: PVSpec = {}): V1PersistentVolume {
  return fake.put('persistentvolumes', {
    metadata: { name },
    spec: {
      storageClassName: o.sc ?? SC,
      capacity: { storage: '1Gi' },
      accessModes: ['ReadWriteOnce'],
      persistentVolumeReclaimPolicy: o.reclaim ?? 'Delete',
      ...((o.local ?? true) ? { local: { path: `/mnt/disks/${name}` } } : { hostPath: { path: `/mnt/disks/${name}` } }),
      nodeAffinity: { required: { nodeSelectorTerms: o.terms ?? [hostTerm(o.node ?? 'node-a')] } },
    },
    status: { phase: o.phase ?? 'Available' },
  });
}

/** A PVC bound to the PV (as the PV binder leaves them: claimRef with UID, volumeName, both Bound). */
function bind(pvName: string, claim: string): V1PersistentVolumeClaim {
  const pv = fake.object('persistentvolumes', pvName);
  const pvc = fake.put('persistentvolumeclaims', {
    metadata: { name: claim, namespace: NS },
    spec: { storageClassName: pv?.spec?.storageClassName ?? SC, volumeName: pvName, accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
    status: { phase: 'Bound' },
  });
  fake.update('persistentvolumes', pvName, (p) => {
    p.spec = { ...p.spec, claimRef: { kind: 'PersistentVolumeClaim', namespace: NS, name: claim, uid: pvc.metadata?.uid } };
    p.status = { phase: 'Bound' };
  });
  return pvc;
}

/** What the PV binder does when a bound claim is deleted: the PV becomes Released. */
function release(pvName: string): void {
  fake.setStatus('persistentvolumes', pvName, { phase: 'Released' });
}

const pvExists = (name: string): boolean => fake.object('persistentvolumes', name) !== undefined;
const pvcExists = (name: string): boolean => fake.object('persistentvolumeclaims', `${NS}/${name}`) !== undefined;
const deletes = (): string[] => fake.requests.filter((r) => r.verb === 'delete').map((r) => `${r.kind}/${r.name ?? ''}`);
const timers = (outcome: string): Promise<number> => metricValue(metrics.deletionTimers, { outcome });

/** Sum of a counter's samples with these labels. */
async function metricValue(c: { get(): Promise<{ values: Array<{ labels: Partial<Record<string, string | number>>; value: number }> }> }, labels: Record<string, string> = {}): Promise<number> {
  const { values } = await c.get();
  return values.filter((v) => Object.entries(labels).every(([k, val]) => v.labels[k] === val)).reduce((s, v) => s + v.value, 0);
}

async function advance(ms: number): Promise<void> {
  await vi.advanceTimersByTimeAsync(ms);
}

/** The PV is still there 1 ms before `ms` more has passed, and deleted when it has. */
async function expectPVDeletedAfter(name: string, ms: number): Promise<void> {
  await advance(ms - 1);
  expect(pvExists(name)).toBe(true);
  await advance(1);
  expect(pvExists(name)).toBe(false);
}

/** A PV of node-a, the controller started, then node-a deleted. */
async function startWithNodeAGone(): Promise<void> {
  putPV('pv-a');
  await start();
  fake.remove('nodes', 'node-a');
}

async function start(storageClassNames: string[] = [SC]): Promise<NodeCleanupController> {
  controller = new NodeCleanupController({
    kube: fake,
    storageClassNames,
    deletionDelayMs: DELAY,
    scanIntervalMs: SCAN,
    workers: 2,
    recorder,
    metrics,
    queueRateLimit: { baseDelayMs: 100, maxDelayMs: 1000 },
  });
  controller.start();
  await controller.waitForSync();
  await advance(0);
  return controller;
}

beforeEach(() => {
  vi.useFakeTimers({ now: new Date('2030-01-01T00:00:00Z') });
  fake = new FakeKube();
  recorder = new FakeRecorder();
  metrics = new NodeCleanupMetrics({ defaultMetrics: false });
  putNode('node-a');
  putNode('node-b');
});

afterEach(async () => {
  await controller?.stop();
  controller = undefined;
  vi.useRealTimers();
});

describe('NodeCleanupController', () => {
  it('deletes the bound PVC once the Node has been gone for the whole delay, then the Released PV; other nodes untouched', async () => {
    putPV('pv-a');
    const claimA = bind('pv-a', 'claim-a');
    putPV('pv-b', { node: 'node-b' });
    bind('pv-b', 'claim-b');
    await start();
    const deletePVC = vi.spyOn(fake, 'deletePersistentVolumeClaim');
    const deletePV = vi.spyOn(fake, 'deletePersistentVolume');

    fake.remove('nodes', 'node-a');
    await advance(0);
    expect(await timers('started')).toBe(1);
    expect(recorder.events).toEqual([
      expect.objectContaining({ ref: expect.objectContaining({ kind: 'PersistentVolumeClaim', namespace: NS, name: 'claim-a' }), type: 'Warning', reason: REASON_NODE_DELETED }),
    ]);
    expect(recorder.events[0]?.message).toBe("PVC is tied to a deleted Node. PVC will be cleaned up in 1m0s if the Node doesn't come back");

    await advance(DELAY - 1);
    expect(pvcExists('claim-a')).toBe(true);
    expect(deletes()).toEqual([]);

    await advance(1);
    expect(pvcExists('claim-a')).toBe(false);
    expect(deletePVC).toHaveBeenCalledWith(NS, 'claim-a', { uid: claimA.metadata?.uid });
    expect(await metricValue(metrics.pvcDeleteTotal)).toBe(1);
    expect(await timers('expired')).toBe(1);
    // The node was looked up on the API server right before the delete.
    const lookups = fake.requests.filter((r) => r.kind === 'nodes' && r.verb !== 'watch');
    expect(lookups.slice(-2)).toEqual([
      { verb: 'get', kind: 'nodes', name: 'node-a' },
      { verb: 'list', kind: 'nodes' },
    ]);
    expect(pvExists('pv-a')).toBe(true); // still Bound: waits for the binder to release it

    release('pv-a');
    const released = fake.object('persistentvolumes', 'pv-a');
    await advance(0);
    expect(pvExists('pv-a')).toBe(false);
    // Only the PV as it was checked: same object, same version.
    expect(deletePV).toHaveBeenCalledWith('pv-a', { uid: released?.metadata?.uid, resourceVersion: released?.metadata?.resourceVersion });
    expect(await metricValue(metrics.pvDeleteTotal, { phase: 'Released' })).toBe(1);

    expect(pvExists('pv-b')).toBe(true);
    expect(pvcExists('claim-b')).toBe(true);
    expect(deletes()).toEqual(['persistentvolumeclaims/claim-a', 'persistentvolumes/pv-a']);
  });

  it('deletes nothing when the Node is re-created within the delay; the timer ends as node_returned', async () => {
    putPV('pv-a');
    bind('pv-a', 'claim-a');
    putPV('pv-a2'); // Available
    await start();

    fake.remove('nodes', 'node-a');
    await advance(DELAY / 2);
    putNode('node-a');
    await advance(DELAY * 3);
    expect(deletes()).toEqual([]);
    expect(await timers('started')).toBe(2);
    expect(await timers('node_returned')).toBe(2);
    expect(await timers('expired')).toBe(0);
  });

  it('restarts the delay when the Node comes back and goes again', async () => {
    putPV('pv-a');
    await start();

    fake.remove('nodes', 'node-a');
    await advance(DELAY - 10_000);
    putNode('node-a');
    await advance(5_000);
    fake.remove('nodes', 'node-a');
    await advance(10_000); // past the first deletion's delay
    expect(pvExists('pv-a')).toBe(true);
    await expectPVDeletedAfter('pv-a', DELAY - 10_000);
  });

  it('never touches a PV whose node affinity is not pinned to hostnames (the Go hazard)', async () => {
    putPV('zone-only', { terms: [zoneTerm] });
    bind('zone-only', 'claim-zone');
    putPV('host-or-zone', { terms: [hostTerm('node-a'), zoneTerm] });
    putPV('host-and-zone', { terms: [{ matchExpressions: [...(hostTerm('node-a').matchExpressions ?? []), ...(zoneTerm.matchExpressions ?? [])] }] });
    putPV('not-in', { terms: [{ matchExpressions: [{ key: HOST, operator: 'NotIn', values: ['node-b'] }] }] });
    await start();

    fake.remove('nodes', 'node-a');
    await advance(DELAY * 2);
    expect(pvExists('zone-only')).toBe(true);
    expect(pvcExists('claim-zone')).toBe(true);
    expect(pvExists('host-or-zone')).toBe(true);
    expect(pvExists('not-in')).toBe(true);
    // A term with the hostname AND another label is still pinned to that host.
    expect(pvExists('host-and-zone')).toBe(false);
    expect(deletes()).toEqual(['persistentvolumes/host-and-zone']);
  });

  it('ignores PVs of StorageClasses not listed, and PVs that are not local', async () => {
    putPV('other-class', { sc: 'other' });
    bind('other-class', 'claim-other');
    putPV('host-path', { local: false });
    await start();

    fake.remove('nodes', 'node-a');
    await advance(DELAY * 2);
    expect(deletes()).toEqual([]);
    expect(await timers('started')).toBe(0);
  });

  it('with no StorageClass listed, cleans nothing', async () => {
    putPV('pv-a');
    await start([]);
    fake.remove('nodes', 'node-a');
    await advance(DELAY * 2);
    expect(deletes()).toEqual([]);
  });

  it('does not delete a PVC that is not the claim bound to the PV', async () => {
    putPV('pv-a');
    bind('pv-a', 'claim-a');
    // The claim was deleted and re-created under the same name: another UID, not bound to pv-a.
    fake.remove('persistentvolumeclaims', `${NS}/claim-a`);
    fake.put('persistentvolumeclaims', {
      metadata: { name: 'claim-a', namespace: NS },
      spec: { storageClassName: SC, accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
    });
    // A claim naming pv-a as its volume, which pv-a's claimRef does not name.
    fake.put('persistentvolumeclaims', {
      metadata: { name: 'squatter', namespace: NS },
      spec: { storageClassName: SC, volumeName: 'pv-a', accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
    });
    await start();

    fake.remove('nodes', 'node-a');
    await advance(DELAY * 2);
    expect(deletes()).toEqual([]); // pv-a is still Bound
    release('pv-a');
    await advance(0);
    expect(pvExists('pv-a')).toBe(false);
    expect(pvcExists('claim-a')).toBe(true);
    expect(pvcExists('squatter')).toBe(true);
  });

  it('deletes Available PVs whatever the reclaim policy, keeps Released ones with Retain', async () => {
    putPV('avail-retain', { reclaim: 'Retain' });
    putPV('released-retain', { reclaim: 'Retain', phase: 'Released' });
    putPV('released-delete', { phase: 'Released' });
    putPV('failed', { phase: 'Failed' });
    await start();
    fake.remove('nodes', 'node-a');
    await advance(DELAY);
    expect(deletes().sort()).toEqual(['persistentvolumes/avail-retain', 'persistentvolumes/released-delete']);
  });

  it('a PV of a gone Node that is left alone (Released, Retain) costs no API request per pass', async () => {
    putPV('kept', { reclaim: 'Retain', phase: 'Released' });
    await start();
    fake.remove('nodes', 'node-a');
    await advance(DELAY + SCAN * 10);
    expect(pvExists('kept')).toBe(true);
    expect(fake.requests.filter((r) => r.kind === 'nodes' && (r.verb === 'get' || r.verb === 'list')).length).toBe(1); // the informer's list
  });

  it('re-checks the Node with a GET before deleting: a Node the cache missed stops the delete', async () => {
    await startWithNodeAGone();
    const getNode = vi.spyOn(fake, 'getNode').mockResolvedValue({ metadata: { name: 'node-a' } });
    await advance(DELAY * 2);
    expect(getNode).toHaveBeenCalledWith('node-a');
    expect(pvExists('pv-a')).toBe(true);
    getNode.mockRestore();
  });

  it('counts a Node named otherwise whose hostname label matches', async () => {
    putPV('pv-h', { node: 'host-h' });
    putNode('node-h', 'host-h');
    await start();
    fake.remove('nodes', 'node-a');
    await advance(DELAY * 2);
    expect(pvExists('pv-h')).toBe(true);
    fake.remove('nodes', 'node-h');
    await advance(DELAY);
    expect(pvExists('pv-h')).toBe(false);
  });

  it('a PV pinned to two nodes waits until both are gone', async () => {
    putPV('pv-ab', { terms: [hostTerm('node-a'), hostTerm('node-b')] });
    await start();
    fake.remove('nodes', 'node-a');
    await advance(DELAY * 2);
    expect(pvExists('pv-ab')).toBe(true);
    fake.remove('nodes', 'node-b');
    await expectPVDeletedAfter('pv-ab', DELAY);
  });

  it('deletes nothing when the API check fails, and retries', async () => {
    await startWithNodeAGone();
    await advance(DELAY - 1);
    fake.failNext('get', 'nodes', new KubeError(500, 'InternalError', 'etcd is sad'));
    await advance(1);
    expect(pvExists('pv-a')).toBe(true);
    expect(await metricValue(metrics.pvDeleteFailedTotal)).toBe(0);
    await advance(1000);
    expect(pvExists('pv-a')).toBe(false);
  });

  it('a delete that loses a race (409 on the resourceVersion precondition) is retried on fresh state', async () => {
    await startWithNodeAGone();
    fake.failNext('delete', 'persistentvolumes', new KubeError(409, 'Conflict', 'Precondition failed'));
    await advance(DELAY);
    expect(pvExists('pv-a')).toBe(true);
    expect(await metricValue(metrics.pvDeleteFailedTotal, { phase: 'Available' })).toBe(1);
    await advance(1000);
    expect(pvExists('pv-a')).toBe(false);
    expect(await metricValue(metrics.pvDeleteTotal, { phase: 'Available' })).toBe(1);
  });

  it('cleans up after Nodes that were already gone when it started, counting the delay from the start', async () => {
    putPV('pv-z', { node: 'node-z' });
    await start();
    expect(await timers('started')).toBe(1);
    await expectPVDeletedAfter('pv-z', DELAY);
  });

  it('a PV for a Node that never existed waits the delay from when it was first seen', async () => {
    await start();
    await advance(5_000);
    putPV('pv-ghost', { node: 'ghost' });
    await expectPVDeletedAfter('pv-ghost', DELAY);
  });
});
