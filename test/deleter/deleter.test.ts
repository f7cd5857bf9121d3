import { testConfig } from '../support/config.ts';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { V1Node } from '@kubernetes/client-node';
import type { ClassConfig, ProvisionerConfig } from '../../src/config/types.ts';
import { Deleter, directChild, type DeleterOptions, type JobTracker } from '../../src/deleter/deleter.ts';
import { ProcTable } from '../../src/deleter/proctable.ts';
import { CleanGuard } from '../../src/deleter/guard.ts';
import { ANN_VOLUME_IDENTITY } from '../../src/identity/identity.ts';
import { KubeError } from '../../src/kube/port.ts';
import type { Metrics } from '../../src/metrics/metrics.ts';
import { FakeKube } from '../support/fake-kube.ts';
import { generatePVName } from '../../src/volume/naming.ts';
import { createNodePVInformer, PV_NODE_LABEL } from '../../src/volume/pv-node-label.ts';
import { silentLogger } from '../../src/util/log.ts';
import { FakeRecorder, liveStore, makePV as makeNamedPV, metricValue, newMetrics, NODE, NS } from './helpers.ts';
import { writeMountInfo } from '../support/mountinfo.ts';
import { splitEnv, testEnv } from '../support/env.ts';
import type { GenerationEnv } from '../../src/volume/env.ts';

const isRoot = process.getuid?.() === 0;

/** The name discovery gives to the volume <hostDir>/<file> of a class on this node. */
const N = (file: string, cls = 'sc1'): string => generatePVName(file, NODE, cls);
/** A PV of the volume /mnt/disks/<file>, named as discovery names it (the deleter refuses other names). */
const makePV = (file: string, opts: Parameters<typeof makeNamedPV>[1] = {}) =>
  makeNamedPV(N(file, opts.cls), { path: `/mnt/disks/${file}`, uid: `uid-${file}`, ...opts });

let tmp: string;
let mountDir: string;
let counter: string;
let fake: FakeKube;
let recorder: FakeRecorder;
let metrics: Metrics;
let procTable: ProcTable;
let now: number;
let mounts: Set<string>;

const node: V1Node = { metadata: { name: NODE, uid: 'node-uid' } };

function classConfig(over: Partial<ClassConfig> = {}): ClassConfig {
  return {
    hostDir: '/mnt/disks',
    mountDir,
    blockCleanerCommand: ['bash', '-c', `echo "run $LOCAL_PV_BLKDEVICE" >> ${counter}`],
    volumeMode: 'Filesystem',
    namePattern: '*',
    ...over,
  };
}

function config(over: Partial<ProvisionerConfig> = {}, cls: ClassConfig = classConfig()): ProvisionerConfig {
  return testConfig({ sc1: cls }, over);
}

function makeDeleter(over: Partial<DeleterOptions & GenerationEnv> = {}): Deleter {
  const [envOver, own] = splitEnv<Partial<DeleterOptions>>(over);
  const env = testEnv({
    config: config(),
    node,
    namespace: NS,
    kube: fake,
    recorder,
    metrics,
    now: () => now,
    mountInfoPath: join(tmp, 'mountinfo'),
    ...envOver,
  });
  return new Deleter(env, {
    pvs: liveStore(fake),
    procTable,
    readMountPoints: () => Promise.resolve(mounts),
    ...own,
  });
}

async function pass(d: Deleter): Promise<void> {
  await d.deletePVs();
  await d.idle();
}

/**
 * A filesystem volume at <mountDir>/<name> with some content, listed as a mount point (in `mounts` for the
 * deleter's check, and in the mount table file the cleaner reads afresh).
 */
function fsVolume(name: string, mounted = true): string {
  const dir = join(mountDir, name);
  mkdirSync(join(dir, 'sub'), { recursive: true });
  writeFileSync(join(dir, 'sub', 'data'), 'old tenant data');
  writeFileSync(join(dir, '.dot'), 'x');
  if (mounted) {
    mounts.add(dir);
    writeMountInfo(join(tmp, 'mountinfo'), [...mounts]);
  }
  return dir;
}

/** A block device node at <mountDir>/<name> (never opened: the test cleaner only echoes). */
function blockVolume(name: string): string {
  const p = join(mountDir, name);
  execFileSync('mknod', [p, 'b', '7', '250']);
  return p;
}

/** Counts cleaner calls; the real cleaner never runs in these tests. */
const counting = (): { calls: string[]; over: Partial<DeleterOptions> } => {
  const calls: string[] = [];
  const clean = (p: string) => {
    calls.push(p);
    return Promise.resolve({ ok: true, durationMs: 1, skipped: [], removed: 0, stdout: [], stderr: [] });
  };
  return { calls, over: { cleanFilesystem: clean, cleanBlockDevice: (o) => clean(o.devicePath) } };
};

const runs = (): number => (existsSync(counter) ? readFileSync(counter, 'utf8').split('\n').filter(Boolean).length : 0);
const pvExists = (file: string): boolean => fake.object('persistentvolumes', N(file)) !== undefined;

beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'lsp-deleter-'));
  mountDir = join(tmp, 'discovery');
  mkdirSync(mountDir);
  counter = join(tmp, 'runs');
  fake = new FakeKube();
  recorder = new FakeRecorder();
  metrics = newMetrics();
  procTable = new ProcTable({ now: () => now });
  now = Date.parse('2026-01-01T00:00:00Z');
  mounts = new Set();
});
afterEach(() => {
  rmSync(tmp, { recursive: true, force: true });
});

