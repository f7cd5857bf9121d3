// Issue 3 end to end: the real daemon (node src/main.ts) against the real
// control plane, on real tmpfs mounts and a real loop device, as the
// restricted provisioner identity.
import { execFileSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CoreV1Event, V1PersistentVolume } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { createNode } from './harness/node-agent.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { holdExclusively, keepLogs, startDaemon } from './support/cleanup.ts';
import { createLocalStorageClass, pvsOfNode, waitPV } from './support/hot-reload.ts';
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
      // As in a pod of the DaemonSet: no LOG_FORMAT, no --log-level, the service variables the kubelet sets
      // (KUBECONFIG still points at the test control plane and wins over them).
      env: { LOG_FORMAT: '', KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' },
      logLevel: null,
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
    // In klog's text format, as the Go provisioner writes it: its e2e suite greps the pod log for this text.
    const dir = join(fsDir, 'not-a-mount');
    const re = dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const line = prov!.logs().split('\n').find((l) => l.includes(`path "${dir}" is not a valid mount point`));
    expect(line).toMatch(
      new RegExp(`^W\\d{4} \\d\\d:\\d\\d:\\d\\d\\.\\d{6} +\\d+ discoverer\\.ts:\\d+\\] path "${re}" is not a valid mount point: mountPath="${re}" wasn't found in the /proc/mounts file controllerGeneration=1 configHash="[0-9a-f]{12}" component="discovery" pv="local-pv-[0-9a-f]+"$`),
    );
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

// Issue 17, points 3(b) and 4 end to end: real loop devices, a real ext4 mount, a real O_EXCL holder, a real
// bind mount that puts class b's discovery dir inside a volume of class a, and a tenant's symlink there.
describe.skipIf(!isRoot())('discovery refuses devices in use and entries inside a volume (issue 17)', () => {
  const host = new HostFixtures('lsp-disc17-');
  const node = uniqueName('disc17-node');
  const fsClass = uniqueName('fs');
  const blockClass = uniqueName('blk');
  const innerClass = uniqueName('inner');
  let prov: ProvisionerProcess | undefined;
  let holder: ChildProcess | undefined;
  const ownMounts: string[] = [];
  const devs: Record<string, string> = {};

  const sh = (cmd: string, args: string[]): string => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
  const pvName = (entry: string, cls: string): string => generatePVName(entry, node, cls);
  const eventsFor = async (reason: string): Promise<string[]> => (await nodeEvents(node)).filter((e) => e.reason === reason).map((e) => e.message ?? '');

  beforeAll(async () => {
    await createNode(core, node);
    for (const c of [fsClass, blockClass, innerClass]) await createLocalStorageClass(storage, c);
    // Class fs: one tmpfs volume vol1. Class inner: its discovery dir is a bind mount of vol1/sub (inside vol1).
    const vol1 = host.tmpfs(16, 'a', 'vol1');
    mkdirSync(join(vol1, 'sub'));
    const innerDir = host.mkdir('inner');
    sh('mount', ['--bind', join(vol1, 'sub'), innerDir]);
    ownMounts.push(innerDir);
    // Block class: symlinks, the free one through a /dev/disk/by-id style name.
    host.mkdir('blk');
    host.mkdir('by-id');
    devs['free'] = host.loopDevice(20, 'free');
    host.symlink(devs['free'], 'by-id', 'ata-FREE_DISK_1');
    host.symlink(host.path('by-id', 'ata-FREE_DISK_1'), 'blk', 'free');
    devs['mounted'] = host.loopDevice(20, 'mounted');
    sh('mkfs.ext4', ['-q', '-F', devs['mounted']]);
    const mnt = host.mkdir('mnt-used');
    sh('mount', [devs['mounted'], mnt]);
    ownMounts.push(mnt);
    host.symlink(devs['mounted'], 'blk', 'mounted');
    devs['held'] = host.loopDevice(20, 'held');
    host.symlink(devs['held'], 'blk', 'held');
    // A 0-byte device: a loop device of ours over an empty file (never someone else's unattached /dev/loopN).
    devs['empty'] = host.loopDevice(0, 'empty');
    host.symlink(devs['empty'], 'blk', 'empty');
    // The tenant of vol1 writes a symlink to a (free) block device into its volume: class inner would see it.
    devs['victim'] = host.loopDevice(20, 'victim');
    host.symlink(devs['victim'], 'a', 'vol1', 'sub', 'evil');
    // Another process holds `held` open with O_EXCL (as mkfs, a VM or a database on the raw device does).
    holder = await holdExclusively(devs['held']);

    prov = await startDaemon(host, {
      nodeName: node,
      files: {
        storageClassMap:
          `${fsClass}:\n  hostDir: /mnt/host/a\n  mountDir: ${host.path('a')}\n` +
          `${blockClass}:\n  hostDir: /mnt/host/blk\n  mountDir: ${host.path('blk')}\n  volumeMode: Block\n` +
          `${innerClass}:\n  hostDir: /mnt/host/inner\n  mountDir: ${innerDir}\n  volumeMode: Block\n`,
      },
    });
  });

  afterAll(async () => {
    try {
      await prov?.stop();
    } finally {
      if (holder?.pid !== undefined && holder.exitCode === null) process.kill(holder.pid, 'SIGKILL');
      for (const m of ownMounts.reverse()) {
        try {
          sh('umount', [m]);
        } catch {
          /* not mounted */
        }
      }
      for (const name of [pvName('vol1', fsClass), pvName('free', blockClass)]) await core.deletePersistentVolume({ name }).catch(() => undefined);
      keepLogs(host, node, ['provisioner.log']);
      host.cleanup();
    }
  });

  it('a blank device (by-id style symlink) gets its PV; mounted, O_EXCL-held and 0-byte devices get none, one BlockDeviceInUse Warning each', async () => {
    await waitPV(core, pvName('free', blockClass));
    const msgs = await waitFor(async () => {
      const m = await eventsFor('BlockDeviceInUse');
      return ['/blk/mounted"', '/blk/held"', '/blk/empty"'].every((e) => m.some((x) => x.includes(e))) ? m : undefined;
    }, { what: 'BlockDeviceInUse events for mounted, held and empty', timeoutMs: 60_000 });
    const about = (e: string): string[] => msgs.filter((m) => m.includes(`/blk/${e}"`));
    expect(about('mounted').some((m) => m.includes(`is mounted at "${host.path('mnt-used')}"`))).toBe(true);
    expect(about('held')).toEqual([expect.stringContaining('is opened exclusively (O_EXCL) by another process')]);
    expect(about('empty')).toEqual([expect.stringContaining('has size 0')]);
    const names = (await pvsOfNode(core, node)).map((p) => p.metadata?.name);
    for (const e of ['mounted', 'held', 'empty']) expect(names).not.toContain(pvName(e, blockClass));
    expect(await prov!.ready()).toBe(true);
  });

  it("a tenant's symlink in a discovery dir that a bind mount puts inside another class's volume gets no PV (VolumeDiscoveryRefused)", async () => {
    await waitPV(core, pvName('vol1', fsClass));
    const msgs = await waitFor(async () => {
      const m = await eventsFor('VolumeDiscoveryRefused');
      return m.some((x) => x.includes('/inner/evil"')) ? m : undefined;
    }, { what: 'a VolumeDiscoveryRefused event for inner/evil', timeoutMs: 60_000 });
    expect(msgs.find((x) => x.includes('/inner/evil"'))).toContain(`it lies inside the volume mounted at "${host.path('a', 'vol1')}"`);
    expect((await pvsOfNode(core, node)).map((p) => p.metadata?.name)).not.toContain(pvName('evil', innerClass));
    // Warnings only: no pass error, and no create was attempted for any refused entry (2 creates in all).
    expect(metricValue(await prov!.metrics(), 'local_volume_provisioner_apiserver_requests_total', { method: 'create' })).toBe(2);
  });
});
