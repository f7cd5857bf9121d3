// Issue 13: replacing the Go provisioner in place. The cluster already holds PVs
// the Go provisioner made on this node, exactly as it names and annotates them
// with the upstream chart's default values (PV name = FNV-1a of entry, node
// name and class; provisioned-by `local-volume-provisioner-<node>-<nodeUID>`,
// or `local-volume-provisioner-<node>` for useNodeNameOnly; no labels, no owner
// reference; spec.local.fsType from the class; hostname node affinity): some
// Bound to PVCs by the real PV binder, some Available, some Released (their
// claim deleted), of both provisioned-by forms. Then ours starts with the
// example ConfigMap (deployment/kubernetes/configmap.yaml: the chart's defaults,
// the class moved to this test's directory), on real tmpfs mounts:
// - no churn: Bound and Available PVs keep their UID, no PV is created for a
//   path that has one, and a volume without a PV gets the PV the Go provisioner
//   would have made (same name, labels, annotation, spec);
// - Released PVs are cleaned and recreated (same name, new UID), whichever
//   provisioned-by form they carry: they pass the forged-PV checks (generated
//   name, path used by no other PV). The Go provisioner adopts only its current
//   form, so the other form's Released PVs stay Released there for ever;
// - Bound volumes keep their files;
// - after a ConfigMap edit that flips useNodeNameOnly, a Released PV of the
//   old form is still cleaned.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { deploymentDir } from './harness/manifests.ts';
import { createNode } from './harness/node-agent.ts';
import { createImmediateClass, keepLogs, pvEvents, startDaemon } from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { applyConfig, bindPV, metric, readPV, waitPV, waitPVGone } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const { core, storage } = adminClients();
const M = 'local_volume_provisioner_';
const ANN = 'pv.kubernetes.io/provisioned-by';
type Form = 'uid' | 'name';