describe('Deleter selection', () => {
  it('cleans and deletes only Released + Delete PVs of this provisioner', async () => {
    const cases: Array<[string, Parameters<typeof makePV>[1]]> = [
      ['pending', { phase: 'Pending' }],
      ['available', { phase: 'Available' }],
      ['bound', { phase: 'Bound' }],
      ['released', { phase: 'Released' }],
      ['failed', { phase: 'Failed' }],
      ['retain', { phase: 'Released', policy: 'Retain' }],
      ['terminating', { phase: 'Released', deleting: true }],
      ['foreign', { phase: 'Released', provisioner: 'local-volume-provisioner-othernode' }],
    ];
    for (const [name, opts] of cases) {
      fake.put('persistentvolumes', makePV(name, opts));
      fsVolume(name);
    }
    const d = makeDeleter();
    await pass(d); // cleans
    expect(readdirSync(join(mountDir, 'released'))).toEqual([]);
    expect(pvExists('released')).toBe(true);
    await pass(d); // deletes
    expect(fake.objects('persistentvolumes').map((p) => p.metadata?.name).sort()).toEqual(
      cases.map(([n]) => n).filter((n) => n !== 'released').map((n) => N(n)).sort(),
    );
    for (const [name] of cases.filter(([n]) => n !== 'released')) {
      expect(readdirSync(join(mountDir, name)).sort(), name).toEqual(['.dot', 'sub']);
    }
    expect(recorder.events).toEqual([]);
    // a third pass changes nothing
    const before = fake.requests.length;
    await pass(d);
    expect(fake.requests.length).toBe(before);
    expect(await metricValue(metrics.deleteTotal, { mode: 'Filesystem', type: 'process' })).toBe(1);
  });

  it('does nothing without PVs', async () => {
    await pass(makeDeleter());
    expect(fake.requests).toEqual([]);
  });

  it('warns about Recycle and unknown policies at most once per backoff window', async () => {
    fake.put('persistentvolumes', makePV('recycle', { policy: 'Recycle' }));
    fake.put('persistentvolumes', makePV('bogus', { policy: 'Bogus' }));
    fsVolume('recycle');
    fsVolume('bogus');
    const d = makeDeleter();
    for (let i = 0; i < 5; i++) {
      await pass(d);
      now += 1000;
    }
    expect(recorder.events.map((e) => `${e.type} ${e.reason} ${e.message}`).sort()).toEqual([
      'Warning VolumeUnknownReclaimPolicy Volume has unrecognized PersistentVolumeReclaimPolicy',
      'Warning VolumeUnsupportedReclaimPolicy Volume has unsupported PersistentVolumeReclaimPolicy: Recycle',
    ]);
    now += 60_000;
    await pass(d);
    expect(recorder.events).toHaveLength(4);
    expect(fake.count('delete')).toBe(0);
    expect(readdirSync(join(mountDir, 'recycle'))).toHaveLength(2);
  });
});

