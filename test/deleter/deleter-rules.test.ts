// The deleter's refusal rules, each asserted on its own (mutation testing,
// docs/cleanup.md "Mutation testing"). deleter.test.ts has the end-to-end
// cases with the real cleaners; here the cleaners only count their calls.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import type { ClassConfig } from '../../src/config/types.ts';
import type { CleanResult } from '../../src/deleter/clean-result.ts';
import { Deleter, directChild, type DeleterOptions } from '../../src/deleter/deleter.ts';
import { ProcTable } from '../../src/deleter/proctable.ts';
import type { Store } from '../../src/kube/informer.ts';
import { KubeError } from '../../src/kube/port.ts';
import type { Metrics } from '../../src/metrics/metrics.ts';
import { generatePVName } from '../../src/volume/naming.ts';
import { testConfig } from '../support/config.ts';
import { testEnv } from '../support/env.ts';
import { FakeKube } from '../support/fake-kube.ts';
import { FakeRecorder, liveStore, makePV, metricValue, newMetrics, NODE, NS } from './helpers.ts';

let tmp: string;
let mountDir: string;
let fake: FakeKube;
let recorder: FakeRecorder;
let metrics: Metrics;
let procTable: ProcTable;
let mounts: Set<string>;
let cleaned: string[];
/** Resolves the in-process cleans started so far (when `hold` is on). */
let release: () => void;
let hold: Promise<void> | undefined;

const cls = (): ClassConfig => ({ hostDir: '/mnt/disks', mountDir, blockCleanerCommand: ['/bin/true'], volumeMode: 'Filesystem', namePattern: '*' });
const ok: CleanResult = { ok: true, durationMs: 1, skipped: [], removed: 0, stdout: [], stderr: [] };

beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'lsp-deleter-rules-'));
  mountDir = join(tmp, 'discovery');
  mkdirSync(mountDir);
  fake = new FakeKube();
  recorder = new FakeRecorder();
  metrics = newMetrics();
  procTable = new ProcTable();
  mounts = new Set();
  cleaned = [];
  hold = undefined;
});
afterEach(() => {
  release?.();
  rmSync(tmp, { recursive: true, force: true });
});

/** A mounted filesystem volume <mountDir>/<name>. */
function volume(name: string): string {
  const p = join(mountDir, name);
  mkdirSync(p);
  mounts.add(p);
  return p;
}

/** A Released PV of ours for /mnt/disks/<file>, named as discovery names it. */
const ours = (file: string, opts: Parameters<typeof makePV>[1] = {}): V1PersistentVolume =>
  makePV(generatePVName(file, NODE, opts.cls ?? 'sc1'), { path: `/mnt/disks/${file}`, uid: `uid-${file}`, ...opts });

const storeOf = (pvs: V1PersistentVolume[]): Store<V1PersistentVolume> => ({
  get: (k) => pvs.find((p) => p.metadata?.name === k),
  list: () => pvs,
});

function deleter(over: Partial<DeleterOptions> = {}, useJobForCleaning = false): Deleter {
  const env = testEnv({
    config: testConfig({ sc1: cls() }, { useJobForCleaning }),
    node: { metadata: { name: NODE, uid: 'node-uid' } },
    namespace: NS,
    kube: fake,
    recorder,
    metrics,
  });
  return new Deleter(env, {
    pvs: liveStore(fake),
    procTable,
    readMountPoints: () => Promise.resolve(mounts),
    cleanFilesystem: async (p) => {
      cleaned.push(p);
      if (hold) await hold;
      return ok;
    },
    cleanBlockDevice: (o) => {
      cleaned.push(o.devicePath);
      return Promise.resolve(ok);
    },
    ...over,
  });
}

async function pass(d: Deleter): Promise<void> {
  await d.deletePVs();
  await d.idle();
}

const reasons = (): string[] => recorder.events.map((e) => e.reason);

