// The base manifests (deployment/kubernetes): the example ConfigMap is the
// upstream chart's defaults with every class under the one discovery root, and
// the DaemonSet mounts that root once, from the host, with HostToContainer, so
// a class added to the ConfigMap needs no DaemonSet change.
import { readFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseConfig } from '../../src/config/parse.ts';

const dir = join(import.meta.dirname, '..', '..', 'deployment', 'kubernetes');
const load = (name: string): Record<string, unknown> => parse(readFileSync(join(dir, name), 'utf8')) as Record<string, unknown>;

interface Mount {
  name: string;
  mountPath: string;
  mountPropagation?: string;
}
interface Volume {
  name: string;
  hostPath?: { path: string; type?: string };
}
const daemonSet = load('daemonset.yaml') as { spec: { template: { spec: { containers: Array<{ volumeMounts: Mount[] }>; volumes: Volume[] } } } };
const pod = daemonSet.spec.template.spec;
const data = (load('configmap.yaml') as { data: Record<string, string> }).data;

const STATE_DIR = '/var/lib/local-volume-provisioner';

/** The host directories the container sees at each mount path, from hostPath volumes. */
const hostMounts = (): Array<{ mountPath: string; hostPath: string; propagation: string | undefined }> =>
  (pod.containers[0]?.volumeMounts ?? []).flatMap((m) => {
    const v = pod.volumes.find((x) => x.name === m.name);
    return v?.hostPath ? [{ mountPath: m.mountPath, hostPath: v.hostPath.path, propagation: m.mountPropagation }] : [];
  });

describe('base manifests: one discovery root', () => {
  it('the ConfigMap parses and holds only what the upstream chart renders by default', () => {
    const r = parseConfig(data);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(Object.keys(data)).toEqual(['storageClassMap']); // useNodeNameOnly, setPVOwnerRef, useJobForCleaning: off
    expect(r.config).toMatchObject({ useNodeNameOnly: false, setPVOwnerRef: false, useJobForCleaning: false, nodeLabelsForPV: [] });
    const classes = Object.entries(r.config.storageClassMap);
    expect(classes.map(([n]) => n)).toEqual(['fast-disks']);
    expect(classes[0]?.[1]).toMatchObject({
      blockCleanerCommand: ['/scripts/shred.sh', '2'],
      volumeMode: 'Filesystem',
      accessMode: 'ReadWriteOnce',
      fsType: 'ext4',
      namePattern: '*',
    });
  });

  it('the DaemonSet mounts /mnt/disks once from the host with HostToContainer, and no per-class volume', () => {
    expect(hostMounts().filter((m) => m.mountPath !== '/dev' && m.mountPath !== STATE_DIR)).toEqual([
      { mountPath: '/mnt/disks', hostPath: '/mnt/disks', propagation: 'HostToContainer' },
    ]);
  });

  // Issue 18, 13: the settings of removed classes (classes.json) must outlive the pod, or a
  // restart strands the Released PVs of a class removed from the ConfigMap.
  it('--state-dir is a hostPath directory, so the state outlives pod restarts', () => {
    const args = (daemonSet.spec.template.spec.containers[0] as { args?: string[] }).args ?? [];
    expect(args).toContain(`--state-dir=${STATE_DIR}`);
    expect(hostMounts().filter((m) => m.mountPath === STATE_DIR)).toEqual([{ mountPath: STATE_DIR, hostPath: STATE_DIR, propagation: undefined }]);
    expect(daemonSet.spec.template.spec.volumes.find((v) => v.hostPath?.path === STATE_DIR)?.hostPath?.type).toBe('DirectoryOrCreate');
  });

  it('every class is a directory under that root, at the same path on the host and in the container', () => {
    const r = parseConfig(data);
    if (!r.ok) throw new Error('config does not parse');
    for (const [name, cls] of Object.entries(r.config.storageClassMap)) {
      const root = hostMounts().find((m) => cls.mountDir.startsWith(`${m.mountPath}/`));
      expect(root, `class ${name}`).toBeDefined();
      expect(posix.relative(root!.mountPath, cls.mountDir)).toBe(posix.relative(root!.hostPath, cls.hostDir));
      expect(posix.dirname(cls.mountDir)).toBe(root!.mountPath); // a directory of the root, not the root itself
      expect(root!.propagation).toBe('HostToContainer');
    }
  });
});
