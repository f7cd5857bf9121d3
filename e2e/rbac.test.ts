// Least privilege on the real control plane (issue 8, points 12-14). Global setup binds the
// provisioner identity to the base RBAC (deployment/kubernetes/rbac.yaml) and to both opt-in
// components (components/job-cleaning, components/taint-removal), as the other e2e files need
// Jobs. This file makes a second, real ServiceAccount bound to the base ClusterRole only and
// checks with SelfSubjectAccessReview what each grants, then runs the daemon as that identity:
// without Jobs RBAC and with useJobForCleaning off it must become ready, create PVs and clean
// in-process; with useJobForCleaning on it must say why it cannot go on, and recover.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1ResourceAttributes } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { adminClients, clientsFor, provisionerClients, serviceAccountIdentity, uniqueName, waitFor, type Clients, type ServiceAccountIdentity } from './harness/kube.ts';
import { deploymentDir } from './harness/manifests.ts';
import { createNode } from './harness/node-agent.ts';
import { createImmediateClass, releaseAndRediscover, startDaemon } from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { bindPV, configFiles, eventsAbout, logsWith, metric, waitPV } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const admin = adminClients();
const { core, storage } = admin;
const BASE_CLUSTER_ROLE = 'local-volume-provisioner-node-clusterrole';
const M = 'local_volume_provisioner_';

const show = (a: V1ResourceAttributes): string => `${a.verb} ${a.group ? `${a.group}/` : ''}${a.resource} ns=${a.namespace ?? '*'}`;

/** "verb resource ns=...: yes|no" for each, as the identity of `clients` sees it (SelfSubjectAccessReview). */
async function access(clients: Clients, attrs: readonly V1ResourceAttributes[]): Promise<string[]> {
  return Promise.all(
    attrs.map(async (a) => {
      const r = await clients.authz.createSelfSubjectAccessReview({ body: { spec: { resourceAttributes: a } } });
      return `${show(a)}: ${r.status?.allowed === true ? 'yes' : 'no'}`;
    }),
  );
}
const expectAccess = async (clients: Clients, allowed: readonly V1ResourceAttributes[], denied: readonly V1ResourceAttributes[]): Promise<void> => {
  expect(await access(clients, [...allowed, ...denied])).toEqual([...allowed.map((a) => `${show(a)}: yes`), ...denied.map((a) => `${show(a)}: no`)]);
};

const jobs = (namespace: string, ...verbs: string[]): V1ResourceAttributes[] => verbs.map((verb) => ({ verb, group: 'batch', resource: 'jobs', namespace }));
const nodes = (...verbs: string[]): V1ResourceAttributes[] => verbs.map((verb) => ({ verb, resource: 'nodes' }));
const componentConfig = (name: string): Record<string, string> =>
  (parseYaml(readFileSync(join(deploymentDir, 'components', name, 'configmap.yaml'), 'utf8')) as { data: Record<string, string> }).data;

let tmp = '';
let base: ServiceAccountIdentity | undefined;
let baseClients: Clients;

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'lsp-rbac-'));
  base = await serviceAccountIdentity(admin, { namespace: 'kube-system', name: uniqueName('lvp-base'), clusterRoles: [BASE_CLUSTER_ROLE], dir: tmp });
  baseClients = clientsFor(base.kubeconfig);
});
afterAll(async () => {
  await base?.remove();
  rmSync(tmp, { recursive: true, force: true });
});

