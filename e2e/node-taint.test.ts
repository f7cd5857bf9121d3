// removeNodeNotReadyTaint against the real control plane: the daemon, as the restricted
// provisioner identity, removes the start-up taint from its Node once a discovery pass has
// succeeded (never before), and keeps every other taint. The Go provisioner never does
// (inverted condition at its call site).
import { RbacAuthorizationV1Api, type V1Taint } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { hostnameLabel } from './harness/node-agent.ts';
import { startDaemon } from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { configFiles, createLocalStorageClass, keepLog, logsWith, metric, pvsOfNode, waitMetric } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';

const { core, storage, kc } = adminClients();
const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
const TAINT = 'example.com/agent-not-ready';
const other: V1Taint = { key: 'example.com/keep-me', value: 'yes', effect: 'NoSchedule' };

describe.runIf(isRoot())('removeNodeNotReadyTaint', () => {
  const host = new HostFixtures('lsp-taint-');
  const node = uniqueName('taint-node');
  const sc = uniqueName('taint-sc');
  // nodes update is granted here, not by the base RBAC (that grant is an opt-in component).
  const grant = uniqueName('lsp-e2e-taint');
  let prov: ProvisionerProcess | undefined;

  const taints = async (): Promise<V1Taint[]> => (await core.readNode({ name: node })).spec?.taints ?? [];

  beforeAll(async () => {
    await rbac.createClusterRole({ body: { metadata: { name: grant }, rules: [{ apiGroups: [''], resources: ['nodes'], verbs: ['get', 'update'] }] } });
    await rbac.createClusterRoleBinding({
      body: {
        metadata: { name: grant },
        subjects: [{ kind: 'ServiceAccount', name: 'local-volume-provisioner', namespace: 'kube-system' }],
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: grant },
      },
    });
    await core.createNode({
      body: {
        metadata: { name: node, labels: { [hostnameLabel]: node } },
        spec: {
          taints: [
            { key: TAINT, effect: 'NoSchedule' },
            // Same key, another value and effect: removed too (every taint with that key).
            { key: TAINT, value: 'booting', effect: 'NoExecute' },
            other,
          ],
        },
      },
    });
  });

  afterAll(async () => {
    await prov?.stop();
    if (prov) keepLog(prov.logFile, 'node-taint');
    for (const pv of await pvsOfNode(core, node).catch(() => [])) await core.deletePersistentVolume({ name: pv.metadata?.name ?? '' }).catch(() => undefined);
    await core.deleteNode({ name: node }).catch(() => undefined);
    await storage.deleteStorageClass({ name: sc }).catch(() => undefined);
    await rbac.deleteClusterRoleBinding({ name: grant }).catch(() => undefined);
    await rbac.deleteClusterRole({ name: grant }).catch(() => undefined);
    host.cleanup();
  });

  it('keeps the taint while discovery fails, removes it (and only it) once a pass succeeds', async () => {
    const hostDir = host.mkdir('disks');
    host.tmpfs(8, 'disks', 'vol1');
    const files = {
      ...configFiles({ classes: { [sc]: { hostDir, mountDir: hostDir } } }),
      removeNodeNotReadyTaint: 'true',
      provisionerNotReadyNodeTaintKey: TAINT,
    };
    // The StorageClass does not exist yet: every discovery pass fails, the daemon is not ready.
    prov = await startDaemon(host, { nodeName: node, files });
    const p = prov;
    await waitMetric(p, 'local_volume_provisioner_discovery_errors_total', { class: sc }, (v) => v >= 2, {
      what: 'two failed discovery passes',
      timeoutMs: 60_000,
    });
    expect(await p.ready()).toBe(false);
    const before = await taints();
    expect(before.filter((t) => t.key === TAINT)).toHaveLength(2);

    await createLocalStorageClass(storage, sc);
    await waitFor(async () => (await taints()).every((t) => t.key !== TAINT), { what: `taint ${TAINT} to be removed from ${node}`, timeoutMs: 60_000 });
    // Every other taint kept as it was (ours, and the one the API server adds to a new Node).
    expect(await taints()).toEqual(before.filter((t) => t.key !== TAINT));
    expect(await taints()).toContainEqual(expect.objectContaining(other));
    expect(await p.ready()).toBe(true);
    expect(await pvsOfNode(core, node)).toHaveLength(1);
    expect(logsWith(p, `removed node taint ${TAINT} from node ${node}`)).toHaveLength(1);

    // One Node update did it (a full update: the reason the identity needs nodes update).
    expect(await metric(p, 'local_volume_provisioner_kube_requests_total', { verb: 'update', resource: 'nodes' })).toBe(1);
  });
});
