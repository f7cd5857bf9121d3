// The job controller's withdrawal and re-check rules asserted one by one (mutation testing,
// docs/cleanup.md "Mutation testing"); jobcontroller.test.ts has the end-to-end cases.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { JobController } from '../../src/deleter/jobcontroller.ts';
import { createInformer } from '../../src/kube/reflector.ts';
import { KubeError } from '../../src/kube/port.ts';
import { KeyedBackoff } from '../../src/util/backoff.ts';
import { generatePVName } from '../../src/volume/naming.ts';
import { testConfig } from '../support/config.ts';
import { testEnv } from '../support/env.ts';
import { FakeKube } from '../support/fake-kube.ts';
import { FakeRecorder, liveStore, makeJob, makePV, newMetrics, NODE, NS } from './helpers.ts';

const SC1 = { hostDir: '/mnt/disks', mountDir: '/discoveryPath', blockCleanerCommand: ['/scripts/quick_reset.sh'], volumeMode: 'Filesystem' as const, namePattern: '*' };
const V = (file: string): string => generatePVName(file, NODE, 'sc1');
const complete = { conditions: [{ type: 'Complete', status: 'True' }], succeeded: 1 };

let fake: FakeKube;
let recorder: FakeRecorder;
let controllers: JobController[];
beforeEach(() => {
  fake = new FakeKube();
  recorder = new FakeRecorder();
  controllers = [];
});
afterEach(async () => {
  for (const c of controllers) await c.stop();
});

function controller(onChange?: () => void): JobController {
  const env = testEnv({ config: testConfig({ sc1: SC1 }), node: { metadata: { name: NODE, uid: 'node-uid' } }, namespace: NS, kube: fake, recorder, metrics: newMetrics() });
  const jc = new JobController(env, {
    informerFactory: (labelSelector, onList) => createInformer(fake, 'jobs', { namespace: NS, labelSelector, onList, random: () => 0, backoff: { initialMs: 5, maxMs: 20 } }),
    pvs: liveStore(fake),
    failureBackoff: new KeyedBackoff({ initialMs: 30_000, maxMs: 600_000, jitter: 0 }),
    queueRateLimit: { baseDelayMs: 5, maxDelayMs: 50 },
    onChange,
  });
  controllers.push(jc);
  jc.start();
  return jc;
}

describe('JobController.withdraw', () => {
  it('never deletes a Job that does not say consistently which PV it cleans (pv label of another PV), even with the right UID label', async () => {
    const pv = fake.put('persistentvolumes', makePV(V('pv1'), { path: '/mnt/disks/pv1', uid: 'uid-pv1' }));
    const job = makeJob(pv);
    job.metadata!.labels = { ...job.metadata!.labels, pv: 'another-pv' };
    fake.put('jobs', job);
    const jc = controller();
    await jc.waitForSync();
    expect(await jc.withdraw(V('pv1'), 'uid-pv1')).toBe(false);
    expect(fake.count('delete', 'jobs')).toBe(0);
  });

  it('a Job already gone (404) or replaced (409) is not withdrawn; any other error is thrown to the caller', async () => {
    const pv = fake.put('persistentvolumes', makePV(V('pv1'), { path: '/mnt/disks/pv1', uid: 'uid-pv1' }));
    fake.put('jobs', makeJob(pv));
    const jc = controller();
    await jc.waitForSync();
    fake.failNext('delete', 'jobs', new KubeError(404, 'NotFound', 'gone'));
    expect(await jc.withdraw(V('pv1'), 'uid-pv1')).toBe(false);
    fake.failNext('delete', 'jobs', new KubeError(409, 'Conflict', 'uid precondition'));
    expect(await jc.withdraw(V('pv1'), 'uid-pv1')).toBe(false);
    fake.failNext('delete', 'jobs', new KubeError(500, 'InternalError', 'etcd timeout'));
    await expect(jc.withdraw(V('pv1'), 'uid-pv1')).rejects.toThrow(/etcd timeout/);
  });
});

describe('JobController re-check before the PV delete', () => {
  it('a Job that succeeded for a PV whose volume cannot be located now (class gone): the PV is kept, the Job deleted', async () => {
    const pv = fake.put('persistentvolumes', makePV(V('pv1'), { path: '/mnt/disks/pv1', uid: 'uid-pv1', cls: 'gone' }));
    fake.put('jobs', { ...makeJob(pv), status: complete });
    controller();
    await vi.waitFor(() => expect(fake.count('delete', 'jobs')).toBe(1));
    expect(fake.count('delete', 'persistentvolumes')).toBe(0);
    expect(fake.object('persistentvolumes', V('pv1'))).toBeDefined();
  });

  it('a claim lookup that fails again and again keeps the Job (retried) until it works; then the PV is deleted', async () => {
    const pv = fake.put('persistentvolumes', makePV(V('pv1'), { path: '/mnt/disks/pv1', uid: 'uid-pv1' }));
    for (let i = 0; i < 3; i++) fake.failNext('list', 'persistentvolumeclaims', new KubeError(503, 'ServiceUnavailable', 'try later'));
    fake.put('jobs', { ...makeJob(pv), status: complete });
    controller();
    await vi.waitFor(() => expect(fake.object('persistentvolumes', V('pv1'))).toBeUndefined());
    expect(fake.count('list', 'persistentvolumeclaims')).toBe(4);
    expect(fake.requests.filter((r) => r.verb === 'delete').map((r) => r.kind)).toEqual(['persistentvolumes', 'jobs']);
    expect(recorder.events).toEqual([]);
  });

  it.each([
    [409, 'Conflict'],
    [404, 'NotFound'],
  ])('a PV delete answered %i (replaced or already gone) is no failure: no Warning, the Job is deleted once', async (code, reason) => {
    const pv = fake.put('persistentvolumes', makePV(V('pv1'), { path: '/mnt/disks/pv1', uid: 'uid-pv1' }));
    fake.failNext('delete', 'persistentvolumes', new KubeError(code, reason, 'no'));
    fake.put('jobs', { ...makeJob(pv), status: complete });
    controller();
    await vi.waitFor(() => expect(fake.count('delete', 'jobs')).toBe(1));
    expect(fake.count('delete', 'persistentvolumes')).toBe(1);
    expect(recorder.events).toEqual([]);
  });
});

