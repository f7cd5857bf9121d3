// The volume health monitor (issue 19) against the fake API server and a fake HealthChecker:
// Events only on a change (PVC always, PV and Pods within the per-pass budget, a Node summary for
// the rest), the gauge, annotatePVs, and the policy (Available + missing past the grace period only).
import { beforeEach, describe, expect, it } from 'vitest';
import type { V1PersistentVolume, V1Pod } from '@kubernetes/client-node';
import type { ClassConfig, HealthPolicy, VolumeHealthConfig } from '../../src/config/types.ts';
import { ANN_VOLUME_HEALTH, HealthLedger, HealthMonitor, LABEL_VOLUME_HEALTH, volumeLocation } from '../../src/health/monitor.ts';
import type { HealthChecker, HealthCondition, HealthCheckInput } from '../../src/health/types.ts';
import type { Metrics } from '../../src/metrics/metrics.ts';
import { FakeKube } from '../support/fake-kube.ts';
import { testConfig } from '../support/config.ts';
import { testEnv } from '../support/env.ts';
import { FakeRecorder, newMetrics } from '../deleter/helpers.ts';

const CLASS = 'fast';
const cls = (healthPolicy?: HealthPolicy): ClassConfig => ({
  hostDir: '/mnt/disks',
  mountDir: '/mnt/in-container',
  blockCleanerCommand: ['/scripts/quick_reset.sh'],
  volumeMode: 'Filesystem',
  namePattern: '*',
  ...(healthPolicy ? { healthPolicy } : {}),
});

/** A checker whose answers the test sets per container path; counts its passes and checks. */
class FakeChecker implements HealthChecker {
  readonly state = new Map<string, Map<HealthCondition, string>>();
  readonly inputs: HealthCheckInput[] = [];
  passes = 0;
  set(entry: string, conditions: Partial<Record<HealthCondition, string>>): void {
    this.state.set(`/mnt/in-container/${entry}`, new Map(Object.entries(conditions) as [HealthCondition, string][]));
  }
  beginPass(): Promise<{ check: (i: HealthCheckInput) => Promise<{ conditions: ReadonlyMap<HealthCondition, string> }> }> {
    this.passes++;
    return Promise.resolve({
      check: (input: HealthCheckInput) => {
        this.inputs.push(input);
        return Promise.resolve({ conditions: this.state.get(input.path) ?? new Map<HealthCondition, string>() });
      },
    });
  }
}

let kube: FakeKube;
let recorder: FakeRecorder;
let metrics: Metrics;
let checker: FakeChecker;
let ledger: HealthLedger;
let clock: number;

function putPV(entry: string, phase: 'Available' | 'Bound' | 'Released', claim?: { ns: string; name: string }): V1PersistentVolume {
  const pv = kube.put('persistentvolumes', {
    metadata: { name: `pv-${entry}`, annotations: { 'pv.kubernetes.io/provisioned-by': 'local-volume-provisioner-node-1' } },
    spec: {
      storageClassName: CLASS,
      local: { path: `/mnt/disks/${entry}` },
      capacity: { storage: '1Gi' },
      ...(claim ? { claimRef: { namespace: claim.ns, name: claim.name, uid: `uid-${claim.name}` } } : {}),
    },
  });
  kube.setStatus('persistentvolumes', `pv-${entry}`, { phase });
  return pv;
}

function putPod(ns: string, name: string, claimName: string, phase = 'Running'): V1Pod {
  const pod = kube.put('pods', {
    metadata: { name, namespace: ns },
    spec: { containers: [{ name: 'c', image: 'busybox' }], volumes: [{ name: 'v', persistentVolumeClaim: { claimName } }] },
  });
  kube.setStatus('pods', `${ns}/${name}`, { phase });
  return pod;
}

function monitor(opts: { policy?: HealthPolicy; volumeHealth?: VolumeHealthConfig; budget?: number; signal?: AbortSignal } = {}): HealthMonitor {
  const config = testConfig({ [CLASS]: cls(opts.policy) }, opts.volumeHealth ? { volumeHealth: opts.volumeHealth } : {});
  const env = testEnv({ kube, recorder, metrics, config, now: () => clock });
  return new HealthMonitor(env, { checker, pvs: { list: () => kube.objects('persistentvolumes') }, ledger, eventBudget: opts.budget, signal: opts.signal });
}

const events = (): string[] => recorder.events.map((e) => `${e.ref.kind}/${e.ref.namespace ? `${e.ref.namespace}/` : ''}${e.ref.name} ${e.type} ${e.reason}`);

