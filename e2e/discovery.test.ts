// Issue 3 end to end: the real daemon (node src/main.ts) against the real
// control plane, on real tmpfs mounts and a real loop device, as the
// restricted provisioner identity.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CoreV1Event, V1PersistentVolume } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { createNode } from './harness/node-agent.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { startDaemon } from './support/cleanup.ts';
import { createLocalStorageClass, pvsOfNode } from './support/hot-reload.ts';
import { metricValue, type ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const { core, storage } = adminClients();

async function nodeEvents(node: string): Promise<CoreV1Event[]> {
  const evs = await core.listNamespacedEvent({ namespace: 'default' });
  return evs.items.filter((e) => e.involvedObject.kind === 'Node' && e.involvedObject.name === node);
}

describe.skipIf(!isRoot())('discovery on real mounts and a loop device', () => {
  const host = new HostFixtures('lsp-disc-');
  const node = uniqueName('disc-node');
  const fsClass = uniqueName('fs');
  const blockClass = uniqueName('blk');
  let prov: ProvisionerProcess | undefined;
  let fsDir = '';
  let blockDir = '';
  let preExisting: V1PersistentVolume;

  beforeAll(async () => {
    await createNode(core, node, { 'topology.kubernetes.io/zone': 'zone-a' });
    await createLocalStorageClass(storage, fsClass, ['noatime']);
    await createLocalStorageClass(storage, blockClass);
    fsDir = host.mkdir('fs');
    blockDir = host.mkdir('block');
    for (const v of ['vol1', 'vol2', 'vol3', 'go-made']) host.tmpfs(12, 'fs', v);
    host.mkdir('fs', 'not-a-mount');
    writeFileSync(join(fsDir, 'stray-file'), 'x');
    const dev = host.loopDevice(24, 'blk1');
    host.symlink(dev, 'block', 'blk1');

    // A PV made earlier by the Go provisioner for fs/go-made: same name recipe and annotation.
    preExisting = (
      await core.createPersistentVolume({
        body: {
          metadata: {
            name: generatePVName('go-made', node, fsClass),
            annotations: { 'pv.kubernetes.io/provisioned-by': `local-volume-provisioner-${node}` },
          },
          spec: {
            capacity: { storage: '12Mi' },
            local: { path: `/mnt/host/fs/go-made` },
            accessModes: ['ReadWriteOnce'],
            persistentVolumeReclaimPolicy: 'Delete',
            storageClassName: fsClass,
            volumeMode: 'Filesystem',
            nodeAffinity: { required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [node] }] }] } },
          },
        },
      })
    );

    prov = await startDaemon(host, {
      nodeName: node,
      files: {
        storageClassMap: `${fsClass}:\n  HOSTDIR: /mnt/host/fs\n  mountDir: ${fsDir}\n  fsType: ext4\n${blockClass}:\n  hostDir: /mnt/host/block\n  mountDir: ${blockDir}\n  volumeMode: Block\n`,
        useNodeNameOnly: 'yes',
        setPVOwnerRef: 'On',
        nodeLabelsForPV: '- topology.kubernetes.io/zone\n- missing.example.com/label\n',
        labelsForPV: 'team: storage\n',
      },
    });
  });

  afterAll(async () => {
    await prov?.stop();
    host.cleanup();
  });

  it('creates one PV per mount and per block device, with the Go provisioner specs', async () => {
    const pvs = await waitFor(async () => {
      const l = await pvsOfNode(core, node);
      return l.length >= 5 ? l : undefined;
    }, { what: '5 PVs for the node', timeoutMs: 60_000 });
    expect(pvs.map((p) => p.metadata?.name).sort()).toEqual(
      [
        generatePVName('vol1', node, fsClass),
        generatePVName('vol2', node, fsClass),
        generatePVName('vol3', node, fsClass),
        generatePVName('go-made', node, fsClass),
        generatePVName('blk1', node, blockClass),
      ].sort(),
    );
    const nodeObj = await core.readNode({ name: node });
    const vol1 = pvs.find((p) => p.metadata?.name === generatePVName('vol1', node, fsClass))!;
    expect(vol1.metadata?.labels).toEqual({ 'topology.kubernetes.io/zone': 'zone-a', team: 'storage' });
    // The Go provisioner's annotation plus the volume identity discovery recorded (docs/upgrading.md).
    expect(vol1.metadata?.annotations).toEqual({ 'local-static-provisioner/volume-identity': 'mount', 'pv.kubernetes.io/provisioned-by': `local-volume-provisioner-${node}` });
    expect(vol1.metadata?.ownerReferences).toEqual([{ apiVersion: 'v1', kind: 'Node', name: node, uid: nodeObj.metadata?.uid }]);
    expect(vol1.spec).toEqual({
      capacity: { storage: '12Mi' },
      local: { path: '/mnt/host/fs/vol1', fsType: 'ext4' },
      accessModes: ['ReadWriteOnce'],
      persistentVolumeReclaimPolicy: 'Delete',
      storageClassName: fsClass,
      mountOptions: ['noatime'],
      volumeMode: 'Filesystem',
      nodeAffinity: { required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [node] }] }] } },
    });
    const blk = pvs.find((p) => p.metadata?.name === generatePVName('blk1', node, blockClass))!;
    expect(blk.spec?.volumeMode).toBe('Block');
    expect(blk.spec?.capacity).toEqual({ storage: '24Mi' });
    expect(blk.spec?.local).toEqual({ path: '/mnt/host/block/blk1' });
    expect(blk.spec?.mountOptions).toBeUndefined();
  });

  it('recognises the PV made with the Go naming and does not recreate it', async () => {
    const same = await core.readPersistentVolume({ name: preExisting.metadata!.name! });
    expect(same.metadata?.uid).toBe(preExisting.metadata?.uid);
    const m = await prov!.metrics();
    // 4 new PVs, no create for the pre-existing one (no AlreadyExists round trip either).
    expect(metricValue(m, 'local_volume_provisioner_apiserver_requests_total', { method: 'create' })).toBe(4);
    expect(metricValue(m, 'local_volume_provisioner_persistentvolume_discovery_total')).toBe(4);
  });

  it('skips a non-mount directory and a stray file with a Warning Event each', async () => {
    const evs = await waitFor(async () => {
      const e = await nodeEvents(node);
      return e.filter((x) => x.reason === 'VolumeNotDiscovered').length >= 2 ? e : undefined;
    }, { what: 'VolumeNotDiscovered events on the node' });
    const msgs = evs.filter((e) => e.reason === 'VolumeNotDiscovered').map((e) => e.message ?? '');
    expect(msgs.some((m) => m.includes(`path "${join(fsDir, 'not-a-mount')}" is not a valid mount point`))).toBe(true);
    expect(msgs.some((m) => m.includes('stray-file') && m.includes('not a directory nor block device'))).toBe(true);
    expect(evs.every((e) => e.type === 'Warning' && e.source?.component === 'local-volume-provisioner')).toBe(true);
    expect(prov!.logs()).toContain(`path \\"${join(fsDir, 'not-a-mount')}\\" is not a valid mount point`);
  });

  it('sends 0 API requests per discovery pass when nothing changed', async () => {
    await new Promise((r) => setTimeout(r, 2500)); // let events settle
    const before = metricValue(await prov!.metrics(), 'local_volume_provisioner_kube_requests_total');
    await new Promise((r) => setTimeout(r, 4000)); // ~4 passes at --discovery-period=1s
    const after = metricValue(await prov!.metrics(), 'local_volume_provisioner_kube_requests_total');
    expect(after - before).toBe(0);
  });

  it('creates a PV for a volume mounted later, and stays ready with only warnings', async () => {
    host.tmpfs(16, 'fs', 'vol4');
    await waitFor(async () => (await pvsOfNode(core, node)).some((p) => p.metadata?.name === generatePVName('vol4', node, fsClass)), {
      what: 'a PV for vol4',
    });
    // The stray file is only a warning; the pass has no error, so the daemon is ready.
    expect(await prov!.ready()).toBe(true);
  });
});