describe('JobController.status', () => {
  it('a Job is stale only when a UID is given and its pvuuid label differs; no UID asks nothing about staleness', async () => {
    const pv = fake.put('persistentvolumes', makePV(V('pv1'), { path: '/mnt/disks/pv1', uid: 'uid-pv1' }));
    fake.put('jobs', makeJob(pv));
    const jc = controller();
    await jc.waitForSync();
    expect(jc.status(V('pv1'), 'uid-pv1')).toEqual({ state: 'Running', stale: false });
    expect(jc.status(V('pv1'), 'uid-other')).toEqual({ state: 'Running', stale: true });
    expect(jc.status(V('pv1'))).toEqual({ state: 'Running', stale: false });
  });

  it('a finished Job that is being deleted is still Running: no new Job and no verdict until it is gone', async () => {
    const pv = fake.put('persistentvolumes', makePV(V('pv1'), { path: '/mnt/disks/pv1', uid: 'uid-pv1' }));
    const job = makeJob(pv);
    fake.put('jobs', { ...job, metadata: { ...job.metadata, deletionTimestamp: new Date() }, status: complete });
    const jc = controller();
    await jc.waitForSync();
    expect(jc.status(V('pv1'), 'uid-pv1')).toEqual({ state: 'Running', stale: false });
  });
});

describe('JobController: what a finished Job may do', () => {
  it('a succeeded Job that is being deleted deletes nothing (no PV delete, no second Job delete)', async () => {
    const pv = fake.put('persistentvolumes', makePV(V('pv1'), { path: '/mnt/disks/pv1', uid: 'uid-pv1' }));
    const job = makeJob(pv);
    fake.put('jobs', { ...job, metadata: { ...job.metadata, deletionTimestamp: new Date() }, status: complete });
    // A second, ordinary Job whose handling proves the queue was worked through.
    const other = fake.put('persistentvolumes', makePV(V('pv2'), { path: '/mnt/disks/pv2', uid: 'uid-pv2' }));
    fake.put('jobs', { ...makeJob(other), status: complete });
    controller();
    await vi.waitFor(() => expect(fake.object('persistentvolumes', V('pv2'))).toBeUndefined());
    await vi.waitFor(() => expect(fake.count('delete', 'jobs')).toBe(1));
    expect(fake.object('persistentvolumes', V('pv1'))).toBeDefined();
    expect(fake.requests.filter((r) => r.verb === 'delete').map((r) => [r.kind, r.name])).toEqual([
      ['persistentvolumes', V('pv2')],
      ['jobs', `cleanup-${V('pv2')}`],
    ]);
  });

  it('a succeeded Job of a Released PV whose reclaim policy is Retain: the PV is kept, only the Job is deleted', async () => {
    const pv = fake.put('persistentvolumes', makePV(V('pv1'), { path: '/mnt/disks/pv1', uid: 'uid-pv1', policy: 'Retain' }));
    fake.put('jobs', { ...makeJob(pv), status: complete });
    controller();
    await vi.waitFor(() => expect(fake.count('delete', 'jobs')).toBe(1));
    expect(fake.count('delete', 'persistentvolumes')).toBe(0);
    expect(fake.object('persistentvolumes', V('pv1'))).toBeDefined();
  });

  it('onChange is called after a succeeded Job is handled and when a Job disappears (the deleter looks again at once)', async () => {
    let changes = 0;
    const pv = fake.put('persistentvolumes', makePV(V('pv1'), { path: '/mnt/disks/pv1', uid: 'uid-pv1' }));
    fake.put('jobs', makeJob(pv));
    const jc = controller(() => changes++);
    await jc.waitForSync();
    expect(changes).toBe(0);
    fake.setStatus('jobs', `${NS}/cleanup-${V('pv1')}`, complete);
    // handled (PV and Job deleted): one call; the Job's deletion seen by the informer: another.
    await vi.waitFor(() => expect(changes).toBe(2));
    expect(fake.object('persistentvolumes', V('pv1'))).toBeUndefined();
  });
});