async function gauge(): Promise<string[]> {
  const { values } = await metrics.volumeHealthAbnormal.get();
  return values
    .map((v) => `${v.labels['persistentvolume']} ${v.labels['storageclass']} ${v.labels['condition']} ${v.labels['namespace']}/${v.labels['persistentvolumeclaim']} = ${v.value}`)
    .sort();
}

const writes = (): number => kube.requests.filter((r) => r.verb !== 'list' && r.verb !== 'get').length;

beforeEach(() => {
  kube = new FakeKube();
  recorder = new FakeRecorder();
  metrics = newMetrics();
  checker = new FakeChecker();
  ledger = new HealthLedger();
  clock = 1_000_000;
});

describe('volumeLocation', () => {
  it('maps spec.local.path under hostDir to the same entry under mountDir; anything else is not located', () => {
    const look = (name: string): ClassConfig | undefined => (name === CLASS ? cls() : undefined);
    const pv = (path: string, sc = CLASS): V1PersistentVolume => ({ spec: { storageClassName: sc, local: { path } } });
    expect(volumeLocation(pv('/mnt/disks/vol1'), look)?.path).toBe('/mnt/in-container/vol1');
    expect(volumeLocation(pv('/mnt/disks/a/b'), look)).toBeUndefined();
    expect(volumeLocation(pv('/mnt/other/vol1'), look)).toBeUndefined();
    expect(volumeLocation(pv('/mnt/disks'), look)).toBeUndefined();
    expect(volumeLocation(pv('/mnt/disks/vol1', 'unknown'), look)).toBeUndefined();
  });
});

describe('HealthMonitor: transitions and recovery', () => {
  it('a Bound volume going missing: Warning VolumeConditionAbnormal on PVC, PV and each running Pod using the claim, once; recovery: VolumeConditionNormal; gauge 1 then 0', async () => {
    putPV('vol1', 'Bound', { ns: 'app', name: 'data' });
    putPod('app', 'web-0', 'data');
    putPod('app', 'other', 'another-claim');
    putPod('app', 'done', 'data', 'Succeeded');
    const m = monitor();

    await m.pass();
    expect(recorder.events).toEqual([]); // healthy from the start: nothing to say
    expect(await gauge()).toEqual([]);

    checker.set('vol1', { missing: '/mnt/in-container/vol1 is no longer a mount point' });
    const r = await m.pass();
    expect(r.changed).toBe(1);
    expect(events().sort()).toEqual([
      'PersistentVolume/pv-vol1 Warning VolumeConditionAbnormal',
      'PersistentVolumeClaim/app/data Warning VolumeConditionAbnormal',
      'Pod/app/web-0 Warning VolumeConditionAbnormal',
    ]);
    expect(recorder.events[0]!.message).toBe('Volume pv-vol1 on node node-1: missing: /mnt/in-container/vol1 is no longer a mount point');
    expect(await gauge()).toEqual(['pv-vol1 fast missing app/data = 1']);

    // Still missing: no Event, no request.
    const before = kube.requests.length;
    recorder.events.length = 0;
    await m.pass();
    expect(recorder.events).toEqual([]);
    expect(kube.requests.length).toBe(before);

    checker.set('vol1', {});
    await m.pass();
    expect(events().sort()).toEqual([
      'PersistentVolume/pv-vol1 Normal VolumeConditionNormal',
      'PersistentVolumeClaim/app/data Normal VolumeConditionNormal',
      'Pod/app/web-0 Normal VolumeConditionNormal',
    ]);
    expect(recorder.events[0]!.message).toBe('The volume pv-vol1 on node node-1 returns to the healthy state (was: missing)');
    expect(await gauge()).toEqual(['pv-vol1 fast missing app/data = 0']);
  });

  it('an Available PV: Event on the PV only, no Pod list; a second condition is a change; the series go with the PV', async () => {
    putPV('vol1', 'Available');
    const m = monitor();
    checker.set('vol1', { 'read-only': 'mounted read-only' });
    await m.pass();
    expect(events()).toEqual(['PersistentVolume/pv-vol1 Warning VolumeConditionAbnormal']);
    expect(kube.count('list', 'pods')).toBe(0);
    expect(await gauge()).toEqual(['pv-vol1 fast read-only / = 1']);

    checker.set('vol1', { 'read-only': 'mounted read-only', 'filesystem-errors': '3 errors' });
    await m.pass();
    expect(events()).toHaveLength(2);
    expect(recorder.events[1]!.message).toContain('read-only: mounted read-only; filesystem-errors: 3 errors');

    kube.remove('persistentvolumes', 'pv-vol1');
    await m.pass();
    expect(await gauge()).toEqual([]);
    expect(ledger.byUid.size).toBe(0);
  });

  it('passes the recorded identity, the mode and fullThresholdPercent to the check; skips Pending PVs and PVs being deleted', async () => {
    putPV('vol1', 'Available');
    kube.update('persistentvolumes', 'pv-vol1', (pv) => {
      pv.metadata!.annotations!['local-static-provisioner/volume-identity'] = 'mount:abc';
    });
    kube.put('persistentvolumes', { metadata: { name: 'pv-pending' }, spec: { storageClassName: CLASS, local: { path: '/mnt/disks/p' } }, status: { phase: 'Pending' } });
    const m = monitor({ volumeHealth: { enabled: true, annotatePVs: false, fullThresholdPercent: 90 } });
    await m.pass();
    expect(checker.inputs).toEqual([
      { pvName: 'pv-vol1', path: '/mnt/in-container/vol1', mode: 'Filesystem', recordedIdentity: 'mount:abc', fullThresholdPercent: 90 },
    ]);
  });

  it('volumeHealth.enabled false: no check, and the series of an earlier pass are removed', async () => {
    putPV('vol1', 'Available');
    checker.set('vol1', { missing: 'gone' });
    await monitor().pass();
    expect(await gauge()).toHaveLength(1);
    const r = await monitor({ volumeHealth: { enabled: false, annotatePVs: false } }).pass();
    expect(r.checked).toBe(0);
    expect(checker.passes).toBe(1);
    expect(await gauge()).toEqual([]);
  });

  it('the ledger outlives a generation: a new monitor (config reload) repeats no Event for a condition already reported', async () => {
    putPV('vol1', 'Bound', { ns: 'app', name: 'data' });
    checker.set('vol1', { missing: 'gone' });
    await monitor().pass();
    const n = recorder.events.length;
    await monitor().pass();
    expect(recorder.events.length).toBe(n);
  });
});