describe('Deleter filesystem volumes', () => {
  it('removes the contents, keeps the directory, then deletes the PV with a UID precondition and counts it', async () => {
    const pv = fake.put('persistentvolumes', makePV('pv1', { capacity: '600Gi' }));
    const dir = fsVolume('pv1');
    const d = makeDeleter();
    await d.deletePVs();
    expect(procTable.isRunning(N('pv1')) || procTable.get(N('pv1'))?.state === 'Succeeded').toBe(true);
    await d.idle();
    expect(existsSync(dir)).toBe(true);
    expect(readdirSync(dir)).toEqual([]);
    expect(procTable.get(N('pv1'))).toMatchObject({ state: 'Succeeded', uid: pv.metadata?.uid });
    now += 4000;
    await pass(d);
    expect(pvExists('pv1')).toBe(false);
    expect(procTable.get(N('pv1'))).toBeUndefined();
    expect(procTable.stats()).toEqual({ running: 0, succeeded: 1, failed: 0 });
    expect(await metricValue(metrics.deleteTotal, { mode: 'Filesystem', type: 'process' })).toBe(1);
    const { values } = await metrics.deleteDuration.get();
    const sum = values.find((v) => v.metricName?.endsWith('_sum'));
    expect(sum?.labels).toMatchObject({ mode: 'Filesystem', type: 'process', capacity: '1000G', cleanup_command: 'bash' });
    expect(sum?.value).toBe(4);
    expect(await metricValue(metrics.apiserverRequests, { method: 'delete' })).toBe(1);
  });

  it('a vanished volume is never cleaned nor deleted: one VolumeMissing event and metric per backoff window', async () => {
    fake.put('persistentvolumes', makePV('gone'));
    fake.put('persistentvolumes', makePV('unmounted'));
    const dir = fsVolume('unmounted', false); // a plain directory: the disk is not mounted there any more
    const d = makeDeleter();
    for (let i = 0; i < 6; i++) {
      await pass(d);
      now += 5000;
    }
    expect(pvExists('gone')).toBe(true);
    expect(pvExists('unmounted')).toBe(true);
    expect(readdirSync(dir).sort()).toEqual(['.dot', 'sub']);
    expect(fake.requests).toEqual([]); // no delete, no job: nothing reached the API
    expect(recorder.reasons()).toEqual(['VolumeMissing', 'VolumeMissing']);
    const unmounted = recorder.events.find((e) => e.ref.name === N('unmounted'));
    expect(unmounted?.message).toContain(`path "${dir}" is not a valid mount point`);
    expect(await metricValue(metrics.volumeMissing, { class: 'sc1' })).toBe(2);
    expect(procTable.stats()).toEqual({ running: 0, succeeded: 0, failed: 0 });
    now += 60_000; // the window is over: one more warning each
    await pass(d);
    expect(recorder.reasons()).toHaveLength(4);
    expect(await metricValue(metrics.volumeMissing, { class: 'sc1' })).toBe(4);
  });

  it('refuses PVs whose path is not a direct child of the class hostDir', async () => {
    fake.put('persistentvolumes', makePV('nested', { path: '/mnt/disks/a/nested' }));
    fake.put('persistentvolumes', makePV('root', { path: '/mnt/disks' }));
    fake.put('persistentvolumes', makePV('outside', { path: '/etc/outside' }));
    fake.put('persistentvolumes', makePV('dots', { path: '/mnt/disks/../disks/..' }));
    const d = makeDeleter();
    await pass(d);
    await pass(d);
    expect(fake.requests).toEqual([]);
    expect(recorder.events.map((e) => e.ref.name).sort()).toEqual(['dots', 'nested', 'outside', 'root'].map((f) => N(f)).sort());
    for (const e of recorder.events) expect(e.message).toMatch(/refusing to clean: path .* is not a direct child of hostDir "\/mnt\/disks"/);
    expect(procTable.isEmpty()).toBe(true);
  });

  it('warns about an unknown storage class, and cleans with the last known settings of a removed one', async () => {
    fake.put('persistentvolumes', makePV('pv1', { cls: 'removed' }));
    fsVolume('pv1');
    const d1 = makeDeleter();
    await pass(d1);
    expect(recorder.events[0]?.message).toBe(
      `Error cleaning PV "${N('pv1', 'removed')}": Unknown storage class name removed: the class is not in the configuration and its last settings are not known on this node, so the volume is not cleaned and the PV is kept (add the class back to the configuration to have it cleaned, or clean the volume and delete the PV by hand)`,
    );
    expect(await metricValue(metrics.deleteFailedTotal, { mode: 'unknown', type: 'process' })).toBe(1);
    const cls = classConfig();
    const d2 = makeDeleter({ lookupClass: (n) => (n === 'removed' ? cls : undefined) });
    await pass(d2);
    await pass(d2);
    expect(pvExists('pv1')).toBe(false);
  });

  it('never lets a finished clean of an older PV with the same name stand for a new one (#174)', async () => {
    procTable.markRunning(N('pv1'), 'old-uid');
    procTable.markSucceeded(N('pv1'), 'old-uid');
    fake.put('persistentvolumes', makePV('pv1', { uid: 'new-uid' }));
    const dir = fsVolume('pv1');
    const d = makeDeleter();
    await pass(d);
    // The new PV is not deleted on the strength of the old result: it is cleaned first.
    expect(pvExists('pv1')).toBe(true);
    expect(readdirSync(dir)).toEqual([]);
    expect(procTable.get(N('pv1'))).toMatchObject({ uid: 'new-uid', state: 'Succeeded' });
    await pass(d);
    expect(pvExists('pv1')).toBe(false);
  });

  it('keeps the clean result and retries only the PV delete, with backoff, when the API fails', async () => {
    fake.put('persistentvolumes', makePV('pv1'));
    fsVolume('pv1');
    const d = makeDeleter();
    await pass(d);
    fake.failNext('delete', 'persistentvolumes', new KubeError(500, 'InternalError', 'etcd timeout'));
    await pass(d);
    expect(pvExists('pv1')).toBe(true);
    expect(recorder.events[0]).toMatchObject({ type: 'Warning', reason: 'VolumeFailedDelete' });
    expect(recorder.events[0]?.message).toMatch(new RegExp(`Error deleting PV "${N('pv1')}": etcd timeout; retrying in \\d+s`));
    expect(procTable.get(N('pv1'))?.state).toBe('Succeeded');
    await pass(d); // within the backoff: no request
    expect(fake.count('delete', 'persistentvolumes')).toBe(1);
    now += 11_000;
    await pass(d);
    expect(pvExists('pv1')).toBe(false);
    expect(procTable.stats().succeeded).toBe(1); // cleaned once only
    expect(await metricValue(metrics.deleteFailedTotal, { type: 'process' })).toBe(1);
  });

  it('a PV replaced meanwhile (UID precondition fails) is not deleted', async () => {
    fake.put('persistentvolumes', makePV('pv1', { uid: 'u1' }));
    fsVolume('pv1');
    const d = makeDeleter({
      pvs: { get: () => undefined, list: () => [makePV('pv1', { uid: 'u1' })] }, // the cache still has the old one
    });
    await pass(d);
    fake.remove('persistentvolumes', N('pv1'));
    fake.put('persistentvolumes', makePV('pv1', { uid: 'u2', phase: 'Available' }));
    await pass(d);
    expect(fake.object('persistentvolumes', N('pv1'))?.metadata?.uid).toBe('u2');
    expect(procTable.get(N('pv1'))).toBeUndefined();
    expect(await metricValue(metrics.deleteTotal)).toBe(0);
  });

  it('retries a failed clean after a backoff, never in a hot loop', async () => {
    fake.put('persistentvolumes', makePV('pv1'));
    fsVolume('pv1');
    let calls = 0;
    const d = makeDeleter({
      cleanFilesystem: () => {
        calls++;
        return Promise.resolve({ ok: false, error: 'EBUSY', durationMs: 1, skipped: [], removed: 0, stdout: [], stderr: [] });
      },
    });
    for (let i = 0; i < 10; i++) await pass(d); // same instant: one clean, one report
    expect(calls).toBe(1);
    expect(recorder.reasons()).toEqual(['VolumeFailedDelete']);
    expect(recorder.events[0]?.message).toMatch(new RegExp(`^Error cleaning PV "${N('pv1')}": EBUSY; retrying in 1\\ds$`));
    expect(await metricValue(metrics.cleanupRetries, { type: 'process' })).toBe(1);
    expect(await metricValue(metrics.deleteFailedTotal, { mode: 'Filesystem', type: 'process' })).toBe(1);
    now += 11_000;
    await pass(d);
    await pass(d);
    expect(calls).toBe(2);
    now += 11_000; // second backoff is ~20 s: not yet
    await pass(d);
    await pass(d);
    expect(calls).toBe(2);
    expect(pvExists('pv1')).toBe(true);
    expect(procTable.stats().failed).toBe(2);
  });

  it('limits parallel in-process cleans and never cleans one PV twice at once', async () => {
    for (const n of ['a', 'b', 'c']) {
      fake.put('persistentvolumes', makePV(n));
      fsVolume(n);
    }
    const releases: Array<() => void> = [];
    let active = 0;
    let maxActive = 0;
    const started: string[] = [];
    const d = makeDeleter({
      maxConcurrentCleans: 2,
      cleanFilesystem: (p) => {
        started.push(p);
        active++;
        maxActive = Math.max(maxActive, active);
        return new Promise((resolve) =>
          releases.push(() => {
            active--;
            resolve({ ok: true, durationMs: 1, skipped: [], removed: 0, stdout: [], stderr: [] });
          }),
        );
      },
    });
    await d.deletePVs();
    await d.deletePVs();
    await d.deletePVs();
    expect(started).toHaveLength(2);
    expect(procTable.stats().running).toBe(2);
    releases.splice(0).forEach((r) => r());
    await d.idle();
    await d.deletePVs(); // deletes two, starts the third
    expect(started).toHaveLength(3);
    releases.splice(0).forEach((r) => r());
    await d.idle();
    await pass(d);
    expect(fake.objects('persistentvolumes')).toEqual([]);
    expect(maxActive).toBe(2);
    expect(new Set(started).size).toBe(3);
  });

  it('waits for a running Job of the PV even when Jobs are switched off (mode switch)', async () => {
    fake.put('persistentvolumes', makePV('pv1'));
    fsVolume('pv1');
    let state: 'Running' | 'NotFound' = 'Running';
    const jobs: JobTracker = { status: () => ({ state }) };
    const d = makeDeleter({ jobController: jobs });
    await pass(d);
    expect(procTable.isEmpty()).toBe(true);
    expect(readdirSync(join(mountDir, 'pv1'))).toHaveLength(2);
    state = 'NotFound';
    await pass(d);
    expect(procTable.get(N('pv1'))?.state).toBe('Succeeded');
  });

  it('stop() prevents new cleans', async () => {
    fake.put('persistentvolumes', makePV('pv1'));
    fsVolume('pv1');
    const d = makeDeleter();
    await d.stop();
    await pass(d);
    expect(procTable.isEmpty()).toBe(true);
  });
});

