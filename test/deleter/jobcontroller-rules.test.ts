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

function controller(): JobController {
  const env = testEnv({ config: testConfig({ sc1: SC1 }), node: { metadata: { name: NODE, uid: 'node-uid' } }, namespace: NS, kube: fake, recorder, metrics: newMetrics() });
  const jc = new JobController(env, {
    informerFactory: (labelSelector, onList) => createInformer(fake, 'jobs', { namespace: NS, labelSelector, onList, random: () => 0, backoff: { initialMs: 5, maxMs: 20 } }),
    pvs: liveStore(fake),
    failureBackoff: new KeyedBackoff({ initialMs: 30_000, maxMs: 600_000, jitter: 0 }),
    queueRateLimit: { baseDelayMs: 5, maxDelayMs: 50 },
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