describe('HealthMonitor: the Event bound of one pass', () => {
  it('50 Bound volumes of one disk going at once: 50 PVC Events, at most 10 PV/Pod Events, one summary on the Node, one Pod list', async () => {
    for (let i = 0; i < 50; i++) {
      putPV(`vol${i}`, 'Bound', { ns: 'app', name: `data-${i}` });
      putPod('app', `pod-${i}`, `data-${i}`);
    }
    const m = monitor();
    await m.pass();
    for (let i = 0; i < 50; i++) checker.set(`vol${i}`, { missing: 'gone' });
    const r = await m.pass();
    const kinds = recorder.events.map((e) => e.ref.kind);
    expect(kinds.filter((k) => k === 'PersistentVolumeClaim')).toHaveLength(50);
    expect(kinds.filter((k) => k === 'PersistentVolume' || k === 'Pod')).toHaveLength(10);
    expect(kinds.filter((k) => k === 'Node')).toHaveLength(1);
    expect(recorder.events.length).toBe(61);
    expect(r.suppressed).toBe(90);
    const summary = recorder.events.find((e) => e.ref.kind === 'Node')!;
    expect(summary.reason).toBe('VolumeHealthChanged');
    expect(summary.type).toBe('Warning');
    expect(summary.message).toMatch(/^50 local volume\(s\) of this node changed health in one pass: 50 abnormal \(missing: 50\), 0 back to normal\. 90 PV and Pod Event\(s\) over the limit of 10 per pass were left out/);
    expect(kube.count('list', 'pods')).toBe(1);
    expect((await gauge()).filter((g) => g.endsWith('= 1'))).toHaveLength(50);
  });

  it('within the budget there is no summary', async () => {
    for (let i = 0; i < 3; i++) putPV(`vol${i}`, 'Available');
    const m = monitor();
    for (let i = 0; i < 3; i++) checker.set(`vol${i}`, { missing: 'gone' });
    await m.pass();
    expect(events().filter((e) => e.startsWith('Node/'))).toEqual([]);
    expect(recorder.events).toHaveLength(3);
  });
});

