import type { V1Node } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { ClassConfig } from '../../src/config/types.ts';
import { GiB, MiB } from '../../src/volume/capacity.ts';
import {
  alphaNodeAffinityAnnotation,
  buildLocalPV,
  buildPVLabels,
  goJSON,
  nodeHostnameTerm,
  nodeOwnerReference,
  type LocalPVInput,
} from '../../src/volume/pv-spec.ts';

const node: V1Node = {
  metadata: {
    name: 'test-node',
    uid: 'd9607e19-f88f-11e6-a518-42010a800195',
    labels: {
      'topology.kubernetes.io/zone': 'west-1',
      'topology.kubernetes.io/region': 'west',
      'kubernetes.io/hostname': 'test-node-host',
      'something-else': 'x',
    },
  },
};

const fsClass: ClassConfig = {
  hostDir: '/mnt/disks/dir1',
  mountDir: '/discoveryPath/dir1',
  blockCleanerCommand: ['/scripts/quick_reset.sh'],
  volumeMode: 'Filesystem',
  namePattern: '*',
};

const hostTerm = {
  matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: ['test-node-host'] }],
};

function input(over: Partial<LocalPVInput> = {}): LocalPVInput {
  return {
    name: 'local-pv-aaaafef5',
    provisionerName: 'local-volume-provisioner-test-node-d9607e19-f88f-11e6-a518-42010a800195',
    labels: {},
    hostnameTerm: nodeHostnameTerm(node),
    config: { useAlphaAPI: false, setPVOwnerRef: false },
    className: 'sc1',
    classConfig: fsClass,
    hostPath: '/mnt/disks/dir1/mount1',
    capacityBytes: 10n * GiB + 12345n,
    reclaimPolicy: 'Delete',
    ...over,
  };
}

describe('nodeHostnameTerm / nodeOwnerReference', () => {
  it('builds the hostname-In term from the label, not the name', () => {
    expect(nodeHostnameTerm(node)).toStrictEqual(hostTerm);
  });
  it('throws the Go errors', () => {
    expect(() => nodeHostnameTerm({ metadata: { name: 'n' } })).toThrow('Node does not have labels');
    expect(() => nodeHostnameTerm({ metadata: { name: 'n', labels: { a: 'b' } } })).toThrow(
      'Node does not have expected label kubernetes.io/hostname',
    );
    expect(() => nodeOwnerReference({ metadata: { uid: 'u' } })).toThrow('Node does not have name');
    expect(() => nodeOwnerReference({ metadata: { name: 'n' } })).toThrow('Node does not have UID');
  });
  it('owner ref has exactly apiVersion, kind, name, uid', () => {
    expect(nodeOwnerReference(node)).toStrictEqual({
      apiVersion: 'v1',
      kind: 'Node',
      name: 'test-node',
      uid: 'd9607e19-f88f-11e6-a518-42010a800195',
    });
  });
});

describe('buildPVLabels', () => {
  it('copies the node labels it has, skips missing ones, and lets labelsForPV win', () => {
    const labels = buildPVLabels(node, {
      nodeLabelsForPV: ['topology.kubernetes.io/zone', 'topology.kubernetes.io/region', 'kubernetes.io/hostname', 'missing/key'],
      labelsForPV: { 'local-storage-cr-name': 'foobar', 'topology.kubernetes.io/region': 'override' },
    });
    expect(labels).toStrictEqual({
      'kubernetes.io/hostname': 'test-node-host',
      'local-storage-cr-name': 'foobar',
      'topology.kubernetes.io/region': 'override',
      'topology.kubernetes.io/zone': 'west-1',
    });
  });
  it('is empty when nothing is configured', () => {
    expect(buildPVLabels(node, { nodeLabelsForPV: [], labelsForPV: {} })).toStrictEqual({});
  });
});