describe('Deleter refuses PVs that may describe another volume', () => {
  /** A PV someone made by hand for /mnt/disks/<file> on this node: no provisioned-by annotation. */
  const manualPV = (name: string, path: string, phase = 'Bound') => {
    const pv = makeNamedPV(name, { path, phase, uid: `uid-${name}` });
    delete pv.metadata?.annotations;
    return pv;
  };
  const refusals = () => recorder.events.filter((e) => e.reason === 'VolumeCleanRefused');

  it('a forged PV with the path of a Bound volume is never cleaned nor deleted (path in use)', async () => {
    // The victim: a Bound PV of someone else on this node; the forged PV even has the name discovery would give.
    fake.put('persistentvolumes', manualPV('manual-vol', '/mnt/disks/vol'));
    const forged = fake.put('persistentvolumes', makePV('vol', { path: '/mnt/disks//vol/', uid: 'uid-forged' }));
    const dir = fsVolume('vol');
    const { calls, over } = counting();
    const d = makeDeleter(over);
    for (let i = 0; i < 4; i++) {
      await pass(d);
      now += 5000;
    }
    expect(calls).toEqual([]);
    expect(readdirSync(dir).sort()).toEqual(['.dot', 'sub']);
    expect(fake.requests.filter((r) => r.verb !== 'get' && r.verb !== 'list')).toEqual([]);
    expect(pvExists('vol')).toBe(true);
    expect(procTable.isEmpty()).toBe(true);
    expect(refusals()).toHaveLength(1); // once per warn window
    expect(refusals()[0]).toMatchObject({ type: 'Warning', ref: { name: forged.metadata?.name, uid: 'uid-forged' } });
    expect(refusals()[0]?.message).toBe(
      `Refusing to clean PV "${N('vol')}": its volume "/mnt/disks//vol/" is also used by PV "manual-vol". ` +
        'The volume is not cleaned and the PV is kept; delete the PV by hand if it was not made by this provisioner.',
    );
    expect(await metricValue(metrics.cleanRefused, { reason: 'path_in_use' })).toBe(1);
    expect(await metricValue(metrics.cleanRefused, { reason: 'name_mismatch' })).toBe(0);
    now += 60_000;
    await pass(d);
    expect(refusals()).toHaveLength(2);
    expect(await metricValue(metrics.cleanRefused, { reason: 'path_in_use' })).toBe(2);
  });

  it('a PV whose name is not the one this node gives to its volume is never cleaned (in-process or by a Job)', async () => {
    fake.put('persistentvolumes', makeNamedPV('forged', { path: '/mnt/disks/vol2' }));
    const dir = fsVolume('vol2');
    for (const useJobForCleaning of [false, true]) {
      const { calls, over } = counting();
      const jobs: JobTracker = { status: () => ({ state: 'NotFound' }) };
      await pass(makeDeleter({ ...over, config: config({ useJobForCleaning }), jobController: jobs }));
      expect(calls).toEqual([]);
    }
    expect(readdirSync(dir).sort()).toEqual(['.dot', 'sub']);
    expect(fake.requests).toEqual([]); // no Job, no delete
    expect(fake.object('persistentvolumes', 'forged')).toBeDefined();
    expect(refusals().map((e) => e.message)).toEqual(
      Array(2).fill(
        `Refusing to clean PV "forged": its name is not "${N('vol2')}", the name this node gives to volume "vol2" of class "sc1". ` +
          'The volume is not cleaned and the PV is kept; delete the PV by hand if it was not made by this provisioner.',
      ),
    );
    expect(await metricValue(metrics.cleanRefused, { reason: 'name_mismatch' })).toBe(2);
  });

  it('sees the victim in the node-wide store only (a stub is enough), and through another class with the same mountDir', async () => {
    const cfg = testConfig({ sc1: classConfig(), alias: classConfig({ hostDir: '/mnt/alias' }) });
    const ours = makePV('vol3', { uid: 'uid-forged' });
    const stub = { metadata: { name: 'hand-made', uid: 'uid-hand' }, spec: { storageClassName: 'alias', local: { path: '/mnt/alias/vol3' } } };
    fake.put('persistentvolumes', ours);
    const dir = fsVolume('vol3');
    const { calls, over } = counting();
    const d = makeDeleter({ ...over, config: cfg, lookupClass: (n) => cfg.storageClassMap[n], allPvs: { get: () => undefined, list: () => [ours, stub] } });
    await pass(d);
    expect(calls).toEqual([]);
    expect(readdirSync(dir)).toHaveLength(2);
    expect(refusals()[0]?.message).toContain('its volume "/mnt/disks/vol3" is also used by PV "hand-made"');
  });

  it('with --pv-node-label the node PV informer still sees an unlabelled hand-made victim: a labelled forged PV is refused', async () => {
    const labelled: V1Node = { metadata: { name: NODE, uid: 'node-uid', labels: { 'kubernetes.io/hostname': NODE } } };
    const affinity = { required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [NODE] }] }] } };
    const victim = manualPV('manual-vol5', '/mnt/disks/vol5');
    victim.spec = { ...victim.spec, nodeAffinity: affinity };
    fake.put('persistentvolumes', victim);
    const forged = makePV('vol5', { uid: 'uid-forged5' });
    forged.metadata = { ...forged.metadata, labels: { [PV_NODE_LABEL]: NODE } };
    forged.spec = { ...forged.spec, nodeAffinity: affinity };
    fake.put('persistentvolumes', forged);
    const dir = fsVolume('vol5');
    const informer = createNodePVInformer(fake, labelled, { nodeLabel: true, logger: silentLogger });
    informer.start();
    try {
      await informer.waitForSync();
      const { calls, over } = counting();
      await pass(makeDeleter({ ...over, node: labelled, pvs: informer, allPvs: informer }));
      expect(calls).toEqual([]);
      expect(readdirSync(dir).sort()).toEqual(['.dot', 'sub']);
      expect(pvExists('vol5')).toBe(true);
      expect(refusals()[0]?.message).toContain('is also used by PV "manual-vol5"');
    } finally {
      await informer.stop();
    }
  });

  it('a legitimate PV is still cleaned and deleted next to other PVs of this node', async () => {
    fake.put('persistentvolumes', manualPV('manual-other', '/mnt/disks/other'));
    fake.put('persistentvolumes', makePV('vol4'));
    const dir = fsVolume('vol4');
    const { calls, over } = counting();
    const d = makeDeleter(over);
    await pass(d);
    await pass(d);
    expect(calls).toEqual([dir]);
    expect(pvExists('vol4')).toBe(false);
    expect(refusals()).toEqual([]);
    expect(await metricValue(metrics.cleanRefused)).toBe(0);
  });
});

