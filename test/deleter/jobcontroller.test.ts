import { testConfig } from '../support/config.ts';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { pino } from 'pino';
import type { V1Job } from '@kubernetes/client-node';
import { Deleter } from '../../src/deleter/deleter.ts';
import { generatePVName } from '../../src/volume/naming.ts';
import { JobController, JobPresence, type JobControllerOptions } from '../../src/deleter/jobcontroller.ts';
import { ProcTable } from '../../src/deleter/proctable.ts';
import { createInformer } from '../../src/kube/reflector.ts';
import { KubeError } from '../../src/kube/port.ts';
import type { Metrics } from '../../src/metrics/metrics.ts';
import { KeyedBackoff } from '../../src/util/backoff.ts';
import { FakeKube } from '../support/fake-kube.ts';
import { FakeRecorder, liveStore, makeJob, makePV, metricValue, newMetrics, NODE, NS } from './helpers.ts';
import { splitEnv, testEnv } from '../support/env.ts';
import type { GenerationEnv } from '../../src/volume/env.ts';

let fake: FakeKube;
let recorder: FakeRecorder;
let metrics: Metrics;
let now: number;
let selectors: string[];
let controllers: JobController[];

const complete = { conditions: [{ type: 'Complete', status: 'True' }], succeeded: 1 };
const failed = { conditions: [{ type: 'Failed', status: 'True', reason: 'BackoffLimitExceeded', message: 'Job has reached the specified backoff limit' }], failed: 4 };

function makeController(over: Partial<JobControllerOptions & GenerationEnv> = {}): JobController {
  const [envOver, own] = splitEnv<Partial<JobControllerOptions>>(over);
  const env = testEnv({ config: testConfig({ sc1: SC1 }), node: { metadata: { name: NODE, uid: 'node-uid' } }, namespace: NS, kube: fake, recorder, metrics, now: () => now, ...envOver });
  const jc = new JobController(env, {
    informerFactory: (labelSelector, onList) => {
      selectors.push(labelSelector);
      return createInformer(fake, 'jobs', { namespace: NS, labelSelector, onList, random: () => 0, backoff: { initialMs: 5, maxMs: 20 } });
    },
    pvs: liveStore(fake),
    failureBackoff: new KeyedBackoff({ initialMs: 30_000, maxMs: 600_000, jitter: 0 }, () => now),
    queueRateLimit: { baseDelayMs: 5, maxDelayMs: 50 },
    ...own,
  });
  controllers.push(jc);
  return jc;
}

const jobKey = (pvName: string): string => `${NS}/cleanup-${pvName}`;
/** The name discovery gives to /mnt/disks/<file> of class sc1 on this node (the job controller re-checks it). */
const V = (file: string): string => generatePVName(file, NODE, 'sc1');
/** A PV of the volume /mnt/disks/<file>, named as discovery names it. */
const pvFor = (file: string, opts: Parameters<typeof makePV>[1] = {}) => makePV(V(file), { path: `/mnt/disks/${file}`, uid: `uid-${file}`, ...opts });
/** The class of those PVs (the job controller's refusal checks look it up). */
const SC1 = { hostDir: '/mnt/disks', mountDir: '/discoveryPath', blockCleanerCommand: ['/scripts/quick_reset.sh'], volumeMode: 'Filesystem' as const, namePattern: '*' };
const putJob = (job: V1Job): V1Job => fake.put('jobs', job);

beforeEach(() => {
  fake = new FakeKube();
  recorder = new FakeRecorder();
  metrics = newMetrics();
  now = Date.parse('2026-01-01T00:00:00Z');
  selectors = [];
  controllers = [];
});
afterEach(async () => {
  for (const c of controllers) await c.stop();
});