describe('RBAC: the base ClusterRole and the opt-in components (SelfSubjectAccessReview)', () => {
  it('(a) base only: everything the daemon uses without Jobs is allowed; Jobs, node writes and node list/watch are denied', async () => {
    await expectAccess(
      baseClients,
      [
        ...['get', 'list', 'watch', 'create', 'delete'].map((verb) => ({ verb, resource: 'persistentvolumes' })),
        // The claim check before a clean and a PV delete (issue 17): read PVCs of any namespace, never write them.
        ...['get', 'list'].map((verb) => ({ verb, resource: 'persistentvolumeclaims', namespace: 'some-tenant' })),
        // Volume health (issue 19): the Pods of a claim's namespace, listed when its volume's health changes.
        { verb: 'list', resource: 'pods', namespace: 'some-tenant' },
        ...['get', 'list', 'watch'].map((verb) => ({ verb, group: 'storage.k8s.io', resource: 'storageclasses' })),
        ...['create', 'patch'].map((verb) => ({ verb, resource: 'events', namespace: 'kube-system' })),
        ...nodes('get'),
      ],
      [
        ...jobs('kube-system', 'create', 'list', 'watch', 'get', 'delete'),
        ...nodes('update', 'patch', 'list', 'watch'),
        ...['watch', 'create', 'update', 'patch', 'delete'].map((verb) => ({ verb, resource: 'persistentvolumeclaims', namespace: 'some-tenant' })),
        { verb: 'create', resource: 'pods', namespace: 'kube-system' },
        ...['get', 'watch', 'delete'].map((verb) => ({ verb, resource: 'pods', namespace: 'some-tenant' })),
        { verb: 'get', resource: 'secrets', namespace: 'kube-system' },
      ],
    );
  });

  it('(b) job-cleaning: Jobs in the daemon\'s namespace only, and useJobForCleaning on', async () => {
    await expectAccess(provisionerClients(), jobs('kube-system', 'get', 'list', 'watch', 'create', 'delete'), [
      ...jobs('kube-system', 'update', 'patch'),
      ...jobs('default', 'create', 'list'),
      { verb: 'create', resource: 'pods', namespace: 'kube-system' },
    ]);
    expect(componentConfig('job-cleaning')).toEqual({ useJobForCleaning: 'true' });
  });

  it('(c) taint-removal: nodes update (the base identity may not), and removeNodeNotReadyTaint on', async () => {
    await expectAccess(provisionerClients(), nodes('get', 'update'), nodes('delete', 'patch', 'list', 'watch'));
    await expectAccess(baseClients, [], nodes('update'));
    expect(componentConfig('taint-removal')).toMatchObject({ removeNodeNotReadyTaint: 'true' });
  });
});

