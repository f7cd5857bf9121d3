// The refusal checks of src/deleter/guard.ts asserted on the guard itself (mutation testing,
// docs/cleanup.md "Mutation testing"); deleter.test.ts and jobcontroller.test.ts cover them through
// their callers.
import { beforeEach, describe, expect, it } from 'vitest';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { CleanGuard, type CleanGuardOptions } from '../../src/deleter/guard.ts';
import type { PathKind } from '../../src/identity/identity.ts';
import { KubeError } from '../../src/kube/port.ts';
import type { Metrics } from '../../src/metrics/metrics.ts';
import { generatePVName } from '../../src/volume/naming.ts';
import { testConfig } from '../support/config.ts';
import { testEnv } from '../support/env.ts';
import { FakeKube } from '../support/fake-kube.ts';
import { FakeRecorder, makePV, metricValue, newMetrics, NODE } from './helpers.ts';

const SC1 = { hostDir: '/mnt/disks', mountDir: '/discoveryPath', blockCleanerCommand: ['/bin/true'], volumeMode: 'Filesystem' as const, namePattern: '*' };
/** The name discovery gives to /mnt/disks/<file> of class sc1 on this node. */
const V = (file: string): string => generatePVName(file, NODE, 'sc1');
const ours = (file: string, opts: Parameters<typeof makePV>[1] = {}): V1PersistentVolume => makePV(V(file), { path: `/mnt/disks/${file}`, uid: `uid-${file}`, ...opts });

let fake: FakeKube;
let recorder: FakeRecorder;
let metrics: Metrics;
let now: number;
let pvs: V1PersistentVolume[];

beforeEach(() => {
  fake = new FakeKube();
  recorder = new FakeRecorder();
  metrics = newMetrics();
  now = Date.parse('2026-01-01T00:00:00Z');
  pvs = [];
});

function guard(over: Partial<CleanGuardOptions> = {}): CleanGuard {
  const env = testEnv({ config: testConfig({ sc1: SC1 }), node: { metadata: { name: NODE, uid: 'node-uid' } }, kube: fake, recorder, metrics, now: () => now });
  return new CleanGuard(env, {
    allPvs: { get: (k) => pvs.find((p) => p.metadata?.name === k), list: () => pvs },
    readMountPoints: () => Promise.resolve(new Set<string>()),
    pathKind: () => Promise.resolve<PathKind>({ kind: 'directory' }),
    ...over,
  });
}

const withClaimRef = (pv: V1PersistentVolume, uid = 'random-uid'): V1PersistentVolume => ({
  ...pv,
  spec: { ...pv.spec, claimRef: { kind: 'PersistentVolumeClaim', namespace: 'team', name: 'data', uid } },
});
const putClaim = (volumeName: string, uid = 'pvc-uid', name = 'data') =>
  fake.put('persistentvolumeclaims', { metadata: { namespace: 'team', name, uid }, spec: { volumeName }, status: { phase: 'Bound' } });