describe('JobController', () => {
  it('watches this node\'s Jobs in its namespace', async () => {
    const jc = makeController();
    jc.start();
    await jc.waitForSync();
    expect(selectors).toEqual([`kubernetes.io/hostname=${NODE}`]);
    expect(fake.requests.find((r) => r.kind === 'jobs' && r.verb === 'list')).toMatchObject({ namespace: NS });
  });

  it('on success deletes the PV (UID precondition), then the Job, and counts it', async () => {
    const pv = fake.put('persistentvolumes', pvFor('pv1', { capacity: '100Gi' }));
    putJob(makeJob(pv, 'Block', new Date(now - 20_000)));
    const jc = makeController();
    jc.start();
    await jc.waitForSync();
    expect(jc.inProgress(V('pv1'))).toBe(true);
    expect(jc.status(V('pv1'), pv.metadata?.uid)).toEqual({ state: 'Running', stale: false });
    const deletes: unknown[] = [];
    const orig = fake.deletePersistentVolume.bind(fake);
    fake.deletePersistentVolume = (name, opts) => {
      deletes.push({ name, opts });
      return orig(name, opts);
    };
    fake.setStatus('jobs', jobKey(V('pv1')), complete);
    await vi.waitFor(() => expect(fake.object('jobs', jobKey(V('pv1')))).toBeUndefined());
    expect(fake.object('persistentvolumes', V('pv1'))).toBeUndefined();
    expect(deletes).toEqual([{ name: V('pv1'), opts: { uid: pv.metadata?.uid } }]);
    // the PV goes first, then the Job
    const order = fake.requests.filter((r) => r.verb === 'delete').map((r) => r.kind);
    expect(order).toEqual(['persistentvolumes', 'jobs']);
    expect(await metricValue(metrics.deleteTotal, { mode: 'Block', type: 'job' })).toBe(1);
    const { values } = await metrics.deleteDuration.get();
    const sum = values.find((v) => v.metricName?.endsWith('_sum'));
    expect(sum?.labels).toMatchObject({ mode: 'Block', type: 'job', capacity: '500G', cleanup_command: '/scripts/quick_reset.sh' });
    expect(sum?.value).toBeCloseTo(20, 1);
    expect(await metricValue(metrics.apiserverRequests, { method: 'delete' })).toBe(1);
    expect(jc.inProgress(V('pv1'))).toBe(false);
    expect(recorder.events).toEqual([]);
  });

  it('a stale Job (pvuuid of an older PV with the same name) never deletes the new PV (#174)', async () => {
    const old = pvFor('pv1', { uid: 'old-uid' });
    putJob(makeJob(old));
    fake.put('persistentvolumes', pvFor('pv1', { uid: 'new-uid' }));
    const jc = makeController();
    jc.start();
    await jc.waitForSync();
    expect(jc.status(V('pv1'), 'new-uid')).toEqual({ state: 'Running', stale: true });
    fake.setStatus('jobs', jobKey(V('pv1')), complete);
    await vi.waitFor(() => expect(fake.object('jobs', jobKey(V('pv1')))).toBeUndefined());
    expect(fake.object('persistentvolumes', V('pv1'))?.metadata?.uid).toBe('new-uid');
    expect(fake.count('delete', 'persistentvolumes')).toBe(0);
    expect(await metricValue(metrics.deleteTotal)).toBe(0);
  });

  it('does not delete a PV that is no longer Released, or is being deleted', async () => {
    const bound = fake.put('persistentvolumes', pvFor('pv1', { phase: 'Bound' }));
    const deleting = fake.put('persistentvolumes', pvFor('pv2', { deleting: true }));
    putJob({ ...makeJob(bound), status: complete });
    putJob({ ...makeJob(deleting), status: complete });
    const jc = makeController();
    jc.start();
    await vi.waitFor(() => expect(fake.objects('jobs')).toEqual([]));
    expect(fake.count('delete', 'persistentvolumes')).toBe(0);
    expect(fake.objects('persistentvolumes')).toHaveLength(2);
  });

  it('follows a Job created before it started to completion (new generation, empty queue)', async () => {
    const pv = fake.put('persistentvolumes', pvFor('pv1'));
    putJob({ ...makeJob(pv), status: complete });
    const first = makeController();
    await first.stop(); // an earlier generation that never handled it
    const jc = makeController();
    jc.start();
    await vi.waitFor(() => expect(fake.object('persistentvolumes', V('pv1'))).toBeUndefined());
    await vi.waitFor(() => expect(fake.object('jobs', jobKey(V('pv1')))).toBeUndefined());
  });

  it('on failure reports once, deletes the Job and holds the PV in a backoff, never stuck', async () => {
    const pv = fake.put('persistentvolumes', pvFor('pv1'));
    putJob(makeJob(pv));
    const jc = makeController();
    jc.start();
    await jc.waitForSync();
    fake.setStatus('jobs', jobKey(V('pv1')), failed);
    await vi.waitFor(() => expect(fake.object('jobs', jobKey(V('pv1')))).toBeUndefined());
    expect(fake.object('persistentvolumes', V('pv1'))).toBeDefined();
    expect(recorder.events).toHaveLength(1);
    expect(recorder.events[0]).toMatchObject({ type: 'Warning', reason: 'VolumeFailedDelete', ref: { name: V('pv1'), kind: 'PersistentVolume' } });
    expect(recorder.events[0]?.message).toContain(`Cleanup job kubesystem/cleanup-${V('pv1')} failed (BackoffLimitExceeded: Job has reached the specified backoff limit); a new one starts in 30s`);
    expect(await metricValue(metrics.deleteFailedTotal, { mode: 'Block', type: 'job' })).toBe(1);
    expect(await metricValue(metrics.cleanupRetries, { type: 'job' })).toBe(1);
    const del = fake.requests.filter((r) => r.verb === 'delete' && r.kind === 'jobs');
    expect(del).toHaveLength(1);
    expect(jc.inProgress(V('pv1'))).toBe(false);
    expect(jc.status(V('pv1'))).toEqual({ state: 'Backoff', retryInMs: 30_000 });
    now += 30_000;
    expect(jc.status(V('pv1'))).toEqual({ state: 'NotFound' });

    // A second failure doubles the backoff.
    putJob(makeJob(pv));
    fake.setStatus('jobs', jobKey(V('pv1')), failed);
    await vi.waitFor(() => expect(fake.object('jobs', jobKey(V('pv1')))).toBeUndefined());
    expect(jc.status(V('pv1'))).toEqual({ state: 'Backoff', retryInMs: 60_000 });
    expect(recorder.events).toHaveLength(2);
  });

  it('keeps the Job and retries when deleting the PV fails, without cleaning again', async () => {
    const pv = fake.put('persistentvolumes', pvFor('pv1'));
    putJob(makeJob(pv));
    fake.failNext('delete', 'persistentvolumes', new KubeError(500, 'InternalError', 'etcd is sad'));
    const jc = makeController();
    jc.start();
    await jc.waitForSync();
    fake.setStatus('jobs', jobKey(V('pv1')), complete);
    await vi.waitFor(() => expect(fake.object('persistentvolumes', V('pv1'))).toBeUndefined());
    await vi.waitFor(() => expect(fake.object('jobs', jobKey(V('pv1')))).toBeUndefined());
    expect(fake.count('delete', 'persistentvolumes')).toBe(2);
    expect(fake.count('create', 'jobs')).toBe(0);
    expect(recorder.reasons()).toEqual(['VolumeFailedDelete']);
    expect(recorder.events[0]?.message).toMatch(/etcd is sad/);
    expect(await metricValue(metrics.deleteFailedTotal, { type: 'job' })).toBe(1);
    expect(await metricValue(metrics.apiserverRequestsFailed, { method: 'delete' })).toBe(1);
    expect(await metricValue(metrics.deleteTotal, { type: 'job' })).toBe(1);
  });

  it('removeStatus deletes a finished Job only', async () => {
    const pv1 = pvFor('pv1');
    const pv2 = pvFor('pv2');
    putJob(makeJob(pv1));
    putJob({ ...makeJob(pv2), status: complete });
    const jc = makeController();
    jc.start();
    await jc.waitForSync();
    // pv2's Job is handled by the workers anyway (its PV is gone); pv1's is running.
    await jc.removeStatus(V('pv1'));
    expect(fake.object('jobs', jobKey(V('pv1')))).toBeDefined();
    await jc.removeStatus(V('pv2'));
    await vi.waitFor(() => expect(fake.object('jobs', jobKey(V('pv2')))).toBeUndefined());
    expect(jc.inProgress(V('pv1'))).toBe(true);
  });

  it('takes the PV from the Job name: a Job whose pv label names another PV is ignored, never deletes a PV', async () => {
    const logs: Array<{ level: number; msg: string; job?: string }> = [];
    const logger = pino({ level: 'info' }, { write: (s: string) => logs.push(JSON.parse(s) as { level: number; msg: string }) });
    const a = fake.put('persistentvolumes', makePV('a'));
    const b = fake.put('persistentvolumes', makePV('b'));
    // A Job named for PV a whose labels point at PV b (name, uid): upstream trusted the label.
    const forged = makeJob(a);
    forged.metadata = { ...forged.metadata, labels: { ...forged.metadata?.labels, pv: 'b', pvuuid: b.metadata?.uid ?? '' } };
    putJob({ ...forged, status: complete });
    // And one without the pv label, also for a.
    const unlabelled = makeJob(a);
    unlabelled.metadata = { ...unlabelled.metadata, name: 'cleanup-a2', labels: { 'kubernetes.io/hostname': NODE, pvuuid: a.metadata?.uid ?? '' } };
    putJob({ ...unlabelled, status: complete });
    const jc = makeController({ logger });
    jc.start();
    await jc.waitForSync();
    const ignored = (): string[] => logs.filter((l) => l.level === 40 && l.msg.startsWith('ignoring cleanup job')).map((l) => l.msg);
    await vi.waitFor(() => expect(ignored().length + fake.count('delete')).toBeGreaterThanOrEqual(2));
    expect(fake.count('delete', 'persistentvolumes')).toBe(0);
    expect(fake.object('persistentvolumes', 'a')).toBeDefined();
    expect(fake.object('persistentvolumes', 'b')).toBeDefined();
    expect(fake.objects('jobs')).toHaveLength(2); // not ours to delete either
    expect(ignored().sort()).toEqual([
      `ignoring cleanup job ${NS}/cleanup-a2: its label pv is missing, but its name is for PV "a2"; no PV is deleted because of it`,
      `ignoring cleanup job ${NS}/cleanup-a: its label pv is "b", but its name is for PV "a"; no PV is deleted because of it`,
    ]);
    // An update of the same Job does not repeat the warning; a consistent Job queued after it is handled as usual.
    fake.setStatus('jobs', jobKey('a'), { ...complete, succeeded: 2 });
    const c = fake.put('persistentvolumes', pvFor('c'));
    putJob({ ...makeJob(c), status: complete });
    await vi.waitFor(() => expect(fake.object('persistentvolumes', V('c'))).toBeUndefined());
    expect(ignored()).toHaveLength(2);
    expect(fake.object('persistentvolumes', 'a')).toBeDefined();
    expect(fake.object('persistentvolumes', 'b')).toBeDefined();
    expect(await metricValue(metrics.deleteTotal)).toBe(1);
  });

  it('stop() ends the watch and the workers; nothing is sent afterwards', async () => {
    const jc = makeController();
    jc.start();
    await jc.waitForSync();
    await vi.waitFor(() => expect(fake.openWatches).toBe(1));
    await jc.stop();
    expect(fake.openWatches).toBe(0);
    const before = fake.requests.length;
    const pv = fake.put('persistentvolumes', pvFor('pv1'));
    putJob({ ...makeJob(pv), status: complete });
    await new Promise((r) => setTimeout(r, 50));
    expect(fake.requests.length).toBe(before);
    expect(fake.object('persistentvolumes', V('pv1'))).toBeDefined();
  });
});