describe.skipIf(!isRoot)('Deleter block volumes', () => {
  it('runs the block cleaner with LOCAL_PV_BLKDEVICE, then deletes the PV', async () => {
    fake.put('persistentvolumes', makePV('blk', { capacity: '1Ti' }));
    const dev = blockVolume('blk');
    const d = makeDeleter();
    await pass(d);
    expect(readFileSync(counter, 'utf8')).toBe(`run ${dev}\n`);
    expect(recorder.events).toEqual([
      expect.objectContaining({ type: 'Normal', reason: 'VolumeDelete', message: `Starting cleanup of Block PV "${N('blk')}", this may take a while` }),
    ]);
    await pass(d);
    expect(pvExists('blk')).toBe(false);
    expect(runs()).toBe(1);
    expect(await metricValue(metrics.deleteTotal, { mode: 'Block', type: 'process' })).toBe(1);
  });

  it('a cleaner exiting non-zero fails the clean with its output, and it is retried after the backoff', async () => {
    fake.put('persistentvolumes', makePV('blk'));
    blockVolume('blk');
    const cfg = config({}, classConfig({ blockCleanerCommand: ['bash', '-c', `echo run >> ${counter}; echo "disk on fire" >&2; exit 7`] }));
    const d = makeDeleter({ config: cfg });
    await pass(d);
    await pass(d);
    await pass(d);
    expect(runs()).toBe(1);
    expect(pvExists('blk')).toBe(true);
    const failed = recorder.events.filter((e) => e.reason === 'VolumeFailedDelete');
    expect(failed).toHaveLength(1);
    expect(failed[0]?.message).toContain(`Error cleaning PV "${N('blk')}": block cleaner command "bash" exited with code 7: disk on fire; retrying in`);
    now += 12_000;
    await pass(d);
    expect(runs()).toBe(2);
  });

  it('a cleaner command that does not exist is a clear failure', async () => {
    fake.put('persistentvolumes', makePV('blk'));
    blockVolume('blk');
    const d = makeDeleter({ config: config({}, classConfig({ blockCleanerCommand: ['/scripts/does-not-exist.sh'] })) });
    await pass(d);
    await pass(d);
    expect(recorder.events.at(-1)?.message).toMatch(/"\/scripts\/does-not-exist.sh" was not found/);
    expect(pvExists('blk')).toBe(true);
  });

  it('a directory where a Block PV had its device is treated as missing', async () => {
    fake.put('persistentvolumes', { ...makePV('blk'), spec: { ...makePV('blk').spec, volumeMode: 'Block' } });
    fsVolume('blk');
    const d = makeDeleter();
    await pass(d);
    expect(recorder.reasons()).toEqual(['VolumeMissing']);
    expect(readdirSync(join(mountDir, 'blk'))).toHaveLength(2);
  });
});

