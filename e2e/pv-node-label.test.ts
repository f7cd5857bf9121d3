// --pv-node-label end to end (issue 12): the daemon lists and watches only PVs
// labelled for its node and unlabelled ones (not the 40 PVs another node has
// labelled), labels the PVs it creates and an existing PV of its node made
// before the option, and still creates, cleans and refuses as before: a forged
// PV (labelled for this node) naming the volume of a Bound PV made by hand
// (unlabelled) is refused, the volume keeps its files.
import { randomUUID } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PatchStrategy, setHeaderOptions, type V1PersistentVolume } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { applyManifests, componentManifests, deleteManifests } from './harness/manifests.ts';
import { createNode } from './harness/node-agent.ts';
import { createImmediateClass, handMadeLocalPV, keepLogs, pvEvents, releaseAndRediscover, startDaemon } from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { bindPV, configFiles, readPV, waitPV } from './support/hot-reload.ts';
import { metricValue, type ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';
import { PV_NODE_LABEL } from '../src/volume/pv-node-label.ts';

const { core, storage } = adminClients();
const HOST_DIR = '/mnt/host/fs';
const FOREIGN = 40;

describe.skipIf(!isRoot())('--pv-node-label: a node lists and watches only its PVs, and behaves as before', () => {
  const host = new HostFixtures('lsp-pvlabel-');
  const node = uniqueName('label-node');
  const other = uniqueName('label-other');
  const ns = uniqueName('label-ns');
  const cls = uniqueName('label-fs');
  const madeHere: string[] = [];
  let prov: ProvisionerProcess | undefined;
  let fsDir = '';

  const localPV = (name: string, n: string, entry: string, meta: V1PersistentVolume['metadata'] = {}, spec: Partial<V1PersistentVolume['spec']> = {}): V1PersistentVolume =>
    handMadeLocalPV({ name, node: n, cls, path: `${HOST_DIR}/${entry}`, meta, spec });
  const create = async (pv: V1PersistentVolume): Promise<V1PersistentVolume> => {
    madeHere.push(pv.metadata?.name ?? '');
    return core.createPersistentVolume({ body: pv });
  };
  const ownedBy = (n: string) => ({ 'pv.kubernetes.io/provisioned-by': `local-volume-provisioner-${n}` });
  const fill = (entry: string): string[] => {
    mkdirSync(join(fsDir, entry, 'sub'), { recursive: true });
    writeFileSync(join(fsDir, entry, 'data.txt'), `data of ${entry}`);
    return readdirSync(join(fsDir, entry)).sort();
  };
  /** The PV informers' "informer synced" lines (debug): selector -> objects listed. */
  const synced = (p: ProvisionerProcess): Map<string, number> =>
    new Map(
      p
        .logLines()
        .filter((l) => l['msg'] === 'informer synced' && l['resource'] === 'persistentvolumes')
        .map((l) => [String(l['selector']), Number(l['listed'])]),
    );
  const ownSelector = (): string => `${PV_NODE_LABEL}=${node}`;

  beforeAll(async () => {
    await applyManifests(inject('kubeconfig'), componentManifests('pv-node-label'));
    await createNode(core, node);
    await createNode(core, other);
    await core.createNamespace({ body: { metadata: { name: ns } } });
    await createImmediateClass(storage, cls);
    fsDir = host.mkdir('fs');
    for (const v of ['vol-a', 'vol-old', 'manual', 'vol-moved']) host.tmpfs(8, 'fs', v);
    // Another node's PVs, labelled by its daemon: never listed nor watched here.
    for (let i = 0; i < FOREIGN; i++) await create(localPV(`${other}-pv-${i}`, other, `vol-b${i}`, { labels: { [PV_NODE_LABEL]: other }, annotations: ownedBy(other) }));
    // A PV of this node made before the option (no label): adopted and labelled.
    await create(localPV(generatePVName('vol-old', node, cls), node, 'vol-old', { annotations: ownedBy(node) }));
    const files = configFiles({ classes: { [cls]: { hostDir: HOST_DIR, mountDir: fsDir, namePattern: 'vol-*' } } });
    prov = await startDaemon(host, { nodeName: node, files, args: ['--pv-node-label=true'], logLevel: 'debug' });
  });

  afterAll(async () => {
    await prov?.stop();
    for (const name of madeHere) await core.deletePersistentVolume({ name }).catch(() => undefined);
    await core.deleteCollectionPersistentVolume({ labelSelector: `${PV_NODE_LABEL}=${node}` }).catch(() => undefined);
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    await deleteManifests(inject('kubeconfig'), componentManifests('pv-node-label')).catch(() => undefined);
    keepLogs(host, node, ['provisioner.log', 'provisioner-2.log']);
    host.cleanup();
  });

  it('creates its PVs with the node label, labels its existing PV, and lists by label only (not the other node\'s PVs)', async () => {
    const created = await waitPV(core, generatePVName('vol-a', node, cls));
    expect(created.metadata?.labels?.[PV_NODE_LABEL]).toBe(node);
    const old = await waitFor(
      async () => {
        const pv = await readPV(core, generatePVName('vol-old', node, cls));
        return pv?.metadata?.labels?.[PV_NODE_LABEL] === node ? pv : undefined;
      },
      { what: 'the pre-existing PV of this node to be labelled', timeoutMs: 60_000 },
    );
    expect(old.metadata?.annotations).toEqual(ownedBy(node)); // only the label was added
    const lists = synced(prov!);
    expect([...lists.keys()].sort()).toEqual([`!${PV_NODE_LABEL}`, ownSelector()].sort());
    // At start nothing carried this node's label yet; the unlabelled list can never contain the other node's PVs.
    expect(lists.get(ownSelector())).toBe(0);
    const all = (await core.listPersistentVolume()).items;
    expect(all.filter((p) => p.metadata?.labels?.[PV_NODE_LABEL] === other)).toHaveLength(FOREIGN);
    expect(lists.get(`!${PV_NODE_LABEL}`)).toBeLessThanOrEqual(all.length - FOREIGN);
  });

  it('a legitimate release is cleaned and the volume rediscovered, labelled', async () => {
    const pv = await waitPV(core, generatePVName('vol-a', node, cls));
    const claim = await bindPV(core, pv, ns);
    fill('vol-a');
    const fresh = await releaseAndRediscover(core, ns, pv, claim);
    expect(readdirSync(join(fsDir, 'vol-a'))).toEqual([]);
    expect(fresh.metadata?.labels?.[PV_NODE_LABEL]).toBe(node);
  });

  it('a forged PV labelled for this node, naming the volume of an unlabelled hand-made Bound PV, is refused', async () => {
    const manual = uniqueName('manual-pv');
    const victim = await create(localPV(manual, node, 'manual', {}, { persistentVolumeReclaimPolicy: 'Retain' }));
    await bindPV(core, victim, ns);
    const before = fill('manual');
    const contents = readFileSync(join(fsDir, 'manual', 'data.txt'), 'utf8');
    const name = generatePVName('manual', node, cls);
    const claimRef = { apiVersion: 'v1', kind: 'PersistentVolumeClaim', namespace: ns, name: `ghost-${name}`.slice(0, 60), uid: randomUUID() };
    const forged = await create(localPV(name, node, 'manual', { labels: { [PV_NODE_LABEL]: node }, annotations: ownedBy(node) }, { claimRef }));
    const ev = await waitFor(
      async () => {
        const found = (await pvEvents(core, forged)).find((e) => e.reason === 'VolumeCleanRefused');
        if (found) return found;
        const damaged = (await readPV(core, name))?.metadata?.uid !== forged.metadata?.uid || readdirSync(join(fsDir, 'manual')).length === 0;
        return damaged ? { message: 'the forged PV was cleaned or deleted' } : undefined;
      },
      { what: `a VolumeCleanRefused event on the forged PV ${name}`, timeoutMs: 90_000 },
    );
    expect(ev.message).toContain(`is also used by PV "${manual}"`);
    expect(readdirSync(join(fsDir, 'manual')).sort()).toEqual(before);
    expect(readFileSync(join(fsDir, 'manual', 'data.txt'), 'utf8')).toBe(contents);
    expect((await readPV(core, name))?.metadata?.uid).toBe(forged.metadata?.uid);
  });

  it('issue 17, 5: our PV patched to label another node is labelled back, a release of it is cleaned, and creates do not loop on 409', async () => {
    const name = generatePVName('vol-moved', node, cls);
    const pv = await waitPV(core, name);
    const code409 = async (): Promise<number> => metricValue(await prov!.metrics(), 'local_volume_provisioner_kube_requests_total', { verb: 'create', resource: 'persistentvolumes', code: '409' });
    const before = await code409();
    await core.patchPersistentVolume({ name, body: { metadata: { labels: { [PV_NODE_LABEL]: 'elsewhere' } } } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    const back = await waitFor(
      async () => {
        const p = await readPV(core, name);
        return p?.metadata?.labels?.[PV_NODE_LABEL] === node ? p : undefined;
      },
      { what: `PV ${name} to be labelled ${PV_NODE_LABEL}=${node} again`, timeoutMs: 60_000 },
    );
    expect(back.metadata?.uid).toBe(pv.metadata?.uid);
    // The daemon handles it as its own again: a release is cleaned and the volume rediscovered.
    const claim = await bindPV(core, back, ns);
    fill('vol-moved');
    const fresh = await releaseAndRediscover(core, ns, back, claim);
    expect(readdirSync(join(fsDir, 'vol-moved'))).toEqual([]);
    expect(fresh.metadata?.labels?.[PV_NODE_LABEL]).toBe(node);
    // No create hot loop: at most the one AlreadyExists that may race the relabel.
    expect((await code409()) - before).toBeLessThanOrEqual(1);
  });

  it('after a restart, the labelled list holds exactly this node\'s PVs', async () => {
    await prov?.stop();
    const files = configFiles({ classes: { [cls]: { hostDir: HOST_DIR, mountDir: fsDir, namePattern: 'vol-*' } } });
    prov = await startDaemon(host, { nodeName: node, files, args: ['--pv-node-label=true'], logLevel: 'debug', dirName: 'config-2', logName: 'provisioner-2.log' });
    const lists = await waitFor(() => {
      const l = synced(prov!);
      return l.size === 2 ? l : undefined;
    }, { what: 'both PV informers to sync', timeoutMs: 60_000 });
    const ours = (await core.listPersistentVolume({ labelSelector: ownSelector() })).items.map((p) => p.metadata?.name).sort();
    expect(ours).toEqual([generatePVName('manual', node, cls), generatePVName('vol-a', node, cls), generatePVName('vol-moved', node, cls), generatePVName('vol-old', node, cls)].sort());
    expect(lists.get(ownSelector())).toBe(ours.length);
  });
});