describe('Deleter: what a PV must be before anything is cleaned', () => {
  it('a Released PV that is not a local volume is never cleaned: one VolumeFailedDelete Event and metric', async () => {
    const pv = ours('vol');
    delete pv.spec?.local;
    pv.spec!.hostPath = { path: '/mnt/disks/vol' };
    fake.put('persistentvolumes', pv);
    volume('vol');
    await pass(deleter());
    expect(cleaned).toEqual([]);
    expect(recorder.events.map((e) => [e.reason, e.message])).toEqual([
      ['VolumeFailedDelete', `Error cleaning PV ${JSON.stringify(pv.metadata?.name)}: Unsupported volume type: only local volumes are cleaned`],
    ]);
    expect(await metricValue(metrics.deleteFailedTotal, { mode: 'unknown', type: 'process' })).toBe(1);
    expect(fake.count('delete')).toBe(0);
  });
});

describe('Deleter: what is at the path must be the volume', () => {
  it('a regular file at the path is never cleaned, even when the mount table lists it (a file bind mount): VolumeMissing', async () => {
    const pv = ours('vol');
    fake.put('persistentvolumes', pv);
    const p = join(mountDir, 'vol');
    writeFileSync(p, 'not a volume');
    mounts.add(p);
    await pass(deleter());
    expect(cleaned).toEqual([]);
    expect(reasons()).toEqual(['VolumeMissing']);
    expect(recorder.events[0]?.message).toContain(`path ${JSON.stringify(p)} is neither a directory nor a block device`);
    expect(fake.count('delete')).toBe(0);
  });
});

describe('Deleter: deleting the PV after its clean', () => {
  it('a PV already gone when it is deleted is not a failure: no Warning, the clean result is consumed', async () => {
    const pv = ours('vol');
    fake.put('persistentvolumes', pv);
    volume('vol');
    const d = deleter();
    await pass(d); // cleans
    expect(procTable.get(pv.metadata!.name!)?.state).toBe('Succeeded');
    fake.failNext('delete', 'persistentvolumes', new KubeError(404, 'NotFound', 'persistentvolumes "x" not found'));
    await pass(d); // deletes: 404
    expect(recorder.events).toEqual([]);
    expect(procTable.isEmpty()).toBe(true);
    expect(await metricValue(metrics.deleteFailedTotal)).toBe(0);
    expect(await metricValue(metrics.deleteTotal, { mode: 'Filesystem', type: 'process' })).toBe(1);
  });
});

describe('Deleter: the path-in-use check sees every PV of the node', () => {
  it('a PV of a class this node does not know, on the same host path, makes a forged PV of ours refused', async () => {
    // The victim has no class of ours: only its host path can match (no <mountDir>/<name> key).
    const victim = makePV('hand-made', { path: '/mnt/disks/vol/', cls: 'manual', phase: 'Bound', uid: 'uid-victim' });
    const forged = ours('vol');
    fake.put('persistentvolumes', forged);
    volume('vol');
    await pass(deleter({ allPvs: storeOf([victim, forged]) }));
    expect(cleaned).toEqual([]);
    expect(reasons()).toEqual(['VolumeCleanRefused']);
    expect(recorder.events[0]?.message).toContain('is also used by PV "hand-made"');
    expect(await metricValue(metrics.cleanRefused, { reason: 'path_in_use' })).toBe(1);
  });

  it('PVs that are not local volumes, or not direct children of a hostDir, do not stop the check for the others', async () => {
    const notLocal = makePV('csi-pv', { uid: 'uid-csi' });
    delete notLocal.spec?.local;
    const deep = makePV('deep', { path: '/mnt/disks/a/b', uid: 'uid-deep' });
    const victim = makePV('hand-made', { path: '/mnt/disks/vol', cls: 'manual', phase: 'Bound', uid: 'uid-victim' });
    const forged = ours('vol');
    const legit = ours('free');
    fake.put('persistentvolumes', forged);
    fake.put('persistentvolumes', legit);
    volume('vol');
    const free = volume('free');
    await pass(deleter({ allPvs: storeOf([notLocal, deep, victim, forged, legit]) }));
    expect(cleaned).toEqual([free]);
    expect(reasons()).toEqual(['VolumeCleanRefused']);
    expect(recorder.events[0]?.ref.name).toBe(forged.metadata?.name);
  });
});