describe('JobController: Jobs are watched only when they may matter', () => {
  const forbidden = (): KubeError => new KubeError(403, 'Forbidden', 'jobs.batch is forbidden: User "lvp" cannot list resource "jobs"');
  const jobRequests = (): string[] => fake.requests.filter((r) => r.kind === 'jobs').map((r) => r.verb);
  const refs = [{ kind: 'Node', name: NODE }];

  it("'off': no Job request at all; every PV is free to clean", async () => {
    const jc = makeController({ watch: 'off' });
    jc.start();
    await jc.waitForSync();
    expect(jc.hasSynced()).toBe(true);
    expect(jc.status(V('pv1'))).toEqual({ state: 'NotFound' });
    expect(jc.inProgress(V('pv1'))).toBe(false);
    expect(jobRequests()).toEqual([]);
  });

  it("'ifPresent' and no Job: one list, no watch, and later generations of the process are 'off'", async () => {
    const presence = new JobPresence();
    expect(presence.modeFor(false)).toBe('ifPresent');
    const jc = makeController({ watch: 'ifPresent', presence });
    jc.start();
    expect(jc.status(V('pv1'))).toEqual({ state: 'Unknown' }); // the list is in flight: wait
    expect(jc.inProgress(V('pv1'))).toBe(true);
    await jc.waitForSync();
    expect(jc.status(V('pv1'))).toEqual({ state: 'NotFound' });
    expect(jobRequests()).toEqual(['list']);
    expect(fake.requests.find((r) => r.kind === 'jobs')).toMatchObject({ namespace: NS });
    expect(presence.modeFor(false)).toBe('off');
    expect(presence.modeFor(true)).toBe('required');
  });

  it("'ifPresent' and forbidden (the Go chart without useJobForCleaning): carries on without Jobs, no Event, no problem", async () => {
    const presence = new JobPresence();
    fake.failNext('list', 'jobs', forbidden());
    const jc = makeController({ watch: 'ifPresent', presence, eventRefs: refs });
    jc.start();
    await jc.waitForSync();
    expect(jc.problem()).toBeUndefined();
    expect(jc.status(V('pv1'))).toEqual({ state: 'NotFound' });
    expect(recorder.events).toEqual([]);
    expect(jobRequests()).toEqual(['list']);
    expect(presence.modeFor(false)).toBe('off');
  });

  it("'ifPresent' with a Job of an earlier generation: follows it to completion (the PV is deleted)", async () => {
    const presence = new JobPresence();
    const pv = fake.put('persistentvolumes', pvFor('pv1'));
    putJob({ ...makeJob(pv), status: complete });
    const jc = makeController({ watch: 'ifPresent', presence });
    jc.start();
    await jc.waitForSync();
    await vi.waitFor(() => expect(fake.object('persistentvolumes', V('pv1'))).toBeUndefined());
    await vi.waitFor(() => expect(fake.object('jobs', jobKey(V('pv1')))).toBeUndefined());
    expect(jobRequests().slice(0, 3)).toEqual(['list', 'list', 'watch']);
    expect(presence.modeFor(false)).toBe('ifPresent'); // the next generation looks again
  });

  it("'ifPresent' after a transient error: the informer retries; its 403 ends the watch", async () => {
    const presence = new JobPresence();
    fake.failNext('list', 'jobs', new KubeError(503, 'ServiceUnavailable', 'busy'));
    fake.failNext('list', 'jobs', forbidden());
    const jc = makeController({ watch: 'ifPresent', presence });
    jc.start();
    await jc.waitForSync();
    expect(jc.status(V('pv1'))).toEqual({ state: 'NotFound' });
    expect(presence.modeFor(false)).toBe('off');
    await new Promise((r) => setTimeout(r, 50));
    expect(jobRequests()).toEqual(['list', 'list']); // no retry after the 403, no watch
  });

  it("'required' and forbidden: a problem (Warning Event once, status Unknown), cleared when the list works", async () => {
    const presence = new JobPresence();
    presence.none();
    for (let i = 0; i < 3; i++) fake.failNext('list', 'jobs', forbidden());
    const changes = vi.fn();
    const jc = makeController({ watch: 'required', presence, eventRefs: refs, onChange: changes });
    jc.start();
    await jc.waitForSync(); // does not hang on the 403
    expect(presence.modeFor(false)).toBe('ifPresent'); // this generation may create Jobs
    expect(jc.problem()).toMatch(/^cannot list cleanup Jobs in namespace kubesystem although useJobForCleaning is on: jobs.batch is forbidden/);
    expect(jc.status(V('pv1'))).toEqual({ state: 'Unknown' });
    expect(jc.inProgress(V('pv1'))).toBe(true);
    expect(recorder.events.map((e) => `${e.ref.kind} ${e.type} ${e.reason}`)).toEqual(['Node Warning CleanupJobsForbidden']);
    expect(recorder.events[0]?.message).toMatch(/grant the Role of deployment\/kubernetes\/components\/job-cleaning, or set useJobForCleaning to false/);
    // The informer keeps retrying; once the Role is granted the problem clears, without a restart.
    await vi.waitFor(() => expect(jc.problem()).toBeUndefined());
    expect(jc.status(V('pv1'))).toEqual({ state: 'NotFound' });
    expect(recorder.events).toHaveLength(1);
    expect(changes).toHaveBeenCalled();
    expect(jobRequests().filter((v) => v === 'list')).toHaveLength(4);
  });
});