describe('HealthMonitor: healthPolicy', () => {
  const ON: HealthPolicy = { deleteMissingAvailable: true, gracePeriodMs: 10 * 60_000 };

  /** Policy on, Available pv-vol1 missing, a PV list read once (a cache that goes stale); one pass, then the grace period passes. */
  async function passWithStaleList(): Promise<HealthMonitor> {
    putPV('vol1', 'Available');
    checker.set('vol1', { missing: 'gone' });
    const stale = kube.objects('persistentvolumes');
    const m = new HealthMonitor(
      testEnv({ kube, recorder, metrics, config: testConfig({ [CLASS]: cls(ON) }), now: () => clock }),
      { checker, pvs: { list: () => stale }, ledger },
    );
    await m.pass();
    clock += ON.gracePeriodMs;
    return m;
  }

  it('policy on: an Available PV missing longer than the grace period is deleted with an Event; not before', async () => {
    putPV('vol1', 'Available');
    checker.set('vol1', { missing: 'gone' });
    const m = monitor({ policy: ON });
    await m.pass();
    clock += 10 * 60_000 - 1;
    expect((await m.pass()).deleted).toEqual([]);
    expect(kube.object('persistentvolumes', 'pv-vol1')).toBeDefined();
    clock += 1;
    expect((await m.pass()).deleted).toEqual(['pv-vol1']);
    expect(kube.object('persistentvolumes', 'pv-vol1')).toBeUndefined();
    const del = kube.requests.find((r) => r.verb === 'delete');
    expect(del).toMatchObject({ kind: 'persistentvolumes', name: 'pv-vol1' });
    const ev = recorder.events.find((e) => e.reason === 'MissingVolumeDeleted')!;
    expect(ev.ref).toMatchObject({ kind: 'PersistentVolume', name: 'pv-vol1' });
    expect(ev.message).toContain('missing for 10m0s, over the grace period 10m0s of class fast');
    expect(await gauge()).toEqual([]);
  });

  it('policy off (default): kept however long it is missing', async () => {
    putPV('vol1', 'Available');
    checker.set('vol1', { missing: 'gone' });
    const m = monitor();
    await m.pass();
    clock += 24 * 3600_000;
    expect((await m.pass()).deleted).toEqual([]);
    expect(kube.count('delete')).toBe(0);
  });

  it('Bound and Released PVs are never deleted for health, policy on or not', async () => {
    putPV('b', 'Bound', { ns: 'app', name: 'data' });
    putPV('r', 'Released', { ns: 'app', name: 'old' });
    checker.set('b', { missing: 'gone' });
    checker.set('r', { missing: 'gone' });
    const m = monitor({ policy: ON });
    await m.pass();
    clock += 24 * 3600_000;
    expect((await m.pass()).deleted).toEqual([]);
    expect(kube.count('delete')).toBe(0);
  });

  it('the precondition: a PV bound (changed) since the pass read it is not deleted', async () => {
    const m = await passWithStaleList();
    // Bound meanwhile: the cache still says Available at the old resourceVersion.
    kube.update('persistentvolumes', 'pv-vol1', (pv) => {
      pv.spec!.claimRef = { namespace: 'app', name: 'data' };
    });
    expect((await m.pass()).deleted).toEqual([]);
    expect(kube.object('persistentvolumes', 'pv-vol1')).toBeDefined();
    expect(recorder.reasons()).not.toContain('MissingVolumeDeleted');
  });

  it('the UID precondition: a PV of the same name made anew since the pass read it is not deleted', async () => {
    const m = await passWithStaleList();
    kube.remove('persistentvolumes', 'pv-vol1');
    const fresh = putPV('vol1', 'Available');
    expect((await m.pass()).deleted).toEqual([]);
    expect(kube.object('persistentvolumes', 'pv-vol1')?.metadata?.uid).toBe(fresh.metadata?.uid);
  });

  it('a volume that came back before the grace period ends restarts the grace period', async () => {
    putPV('vol1', 'Available');
    const m = monitor({ policy: ON });
    checker.set('vol1', { missing: 'gone' });
    await m.pass();
    clock += 9 * 60_000;
    checker.set('vol1', {});
    await m.pass();
    checker.set('vol1', { missing: 'gone' });
    clock += 2 * 60_000;
    expect((await m.pass()).deleted).toEqual([]);
  });
});

