// Volume health on a real node (issue 19; e2e/health.test.ts has the same rules on the control plane alone): the shipped kustomize base runs the image built from the
// Dockerfile on a real kubelet (e2e/harness/node.ts, the e2e overlay of e2e/support/real-node.ts);
// the volumes are real mounts under /mnt/disks made by the test (DiscoveryRoot), seen by the daemon
// through its HostToContainer hostPath. Then, as an admin would see it (Events, /metrics at the pod):
//  - a Pod's claimed tmpfs lazily unmounted on the host (the Pod keeps its own bind mount, as with a
//    disk that drops out from under a running workload): VolumeConditionAbnormal on the PVC and on
//    the Pod and the gauge at 1 within a discovery period; remounted: VolumeConditionNormal, gauge 0;
//  - an ext4 volume on a loop device remounted read-only: the read-only condition, then recovery;
//  - an Available PV whose mount vanished: kept with the default config (no health policy), deleted
//    after the grace period once the class's healthPolicy allows it, recreated when the mount returns;
//  - 50 volumes vanishing at once: the Events stay within the documented bound.
// Measurements go to the log as `[measure] …`.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PatchStrategy, setHeaderOptions, type CoreV1Event, type V1PersistentVolume } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { waitFor, type Clients } from './harness/kube.ts';
import { realNodeUnsupportedReason } from './support/real-node.ts';
import { withRealNode } from './support/with-real-node.ts';

const reason = realNodeUnsupportedReason();
const measure = (what: string, ms: number): void => console.log(`[measure] ${what}: ${(ms / 1000).toFixed(1)} s`);
const sh = (cmd: string, args: readonly string[]): string => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const gauge = 'local_volume_provisioner_volume_health_abnormal';
/** The base DaemonSet's --discovery-period. */
const periodMs = 10_000;
/** Volumes that vanish at once in the last test. */
const MANY = 50;

