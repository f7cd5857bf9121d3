// A ConfigMap as the upstream helm chart renders it (values quoted the chart's way),
// and helpers to turn a manifest into the files the kubelet would mount.
import { parse } from 'yaml';
import { parseConfig } from '../../src/config/parse.ts';
import type { ConfigError, ProvisionerConfig } from '../../src/config/types.ts';

export const HELM_CONFIGMAP = `
# Source: provisioner/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: local-static-provisioner-config
  namespace: kube-system
  labels:
    app.kubernetes.io/name: provisioner
data:
  setPVOwnerRef: "true"
  useJobForCleaning: "yes"
  jobTolerations: |
    - effect: NoSchedule
      operator: Exists
    - key: node-role.kubernetes.io/control-plane
      operator: Exists
      effect: NoSchedule
  nodeLabelsForPV: |
    - topology.kubernetes.io/zone
    - kubernetes.io/hostname
  minResyncPeriod: "1h30m"
  storageClassMap: |
    fast-disks:
      hostDir: /mnt/fast-disks
      mountDir: /mnt/fast-disks
      blockCleanerCommand:
        - "/scripts/shred.sh"
        - "2"
      volumeMode: Filesystem
      fsType: ext4
      namePattern: "*"
      selector:
        - matchExpressions:
            - key: kubernetes.io/hostname
              operator: In
              values:
                - worker-1
                - worker-2
    block-disks:
      hostDir: /dev/disk/by-id
      mountDir: /dev/disk/by-id
      volumeMode: Block
      namePattern: "nvme-*,scsi-*"
`;

/** The `data` of a ConfigMap manifest: ConfigMap key -> file content. */
export function configMapData(manifest: string): Record<string, string> {
  const doc = parse(manifest) as { data: Record<string, string> };
  return doc.data;
}

/** The config of files that must be valid (the errors in the exception otherwise). */
export function ok(files: Record<string, string>): ProvisionerConfig {
  const r = parseConfig(files);
  if (!r.ok) throw new Error(`expected a valid config, got ${JSON.stringify(r.errors, null, 2)}`);
  return r.config;
}

/** The errors of files that must be invalid. */
export function errors(files: Record<string, string>): readonly ConfigError[] {
  const r = parseConfig(files);
  if (r.ok) throw new Error('expected errors, got a valid config');
  return r.errors;
}
