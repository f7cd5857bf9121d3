// The PV cache's lean objects (issue 20): what no reader uses is dropped at decode time, what the deleter,
// discoverer, health monitor and preconditions read is kept.
import type { V1Node, V1PersistentVolume } from '@kubernetes/client-node';
import { afterEach, describe, expect, it } from 'vitest';
import { intern, leanPersistentVolume, type Informer } from '../../src/kube/informer.ts';
import { silentLogger } from '../../src/util/log.ts';
import { createNodePVInformer } from '../../src/volume/pv-node-label.ts';
import { FakeKube } from '../support/fake-kube.ts';

const NODE = 'node-a';
const node: V1Node = { metadata: { name: NODE, uid: 'uid-a', labels: { 'kubernetes.io/hostname': NODE } } };

/** A PV as the API server sends it, every field the daemon might meet set. */
function apiPV(name: string): V1PersistentVolume {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: {
      name,
      uid: `uid-${name}`,
      resourceVersion: '42',
      creationTimestamp: new Date('2026-12-02T07:00:00Z'),
      deletionTimestamp: new Date('2026-12-02T07:05:00Z'),
      finalizers: ['kubernetes.io/pv-protection'],
      labels: { 'kubernetes.io/hostname': NODE, team: 'a' },
      annotations: { 'pv.kubernetes.io/provisioned-by': `local-volume-provisioner-${NODE}-uid-a`, 'local-static-provisioner/volume-identity': `{"fs":"${name}"}` },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: NODE, uid: 'uid-a' }],
      managedFields: [{ manager: 'kube-controller-manager', operation: 'Update', apiVersion: 'v1', fieldsType: 'FieldsV1', fieldsV1: { 'f:status': {} } }],
    },
    spec: {
      capacity: { storage: '10Gi' },
      local: { path: `/mnt/disks/${name}`, fsType: 'ext4' },
      accessModes: ['ReadWriteOnce'],
      persistentVolumeReclaimPolicy: 'Delete',
      storageClassName: 'local',
      volumeMode: 'Filesystem',
      mountOptions: ['noatime'],
      claimRef: { apiVersion: 'v1', kind: 'PersistentVolumeClaim', namespace: 'ns', name: 'claim', uid: 'claim-uid', resourceVersion: '7' },
      nodeAffinity: { required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [NODE] }] }] } },
    },
    status: { phase: 'Released', reason: 'r', message: 'm', lastPhaseTransitionTime: new Date('2026-12-02T07:01:00Z') },
  };
}

/** What the cache must keep: apiPV without managedFields, creationTimestamp, finalizers, lastPhaseTransitionTime. */
function kept(name: string): V1PersistentVolume {
  const pv = apiPV(name);
  delete pv.metadata!.managedFields;
  delete pv.metadata!.creationTimestamp;
  delete pv.metadata!.finalizers;
  delete pv.status!.lastPhaseTransitionTime;
  return pv;
}

describe('leanPersistentVolume', () => {
  it('drops managedFields, creationTimestamp, finalizers and lastPhaseTransitionTime; keeps everything else as it came', () => {
    const input = apiPV('pv-1');
    const out = leanPersistentVolume(input);
    expect(out).toEqual(kept('pv-1'));
    expect(out.metadata).not.toHaveProperty('managedFields');
    expect(out.metadata).not.toHaveProperty('creationTimestamp');
    expect(out.metadata).not.toHaveProperty('finalizers');
    expect(out.status).not.toHaveProperty('lastPhaseTransitionTime');
    expect(input).toEqual(apiPV('pv-1')); // the argument is not changed
  });

  it('keeps a stub (name, uid, resourceVersion, local.path, class) and an empty object as they are', () => {
    const stub: V1PersistentVolume = { apiVersion: 'v1', kind: 'PersistentVolume', metadata: { name: 's', uid: 'u', resourceVersion: '1' }, spec: { local: { path: '/p' }, storageClassName: 'c' } };
    expect(leanPersistentVolume(stub)).toEqual(stub);
    expect(leanPersistentVolume({})).toEqual({});
  });

  it('intern() gives back an equal string and stays bounded', () => {
    for (let i = 0; i < 5000; i++) expect(intern(`v-${i}`)).toBe(`v-${i}`);
    expect(intern('x'.repeat(300))).toBe('x'.repeat(300));
  });
});

describe('the PV informer of main (createNodePVInformer) stores lean PVs', () => {
  let inf: Informer<V1PersistentVolume> | undefined;
  afterEach(async () => {
    await inf?.stop();
  });

  it('its cache holds what the deleter and discoverer read, without the dropped fields', async () => {
    const fake = new FakeKube();
    fake.put('persistentvolumes', apiPV('pv-1'));
    inf = createNodePVInformer(fake, node, { nodeLabel: false, logger: silentLogger });
    inf.start();
    await inf.waitForSync();
    const got = inf.get('pv-1');
    expect(got?.metadata).not.toHaveProperty('managedFields');
    expect(got?.metadata).not.toHaveProperty('creationTimestamp');
    expect(got?.metadata).not.toHaveProperty('finalizers');
    expect(got?.status).not.toHaveProperty('lastPhaseTransitionTime');
    // What the deleter (phase, reclaim policy, path, class, claimRef, preconditions), the discoverer (path, class,
    // provisioned-by), the health monitor and the node-label patches read:
    expect(got?.metadata?.uid).toBe('uid-pv-1');
    expect(got?.metadata?.resourceVersion).toBeDefined();
    expect(got?.metadata?.deletionTimestamp).toEqual(new Date('2026-12-02T07:05:00Z'));
    expect(got?.metadata?.annotations).toEqual(apiPV('pv-1').metadata!.annotations);
    expect(got?.metadata?.labels).toEqual(apiPV('pv-1').metadata!.labels);
    expect(got?.spec).toEqual(apiPV('pv-1').spec);
    expect(got?.status).toEqual({ phase: 'Released', reason: 'r', message: 'm' });
  });
});
