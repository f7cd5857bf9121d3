// local-volume-node-cleanup against the real control plane: run as its own ServiceAccount
// with the RBAC of deployment/kubernetes/components/node-cleanup, local PVs bound to PVCs
// by the real PV binder, Nodes deleted and re-created.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1NodeSelectorTerm, V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { freePort } from './harness/controlplane.ts';
import { adminClients, apiStatus, serviceAccountKubeconfig, uniqueName, waitFor } from './harness/kube.ts';
import { applyManifests, deleteManifests, deploymentDir } from './harness/manifests.ts';
import { createNode, hostnameLabel } from './harness/node-agent.ts';
import { createImmediateClass } from './support/cleanup.ts';
import { keepLog, metric, readPV, waitMetric } from './support/hot-reload.ts';
import { metricValue, startNodeCleanup, type ProvisionerProcess } from './support/provisioner.ts';

const admin = adminClients();
const { core, storage } = admin;
const component = join(deploymentDir, 'components', 'node-cleanup');
// The component as shipped: its RBAC is what the controller runs with. The Deployment is only
// stored (no deployment controller here): the API server checks its types and required fields.
const componentFiles = ['serviceaccount.yaml', 'rbac.yaml', 'deployment.yaml'].map((f) => join(component, f));
// Short, yet long enough for the test to re-create a Node within it on a loaded machine.
const DELAY_S = 5;
const timersMetric = 'local_volume_node_cleanup_deletion_timers_total';

const hostTerm = (node: string): V1NodeSelectorTerm => ({ matchExpressions: [{ key: hostnameLabel, operator: 'In', values: [node] }] });