describe('buildLocalPV', () => {
  it('the volume identity is one annotation more (sorted first, as Go sorts map keys); the spec is byte-identical', () => {
    const plain = buildLocalPV(input());
    const pv = buildLocalPV(input({ identity: 'block:7:3' }));
    expect(JSON.stringify(pv.spec)).toBe(JSON.stringify(plain.spec));
    expect(Object.entries(pv.metadata?.annotations ?? {})).toEqual([
      ['local-static-provisioner/volume-identity', 'block:7:3'],
      ...Object.entries(plain.metadata?.annotations ?? {}),
    ]);
  });
  it('plain filesystem class', () => {
    const pv = buildLocalPV(input());
    expect(pv).toStrictEqual({
      apiVersion: 'v1',
      kind: 'PersistentVolume',
      metadata: {
        name: 'local-pv-aaaafef5',
        annotations: {
          'pv.kubernetes.io/provisioned-by': 'local-volume-provisioner-test-node-d9607e19-f88f-11e6-a518-42010a800195',
        },
      },
      spec: {
        capacity: { storage: '10Gi' },
        local: { path: '/mnt/disks/dir1/mount1' },
        accessModes: ['ReadWriteOnce'],
        persistentVolumeReclaimPolicy: 'Delete',
        storageClassName: 'sc1',
        volumeMode: 'Filesystem',
        nodeAffinity: { required: { nodeSelectorTerms: [hostTerm] } },
      },
    });
    // Keys in Go's JSON order.
    expect(JSON.stringify(pv)).toBe(
      '{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"local-pv-aaaafef5","annotations":' +
        '{"pv.kubernetes.io/provisioned-by":"local-volume-provisioner-test-node-d9607e19-f88f-11e6-a518-42010a800195"}},' +
        '"spec":{"capacity":{"storage":"10Gi"},"local":{"path":"/mnt/disks/dir1/mount1"},"accessModes":["ReadWriteOnce"],' +
        '"persistentVolumeReclaimPolicy":"Delete","storageClassName":"sc1","volumeMode":"Filesystem",' +
        '"nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["test-node-host"]}]}]}}}}',
    );
  });

  it('block class with fsType, access mode and Retain', () => {
    const pv = buildLocalPV(
      input({
        name: 'local-pv-a7aafa3c',
        className: 'sc2',
        classConfig: { ...fsClass, hostDir: '/dev/disks', volumeMode: 'Block', fsType: 'ext4', accessMode: 'ReadWriteOncePod' },
        hostPath: '/dev/disks/sdb',
        capacityBytes: 9n * GiB + 999n * MiB,
        reclaimPolicy: 'Retain',
      }),
    );
    expect(pv.spec).toStrictEqual({
      capacity: { storage: '10215Mi' },
      local: { path: '/dev/disks/sdb', fsType: 'ext4' },
      accessModes: ['ReadWriteOncePod'],
      persistentVolumeReclaimPolicy: 'Retain',
      storageClassName: 'sc2',
      volumeMode: 'Block',
      nodeAffinity: { required: { nodeSelectorTerms: [hostTerm] } },
    });
  });

  it('empty fsType and empty accessMode behave as unset', () => {
    const pv = buildLocalPV(input({ classConfig: { ...fsClass, fsType: '', accessMode: '' } }));
    expect(pv.spec?.local).toStrictEqual({ path: '/mnt/disks/dir1/mount1' });
    expect(pv.spec?.accessModes).toStrictEqual(['ReadWriteOnce']);
  });

  it('useAlphaAPI: affinity in the annotation, exactly as Go json.Marshal writes it, no spec.nodeAffinity', () => {
    const pv = buildLocalPV(
      input({
        config: { useAlphaAPI: true, setPVOwnerRef: false },
        classConfig: { ...fsClass, selector: [{ matchExpressions: [{ key: 'disk', operator: 'Exists' }] }] },
      }),
    );
    expect(pv.metadata?.annotations).toStrictEqual({
      'pv.kubernetes.io/provisioned-by': 'local-volume-provisioner-test-node-d9607e19-f88f-11e6-a518-42010a800195',
      'volume.alpha.kubernetes.io/node-affinity':
        '{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["test-node-host"]}]}]}}',
    });
    expect(pv.spec && 'nodeAffinity' in pv.spec).toBe(false);
  });

  it('setPVOwnerRef adds the Node owner reference (and only then)', () => {
    const ref = { ...nodeOwnerReference(node), controller: true };
    const withRef = buildLocalPV(input({ config: { useAlphaAPI: false, setPVOwnerRef: true }, ownerReference: ref }));
    expect(withRef.metadata?.ownerReferences).toStrictEqual([
      { apiVersion: 'v1', kind: 'Node', name: 'test-node', uid: 'd9607e19-f88f-11e6-a518-42010a800195' },
    ]);
    const without = buildLocalPV(input({ ownerReference: ref }));
    expect(without.metadata && 'ownerReferences' in without.metadata).toBe(false);
  });

  it('labels from nodeLabelsForPV (missing key skipped) with the labelsForPV overlay', () => {
    const labels = buildPVLabels(node, {
      nodeLabelsForPV: ['topology.kubernetes.io/zone', 'kubernetes.io/hostname', 'absent'],
      labelsForPV: { 'local-storage-cr-name': 'foobar' },
    });
    const pv = buildLocalPV(input({ labels }));
    expect(pv.metadata?.labels).toStrictEqual({
      'kubernetes.io/hostname': 'test-node-host',
      'local-storage-cr-name': 'foobar',
      'topology.kubernetes.io/zone': 'west-1',
    });
    expect(Object.keys(pv.metadata ?? {})).toEqual(['name', 'labels', 'annotations']);
  });

  it('class selector terms are appended after the hostname term, empty lists dropped', () => {
    const selector = [
      { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: ['node-b', 'node-c'] }], matchFields: [] },
      { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['node-d'] }] },
      { matchExpressions: [{ key: 'shared-disk', operator: 'Exists', values: [] }] },
    ];
    const pv = buildLocalPV(input({ classConfig: { ...fsClass, selector } }));
    expect(pv.spec?.nodeAffinity).toStrictEqual({
      required: {
        nodeSelectorTerms: [
          hostTerm,
          { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: ['node-b', 'node-c'] }] },
          { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['node-d'] }] },
          { matchExpressions: [{ key: 'shared-disk', operator: 'Exists' }] },
        ],
      },
    });
    // The config's objects are copied, not shared.
    expect(pv.spec?.nodeAffinity?.required?.nodeSelectorTerms[1]).not.toBe(selector[0]);
  });

  it('StorageClass mountOptions are set verbatim, and omitted when empty', () => {
    const pv = buildLocalPV(input({ mountOptions: ['ro', 'noatime'] }));
    expect(pv.spec?.mountOptions).toStrictEqual(['ro', 'noatime']);
    expect(Object.keys(pv.spec ?? {})).toEqual([
      'capacity',
      'local',
      'accessModes',
      'persistentVolumeReclaimPolicy',
      'storageClassName',
      'mountOptions',
      'volumeMode',
      'nodeAffinity',
    ]);
    const none = buildLocalPV(input({ mountOptions: [] }));
    expect(none.spec && 'mountOptions' in none.spec).toBe(false);
  });

  it('rounds the capacity (small sizes keep exact bytes)', () => {
    expect(buildLocalPV(input({ capacityBytes: 12345n })).spec?.capacity).toStrictEqual({ storage: '12345' });
    expect(buildLocalPV(input({ capacityBytes: 63n * MiB - 10n })).spec?.capacity).toStrictEqual({ storage: '62Mi' });
  });
});

describe('goJSON / alphaNodeAffinityAnnotation', () => {
  it('escapes HTML characters like Go', () => {
    expect(goJSON({ a: '<b>&\u2028' })).toBe('{"a":"\\u003cb\\u003e\\u0026\\u2028"}');
  });
  it('drops empty lists (omitempty) and keeps Go field order', () => {
    expect(
      alphaNodeAffinityAnnotation([{ matchFields: [{ values: ['x'], operator: 'In', key: 'metadata.name' }], matchExpressions: [] }]),
    ).toBe('{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["x"]}]}]}}');
  });
});
