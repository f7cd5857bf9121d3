// examples/ and the user docs against the real API server: every example manifest is accepted (server-side
// apply, dryRun=All); the provisioner's pod passes Pod Security only in a namespace labelled as
// examples/namespace-pod-security.yaml says; and docs/getting-started.md's embedded-plane path works: with the
// Immediate class of examples/immediate-binding.yaml the claim binds to a PV the daemon made, and a deleted
// claim's volume is cleaned and offered again.
import { appendFileSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { KubernetesObject, V1PodSpec } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { adminClients, apiStatus, uniqueName, waitFor } from './harness/kube.ts';
import { ensureKustomizeBinary, kustomizeBuild } from './harness/kustomize.ts';
import { applyObjects, deploymentDir, manifestObjects } from './harness/manifests.ts';
import { createNode } from './harness/node-agent.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { startDaemon } from './support/cleanup.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const examplesDir = resolve(deploymentDir, '..', '..', 'examples');
const clusterScoped = new Set(['Namespace', 'StorageClass', 'PersistentVolume', 'ClusterRole', 'ClusterRoleBinding']);
const { core, storage } = adminClients();

type Obj = KubernetesObject & { kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string> } };
const exampleObjects = (file: string): Obj[] => manifestObjects(readFileSync(join(examplesDir, file), 'utf8'));
/** Namespaced objects go to `namespace`. */
const into = (objs: Obj[], namespace: string): Obj[] => objs.map((o) => (clusterScoped.has(o.kind) ? o : { ...o, metadata: { ...o.metadata, namespace } }));

describe('examples/ on the real API server', () => {
  const ns = uniqueName('examples');
  const psaNamespaces: string[] = [];

  beforeAll(async () => {
    await core.createNamespace({ body: { metadata: { name: ns } } });
  });
  afterAll(async () => {
    for (const n of [ns, ...psaNamespaces]) await core.deleteNamespace({ name: n }).catch(() => undefined);
  });

  it('every example manifest is accepted (server-side apply, dryRun=All)', async () => {
    const files = readdirSync(examplesDir).filter((f) => f.endsWith('.yaml')).sort();
    expect(files.length).toBeGreaterThan(0);
    const kinds = new Set<string>();
    for (const file of files) {
      const objs = into(exampleObjects(file), ns);
      expect(objs.length, file).toBeGreaterThan(0);
      for (const o of objs) kinds.add(o.kind);
      const applied = await applyObjects(inject('kubeconfig'), objs, `examples/${file}`, { dryRun: 'All', fieldManager: 'lsp-e2e-examples' });
      expect(applied).toHaveLength(objs.length);
    }
    for (const k of ['StorageClass', 'StatefulSet', 'PersistentVolumeClaim', 'Pod', 'Namespace']) expect([...kinds], k).toContain(k);
  });

  it('Pod Security: the provisioner pod is admitted where the namespace is labelled privileged, rejected under baseline', async () => {
    const rendered = manifestObjects(await kustomizeBuild(await ensureKustomizeBinary({ log: () => undefined }), deploymentDir));
    const ds = rendered.find((o) => o.kind === 'DaemonSet') as (Obj & { spec: { template: { spec: V1PodSpec } } }) | undefined;
    if (!ds) throw new Error('no DaemonSet in the base');
    const example = exampleObjects('namespace-pod-security.yaml').find((o) => o.kind === 'Namespace');
    const labels = example?.metadata.labels ?? {};
    expect(labels['pod-security.kubernetes.io/enforce']).toBe('privileged');
    const tryPod = async (namespace: string): Promise<void> => {
      await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: 'local-volume-provisioner' } } });
      const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'provisioner', namespace }, spec: ds.spec.template.spec };
      await applyObjects(inject('kubeconfig'), [pod], `the base DaemonSet's pod in ${namespace}`, { dryRun: 'All' });
    };
    const privileged = uniqueName('psa-privileged');
    const baseline = uniqueName('psa-baseline');
    psaNamespaces.push(privileged, baseline);
    await core.createNamespace({ body: { metadata: { name: privileged, labels } } });
    await core.createNamespace({ body: { metadata: { name: baseline, labels: { 'pod-security.kubernetes.io/enforce': 'baseline' } } } });
    await tryPod(privileged);
    await expect(tryPod(baseline)).rejects.toThrow(/violates PodSecurity \W*baseline:latest\W*: hostPath volumes .*privileged/);
  });
});