describe.skipIf(!isRoot())('migration from the Go provisioner (chart defaults)', () => {
  const host = new HostFixtures('lsp-migrate-');
  const node = uniqueName('mig-node');
  const ns = uniqueName('mig-ns');
  const cls = uniqueName('mig-fs');
  let nodeUid = '';
  let fsDir = '';
  let prov: ProvisionerProcess | undefined;
  const made: string[] = [];
  /** UID of each Go-made PV, by volume entry, as created. */
  const goUid = new Map<string, string>();

  const by = (form: Form): string => (form === 'uid' ? `local-volume-provisioner-${node}-${nodeUid}` : `local-volume-provisioner-${node}`);
  const pvName = (entry: string): string => generatePVName(entry, node, cls);

  /** A PV as the Go provisioner creates it for <fsDir>/<entry> (8 MiB tmpfs) with the chart's default class. */
  const goPV = (entry: string, form: Form): V1PersistentVolume => ({
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name: pvName(entry), annotations: { [ANN]: by(form) } },
    spec: {
      capacity: { storage: '8Mi' },
      local: { path: join(fsDir, entry), fsType: 'ext4' },
      accessModes: ['ReadWriteOnce'],
      storageClassName: cls,
      persistentVolumeReclaimPolicy: 'Delete',
      volumeMode: 'Filesystem',
      nodeAffinity: { required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [node] }] }] } },
    },
  });

  const fill = (entry: string): void => {
    writeFileSync(join(fsDir, entry, 'data.txt'), `data of ${entry}`);
    writeFileSync(join(fsDir, entry, '.hidden'), 'secret');
  };
  const intact = (entry: string): boolean =>
    existsSync(join(fsDir, entry, 'data.txt')) && readFileSync(join(fsDir, entry, 'data.txt'), 'utf8') === `data of ${entry}`;

  /** The example ConfigMap's keys, its class renamed to this test's class and moved to this test's directory. */
  const exampleConfig = (): Record<string, string> => {
    const { data } = parseYaml(readFileSync(join(deploymentDir, 'configmap.yaml'), 'utf8')) as { data: Record<string, string> };
    const scm = data['storageClassMap'] ?? '';
    expect(scm).toContain('fast-disks:\n');
    const files = { ...data, storageClassMap: scm.replace('fast-disks:\n', `${cls}:\n`).replaceAll('/mnt/disks/fast-disks', fsDir) };
    expect(files.storageClassMap.split(fsDir)).toHaveLength(3); // hostDir and mountDir
    return files;
  };

  /** Creates a Go-made PV; Bound: with a PVC bound by the binder; Released: then its PVC deleted. */
  const seed = async (entry: string, form: Form, state: 'Available' | 'Bound' | 'Released'): Promise<void> => {
    const pv = await core.createPersistentVolume({ body: goPV(entry, form) });
    made.push(pvName(entry));
    goUid.set(entry, pv.metadata?.uid ?? '');
    if (state === 'Available') return;
    fill(entry);
    const claim = await bindPV(core, pv, ns);
    if (state === 'Bound') return;
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });
    await waitFor(async () => (await readPV(core, pvName(entry)))?.status?.phase === 'Released', { what: `Go-made PV of ${entry} to be Released` });
  };

  /** Waits until the PV of `entry` was deleted and rediscovered (new UID, Available); returns the new PV. */
  const recreated = async (entry: string, oldUid: string): Promise<V1PersistentVolume> => {
    await waitPVGone(core, pvName(entry), oldUid, 90_000);
    await waitPV(core, pvName(entry), { notUid: oldUid });
    return waitFor(
      async () => {
        const p = await readPV(core, pvName(entry));
        return p?.status?.phase === 'Available' && p.metadata?.uid !== oldUid ? p : undefined;
      },
      { what: `the rediscovered PV of ${entry} to be Available` },
    );
  };

  /** PVs whose spec.local.path is under this test's directory, by path. */
  const pvsByPath = async (): Promise<Map<string, string[]>> => {
    const out = new Map<string, string[]>();
    for (const pv of (await core.listPersistentVolume()).items) {
      const p = pv.spec?.local?.path ?? '';
      if (p.startsWith(`${fsDir}/`)) out.set(p, [...(out.get(p) ?? []), pv.metadata?.name ?? '']);
    }
    return out;
  };

  const refusals = async (entry: string): Promise<string[]> => {
    const pv: V1PersistentVolume = { metadata: { uid: goUid.get(entry) ?? '' } };
    return (await pvEvents(core, pv)).filter((e) => e.reason === 'VolumeCleanRefused').map((e) => e.message ?? '');
  };

  beforeAll(async () => {
    nodeUid = (await createNode(core, node)).metadata?.uid ?? '';
    expect(nodeUid).not.toBe('');
    await core.createNamespace({ body: { metadata: { name: ns } } });
    await createImmediateClass(storage, cls);
    fsDir = host.mkdir('fs');
    for (const v of ['bound-uid', 'bound-name', 'avail-uid', 'avail-name', 'rel-uid', 'rel-name', 'flip-uid', 'fresh']) host.tmpfs(8, 'fs', v);
    await seed('bound-uid', 'uid', 'Bound');
    await seed('bound-name', 'name', 'Bound');
    await seed('avail-uid', 'uid', 'Available');
    await seed('avail-name', 'name', 'Available');
    await seed('rel-uid', 'uid', 'Released');
    await seed('rel-name', 'name', 'Released');
    await seed('flip-uid', 'uid', 'Available');
    prov = await startDaemon(host, { nodeName: node, files: exampleConfig() });
  });

  afterAll(async () => {
    await prov?.stop();
    for (const name of made) await core.deletePersistentVolume({ name }).catch(() => undefined);
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    keepLogs(host, node, ['provisioner.log']);
    host.cleanup();
  });

  it('no churn: Bound and Available PVs keep their UID, no second PV for a path, a new volume gets the PV the Go provisioner would make', async () => {
    const fresh = await waitPV(core, pvName('fresh'));
    await waitFor(() => prov!.ready(), { what: 'the daemon to be ready' });
    const expected = goPV('fresh', 'uid');
    // The Go provisioner's annotations plus our only addition, the volume identity (docs/upgrading.md); the spec is the same.
    expect(fresh.metadata?.annotations).toEqual({ ...expected.metadata?.annotations, 'local-static-provisioner/volume-identity': 'mount' });
    expect(fresh.metadata?.labels).toBeUndefined();
    expect(fresh.metadata?.ownerReferences).toBeUndefined();
    expect(fresh.spec).toMatchObject(expected.spec!);
    expect(fresh.spec?.mountOptions).toBeUndefined();

    for (const entry of ['bound-uid', 'bound-name', 'avail-uid', 'avail-name', 'flip-uid']) {
      const pv = await readPV(core, pvName(entry));
      expect(pv?.metadata?.uid, entry).toBe(goUid.get(entry));
      expect(pv?.metadata?.annotations?.[ANN], entry).toBe(goPV(entry, entry.endsWith('uid') ? 'uid' : 'name').metadata?.annotations?.[ANN]);
      expect(pv?.metadata?.annotations?.['local-static-provisioner/volume-identity'], entry).toBeUndefined(); // Go PVs are never re-annotated
    }
    for (const [path, names] of await pvsByPath()) expect(names, path).toHaveLength(1);
    // Only 'fresh' and the rediscovered Released volumes are ever created.
    expect(await metric(prov!, `${M}persistentvolume_discovery_total`)).toBeLessThanOrEqual(3);
  });

  it('Released PVs of both provisioned-by forms are cleaned and recreated (same name, new UID); none is refused as forged', async () => {
    for (const entry of ['rel-uid', 'rel-name']) {
      const pv = await recreated(entry, goUid.get(entry) ?? '');
      expect(pv.metadata?.name).toBe(pvName(entry));
      expect(pv.metadata?.annotations?.[ANN]).toBe(by('uid')); // the current config's form
      expect(readdirSync(join(fsDir, entry))).toEqual([]);
      expect(await refusals(entry)).toEqual([]);
    }
    expect(await metric(prov!, `${M}clean_refused_total`)).toBe(0);
    expect(await metric(prov!, `${M}persistentvolume_discovery_total`)).toBe(3);
    const paths = await pvsByPath();
    expect([...paths.keys()].sort()).toEqual(
      ['avail-name', 'avail-uid', 'bound-name', 'bound-uid', 'flip-uid', 'fresh', 'rel-name', 'rel-uid'].map((e) => join(fsDir, e)).sort(),
    );
    for (const [path, names] of paths) expect(names, path).toHaveLength(1);
  });

  it('Bound volumes are untouched: same UID, still Bound, files intact', async () => {
    for (const entry of ['bound-uid', 'bound-name']) {
      const pv = await readPV(core, pvName(entry));
      expect(pv?.metadata?.uid).toBe(goUid.get(entry));
      expect(pv?.status?.phase).toBe('Bound');
      expect(intact(entry), entry).toBe(true);
    }
  });

  it('after a ConfigMap edit flipping useNodeNameOnly, a Released PV of the old form is still cleaned', async () => {
    await applyConfig(prov!, () => Promise.resolve(writeFileSync(host.path('config', 'useNodeNameOnly'), 'true')));
    const flip = await readPV(core, pvName('flip-uid'));
    expect(flip?.metadata?.uid).toBe(goUid.get('flip-uid'));
    fill('flip-uid');
    const claim = await bindPV(core, flip!, ns);
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });
    const pv = await recreated('flip-uid', goUid.get('flip-uid') ?? '');
    expect(pv.metadata?.annotations?.[ANN]).toBe(by('name'));
    expect(readdirSync(join(fsDir, 'flip-uid'))).toEqual([]);
    expect(await refusals('flip-uid')).toEqual([]);
    // The reload changed nothing else.
    for (const entry of ['bound-uid', 'bound-name', 'avail-uid', 'avail-name']) expect((await readPV(core, pvName(entry)))?.metadata?.uid, entry).toBe(goUid.get(entry));
    for (const entry of ['bound-uid', 'bound-name']) expect(intact(entry), entry).toBe(true);
  });
});