describe('HealthMonitor: volumeHealth.annotatePVs', () => {
  it('writes the label and annotation on a change only, "ok" when healthy, and removes them when turned off', async () => {
    putPV('vol1', 'Available');
    const on: VolumeHealthConfig = { enabled: true, annotatePVs: true };
    await monitor({ volumeHealth: on }).pass();
    expect(kube.object('persistentvolumes', 'pv-vol1')!.metadata!.labels![LABEL_VOLUME_HEALTH]).toBe('ok');
    const patches = kube.count('patch', 'persistentvolumes');
    await monitor({ volumeHealth: on }).pass();
    expect(kube.count('patch', 'persistentvolumes')).toBe(patches);

    checker.set('vol1', { missing: 'gone', 'read-only': 'ro' });
    await monitor({ volumeHealth: on }).pass();
    const pv = kube.object('persistentvolumes', 'pv-vol1')!;
    expect(pv.metadata!.labels![LABEL_VOLUME_HEALTH]).toBe('missing.read-only');
    expect(pv.metadata!.annotations![ANN_VOLUME_HEALTH]).toBe('missing: gone; read-only: ro');

    await monitor().pass();
    const off = kube.object('persistentvolumes', 'pv-vol1')!;
    expect(off.metadata!.labels?.[LABEL_VOLUME_HEALTH]).toBeUndefined();
    expect(off.metadata!.annotations?.[ANN_VOLUME_HEALTH]).toBeUndefined();
  });

  it('off (default) and nothing changed: no request at all', async () => {
    for (let i = 0; i < 5; i++) putPV(`vol${i}`, 'Bound', { ns: 'app', name: `c${i}` });
    const m = monitor();
    const before = writes() + kube.count('list');
    await m.pass();
    await m.pass();
    expect(writes() + kube.count('list')).toBe(before);
  });
});

describe('HealthMonitor: a stopping generation (its signal aborted) abandons the pass', () => {
  it('an abort during a pass over 1,000 volumes with a slow check starts no check after it, and the aborted pass records and reports nothing', async () => {
    const n = 1000;
    for (let i = 0; i < n; i++) putPV(`vol${String(i).padStart(4, '0')}`, i % 2 === 0 ? 'Available' : 'Bound', i % 2 === 0 ? undefined : { ns: 'app', name: `c${i}` });
    // Volumes that a finished pass would report (Events, gauge, a delete by the policy past its grace period).
    checker.set('vol0000', { missing: 'gone' });
    checker.set('vol0001', { 'read-only': 'ro' });
    checker.set('vol0998', { missing: 'gone' });
    const stop = new AbortController();
    const abortAt = 100;
    let startedAtAbort = -1;
    // A slow check (answers one macrotask later); the abort comes from inside the 100th check, as a
    // reload's stop() comes while checks are in flight.
    const inner = checker.beginPass.bind(checker);
    checker.beginPass = async () => {
      const pass = await inner();
      return {
        check: async (input: HealthCheckInput) => {
          const r = pass.check(input);
          if (checker.inputs.length === abortAt) {
            startedAtAbort = checker.inputs.length;
            stop.abort();
          }
          await new Promise<void>((resolve) => setImmediate(resolve));
          return r;
        },
      };
    };
    const m = monitor({ signal: stop.signal, policy: { deleteMissingAvailable: true, gracePeriodMs: 0 } });
    const r = await m.pass();
    expect(startedAtAbort).toBe(abortAt);
    // Not one check started after the abort (those in flight then, at most 64, were awaited).
    expect(checker.inputs.length).toBe(startedAtAbort);
    expect(r).toMatchObject({ checked: 0, changed: 0, deleted: [], aborted: true });
    expect(recorder.events).toEqual([]);
    expect(await gauge()).toEqual([]);
    expect(ledger.byUid.size).toBe(0);
    expect(writes()).toBe(0);

    // The next generation (same process-scope ledger) finds the changes and reports them once.
    checker.beginPass = inner;
    const next = await monitor().pass();
    expect(next).toMatchObject({ checked: n, changed: 3 });
    expect(events().filter((e) => e.startsWith('PersistentVolumeClaim/')).sort()).toEqual(['PersistentVolumeClaim/app/c1 Warning VolumeConditionAbnormal']);
    expect(await gauge()).toEqual(['pv-vol0000 fast missing / = 1', 'pv-vol0001 fast read-only app/c1 = 1', 'pv-vol0998 fast missing / = 1']);
    expect((await monitor().pass()).changed).toBe(0);
  });

  it('an abort before the pass begins reads nothing', async () => {
    putPV('vol1', 'Available');
    const stop = new AbortController();
    stop.abort();
    const r = await monitor({ signal: stop.signal }).pass();
    expect(r.aborted).toBe(true);
    expect(checker.passes).toBe(0);
    expect(ledger.byUid.size).toBe(0);
  });
});