describe.skipIf(!isRoot())('getting started on the embedded control plane (docs/getting-started.md)', () => {
  const host = new HostFixtures('lsp-getting-started-');
  const node = uniqueName('gs-node');
  const ns = uniqueName('gs');
  const objs = exampleObjects('immediate-binding.yaml');
  const sc = objs.find((o) => o.kind === 'StorageClass');
  const claim = objs.find((o) => o.kind === 'PersistentVolumeClaim');
  let prov: ProvisionerProcess | undefined;
  let configDir = '';
  const demoClasses: string[] = [];

  beforeAll(async () => {
    await core.createNamespace({ body: { metadata: { name: ns } } });
    await createNode(core, node);
    // As in `npm run demo`: the daemon runs with a class of its own (WaitForFirstConsumer) ...
    const demoClass = uniqueName('gs-demo-fs');
    await storage.createStorageClass({
      body: { metadata: { name: demoClass }, provisioner: 'kubernetes.io/no-provisioner', volumeBindingMode: 'WaitForFirstConsumer', reclaimPolicy: 'Delete' },
    });
    demoClasses.push(demoClass);
    const demoDir = host.mkdir('disks', 'fs');
    prov = await startDaemon(host, {
      nodeName: node,
      files: { storageClassMap: `${demoClass}:\n  hostDir: ${demoDir}\n  mountDir: ${demoDir}\n`, useNodeNameOnly: 'true\n' },
    });
    configDir = host.path('config');
  });

  afterAll(async () => {
    await prov?.stop();
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    await core.deletePersistentVolume({ name: generatePVName('vol1', node, sc?.metadata.name ?? '') }).catch(() => undefined);
    for (const c of [...demoClasses, ...(sc ? [sc.metadata.name] : [])]) await storage.deleteStorageClass({ name: c }).catch(() => undefined);
    await core.deleteNode({ name: node }).catch(() => undefined);
    host.cleanup();
  });

  it('an Immediate class added to the running config binds the claim to the daemon\'s PV; a deleted claim\'s volume is cleaned and offered again', async () => {
    if (!sc || !claim) throw new Error('examples/immediate-binding.yaml needs a StorageClass and a PersistentVolumeClaim');
    expect((sc as Obj & { volumeBindingMode?: string }).volumeBindingMode).toBe('Immediate');
    // ... then the steps of the page: the example applied, a tmpfs mounted, the class appended to the running config.
    await applyObjects(inject('kubeconfig'), into(objs, ns), 'examples/immediate-binding.yaml');
    const dir = host.mkdir('immediate');
    host.tmpfs(64, 'immediate', 'vol1');
    appendFileSync(join(configDir, 'storageClassMap'), `${sc.metadata.name}:\n  hostDir: ${dir}\n  mountDir: ${dir}\n`);
    const pvName = generatePVName('vol1', node, sc.metadata.name);
    const bound = await waitFor(
      async () => {
        const c = await core.readNamespacedPersistentVolumeClaim({ namespace: ns, name: claim.metadata.name });
        return c.status?.phase === 'Bound' ? c : undefined;
      },
      { what: `claim ${claim.metadata.name} to be Bound`, timeoutMs: 90_000 },
    );
    expect(bound.spec?.volumeName).toBe(pvName);
    const pv = await core.readPersistentVolume({ name: pvName });
    expect(pv.spec?.capacity?.['storage']).toBe('64Mi');
    expect(pv.spec?.local?.path).toBe(host.path('immediate', 'vol1'));
    writeFileSync(join(host.path('immediate', 'vol1'), 'data'), 'written by the user');

    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim.metadata.name });
    const again = await waitFor(
      async () => {
        try {
          const p = await core.readPersistentVolume({ name: pvName });
          return p.metadata?.uid !== pv.metadata?.uid && p.status?.phase === 'Available' ? p : undefined;
        } catch (err) {
          if (apiStatus(err) === 404) return undefined;
          throw err;
        }
      },
      { what: `PV ${pvName} cleaned, deleted and created again as Available`, timeoutMs: 90_000 },
    );
    expect(again.spec?.local?.path).toBe(pv.spec?.local?.path);
    expect(readdirSync(host.path('immediate', 'vol1'))).toEqual([]);
  });
});