/** A Deleter of this node with cleanup Jobs followed by `jc`; `mountPoint` is the one mount point it sees. */
function jobDeleter(config: ReturnType<typeof testConfig>, jc: JobController, mountPoint: string): Deleter {
  const env = testEnv({ config, node: { metadata: { name: NODE, uid: 'node-uid' } }, namespace: NS, jobImage: 'img', kube: fake, recorder, metrics, now: () => now });
  return new Deleter(env, { pvs: liveStore(fake), procTable: new ProcTable(), jobController: jc, readMountPoints: () => Promise.resolve(new Set([mountPoint])) });
}

describe('Deleter + JobController', () => {
  it('creates a Job, deletes the PV when it succeeds, and after a failure creates a new Job only after the backoff', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'lsp-jc-'));
    try {
      const mountDir = join(tmp, 'discovery');
      mkdirSync(join(mountDir, 'pv1'), { recursive: true });
      const cls = { hostDir: '/mnt/disks', mountDir, blockCleanerCommand: ['/scripts/quick_reset.sh'], volumeMode: 'Filesystem' as const, namePattern: '*' };
      const config = testConfig({ sc1: cls }, { useJobForCleaning: true });
      // Named as discovery names /mnt/disks/pv1 on this node (the deleter refuses other names).
      const name = generatePVName('pv1', NODE, 'sc1');
      fake.put('persistentvolumes', makePV(name, { path: '/mnt/disks/pv1' }));
      const jc = makeController();
      jc.start();
      await jc.waitForSync();
      const d = jobDeleter(config, jc, join(mountDir, 'pv1'));
      await d.deletePVs();
      await vi.waitFor(() => expect(jc.inProgress(name)).toBe(true));
      await d.deletePVs();
      expect(fake.count('create', 'jobs')).toBe(1);

      fake.setStatus('jobs', jobKey(name), failed);
      await vi.waitFor(() => expect(jc.status(name).state).toBe('Backoff'));
      await vi.waitFor(() => expect(jc.inProgress(name)).toBe(false));
      await d.deletePVs();
      expect(fake.count('create', 'jobs')).toBe(1); // held by the backoff
      now += 31_000;
      await d.deletePVs();
      expect(fake.count('create', 'jobs')).toBe(2);

      await vi.waitFor(() => expect(jc.inProgress(name)).toBe(true));
      fake.setStatus('jobs', jobKey(name), complete);
      await vi.waitFor(() => expect(fake.object('persistentvolumes', name)).toBeUndefined());
      await vi.waitFor(() => expect(fake.objects('jobs')).toEqual([]));
      expect(await metricValue(metrics.deleteTotal, { mode: 'Filesystem', type: 'job' })).toBe(1);
      expect(recorder.reasons()).toEqual(['VolumeFailedDelete']);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});