describe('CleanGuard.check', () => {
  it('a PV that is not in the store (the informer lags) is not in use by another PV: ok', async () => {
    expect((await guard().check(ours('vol'), {}, { claims: false })).kind).toBe('ok');
  });

  it('a PV without spec cannot be located (invalid), never a throw', async () => {
    expect(await guard().check({ metadata: { name: 'x', uid: 'u' } }, {}, { claims: true })).toEqual({ kind: 'invalid', why: 'Unsupported volume type: only local volumes are cleaned' });
  });

  it('a refused PV costs no claim lookup (no API request)', async () => {
    const pv = withClaimRef(makePV('forged', { path: '/mnt/disks/vol' }));
    const v = await guard().check(pv, {}, { claims: true });
    expect(v.kind === 'refused' && v.refusals.map((r) => r.reason)).toEqual(['name_mismatch']);
    expect(fake.requests).toEqual([]);
  });

  it('a failing identity read is "unknown" (do not clean now), not ok', async () => {
    const pv = ours('vol');
    pv.metadata!.annotations = { ...pv.metadata!.annotations, 'local-static-provisioner/volume-identity': 'mount' };
    const v = await guard({ pathKind: () => Promise.reject(new Error('boom')) }).check(pv, {}, { claims: false });
    expect(v.kind).toBe('unknown');
    expect(v.kind === 'unknown' && v.why).toBe('cannot check the volume identity: boom');
  });

  it('path_in_use names every other PV of the volume once, sorted', async () => {
    const pv = ours('vol');
    pvs = [pv, makePV('zz-manual', { path: '/mnt/disks/vol', uid: 'u-z' }), makePV('aa-manual', { path: '/mnt/disks/vol/', uid: 'u-a' }), makePV('aa-manual', { path: '/mnt/disks//vol', uid: 'u-a2' })];
    const v = await guard().check(pv, {}, { claims: false });
    expect(v.kind === 'refused' && v.refusals).toEqual([{ reason: 'path_in_use', message: 'its volume "/mnt/disks/vol" is also used by PV "aa-manual", "zz-manual"' }]);
  });
});

describe('CleanGuard claim lookup', () => {
  it('the claimRef PVC that names the PV refuses it with one GET, no cluster-wide list', async () => {
    putClaim(V('vol'));
    const v = await guard().check(withClaimRef(ours('vol')), {}, { claims: true });
    expect(v.kind).toBe('refused');
    expect(fake.requests.map((r) => `${r.verb} ${r.kind}`)).toEqual(['get persistentvolumeclaims']);
  });

  it('an error other than 404 reading the claimRef PVC is "unknown" (no clean now), without a list', async () => {
    fake.failNext('get', 'persistentvolumeclaims', new KubeError(500, 'InternalError', 'etcd timeout'));
    const v = await guard().check(withClaimRef(ours('vol')), {}, { claims: true });
    expect(v.kind).toBe('unknown');
    expect(v.kind === 'unknown' && v.why).toBe(`cannot look up the claims of PV ${JSON.stringify(V('vol'))}: etcd timeout`);
    expect(fake.count('list', 'persistentvolumeclaims')).toBe(0);
  });

  it('the refusal names the PVC as an Event target (kind, apiVersion, namespace, name, uid) and says whether its UID is the claimRef\'s', async () => {
    putClaim(V('vol'), 'pvc-uid');
    const v = await guard().check(withClaimRef(ours('vol'), 'pvc-uid'), {}, { claims: true });
    expect(v.kind === 'refused' && v.refusals).toEqual([
      {
        reason: 'claim_still_exists',
        message: 'PVC "team/data" (UID "pvc-uid", phase Bound) still names it in spec.volumeName while its claimRef',
        pvc: { kind: 'PersistentVolumeClaim', apiVersion: 'v1', namespace: 'team', name: 'data', uid: 'pvc-uid' },
      },
    ]);
  });
});

describe('CleanGuard.refuse', () => {
  it('one Event listing every refusal, then silence within the warn window; retain() that drops the key warns again', async () => {
    const pv = ours('vol');
    const g = guard();
    const refusals = [
      { reason: 'path_in_use' as const, message: 'first' },
      { reason: 'name_mismatch' as const, message: 'second' },
    ];
    g.refuse(pv, refusals);
    g.refuse(pv, refusals);
    expect(recorder.events.map((e) => e.message)).toEqual([
      `Refusing to clean PV ${JSON.stringify(V('vol'))}: first; second. The volume is not cleaned and the PV is kept; delete the PV by hand if it was not made by this provisioner.`,
    ]);
    g.retain((k) => k !== 'uid-vol/VolumeCleanRefused');
    g.refuse(pv, refusals);
    expect(recorder.events).toHaveLength(2);
    g.retain(() => true);
    g.refuse(pv, refusals);
    expect(recorder.events).toHaveLength(2);
    expect(await metricValue(metrics.cleanRefused, { reason: 'path_in_use' })).toBe(2);
  });
});