describe.skipIf(!isRoot())('the daemon with the base RBAC only (no Jobs role)', () => {
  const host = new HostFixtures('lsp-rbac-');
  const node = uniqueName('rbac-node');
  const ns = uniqueName('rbac-ns');
  const cls = uniqueName('rbac-fs');
  let prov: ProvisionerProcess | undefined;
  let volDir = '';
  const name = (entry: string): string => generatePVName(entry, node, cls);
  const requests = async (verb: string, resource: string): Promise<number> => metric(prov!, `${M}kube_requests_total`, { verb, resource });
  const readyDetail = async (): Promise<string> => (await fetch(`http://127.0.0.1:${prov!.port}/ready?verbose`)).text();

  beforeAll(async () => {
    await createNode(core, node);
    await core.createNamespace({ body: { metadata: { name: ns } } });
    await createImmediateClass(storage, cls);
    const dir = host.mkdir('fs');
    volDir = host.tmpfs(8, 'fs', 'vol');
    const files = configFiles({ useJobForCleaning: false, classes: { [cls]: { hostDir: '/mnt/host/fs', mountDir: dir } } });
    prov = await startDaemon(host, { nodeName: node, files, kubeconfig: base!.kubeconfig });
  });
  afterAll(async () => {
    await prov?.stop();
    host.cleanup();
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
  });

  it('useJobForCleaning off: ready, creates the PV, cleans a Released PV in-process; one Jobs list (403), never a watch', async () => {
    const pv = await waitPV(core, name('vol'));
    await waitFor(() => prov!.ready(), { what: 'the daemon to be ready' });
    writeFileSync(join(volDir, 'data'), 'user data');
    const claim = await bindPV(core, pv, ns);
    const fresh = await releaseAndRediscover(core, ns, pv, claim);
    expect(fresh.metadata?.uid).not.toBe(pv.metadata?.uid);
    expect(readdirSync(volDir)).toEqual([]); // cleaned, by the daemon itself
    expect(await metric(prov!, `${M}persistentvolume_delete_total`, { type: 'process' })).toBe(1);
    // Expected with the base RBAC while no class uses Jobs: one debug line, no stack, nothing at info or above.
    const forbidden = logsWith(prov!, 'not allowed to list cleanup Jobs; useJobForCleaning is off');
    expect(forbidden).toHaveLength(1);
    expect(forbidden[0]?.['level']).toBe('debug');
    expect(JSON.stringify(forbidden[0])).not.toMatch(/\bat \S+ \(|"stack"/);
    const loud = prov!.logLines().filter((l) => l['level'] !== 'debug' && l['level'] !== 'trace' && /\b403\b|forbidden/i.test(JSON.stringify(l)));
    expect(loud).toEqual([]);
    expect(await requests('list', 'jobs')).toBe(1);
    expect(await requests('watch', 'jobs')).toBe(0);
    expect(await requests('create', 'jobs')).toBe(0);
  });

  it('useJobForCleaning on without the Role: not ready with the reason and a Warning Event, then back once it is off again', async () => {
    const cfg = host.path('config');
    writeFileSync(join(cfg, 'useJobForCleaning'), 'true');
    prov!.child.kill('SIGHUP');
    await waitFor(async () => !(await prov!.ready()), { what: 'the daemon to report not ready' });
    expect(await readyDetail()).toMatch(/cannot list cleanup Jobs in namespace kube-system although useJobForCleaning is on: .*forbidden/);
    const events = await waitFor(
      async () => {
        const evs = (await eventsAbout(core, 'default', 'Node', node)).filter((e) => e.reason === 'CleanupJobsForbidden');
        return evs.length > 0 ? evs : undefined;
      },
      { what: 'a CleanupJobsForbidden Event on the Node' },
    );
    expect(events[0]?.type).toBe('Warning');
    expect(events[0]?.message).toMatch(/grant the Role of deployment\/kubernetes\/components\/job-cleaning, or set useJobForCleaning to false/);
    expect(await requests('create', 'jobs')).toBe(0);

    writeFileSync(join(cfg, 'useJobForCleaning'), 'false');
    prov!.child.kill('SIGHUP');
    await waitFor(() => prov!.ready(), { what: 'the daemon to be ready again' });
  });
});

describe('taint-removal: the node update on the real API', () => {
  const host = new HostFixtures('lsp-rbac-taint-');
  const TAINT = 'sig-storage-local-static-provisioner/agent-not-ready';
  const cls = uniqueName('rbac-taint');
  const daemons: ProvisionerProcess[] = [];

  /** A Node started with the taint, and a daemon for it that is configured to remove it. */
  async function taintedNodeWithDaemon(kubeconfig: string): Promise<{ node: string; prov: ProvisionerProcess }> {
    const node = uniqueName('taint-node');
    await createNode(core, node);
    const n = await core.readNode({ name: node });
    await core.replaceNode({ name: node, body: { ...n, spec: { ...n.spec, taints: [{ key: TAINT, effect: 'NoSchedule' }] } } });
    const files = configFiles({ classes: { [cls]: { hostDir: '/mnt/host/none', mountDir: host.mkdir(node, 'disks') } } });
    files['removeNodeNotReadyTaint'] = 'true';
    files['provisionerNotReadyNodeTaintKey'] = TAINT;
    const prov = await startDaemon(host, { nodeName: node, files, kubeconfig, dirName: `${node}/config`, logName: `${node}.log` });
    daemons.push(prov);
    return { node, prov };
  }
  const taints = async (node: string): Promise<string[]> => ((await core.readNode({ name: node })).spec?.taints ?? []).map((t) => t.key);

  beforeAll(async () => {
    await createImmediateClass(storage, cls);
  });
  afterAll(async () => {
    for (const d of daemons) await d.stop();
    host.cleanup();
  });

  it('(c) with the component the daemon removes its Node\'s startup taint; with the base alone the update is forbidden and retried, the daemon stays ready', async () => {
    const withComponent = await taintedNodeWithDaemon(inject('provisionerKubeconfig'));
    const baseOnly = await taintedNodeWithDaemon(base!.kubeconfig);
    await waitFor(async () => (await taints(withComponent.node)).length === 0, { what: `the taint to be removed from ${withComponent.node}` });
    // (the log line follows the update's answer: wait for it rather than read at once)
    await waitFor(() => logsWith(withComponent.prov, `removed node taint ${TAINT}`).length === 1, { what: 'the taint removal to be logged' });

    await waitFor(() => logsWith(baseOnly.prov, 'failed to remove node taint; will retry').length > 0, { what: 'the forbidden node update to be logged' });
    expect(JSON.stringify(logsWith(baseOnly.prov, 'failed to remove node taint; will retry')[0])).toMatch(/forbidden/i);
    expect(await taints(baseOnly.node)).toEqual([TAINT]);
    expect(await baseOnly.prov.ready()).toBe(true);
  });
});