describe('local-volume-node-cleanup', () => {
  let tmp = '';
  const sc = uniqueName('nc-local');
  const nodeA = uniqueName('nc-node-a');
  const nodeB = uniqueName('nc-node-b');
  let ns = '';
  let ctl: ProvisionerProcess | undefined;
  const pvNames: string[] = [];

  const createPV = async (name: string, terms: V1NodeSelectorTerm[], provisionedBy: string): Promise<V1PersistentVolume> => {
    pvNames.push(name);
    return core.createPersistentVolume({
      body: {
        // As the provisioner makes them: the annotation tells the PV binder that an external
        // deleter owns Released PVs (without it the binder marks them Failed).
        metadata: { name, annotations: { 'pv.kubernetes.io/provisioned-by': provisionedBy } },
        spec: {
          capacity: { storage: '1Gi' },
          accessModes: ['ReadWriteOnce'],
          persistentVolumeReclaimPolicy: 'Delete',
          storageClassName: sc,
          volumeMode: 'Filesystem',
          local: { path: `/mnt/disks/${name}` },
          nodeAffinity: { required: { nodeSelectorTerms: terms } },
        },
      },
    });
  };

  /** A PVC for this PV (volumeName pre-set, so the binder binds exactly this pair). */
  const claim = (name: string, pv: string): Promise<V1PersistentVolumeClaim> =>
    core.createNamespacedPersistentVolumeClaim({
      namespace: ns,
      body: {
        metadata: { name },
        spec: { storageClassName: sc, volumeName: pv, accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
      },
    });

  const readPVC = async (name: string): Promise<V1PersistentVolumeClaim | undefined> => {
    try {
      return await core.readNamespacedPersistentVolumeClaim({ namespace: ns, name });
    } catch (err) {
      if (apiStatus(err) === 404) return undefined;
      throw err;
    }
  };
  const uids = async (pvs: readonly string[], pvcs: readonly string[]): Promise<Array<string | undefined>> => [
    ...(await Promise.all(pvs.map(async (p) => (await readPV(core, p))?.metadata?.uid))),
    ...(await Promise.all(pvcs.map(async (c) => (await readPVC(c))?.metadata?.uid))),
  ];
  const value = (name: string, labels: Record<string, string> = {}): Promise<number> => metric(ctl as ProvisionerProcess, name, labels);
  const atLeast = (name: string, labels: Record<string, string>, n: number, what: string): Promise<number> =>
    waitMetric(ctl as ProvisionerProcess, name, labels, (v) => v >= n, { what, timeoutMs: 60_000 });

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'lsp-e2e-node-cleanup-'));
    await applyManifests(inject('kubeconfig'), componentFiles);
    const kubeconfig = await serviceAccountKubeconfig(admin, 'kube-system', 'local-volume-node-cleanup', join(tmp, 'node-cleanup.kubeconfig'));
    ns = uniqueName('nc');
    await core.createNamespace({ body: { metadata: { name: ns } } });
    await createImmediateClass(storage, sc);
    await createNode(core, nodeA);
    await createNode(core, nodeB);

    await createPV(`${nodeA}-pv1`, [hostTerm(nodeA)], `local-volume-provisioner-${nodeA}`);
    await createPV(`${nodeA}-pv2`, [hostTerm(nodeA)], `local-volume-provisioner-${nodeA}`);
    await createPV(`${nodeB}-pv1`, [hostTerm(nodeB)], `local-volume-provisioner-${nodeB}`);
    // Pinned to a zone, not to a host: the Go controller would take it for "on a deleted node".
    await createPV(`${sc}-zonal`, [{ matchExpressions: [{ key: 'topology.kubernetes.io/zone', operator: 'In', values: ['e2e-zone'] }] }], 'hand-made');
    await claim('a1', `${nodeA}-pv1`);
    await claim('a2', `${nodeA}-pv2`);
    await claim('b1', `${nodeB}-pv1`);
    await claim('zonal', `${sc}-zonal`);
    for (const c of ['a1', 'a2', 'b1', 'zonal']) {
      await waitFor(async () => (await readPVC(c))?.status?.phase === 'Bound', { what: `PVC ${ns}/${c} to be Bound`, timeoutMs: 60_000 });
    }

    ctl = startNodeCleanup({
      kubeconfig,
      port: await freePort(),
      logFile: join(tmp, 'node-cleanup.log'),
      args: [`--storageclass-names=${sc}`, `--pvc-deletion-delay=${DELAY_S}s`, '--stale-pv-discovery-interval=1s', '--worker-threads=2'],
    });
    const c = ctl;
    await waitFor(
      async () => {
        if (c.child.exitCode !== null) throw new Error(`node-cleanup exited with ${String(c.child.exitCode)}: ${c.logs().slice(-2000)}`);
        return c.ready();
      },
      { what: 'node-cleanup to be ready (caches synced)', timeoutMs: 60_000 },
    );
  });

  afterAll(async () => {
    await ctl?.stop();
    if (ctl) keepLog(ctl.logFile, 'node-cleanup');
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    for (const pv of pvNames) await core.deletePersistentVolume({ name: pv }).catch(() => undefined);
    for (const n of [nodeA, nodeB]) await core.deleteNode({ name: n }).catch(() => undefined);
    await storage.deleteStorageClass({ name: sc }).catch(() => undefined);
    await deleteManifests(inject('kubeconfig'), componentFiles).catch(() => undefined);
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('never touches a PV whose node affinity is not pinned to hostnames', async () => {
    const c = ctl as ProvisionerProcess;
    await waitFor(() => c.logs().includes(`PV ${sc}-zonal is not pinned to hostnames`), { what: 'the controller to report the zonal PV as out of reach' });
  });

  it('deletes nothing when a Node is deleted and re-created within the delay', async () => {
    const before = await uids([`${nodeA}-pv1`, `${nodeA}-pv2`], ['a1', 'a2']);
    const started = await value(timersMetric, { outcome: 'started' });
    const returned = await value(timersMetric, { outcome: 'node_returned' });
    await core.deleteNode({ name: nodeA });
    // The controller saw the Node go: a deletion timer per PV of node A...
    await atLeast(timersMetric, { outcome: 'started' }, started + 2, 'deletion timers for the two PVs of node A');
    await createNode(core, nodeA);
    // ...and both delays ended, as the controller observed, with the Node back.
    await atLeast(timersMetric, { outcome: 'node_returned' }, returned + 2, 'both deletion delays to end with node A back');
    expect(await uids([`${nodeA}-pv1`, `${nodeA}-pv2`], ['a1', 'a2'])).toEqual(before);
    expect(await value('local_volume_node_cleanup_persistentvolumeclaim_delete_total')).toBe(0);
    expect(await value('local_volume_node_cleanup_persistentvolume_delete_total')).toBe(0);
    const events = await core.listNamespacedEvent({ namespace: ns, fieldSelector: 'involvedObject.name=a1' });
    expect(events.items.map((e) => e.reason)).toContain('ReferencedNodeDeleted');
  });

  it('after a Node has been gone for the delay, deletes its PVCs, then its PVs; other nodes and the zonal PV untouched', async () => {
    const keep = await uids([`${nodeB}-pv1`, `${sc}-zonal`], ['b1', 'zonal']);
    expect(keep.every((u) => u !== undefined)).toBe(true);
    const expired = await value(timersMetric, { outcome: 'expired' });
    await core.deleteNode({ name: nodeA });

    await waitFor(async () => (await readPVC('a1')) === undefined && (await readPVC('a2')) === undefined, {
      what: `PVCs ${ns}/a1 and a2 of node A to be deleted`,
      timeoutMs: 60_000,
    });
    // The PV binder releases the PVs; the controller then deletes them (Released, reclaim Delete).
    await waitFor(async () => (await readPV(core, `${nodeA}-pv1`)) === undefined && (await readPV(core, `${nodeA}-pv2`)) === undefined, {
      what: `PVs of node A to be deleted`,
      timeoutMs: 60_000,
    });
    expect(await value(timersMetric, { outcome: 'expired' })).toBe(expired + 2);
    expect(await value('local_volume_node_cleanup_persistentvolumeclaim_delete_total')).toBe(2);
    expect(await value('local_volume_node_cleanup_persistentvolume_delete_total', { phase: 'Released' })).toBe(2);
    expect(await value('local_volume_node_cleanup_persistentvolumeclaim_delete_failed_total')).toBe(0);

    expect(await uids([`${nodeB}-pv1`, `${sc}-zonal`], ['b1', 'zonal'])).toEqual(keep);
    expect((await readPV(core, `${nodeB}-pv1`))?.status?.phase).toBe('Bound');
    expect((await readPV(core, `${sc}-zonal`))?.status?.phase).toBe('Bound');
    // Every request of the controller was allowed by the component's RBAC.
    const text = await (ctl as ProvisionerProcess).metrics();
    expect(metricValue(text, 'local_volume_node_cleanup_kube_requests_total', { code: '403' })).toBe(0);
  });
});