describe.skipIf(reason !== undefined)(`volume health on a real node${reason ? ` (skipped: ${reason})` : ''}`, { timeout: 400_000 }, () => {
  const nodeName = 'lsp-health-node';
  const cls = 'fast-disks';
  const namespace = 'default';
  let api: Clients;
  /** Host paths the test made read-only, to make writable again on teardown. */
  const readOnly = new Set<string>();

  /** The daemon's /metrics (hostNetwork: on the node's address, port 8080 of the base). */
  const scrape = async (): Promise<string> => (await fetch('http://127.0.0.1:8080/metrics')).text();
  /** The value of the health gauge for a PV and condition, undefined when there is no such series. */
  const health = async (pv: string, condition: string): Promise<number | undefined> => {
    const line = (await scrape()).split('\n').find((l) => l.startsWith(`${gauge}{`) && l.includes(`persistentvolume="${pv}"`) && l.includes(`condition="${condition}"`));
    return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
  };
  const seriesOf = async (pv: string, condition: string): Promise<string | undefined> =>
    (await scrape()).split('\n').find((l) => l.startsWith(`${gauge}{`) && l.includes(`persistentvolume="${pv}"`) && l.includes(`condition="${condition}"`));
  const eventsFor = async (kind: string, name: string, reasonName: string): Promise<CoreV1Event[]> =>
    (await api.core.listEventForAllNamespaces({ fieldSelector: `involvedObject.kind=${kind},involvedObject.name=${name},reason=${reasonName}` })).items;
  const pvAt = async (path: string): Promise<V1PersistentVolume | undefined> => (await api.core.listPersistentVolume()).items.find((p) => p.spec?.local?.path === path);
  const eventTime = (e: CoreV1Event): number => Date.parse(String(e.eventTime ?? e.lastTimestamp ?? e.firstTimestamp ?? e.metadata?.creationTimestamp ?? ''));

  const rn = withRealNode({
    nodeName,
    disks: (disks) => {
      disks.volume(cls, 'claimed');
      disks.volume(cls, 'spare');
      disks.ext4Volume(cls, 'ext4', 32);
    },
    setup: async (run) => {
      api = run.api;
      await waitFor(async () => (await api.core.listPersistentVolume()).items.filter((p) => p.status?.phase === 'Available').length >= 3 || undefined, {
        what: 'the 3 PVs Available',
        timeoutMs: 240_000,
        intervalMs: 500,
      });
    },
    teardown: (errors) => {
      for (const p of readOnly) {
        try {
          sh('mount', ['-o', 'remount,rw', p]);
        } catch (e) {
          errors.push(e);
        }
      }
    },
  });

  it("a Pod's claimed volume unmounted from under it: VolumeConditionAbnormal on the PVC and the Pod and the gauge within a discovery period; remounted: VolumeConditionNormal", async () => {
    const hostPath = join(rn.disks.root, cls, 'claimed');
    const pv = await waitFor(() => pvAt(hostPath), { what: `the PV of ${hostPath}`, timeoutMs: 60_000 });
    const pvName = pv.metadata?.name ?? '';
    await api.core.createNamespacedPersistentVolumeClaim({
      namespace,
      body: { metadata: { name: 'data' }, spec: { storageClassName: cls, volumeName: pvName, accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Mi' } } } },
    });
    await api.core.createNamespacedPod({
      namespace,
      body: {
        metadata: { name: 'app' },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [{ name: 'app', image: rn.image.ref, command: ['bash', '-c', 'echo hello > /data/hello && exec sleep infinity'], volumeMounts: [{ name: 'data', mountPath: '/data' }] }],
          volumes: [{ name: 'data', persistentVolumeClaim: { claimName: 'data' } }],
        },
      },
    });
    await waitFor(async () => (await api.core.readNamespacedPod({ name: 'app', namespace })).status?.phase === 'Running' || undefined, { what: 'pod app Running', timeoutMs: 120_000 });
    await waitFor(() => existsSync(join(hostPath, 'hello')) || undefined, { what: 'the pod wrote into the volume', timeoutMs: 30_000 });
    // Healthy: a series at 0 or none, and no abnormal Event.
    expect(await health(pvName, 'missing')).not.toBe(1);
    expect(await eventsFor('PersistentVolumeClaim', 'data', 'VolumeConditionAbnormal')).toEqual([]);

    const t0 = Date.now();
    sh('umount', ['-l', hostPath]);
    const [pvcEvent] = await waitFor(async () => {
      const ev = await eventsFor('PersistentVolumeClaim', 'data', 'VolumeConditionAbnormal');
      return ev.length > 0 ? ev : undefined;
    }, { what: 'VolumeConditionAbnormal on the PVC', timeoutMs: 120_000, intervalMs: 250 });
    measure('umount -l to VolumeConditionAbnormal on the PVC', Date.now() - t0);
    expect(pvcEvent?.type).toBe('Warning');
    expect(pvcEvent?.message).toMatch(/missing|not.*mount/i);
    expect(pvcEvent?.involvedObject.namespace).toBe(namespace);
    // Within one discovery period (plus the pass itself, generous on a loaded machine).
    expect(eventTime(pvcEvent!) - t0).toBeLessThan(2 * periodMs + 5_000);
    const [podEvent] = await waitFor(async () => {
      const ev = await eventsFor('Pod', 'app', 'VolumeConditionAbnormal');
      return ev.length > 0 ? ev : undefined;
    }, { what: 'VolumeConditionAbnormal on the Pod', timeoutMs: 60_000, intervalMs: 250 });
    expect(podEvent?.type).toBe('Warning');
    expect(podEvent?.message).toContain(pvName);
    const series = await waitFor(async () => ((await health(pvName, 'missing')) === 1 ? seriesOf(pvName, 'missing') : undefined), { what: 'the gauge at 1', timeoutMs: 60_000 });
    // Labels line up with kubelet_volume_stats_health_status_abnormal{namespace,persistentvolumeclaim}.
    expect(series).toContain(`namespace="${namespace}"`);
    expect(series).toContain('persistentvolumeclaim="data"');
    expect(series).toContain(`storageclass="${cls}"`);
    // The Pod still runs: the daemon neither deletes nor cleans a Bound PV for its health.
    expect((await api.core.readNamespacedPod({ name: 'app', namespace })).status?.phase).toBe('Running');
    expect((await api.core.readPersistentVolume({ name: pvName })).metadata?.uid).toBe(pv.metadata?.uid);

    const t1 = Date.now();
    sh('mount', ['-t', 'tmpfs', '-o', 'size=16m', 'lsp-e2e', hostPath]);
    await waitFor(async () => {
      const ev = await eventsFor('PersistentVolumeClaim', 'data', 'VolumeConditionNormal');
      return ev.length > 0 ? ev : undefined;
    }, { what: 'VolumeConditionNormal on the PVC', timeoutMs: 120_000, intervalMs: 250 });
    measure('remount to VolumeConditionNormal on the PVC', Date.now() - t1);
    await waitFor(async () => (await eventsFor('Pod', 'app', 'VolumeConditionNormal')).length > 0 || undefined, { what: 'VolumeConditionNormal on the Pod', timeoutMs: 60_000 });
    await waitFor(async () => (await health(pvName, 'missing')) !== 1 || undefined, { what: 'the gauge back to 0', timeoutMs: 60_000 });
  });

  it('an ext4 volume on a loop device remounted read-only: the read-only condition, then recovery', async () => {
    const hostPath = join(rn.disks.root, cls, 'ext4');
    const pv = await waitFor(() => pvAt(hostPath), { what: `the PV of ${hostPath}`, timeoutMs: 60_000 });
    const pvName = pv.metadata?.name ?? '';
    expect(await health(pvName, 'read-only')).not.toBe(1);
    const t0 = Date.now();
    sh('mount', ['-o', 'remount,ro', hostPath]);
    readOnly.add(hostPath);
    await waitFor(async () => (await health(pvName, 'read-only')) === 1 || undefined, { what: 'read-only condition in the gauge', timeoutMs: 120_000, intervalMs: 250 });
    measure('remount,ro to the read-only condition', Date.now() - t0);
    const series = await seriesOf(pvName, 'read-only');
    expect(series).toContain(`storageclass="${cls}"`);
    // Not missing, not replaced: the same filesystem is still there.
    expect(await health(pvName, 'missing')).not.toBe(1);
    expect(await health(pvName, 'replaced')).not.toBe(1);
    const pvEvents = await waitFor(async () => {
      const ev = (await api.core.listEventForAllNamespaces({ fieldSelector: `involvedObject.kind=PersistentVolume,involvedObject.name=${pvName}` })).items.filter((e) => /read-only/i.test(e.message ?? ''));
      return ev.length > 0 ? ev : undefined;
    }, { what: 'an Event on the PV naming read-only', timeoutMs: 60_000 });
    expect(pvEvents[0]?.type).toBe('Warning');
    sh('mount', ['-o', 'remount,rw', hostPath]);
    readOnly.delete(hostPath);
    await waitFor(async () => (await health(pvName, 'read-only')) !== 1 || undefined, { what: 'read-only condition cleared', timeoutMs: 120_000, intervalMs: 250 });
    expect((await api.core.readPersistentVolume({ name: pvName })).metadata?.uid).toBe(pv.metadata?.uid);
  });

  /** Merge-patches the provisioner ConfigMap's data; resolves when the daemon has applied it. */
  async function patchConfigAndWait(data: Record<string, string>): Promise<void> {
    const applied = async (): Promise<number> =>
      (await scrape())
        .split('\n')
        .filter((l) => l.startsWith('local_volume_provisioner_config_reload_total{result="applied"}'))
        .reduce((s, l) => s + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
    const n = await applied();
    await api.core.patchNamespacedConfigMap({ name: 'local-volume-provisioner-config', namespace: 'kube-system', body: { data } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    await waitFor(async () => (await applied()) > n || undefined, { what: 'the ConfigMap change applied', timeoutMs: 180_000, intervalMs: 500 });
  }

  it('an Available PV whose mount vanished: kept without a health policy, deleted after the grace period with one, recreated when the mount returns', async () => {
    const hostPath = join(rn.disks.root, cls, 'spare');
    const pv = await waitFor(() => pvAt(hostPath), { what: `the PV of ${hostPath}`, timeoutMs: 60_000 });
    const pvName = pv.metadata?.name ?? '';
    expect(pv.status?.phase).toBe('Available');
    const t0 = Date.now();
    sh('umount', [hostPath]);
    await waitFor(async () => (await health(pvName, 'missing')) === 1 || undefined, { what: 'the spare volume missing', timeoutMs: 120_000, intervalMs: 250 });
    const graceMs = 15_000;
    // Without a policy (the default) it stays: watch it for the grace period and three more passes.
    // (A negative: nothing to wait for but time.)
    await new Promise((r) => setTimeout(r, graceMs + 3 * periodMs - (Date.now() - t0)));
    expect((await api.core.readPersistentVolume({ name: pvName })).metadata?.uid).toBe(pv.metadata?.uid);

    // The class's healthPolicy on: the PV goes after the grace period (counted from when the new
    // configuration first saw it missing, at the latest).
    const cm = await api.core.readNamespacedConfigMap({ name: 'local-volume-provisioner-config', namespace: 'kube-system' });
    const classes = cm.data?.['storageClassMap'] ?? '';
    expect(classes).toContain(`${cls}:`);
    const withPolicy = classes.replace(`${cls}:\n`, `${cls}:\n  healthPolicy:\n    deleteMissingAvailable: true\n    gracePeriod: 15s\n`);
    expect(withPolicy).not.toBe(classes);
    const t1 = Date.now();
    await patchConfigAndWait({ storageClassMap: withPolicy });
    const applied = Date.now();
    await waitFor(async () => ((await api.core.readPersistentVolume({ name: pvName }).catch(() => undefined))?.metadata?.uid === pv.metadata?.uid ? undefined : true), {
      what: `PV ${pvName} deleted by the health policy`,
      timeoutMs: 120_000,
      intervalMs: 250,
    });
    measure('policy applied to the missing Available PV deleted', Date.now() - applied);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(graceMs);
    measure('ConfigMap patch to PV deleted', Date.now() - t1);
    // The disk comes back: discovery makes the PV again (same name, new object).
    sh('mount', ['-t', 'tmpfs', '-o', 'size=16m', 'lsp-e2e', hostPath]);
    const again = await waitFor(async () => {
      const p = await pvAt(hostPath);
      return p && p.metadata?.uid !== pv.metadata?.uid && p.status?.phase === 'Available' ? p : undefined;
    }, { what: 'the PV made again', timeoutMs: 120_000, intervalMs: 250 });
    expect(again.metadata?.name).toBe(pvName);
  });

  it(`${MANY} volumes vanishing at once: the Events stay within the documented bound`, async () => {
    const many = 'many';
    await api.storage.createStorageClass({ body: { metadata: { name: many }, provisioner: 'kubernetes.io/no-provisioner', volumeBindingMode: 'WaitForFirstConsumer', reclaimPolicy: 'Delete' } });
    // One disk under the class dir, the 50 volumes mounted inside it: a lazy unmount of the disk takes all
    // 50 away at once (in one discovery pass), as a dying disk holding 50 volumes does.
    const disk = rn.disks.classDisk(many);
    for (let i = 0; i < MANY; i++) rn.disks.volume(many, `v${String(i).padStart(2, '0')}`);
    const cm = await api.core.readNamespacedConfigMap({ name: 'local-volume-provisioner-config', namespace: 'kube-system' });
    await patchConfigAndWait({
      storageClassMap: `${cm.data?.['storageClassMap'] ?? ''}${many}:\n  hostDir: /mnt/disks/${many}\n  mountDir: /mnt/disks/${many}\n`,
    });
    await waitFor(async () => (await api.core.listPersistentVolume()).items.filter((p) => p.spec?.storageClassName === many).length === MANY || undefined, {
      what: `${MANY} PVs of class ${many}`,
      timeoutMs: 180_000,
      intervalMs: 500,
    });
    const names = new Set((await api.core.listPersistentVolume()).items.filter((p) => p.spec?.storageClassName === many).map((p) => p.metadata?.name ?? ''));
    const eventsBefore = (await api.core.listEventForAllNamespaces()).items.length;
    const t0 = Date.now();
    sh('umount', ['-l', disk]);
    await waitFor(
      async () => {
        const text = await scrape();
        const abnormal = text.split('\n').filter((l) => l.startsWith(`${gauge}{`) && l.includes('condition="missing"') && l.endsWith(' 1') && [...names].some((n) => l.includes(`persistentvolume="${n}"`)));
        return abnormal.length === MANY || undefined;
      },
      { what: `all ${MANY} volumes missing in the gauge`, timeoutMs: 120_000, intervalMs: 500 },
    );
    measure(`${MANY} volumes unmounted to all ${MANY} in the gauge`, Date.now() - t0);
    // The bound (docs/operations.md, "Volume health"): PV and Pod Events share a budget of 10 per pass,
    // the rest is summed up in one VolumeHealthChanged Event on the Node.
    const [summary] = await waitFor(async () => {
      const ev = await eventsFor('Node', nodeName, 'VolumeHealthChanged');
      return ev.length > 0 ? ev : undefined;
    }, { what: 'the VolumeHealthChanged summary on the Node', timeoutMs: 60_000, intervalMs: 500 });
    expect(summary?.message).toMatch(/\b(4\d|50)\b/);
    const events = (await api.core.listEventForAllNamespaces()).items;
    const pvEvents = events.filter((e) => e.involvedObject.kind === 'PersistentVolume' && names.has(e.involvedObject.name ?? '') && e.reason === 'VolumeConditionAbnormal');
    console.log(`[measure] Events about the ${MANY} volumes: ${pvEvents.length} on PVs + ${String(summary?.count ?? 1)} summary on the Node (all Events ${eventsBefore} -> ${events.length})`);
    expect(pvEvents.length).toBeLessThanOrEqual(10);
    expect(pvEvents.length).toBeGreaterThan(0);
    const docs = readFileSync(join(import.meta.dirname, '..', 'docs', 'operations.md'), 'utf8');
    expect(docs).toContain('**10 per pass**');
  });
});