describe('Deleter: one clean of a path at a time', () => {
  it('a running in-process clean blocks a cleanup Job for the same PV when useJobForCleaning is switched on', async () => {
    const pv = ours('vol');
    fake.put('persistentvolumes', pv);
    volume('vol');
    hold = new Promise<void>((r) => (release = r));
    const first = deleter();
    await first.deletePVs(); // starts the in-process clean, which waits on `hold`
    expect(procTable.isRunning(pv.metadata!.name!)).toBe(true);
    // The next generation: Jobs on, no Job of this PV yet.
    const next = deleter({ jobController: { status: () => ({ state: 'NotFound' }) } }, true);
    await next.deletePVs();
    expect(fake.count('create', 'jobs')).toBe(0);
    expect(cleaned).toHaveLength(1);
    release();
    await first.idle();
  });
});

describe('directChild: the one path rule of every clean', () => {
  it('relative paths are never a child of anything (a PV path must be absolute)', () => {
    expect(directChild('mnt', 'mnt/x')).toBeUndefined();
    expect(directChild('.', 'x')).toBeUndefined();
    expect(directChild('/mnt', 'mnt/x')).toBeUndefined();
  });

  it('the root directory is no child of itself', () => {
    expect(directChild('/', '/')).toBeUndefined();
    expect(directChild('/', '//')).toBeUndefined();
    expect(directChild('/', '/x')).toBe('x');
  });
});

describe('Deleter: a refusal withdraws the cleanup Job of the refused PV (issue 17, point 1)', () => {
  /** A forged PV of ours for the volume of a Bound hand-made PV: refused (path_in_use) on every pass. */
  function refusedForged(): V1PersistentVolume {
    const victim = makePV('hand-made', { path: '/mnt/disks/vol', cls: 'manual', phase: 'Bound', uid: 'uid-victim' });
    const forged = ours('vol');
    fake.put('persistentvolumes', victim);
    fake.put('persistentvolumes', forged);
    volume('vol');
    return forged;
  }

  it('asks the job controller to withdraw the Job of exactly that PV name and UID, on every pass, and cleans nothing', async () => {
    const forged = refusedForged();
    const withdrawn: Array<[string, string]> = [];
    const jobController = {
      status: () => ({ state: 'NotFound' as const }),
      withdraw: (name: string, uid: string) => {
        withdrawn.push([name, uid]);
        return Promise.resolve(true);
      },
    };
    const d = deleter({ jobController }, true);
    await pass(d);
    await pass(d);
    expect(withdrawn).toEqual([
      [forged.metadata!.name!, 'uid-vol'],
      [forged.metadata!.name!, 'uid-vol'],
    ]);
    expect(cleaned).toEqual([]);
    expect(fake.count('create', 'jobs')).toBe(0);
    expect(fake.count('delete', 'persistentvolumes')).toBe(0);
  });

  it('a failed withdrawal neither throws nor stops the pass: the other PVs are still cleaned, the refused one is retried next pass', async () => {
    const forged = refusedForged();
    const legit = ours('free');
    fake.put('persistentvolumes', legit);
    const free = volume('free');
    let calls = 0;
    const jobController = {
      status: () => ({ state: 'NotFound' as const }),
      withdraw: () => {
        calls++;
        return Promise.reject(new Error('etcd timeout'));
      },
    };
    const d = deleter({ jobController });
    await expect(pass(d)).resolves.toBeUndefined();
    expect(cleaned).toEqual([free]);
    expect(calls).toBe(1);
    await pass(d);
    expect(calls).toBe(2);
    expect(fake.object('persistentvolumes', forged.metadata!.name!)).toBeDefined();
  });
});
