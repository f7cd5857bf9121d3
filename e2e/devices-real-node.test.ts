// Issue 21 on a real node: a raw disk (a blank loop device, selected by a class's deviceSelector with the
// test-only allowLoop) becomes a Filesystem PV with fsType ext4 without any hand-made link. The shipped
// kustomize base runs the image built from the Dockerfile on a real kubelet (e2e/harness/node.ts). Then a
// claim binds to it and a Pod writes into it: the kubelet formats the disk with ext4 on first use (the
// daemon never writes to it); the claim released, the class's block cleaner (quick_reset.sh: wipefs and
// the first and last MiB zeroed) cleans it, and the PV comes back Available on the same, blank disk.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readlinkSync } from 'node:fs';
import { basename, join } from 'node:path';
import { PatchStrategy, setHeaderOptions, type V1PersistentVolume } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { waitFor } from './harness/kube.ts';
import { realNodeUnsupportedReason } from './support/real-node.ts';
import { withRealNode } from './support/with-real-node.ts';

const reason = realNodeUnsupportedReason();
const measure = (what: string, ms: number): void => console.log(`[measure] ${what}: ${(ms / 1000).toFixed(1)} s`);
/** libblkid's probe of a device: its TYPE/PTTYPE lines, '' when it finds nothing (exit 2). */
const probe = (dev: string): string => {
  try {
    return execFileSync('blkid', ['-p', '-o', 'export', dev], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
      .split('\n')
      .filter((l) => /^(TYPE|PTTYPE)=/.test(l))
      .join(' ');
  } catch (e) {
    if ((e as { status?: number }).status === 2) return '';
    throw e;
  }
};

describe.skipIf(reason !== undefined)(`raw disks to PVs on a real node${reason ? ` (skipped: ${reason})` : ''}`, { timeout: 400_000 }, () => {
  const cls = 'raw';
  const namespace = 'default';
  let dev = '';
  const rn = withRealNode({
    nodeName: 'lsp-rawdisk-node',
    disks: (disks) => {
      dev = disks.bareDevice('raw0', 64);
      // The class's directory, as an admin makes it (the daemon links into it; it never creates a hostDir).
      mkdirSync(join(disks.root, cls));
      expect(probe(dev)).toBe('');
    },
    setup: async ({ api }) => {
      await api.storage.createStorageClass({ body: { metadata: { name: cls }, provisioner: 'kubernetes.io/no-provisioner', volumeBindingMode: 'WaitForFirstConsumer', reclaimPolicy: 'Delete' } });
    },
  });

  it('a blank disk selected by the class is linked and becomes a Filesystem PV; a claim binds, the kubelet formats it ext4, the Pod writes; released, the block cleaner wipes it and the PV is Available again', async () => {
    const hostPath = join(rn.disks.root, cls, basename(dev));
    const { api, image } = rn;
    const cm = await api.core.readNamespacedConfigMap({ name: 'local-volume-provisioner-config', namespace: 'kube-system' });
    const classes = `${cm.data?.['storageClassMap'] ?? ''}${cls}:\n  hostDir: /mnt/disks/${cls}\n  mountDir: /mnt/disks/${cls}\n  volumeMode: Filesystem\n  fsType: ext4\n  blockCleanerCommand: ["/scripts/quick_reset.sh"]\n  deviceSelector:\n    paths: [${dev}]\n    allowLoop: true\n`;
    const t0 = performance.now();
    await api.core.patchNamespacedConfigMap(
      { name: 'local-volume-provisioner-config', namespace: 'kube-system', body: { data: { storageClassMap: classes } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    const pv = await waitFor(async () => (await api.core.listPersistentVolume()).items.find((p) => p.spec?.local?.path === hostPath && p.status?.phase === 'Available'), {
      what: `a PV at ${hostPath}`,
      timeoutMs: 240_000,
      intervalMs: 500,
    });
    measure('ConfigMap patch (kubelet sync included) to the raw disk PV Available', performance.now() - t0);
    // The daemon made the link (the stable name of a loop device is its /dev name) and nothing else.
    expect(readlinkSync(hostPath)).toBe(dev);
    expect(pv.spec).toMatchObject({ volumeMode: 'Filesystem', storageClassName: cls, local: { path: hostPath, fsType: 'ext4' } });
    expect(probe(dev)).toBe('');
    const linked = (await api.core.listEventForAllNamespaces({ fieldSelector: 'reason=RawDeviceLinked' })).items;
    expect(linked.map((e) => e.message).join('\n')).toContain(basename(dev));

    await api.core.createNamespacedPersistentVolumeClaim({
      namespace,
      body: { metadata: { name: 'rawdata' }, spec: { storageClassName: cls, accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '16Mi' } } } },
    });
    await api.core.createNamespacedPod({
      namespace,
      body: {
        metadata: { name: 'rawapp' },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [{ name: 'app', image: image.ref, command: ['bash', '-c', 'echo written-on-raw > /data/hello && sync && exec sleep infinity'], volumeMounts: [{ name: 'data', mountPath: '/data' }] }],
          volumes: [{ name: 'data', persistentVolumeClaim: { claimName: 'rawdata' } }],
        },
      },
    });
    await waitFor(async () => (await api.core.readNamespacedPod({ name: 'rawapp', namespace })).status?.phase === 'Running' || undefined, { what: 'pod rawapp Running', timeoutMs: 180_000 });
    const claim = await api.core.readNamespacedPersistentVolumeClaim({ name: 'rawdata', namespace });
    expect(claim.status?.phase).toBe('Bound');
    expect(claim.spec?.volumeName).toBe(pv.metadata?.name);
    // The kubelet formatted the disk (the daemon only linked it) and the Pod's file is on it.
    await waitFor(() => (probe(dev) === 'TYPE=ext4' ? true : undefined), { what: `${dev} formatted ext4 by the kubelet`, timeoutMs: 30_000 });
    const out = execFileSync('debugfs', ['-R', 'cat /hello', dev], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    expect(out).toContain('written-on-raw');
    // While the claim uses it, the link stays (the disk is no longer blank nor unused: it no longer matches).
    expect(readlinkSync(hostPath)).toBe(dev);

    const t1 = performance.now();
    await api.core.deleteNamespacedPod({ name: 'rawapp', namespace });
    await api.core.deleteNamespacedPersistentVolumeClaim({ name: 'rawdata', namespace });
    const again: V1PersistentVolume = await waitFor(
      async () => {
        const p = await api.core.readPersistentVolume({ name: pv.metadata?.name ?? '' }).catch(() => undefined);
        return p?.status?.phase === 'Available' && p.metadata?.uid !== pv.metadata?.uid ? p : undefined;
      },
      { what: 'the PV cleaned, deleted and made again', timeoutMs: 240_000, intervalMs: 500 },
    );
    measure('PVC delete to the raw disk PV Available again', performance.now() - t1);
    expect(again.spec?.local?.path).toBe(hostPath);
    // The block cleaner wiped the kubelet's filesystem: the disk is blank again, and still linked.
    expect(probe(dev)).toBe('');
    expect(readlinkSync(hostPath)).toBe(dev);
  });
});