describe('Deleter with cleanup Jobs', () => {
  it('creates one cleanup Job per PV (Filesystem via fsclean.sh) and waits for it', async () => {
    fake.put('persistentvolumes', makePV('pv1'));
    const dir = fsVolume('pv1');
    const jobs: JobTracker = { status: (n) => ({ state: fake.object('jobs', `${NS}/cleanup-${n}`) ? 'Running' : 'NotFound' }) };
    const d = makeDeleter({ config: config({ useJobForCleaning: true }), jobController: jobs, cleanTimeoutMs: 5 * 60_000 });
    await pass(d);
    await pass(d);
    expect(fake.count('create', 'jobs')).toBe(1);
    const job = fake.object('jobs', `${NS}/cleanup-${N('pv1')}`);
    expect(job?.spec?.activeDeadlineSeconds).toBe(300); // --clean-timeout
    const c = job?.spec?.template.spec?.containers[0];
    expect(c?.command).toEqual(['/scripts/fsclean.sh']);
    expect(c?.env).toEqual([{ name: 'LOCAL_PV_FILESYSTEM', value: dir }]);
    expect(c?.image).toBe('provisioner:test');
    expect(job?.metadata?.labels?.['pvuuid']).toBe('uid-pv1');
    expect(job?.metadata?.annotations?.['start-time']).toBe('2026-01-01T00:00:00Z');
    expect(readdirSync(dir)).toHaveLength(2); // nothing cleaned in-process
    expect(procTable.isEmpty()).toBe(true);
    expect(pvExists('pv1')).toBe(true);
  });

  it('a failed Job create is reported and retried after the backoff', async () => {
    fake.put('persistentvolumes', makePV('pv1'));
    fsVolume('pv1');
    fake.failNext('create', 'jobs', new KubeError(403, 'Forbidden', 'jobs.batch is forbidden'));
    const jobs: JobTracker = { status: (n) => ({ state: fake.object('jobs', `${NS}/cleanup-${n}`) ? 'Running' : 'NotFound' }) };
    const d = makeDeleter({ config: config({ useJobForCleaning: true }), jobController: jobs });
    await pass(d);
    await pass(d);
    expect(fake.count('create', 'jobs')).toBe(1);
    expect(recorder.events[0]?.message).toMatch(/cannot create cleanup job: jobs.batch is forbidden/);
    expect(await metricValue(metrics.deleteFailedTotal, { type: 'job' })).toBe(1);
    now += 12_000;
    await pass(d);
    expect(fake.count('create', 'jobs')).toBe(2);
    expect(fake.object('jobs', `${NS}/cleanup-${N('pv1')}`)).toBeDefined();
  });

  it('waits while the job controller holds the PV in a failure backoff', async () => {
    fake.put('persistentvolumes', makePV('pv1'));
    fsVolume('pv1');
    const d = makeDeleter({ config: config({ useJobForCleaning: true }), jobController: { status: () => ({ state: 'Backoff', retryInMs: 5000 }) } });
    await pass(d);
    expect(fake.requests).toEqual([]);
  });
});

describe('directChild', () => {
  it('accepts only a single component below the directory', () => {
    expect(directChild('/mnt/disks', '/mnt/disks/vol1')).toBe('vol1');
    expect(directChild('/mnt/disks/', '/mnt/disks//vol1/')).toBe('vol1');
    expect(directChild('/mnt/disks', '/mnt/disks/a/b')).toBeUndefined();
    expect(directChild('/mnt/disks', '/mnt/disks')).toBeUndefined();
    expect(directChild('/mnt/disks', '/mnt/disks/..')).toBeUndefined();
    expect(directChild('/mnt/disks', '/mnt/disks/../etc')).toBeUndefined();
    expect(directChild('/mnt/disks', '/mnt/disksX/vol')).toBeUndefined();
    expect(directChild('/mnt/disks', 'vol1')).toBeUndefined();
  });
});