describe('JobController re-checks before it deletes a PV, and withdraws Jobs of refused PVs (issue 17)', () => {
  const refusals = () => recorder.events.filter((e) => e.reason === 'VolumeCleanRefused');
  /** A PV someone made by hand for /mnt/disks/<file>: Bound, no provisioned-by annotation. */
  const manualPV = (file: string) => {
    const pv = makePV(`manual-${file}`, { path: `/mnt/disks/${file}`, phase: 'Bound' });
    delete pv.metadata?.annotations;
    return pv;
  };

  it('a Job that succeeded for a PV whose path another PV uses now: the PV is kept (path_in_use), only the Job is deleted', async () => {
    const pv = fake.put('persistentvolumes', pvFor('pv1'));
    putJob(makeJob(pv));
    fake.put('persistentvolumes', manualPV('pv1'));
    const jc = makeController();
    jc.start();
    await jc.waitForSync();
    fake.setStatus('jobs', jobKey(V('pv1')), complete);
    await vi.waitFor(() => expect(fake.object('jobs', jobKey(V('pv1')))).toBeUndefined());
    expect(fake.object('persistentvolumes', V('pv1'))).toBeDefined();
    expect(fake.count('delete', 'persistentvolumes')).toBe(0);
    expect(refusals()).toHaveLength(1);
    expect(refusals()[0]?.message).toContain('is also used by PV "manual-pv1"');
    expect(await metricValue(metrics.cleanRefused, { reason: 'path_in_use' })).toBe(1);
    expect(await metricValue(metrics.deleteTotal)).toBe(0);
  });

  it('a Job that succeeded for a PV whose PVC still names it (claimRef game): the PV is kept, Events on the PV and the PVC', async () => {
    const pv = pvFor('pv1');
    pv.spec = { ...pv.spec, claimRef: { namespace: 'team', name: 'data', uid: 'random-uid' } };
    fake.put('persistentvolumes', pv);
    fake.put('persistentvolumeclaims', { metadata: { namespace: 'team', name: 'data', uid: 'pvc-uid' }, spec: { volumeName: V('pv1') }, status: { phase: 'Bound' } });
    putJob({ ...makeJob(fake.object('persistentvolumes', V('pv1'))!), status: complete });
    const jc = makeController();
    jc.start();
    await vi.waitFor(() => expect(fake.object('jobs', jobKey(V('pv1')))).toBeUndefined());
    expect(fake.object('persistentvolumes', V('pv1'))).toBeDefined();
    expect(refusals().map((e) => `${e.ref.kind}/${e.ref.name}`)).toEqual([`PersistentVolume/${V('pv1')}`, 'PersistentVolumeClaim/data']);
    expect(await metricValue(metrics.cleanRefused, { reason: 'claim_still_exists' })).toBe(1);
  });

  it('an API error during the claim lookup keeps the PV and the Job; the delete happens once the lookup works', async () => {
    const pv = fake.put('persistentvolumes', pvFor('pv1'));
    fake.failNext('list', 'persistentvolumeclaims', new KubeError(503, 'ServiceUnavailable', 'try later'));
    putJob({ ...makeJob(pv), status: complete });
    const jc = makeController();
    jc.start();
    await vi.waitFor(() => expect(fake.object('persistentvolumes', V('pv1'))).toBeUndefined());
    expect(fake.count('list', 'persistentvolumeclaims')).toBe(2);
    const order = fake.requests.filter((r) => r.verb === 'delete').map((r) => r.kind);
    expect(order).toEqual(['persistentvolumes', 'jobs']); // the Job stayed until the PV was gone
    expect(refusals()).toEqual([]);
  });

  it('withdraw(): deletes only our Job of that PV name and UID, with propagation Foreground', async () => {
    const pv = fake.put('persistentvolumes', pvFor('pv1'));
    putJob(makeJob(pv));
    const deletes: unknown[] = [];
    const orig = fake.deleteJob.bind(fake);
    fake.deleteJob = (ns, name, opts) => {
      deletes.push({ name, opts });
      return orig(ns, name, opts);
    };
    const jc = makeController();
    jc.start();
    await jc.waitForSync();
    expect(await jc.withdraw(V('pv1'), 'another-uid')).toBe(false);
    expect(await jc.withdraw(V('pv2'), 'uid-pv1')).toBe(false);
    expect(fake.object('jobs', jobKey(V('pv1')))).toBeDefined();
    const jobUid = fake.object('jobs', jobKey(V('pv1')))?.metadata?.uid;
    expect(await jc.withdraw(V('pv1'), 'uid-pv1')).toBe(true);
    expect(deletes).toEqual([{ name: `cleanup-${V('pv1')}`, opts: { uid: jobUid, propagationPolicy: 'Foreground' } }]);
    expect(fake.object('jobs', jobKey(V('pv1')))).toBeUndefined();
  });
});

