// Fixtures shared by the deleter and job controller tests.
import type { V1Job, V1PersistentVolume } from '@kubernetes/client-node';
import type { EventRecorder, EventType, ObjectRef } from '../../src/kube/events.ts';
import type { Store } from '../../src/kube/informer.ts';
import { Metrics } from '../../src/metrics/metrics.ts';
import { buildCleanupJob } from '../../src/deleter/job.ts';
import type { FakeKube } from '../support/fake-kube.ts';

export const NODE = 'somehost.acme.com';
export const NS = 'kubesystem';
export const PROVISIONER = `local-volume-provisioner-${NODE}`;

export interface RecordedEvent {
  ref: ObjectRef;
  type: EventType;
  reason: string;
  message: string;
}

export class FakeRecorder implements EventRecorder {
  readonly events: RecordedEvent[] = [];
  event(ref: ObjectRef, type: EventType, reason: string, message: string): void {
    this.events.push({ ref, type, reason, message });
  }
  reasons(): string[] {
    return this.events.map((e) => e.reason);
  }
}

/** A Store that reads the fake API server's current PVs (an always-synced informer). */
export const liveStore = (fake: FakeKube): Store<V1PersistentVolume> => ({
  get: (k) => fake.object('persistentvolumes', k),
  list: () => fake.objects('persistentvolumes'),
});

export function makePV(
  name: string,
  opts: {
    phase?: string;
    policy?: string;
    path?: string;
    cls?: string;
    uid?: string;
    deleting?: boolean;
    capacity?: string;
    provisioner?: string;
  } = {},
): V1PersistentVolume {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: {
      name,
      uid: opts.uid ?? `uid-${name}`,
      annotations: { 'pv.kubernetes.io/provisioned-by': opts.provisioner ?? PROVISIONER },
      ...(opts.deleting ? { deletionTimestamp: new Date() } : {}),
    },
    spec: {
      capacity: { storage: opts.capacity ?? '10Gi' },
      persistentVolumeReclaimPolicy: opts.policy ?? 'Delete',
      storageClassName: opts.cls ?? 'sc1',
      local: { path: opts.path ?? `/mnt/disks/${name}` },
    },
    status: { phase: opts.phase ?? 'Released' },
  };
}

export function makeJob(pv: V1PersistentVolume, mode: 'Block' | 'Filesystem' = 'Block', startTime = new Date()): V1Job {
  const name = pv.metadata?.name ?? '';
  return buildCleanupJob({
    pvName: name,
    pvUid: pv.metadata?.uid ?? '',
    nodeName: NODE,
    namespace: NS,
    image: 'img',
    mode,
    blockCleanerCommand: ['/scripts/quick_reset.sh'],
    containerPath: `/discoveryPath/${name}`,
    hostDir: '/mnt/disks',
    mountDir: '/discoveryPath',
    tolerations: [],
    startTime,
  });
}

export const newMetrics = (): Metrics => new Metrics({ defaultMetrics: false });

export async function metricValue(
  m: { get(): Promise<{ values: Array<{ labels: Record<string, string | number>; value: number; metricName?: string }> }> },
  labels: Record<string, string> = {},
  metricName?: string,
): Promise<number> {
  const { values } = await m.get();
  return values
    .filter((v) => (metricName === undefined || v.metricName === metricName) && Object.entries(labels).every(([k, val]) => v.labels[k] === val))
    .reduce((s, v) => s + v.value, 0);
}