describe('Deleter refusal checks of guard.ts (issue 17)', () => {
  const refusals = () => recorder.events.filter((e) => e.reason === 'VolumeCleanRefused');
  /** A Released PV whose claimRef someone patched to a random UID: the binder released it, its PVC still uses it. */
  const patchedClaimRef = (file: string) => {
    const pv = makePV(file);
    pv.spec = { ...pv.spec, claimRef: { kind: 'PersistentVolumeClaim', namespace: 'team', name: `claim-${file}`, uid: 'random-uid' } };
    return pv;
  };
  const putClaim = (file: string, over: { volumeName?: string; uid?: string; phase?: string; name?: string } = {}) =>
    fake.put('persistentvolumeclaims', {
      metadata: { namespace: 'team', name: over.name ?? `claim-${file}`, uid: over.uid ?? `pvc-uid-${file}` },
      spec: { volumeName: over.volumeName ?? N(file) },
      status: { phase: over.phase ?? 'Bound' },
    });
  const nonReads = () => fake.requests.filter((r) => r.verb !== 'get' && r.verb !== 'list');

  it('claim_still_exists: a patched claimRef on a PV whose PVC still uses it is never cleaned (in-process), Events on the PV and the PVC', async () => {
    fake.put('persistentvolumes', patchedClaimRef('vol'));
    putClaim('vol');
    const dir = fsVolume('vol');
    const { calls, over } = counting();
    const d = makeDeleter(over);
    await pass(d);
    await pass(d);
    expect(calls).toEqual([]);
    expect(readdirSync(dir).sort()).toEqual(['.dot', 'sub']);
    expect(pvExists('vol')).toBe(true);
    expect(nonReads()).toEqual([]);
    expect(refusals().map((e) => e.ref.kind)).toEqual(['PersistentVolume', 'PersistentVolumeClaim']);
    expect(refusals()[1]?.ref).toMatchObject({ namespace: 'team', name: 'claim-vol', uid: 'pvc-uid-vol' });
    expect(refusals()[0]?.message).toContain(`PVC "team/claim-vol" (UID "pvc-uid-vol", phase Bound) still names it in spec.volumeName while its claimRef names UID "random-uid"`);
    expect(await metricValue(metrics.cleanRefused, { reason: 'claim_still_exists' })).toBe(1);
  });

  it('claim_still_exists: no cleanup Job is created for such a PV', async () => {
    fake.put('persistentvolumes', patchedClaimRef('vol'));
    putClaim('vol');
    fsVolume('vol');
    const jobs: JobTracker = { status: () => ({ state: 'NotFound' }) };
    await pass(makeDeleter({ config: config({ useJobForCleaning: true }), jobController: jobs }));
    expect(fake.count('create', 'jobs')).toBe(0);
    expect(refusals()).toHaveLength(2);
    expect(await metricValue(metrics.cleanRefused, { reason: 'claim_still_exists' })).toBe(1);
  });

  it('claim lookup: the claimRef PVC is read, then every PVC is listed page by page; a PVC found only by the list refuses too', async () => {
    fake.put('persistentvolumes', patchedClaimRef('vol'));
    for (let i = 0; i < 7; i++) putClaim(`other${i}`, { volumeName: `elsewhere-${i}` });
    putClaim('vol', { name: 'renamed', uid: 'pvc-uid-renamed' }); // not the claimRef's name: found by the list only
    fsVolume('vol');
    const { calls, over } = counting();
    const guard = new CleanGuard(testEnv({ config: config(), node, kube: fake, recorder, metrics, now: () => now }), {
      allPvs: liveStore(fake),
      readMountPoints: () => Promise.resolve(mounts),
      claimPageSize: 3,
    });
    await pass(makeDeleter({ ...over, guard }));
    expect(calls).toEqual([]);
    expect(fake.requests.map((r) => `${r.verb} ${r.kind}`)).toEqual([
      'get persistentvolumeclaims', // claim-vol: 404
      'list persistentvolumeclaims',
      'list persistentvolumeclaims',
      'list persistentvolumeclaims',
    ]);
    expect(refusals()[1]?.ref).toMatchObject({ name: 'renamed' });
  });

  it('claim lookup: a PVC that does not name this PV (recreated with the same name, bound elsewhere) does not block the clean', async () => {
    fake.put('persistentvolumes', patchedClaimRef('vol'));
    putClaim('vol', { volumeName: '', phase: 'Pending', uid: 'new-uid' });
    fsVolume('vol');
    const { calls, over } = counting();
    const d = makeDeleter(over);
    await pass(d);
    await pass(d);
    expect(calls).toEqual([join(mountDir, 'vol')]);
    expect(pvExists('vol')).toBe(false);
    expect(refusals()).toEqual([]);
    // one lookup before the clean, one before the delete: a get and one list page each
    expect(fake.count('get', 'persistentvolumeclaims')).toBe(2);
    expect(fake.count('list', 'persistentvolumeclaims')).toBe(2);
  });

  it('claim lookup: an API error means no clean now, and a retry after the backoff', async () => {
    fake.put('persistentvolumes', makePV('vol'));
    fsVolume('vol');
    fake.failNext('list', 'persistentvolumeclaims', new KubeError(500, 'InternalError', 'etcd is sad'));
    const { calls, over } = counting();
    const d = makeDeleter(over);
    await pass(d);
    await pass(d);
    expect(calls).toEqual([]);
    expect(pvExists('vol')).toBe(true);
    expect(refusals()).toEqual([]);
    now += 12_000;
    await pass(d);
    await pass(d);
    expect(calls).toHaveLength(1);
    expect(pvExists('vol')).toBe(false);
  });

  it('in-process: the checks run again right before the PV delete; a PVC that appeared meanwhile keeps the PV', async () => {
    fake.put('persistentvolumes', patchedClaimRef('vol'));
    fsVolume('vol');
    const { calls, over } = counting();
    const d = makeDeleter(over);
    await pass(d); // cleaned: no PVC names it yet
    expect(calls).toHaveLength(1);
    putClaim('vol');
    await pass(d);
    expect(pvExists('vol')).toBe(true);
    expect(fake.count('delete', 'persistentvolumes')).toBe(0);
    expect(await metricValue(metrics.cleanRefused, { reason: 'claim_still_exists' })).toBe(1);
    now += 5000;
    await pass(d); // held by the retry backoff: no second lookup yet
    expect(fake.count('get', 'persistentvolumeclaims')).toBe(2);
  });

  it('in-process: a hand-made PV for the same path that appears after the clean keeps the PV (path_in_use before the delete)', async () => {
    fake.put('persistentvolumes', makePV('vol'));
    fsVolume('vol');
    const { calls, over } = counting();
    const d = makeDeleter(over);
    await pass(d);
    expect(calls).toHaveLength(1);
    const manual = makeNamedPV('manual-vol', { path: '/mnt/disks/vol', phase: 'Bound', uid: 'uid-manual' });
    delete manual.metadata?.annotations;
    fake.put('persistentvolumes', manual);
    await pass(d);
    expect(pvExists('vol')).toBe(true);
    expect(fake.count('delete', 'persistentvolumes')).toBe(0);
    expect(await metricValue(metrics.cleanRefused, { reason: 'path_in_use' })).toBe(1);
  });

  it('a refusal withdraws the pending or running cleanup Job of that PV (tracker.withdraw)', async () => {
    fake.put('persistentvolumes', makeNamedPV('forged', { path: '/mnt/disks/vol' }));
    fsVolume('vol');
    const withdrawn: string[] = [];
    const jobs: JobTracker = {
      status: () => ({ state: 'Running' }),
      withdraw: (name, uid) => {
        withdrawn.push(`${name}/${uid}`);
        return Promise.resolve(true);
      },
    };
    const d = makeDeleter({ config: config({ useJobForCleaning: true }), jobController: jobs });
    await pass(d);
    await pass(d);
    expect(withdrawn).toEqual(['forged/uid-forged', 'forged/uid-forged']); // every pass, not only once per warn window
    expect(refusals()).toHaveLength(1);
  });
});

describe.skipIf(!isRoot)('Deleter identity_mismatch (issue 17, point 3c)', () => {
  const withIdentity = (file: string, identity: string, over: Parameters<typeof makePV>[1] = {}) => {
    const pv = makePV(file, over);
    pv.metadata = { ...pv.metadata, annotations: { ...pv.metadata?.annotations, [ANN_VOLUME_IDENTITY]: identity } };
    return pv;
  };
  const identityRefusals = () => metricValue(metrics.cleanRefused, { reason: 'identity_mismatch' });

  it('a Filesystem PV discovered as a mount point whose path now resolves to a block device is refused (the block cleaner never runs)', async () => {
    fake.put('persistentvolumes', withIdentity('vol', 'mount'));
    blockVolume('vol');
    await pass(makeDeleter());
    await pass(makeDeleter());
    expect(runs()).toBe(0);
    expect(pvExists('vol')).toBe(true);
    expect(await identityRefusals()).toBeGreaterThanOrEqual(1);
    expect(recorder.events[0]?.message).toContain(`it was discovered as "mount" but "${join(mountDir, 'vol')}" now resolves to block device 7:250`);
  });

  it('a Block PV whose path now resolves to another device number is refused', async () => {
    fake.put('persistentvolumes', withIdentity('blk', 'block:7:251'));
    blockVolume('blk'); // 7:250
    await pass(makeDeleter());
    expect(runs()).toBe(0);
    expect(pvExists('blk')).toBe(true);
    expect(await identityRefusals()).toBe(1);
  });

  it('a Block PV whose path is now a directory is refused; a mount PV whose directory is no longer a mount point is missing, not refused', async () => {
    fake.put('persistentvolumes', withIdentity('blk', 'block:7:250'));
    fake.put('persistentvolumes', withIdentity('plain', 'mount'));
    const blkDir = fsVolume('blk');
    const dir = fsVolume('plain', false);
    await pass(makeDeleter());
    expect(readdirSync(blkDir).length).toBeGreaterThan(0);
    expect(readdirSync(dir)).toHaveLength(2);
    expect(pvExists('blk')).toBe(true);
    expect(pvExists('plain')).toBe(true);
    expect(await identityRefusals()).toBe(1);
    // The unmounted volume vanished (the disk may come back): VolumeMissing, as for a PV without an identity.
    expect(await metricValue(metrics.volumeMissing, { class: 'sc1' })).toBe(1);
  });

  it('the recorded identity still there: cleaned as before; a PV without the annotation keeps the earlier checks only', async () => {
    fake.put('persistentvolumes', withIdentity('blk', 'block:7:250'));
    blockVolume('blk');
    fake.put('persistentvolumes', makePV('legacy')); // Go provisioner's PV: no identity recorded
    blockVolume('legacy');
    const d = makeDeleter();
    await pass(d);
    await pass(d);
    expect(runs()).toBe(2);
    expect(pvExists('blk')).toBe(false);
    expect(await identityRefusals()).toBe(0);
  });
});