describe('Deleter + JobController: a refusal after the Job was created withdraws it (issue 17, point 1)', () => {
  it('Job created, then a hand-made Bound PV for the same path appears: the Job is deleted, the PV kept', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'lsp-jc-'));
    try {
      const mountDir = join(tmp, 'discovery');
      mkdirSync(join(mountDir, 'pv1'), { recursive: true });
      const cls = { ...SC1, mountDir };
      const config = testConfig({ sc1: cls }, { useJobForCleaning: true });
      const name = V('pv1');
      fake.put('persistentvolumes', makePV(name, { path: '/mnt/disks/pv1' }));
      const jc = makeController({ config });
      jc.start();
      await jc.waitForSync();
      const d = jobDeleter(config, jc, join(mountDir, 'pv1'));
      await d.deletePVs();
      await vi.waitFor(() => expect(jc.inProgress(name)).toBe(true));
      const manual = makePV('manual-pv1', { path: '/mnt/disks/pv1', phase: 'Bound' });
      delete manual.metadata?.annotations;
      fake.put('persistentvolumes', manual);
      await d.deletePVs();
      expect(fake.object('jobs', jobKey(name))).toBeUndefined();
      expect(fake.requests.filter((r) => r.verb === 'delete').map((r) => r.kind)).toEqual(['jobs']);
      expect(fake.object('persistentvolumes', name)).toBeDefined();
      expect(recorder.reasons()).toEqual(['VolumeCleanRefused']);
      // No new Job for the refused PV.
      await vi.waitFor(() => expect(jc.inProgress(name)).toBe(false));
      now += 120_000;
      await d.deletePVs();
      expect(fake.count('create', 'jobs')).toBe(1);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
