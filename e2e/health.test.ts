// Issue 19 end to end on the real control plane: the daemon (node src/main.ts, discovery period 1 s)
// on real tmpfs mounts. A Bound volume lazily unmounted from under its claim -> VolumeConditionAbnormal
// on the PVC, the PV and the Pod using the claim, and the gauge at 1; mounted again -> Normal, gauge 0.
// healthPolicy: an Available PV whose mount vanished is deleted after the grace period with the policy
// on, kept with it off, and made again when the mount returns. 50 volumes of one "disk" vanishing at
// once (one lazy unmount of the tmpfs holding their 50 mounts) -> the Event bound of docs/operations.md.
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CoreV1Event, V1PersistentVolume } from '@kubernetes/client-node';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { createDeleterCluster, keepLogs, pvEvents, startDaemon, waitPVEvent } from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { bindPV, eventsAbout, readPV, waitMetric, waitPV, waitPVGone } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const { core, storage } = adminClients();
const GAUGE = 'local_volume_provisioner_volume_health_abnormal';
const GRACE_S = 3;
const STORM = 50;

const lazyUnmount = (path: string): void => {
  execFileSync('umount', ['-l', path]);
};

describe.skipIf(!isRoot())('volume health on the real control plane (issue 19)', () => {
  const host = new HostFixtures('lsp-health-');
  const node = uniqueName('health-node');
  const ns = uniqueName('health-ns');
  const cls = { bound: uniqueName('hl-bound'), del: uniqueName('hl-del'), keep: uniqueName('hl-keep'), storm: uniqueName('hl-storm') };
  let prov: ProvisionerProcess | undefined;
  const pvName = (entry: string, className: string): string => generatePVName(entry, node, className);
  const dirs: Record<keyof typeof cls, string> = { bound: '', del: '', keep: '', storm: '' };

  beforeAll(async () => {
    await createDeleterCluster(core, storage, { node, ns, classes: Object.values(cls) });
    for (const k of Object.keys(cls) as Array<keyof typeof cls>) dirs[k] = host.mkdir(k);
    host.tmpfs(8, 'bound', 'vol');
    host.tmpfs(8, 'del', 'vol');
    host.tmpfs(8, 'keep', 'vol');
    // The "disk": one tmpfs holding the class's 50 volume mounts; a lazy unmount of it takes all 50 at once.
    host.tmpfs(1, 'storm');
    for (let i = 0; i < STORM; i++) host.tmpfs(1, 'storm', `v${i}`);
    const klass = (k: keyof typeof cls, extra = ''): string => `${cls[k]}:\n  hostDir: "/mnt/host/${k}"\n  mountDir: "${dirs[k]}"\n${extra}`;
    const files = {
      storageClassMap:
        klass('bound') +
        klass('del', `  healthPolicy:\n    deleteMissingAvailable: true\n    gracePeriod: ${GRACE_S}s\n`) +
        klass('keep', `  healthPolicy:\n    deleteMissingAvailable: false\n    gracePeriod: ${GRACE_S}s\n`) +
        klass('storm'),
      useNodeNameOnly: 'true',
    };
    prov = await startDaemon(host, { nodeName: node, files });
  }, 120_000);

  afterAll(async () => {
    await prov?.stop();
    keepLogs(host, 'health', ['provisioner.log']);
    host.cleanup();
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    for (const c of Object.values(cls)) await storage.deleteStorageClass({ name: c }).catch(() => undefined);
    await core.deleteNode({ name: node }).catch(() => undefined);
    const pvs = await core.listPersistentVolume();
    for (const pv of pvs.items) {
      if (Object.values(cls).includes(pv.spec?.storageClassName ?? '')) await core.deletePersistentVolume({ name: pv.metadata?.name ?? '' }).catch(() => undefined);
    }
  });

  const reasonsOn = async (namespace: string, kind: string, name: string): Promise<CoreV1Event[]> =>
    (await eventsAbout(core, namespace, kind, name)).filter((e) => e.reason?.startsWith('VolumeCondition'));

  it('a Bound volume unmounted from under its claim: Abnormal Events on PVC, PV and Pod and the gauge within a few discovery periods; mounted again: Normal, gauge 0', async () => {
    const pv = await waitPV(core, pvName('vol', cls.bound));
    const claim = await bindPV(core, pv, ns);
    // A Pod that uses the claim, on the test node (no kubelet: it stays Pending, which is enough for Events).
    const pod = uniqueName('hl-pod');
    await waitFor(
      () =>
        core
          .createNamespacedPod({
            namespace: ns,
            body: {
              metadata: { name: pod },
              spec: {
                nodeName: node,
                automountServiceAccountToken: false,
                containers: [{ name: 'c', image: 'busybox', volumeMounts: [{ name: 'data', mountPath: '/data' }] }],
                volumes: [{ name: 'data', persistentVolumeClaim: { claimName: claim } }],
              },
            },
          })
          .then(() => true, () => false), // the namespace's default ServiceAccount may not exist yet
      { what: `pod ${ns}/${pod} created`, timeoutMs: 60_000 },
    );
    const labels = { persistentvolume: pvName('vol', cls.bound), condition: 'missing', namespace: ns, persistentvolumeclaim: claim };

    const t0 = Date.now();
    lazyUnmount(host.path('bound', 'vol'));
    const pvcEvent = await waitFor(async () => (await reasonsOn(ns, 'PersistentVolumeClaim', claim)).find((e) => e.reason === 'VolumeConditionAbnormal'), {
      what: `VolumeConditionAbnormal on PVC ${ns}/${claim}`,
      timeoutMs: 60_000,
    });
    const pvcMs = Date.now() - t0;
    expect(pvcEvent.type).toBe('Warning');
    expect(pvcEvent.message).toContain(`Volume ${pvName('vol', cls.bound)} on node ${node}: missing: `);
    await waitFor(async () => (await reasonsOn(ns, 'Pod', pod)).some((e) => e.reason === 'VolumeConditionAbnormal'), { what: `VolumeConditionAbnormal on Pod ${ns}/${pod}`, timeoutMs: 30_000 });
    await waitPVEvent(core, pv, 'VolumeConditionAbnormal');
    await waitMetric(prov!, GAUGE, labels, (v) => v === 1, { timeoutMs: 30_000 });
    console.log(`health e2e: unmount -> PVC Event in ${pvcMs} ms (discovery period 1 s)`);

    host.tmpfs(8, 'bound', 'vol');
    await waitFor(async () => (await reasonsOn(ns, 'PersistentVolumeClaim', claim)).some((e) => e.reason === 'VolumeConditionNormal'), {
      what: `VolumeConditionNormal on PVC ${ns}/${claim}`,
      timeoutMs: 60_000,
    });
    await waitFor(async () => (await reasonsOn(ns, 'Pod', pod)).some((e) => e.reason === 'VolumeConditionNormal'), { what: `VolumeConditionNormal on Pod ${ns}/${pod}`, timeoutMs: 30_000 });
    await waitMetric(prov!, GAUGE, labels, (v) => v === 0, { timeoutMs: 30_000 });
    // One Abnormal and one Normal on the PVC: no repeat while the condition held.
    const onPvc = (await reasonsOn(ns, 'PersistentVolumeClaim', claim)).map((e) => `${e.reason} x${e.count ?? 1}`);
    expect(onPvc.sort()).toEqual(['VolumeConditionAbnormal x1', 'VolumeConditionNormal x1']);
  });

  it('an Available PV whose mount vanished: deleted after the grace period with healthPolicy on, kept with it off, made again when the mount returns', async () => {
    const del = await waitPV(core, pvName('vol', cls.del));
    const keep = await waitPV(core, pvName('vol', cls.keep));
    await waitFor(async () => (await readPV(core, pvName('vol', cls.del)))?.status?.phase === 'Available', { what: 'the policy PV Available' });
    const t0 = Date.now();
    lazyUnmount(host.path('del', 'vol'));
    lazyUnmount(host.path('keep', 'vol'));
    await waitPVEvent(core, keep, 'VolumeConditionAbnormal', () => true, 30_000);
    await waitPVGone(core, pvName('vol', cls.del), del.metadata!.uid!, 60_000);
    const goneMs = Date.now() - t0;
    expect(goneMs).toBeGreaterThanOrEqual(GRACE_S * 1000);
    const deleted = await waitPVEvent(core, del, 'MissingVolumeDeleted');
    expect(deleted.message).toContain(`over the grace period ${GRACE_S}s of class ${cls.del}`);
    // The PV without the policy has been missing as long, and a few passes more: still there, same object.
    const after = Date.now() + 3000;
    await waitFor(() => Date.now() > after, { what: 'three more discovery periods', timeoutMs: 10_000, intervalMs: 200 });
    expect((await readPV(core, pvName('vol', cls.keep)))?.metadata?.uid).toBe(keep.metadata?.uid);
    console.log(`health e2e: missing Available PV deleted ${goneMs} ms after the unmount (grace ${GRACE_S}s)`);

    host.tmpfs(8, 'del', 'vol');
    const back = await waitPV(core, pvName('vol', cls.del), { notUid: del.metadata!.uid! });
    expect(back.spec?.local?.path).toBe(`/mnt/host/del/vol`);
  });

  it(`${STORM} volumes vanishing at once: ${STORM} changes in one pass, 10 PV Events, one VolumeHealthChanged summary on the Node, gauge ${STORM}`, async () => {
    const names = Array.from({ length: STORM }, (_, i) => pvName(`v${i}`, cls.storm));
    const pvs: V1PersistentVolume[] = await Promise.all(names.map((n) => waitPV(core, n)));
    lazyUnmount(host.path('storm'));
    const summary = await waitFor(
      async () => (await eventsAbout(core, 'default', 'Node', node)).find((e) => e.reason === 'VolumeHealthChanged'),
      { what: `VolumeHealthChanged on Node ${node}`, timeoutMs: 60_000 },
    );
    expect(summary.type).toBe('Warning');
    expect(summary.message).toMatch(new RegExp(`^${STORM} local volume\\(s\\) of this node changed health in one pass: ${STORM} abnormal \\(missing: ${STORM}\\), 0 back to normal\\. ${STORM - 10} PV and Pod Event\\(s\\) over the limit of 10 per pass were left out`));
    await waitMetric(prov!, GAUGE, { storageclass: cls.storm, condition: 'missing' }, (v) => v === STORM, { timeoutMs: 30_000 });
    // The recorder sends asynchronously: wait until the 10 PV Events are there, then check no more come.
    const pvAbnormal = async (): Promise<number> => {
      const evs = await core.listNamespacedEvent({ namespace: 'default' });
      const uids = new Set(pvs.map((p) => p.metadata?.uid));
      return evs.items.filter((e) => e.reason === 'VolumeConditionAbnormal' && uids.has(e.involvedObject.uid)).length;
    };
    await waitFor(async () => (await pvAbnormal()) === 10, { what: '10 VolumeConditionAbnormal Events on the storm PVs', timeoutMs: 30_000 });
    const settle = Date.now() + 3000;
    await waitFor(() => Date.now() > settle, { what: 'three more discovery periods', timeoutMs: 10_000, intervalMs: 200 });
    expect(await pvAbnormal()).toBe(10);
    expect((await eventsAbout(core, 'default', 'Node', node)).filter((e) => e.reason === 'VolumeHealthChanged').map((e) => e.count ?? 1)).toEqual([1]);
    expect((await pvEvents(core, pvs[0]!)).length).toBeLessThanOrEqual(1);
  });
});