// Issue 18, 13: an Available PV of a class removed from the config is not offered any more.
describe('Deleter: Available PVs of a removed storage class', () => {
  /** The class 'gone' is not in the config; its last settings are remembered unless `known` is false. */
  const removedDeleter = (known = true): Deleter => {
    const gone = classConfig();
    return makeDeleter({ lookupClass: (n) => (n === 'sc1' ? classConfig() : known && n === 'gone' ? gone : undefined) });
  };
  const goneName = (file: string): string => N(file, 'gone');
  const exists = (name: string): boolean => fake.object('persistentvolumes', name) !== undefined;

  it('deletes an Available PV of a removed class, with UID and resourceVersion preconditions, and leaves its volume alone', async () => {
    const pv = fake.put('persistentvolumes', makePV('a', { cls: 'gone', phase: 'Available' }));
    const dir = fsVolume('a');
    const d = removedDeleter();
    await pass(d);
    expect(exists(goneName('a'))).toBe(false);
    expect(fake.requests.filter((r) => r.kind === 'persistentvolumes').map((r) => r.verb)).toEqual(['get', 'delete']);
    expect(readdirSync(dir).sort()).toEqual(['.dot', 'sub']); // no clean: the PV held no claim's data
    expect(recorder.events).toEqual([]);
    expect(pv.metadata?.resourceVersion).toBeTruthy();
  });

  it('never deletes a PV of a configured class, of a class it never knew, a pre-bound one, a Bound or a Released one', async () => {
    fake.put('persistentvolumes', makePV('kept', { phase: 'Available' })); // sc1: configured
    fake.put('persistentvolumes', makePV('bound', { cls: 'gone', phase: 'Bound' }));
    fake.put('persistentvolumes', makePV('pending', { cls: 'gone', phase: 'Pending' }));
    fake.put('persistentvolumes', makePV('never', { cls: 'never-known', phase: 'Available' }));
    const prebound = makePV('prebound', { cls: 'gone', phase: 'Available' });
    prebound.spec!.claimRef = { namespace: 'ns', name: 'claim' };
    fake.put('persistentvolumes', prebound);
    const d = removedDeleter();
    await pass(d);
    await pass(d);
    expect(fake.objects('persistentvolumes').map((p) => p.metadata?.name).sort()).toEqual(
      [N('kept'), goneName('bound'), goneName('pending'), N('never', 'never-known'), goneName('prebound')].sort(),
    );
    expect(fake.requests.filter((r) => r.verb === 'delete')).toEqual([]);
  });

  it('keeps an Available PV of a removed class whose settings are not known', async () => {
    fake.put('persistentvolumes', makePV('a', { cls: 'gone', phase: 'Available' }));
    await pass(removedDeleter(false));
    expect(exists(goneName('a'))).toBe(true);
  });

  it('does not delete the PV when a claim bound it since the informer saw it (phase re-read)', async () => {
    const pv = fake.put('persistentvolumes', makePV('a', { cls: 'gone', phase: 'Available' }));
    const stale = structuredClone(pv);
    // The API has moved on: bound to a claim. The deleter's store still holds the Available copy.
    fake.put('persistentvolumes', { ...pv, spec: { ...pv.spec, claimRef: { namespace: 'ns', name: 'c', uid: 'c-uid' } }, status: { phase: 'Bound' } });
    const d = makeDeleter({
      lookupClass: (n) => (n === 'gone' || n === 'sc1' ? classConfig() : undefined),
      pvs: { get: () => stale, list: () => [stale] },
    });
    await pass(d);
    expect(exists(goneName('a'))).toBe(true);
    expect(fake.object('persistentvolumes', goneName('a'))?.status?.phase).toBe('Bound');
    expect(fake.requests.filter((r) => r.verb === 'delete')).toEqual([]);
  });

  it('does not delete the PV when it changes between the re-read and the delete (resourceVersion precondition)', async () => {
    fake.put('persistentvolumes', makePV('a', { cls: 'gone', phase: 'Available' }));
    const get = fake.getPersistentVolume.bind(fake);
    fake.getPersistentVolume = async (name: string) => {
      const seen = await get(name);
      // Bound right after the deleter read it.
      fake.put('persistentvolumes', { ...seen, spec: { ...seen.spec, claimRef: { namespace: 'ns', name: 'c', uid: 'c-uid' } }, status: { phase: 'Bound' } });
      return seen;
    };
    await pass(removedDeleter());
    expect(fake.requests.filter((r) => r.verb === 'delete')).toHaveLength(1); // tried, refused by the API server
    expect(fake.object('persistentvolumes', goneName('a'))?.status?.phase).toBe('Bound');
  });
});
