// The cache seam: a list+watch cache of one resource kind. src/kube/reflector.ts
// implements it on KubePort; it relists on 410, backs off on errors, restarts
// stalled watches, and never lets a handler exception escape.
import type { V1NodeSelectorRequirement, V1NodeSelectorTerm, V1PersistentVolume, V1PersistentVolumeSpec } from '@kubernetes/client-node';

export interface Store<T> {
  /** Key is "name" for cluster-scoped objects and "namespace/name" for namespaced ones. */
  get(key: string): T | undefined;
  list(): T[];
}

export interface InformerHandlers<T> {
  add?(obj: T): void;
  update?(oldObj: T, newObj: T): void;
  delete?(obj: T): void;
}

export interface Informer<T> extends Store<T> {
  /** Starts list+watch in the background; idempotent. */
  start(): void;
  /** Stops the watch and every timer; resolves when nothing is left running. */
  stop(): Promise<void>;
  /** True once the first list has been stored. */
  hasSynced(): boolean;
  /** Resolves once synced; rejects if the signal aborts first. */
  waitForSync(signal?: AbortSignal): Promise<void>;
  /** Registers handlers; for an already-synced informer, add() is replayed for every cached object. Returns an unsubscribe function. */
  on(handlers: InformerHandlers<T>): () => void;
}

export const objectKey = (obj: { metadata?: { name?: string; namespace?: string } }): string =>
  obj.metadata?.namespace ? `${obj.metadata.namespace}/${obj.metadata.name ?? ''}` : (obj.metadata?.name ?? '');

/** Drops managedFields: a cache never needs them and they are most of an object's size. */
export function stripManagedFields<T extends { metadata?: { managedFields?: unknown } }>(obj: T): T {
  if (obj.metadata?.managedFields !== undefined) {
    const { managedFields: _drop, ...metadata } = obj.metadata;
    return { ...obj, metadata };
  }
  return obj;
}

/** Interned strings of cached objects (see leanPersistentVolume); bounded, so odd values cannot grow it without end. */
const INTERN_MAX = 1024;
const interned = new Map<string, string>();

/** One shared copy of a string that repeats across cached objects (JSON.parse makes a new one per object). */
export function intern(s: string): string {
  const c = interned.get(s);
  if (c !== undefined) return c;
  if (interned.size < INTERN_MAX && s.length <= 256) interned.set(s, s);
  return s;
}

const internAll = (xs: readonly string[] | undefined): string[] | undefined => xs?.map(intern);
function internValues(r: Record<string, string> | undefined): Record<string, string> | undefined {
  if (r === undefined) return undefined;
  const out: Record<string, string> = {};
  for (const k in r) out[k] = intern(r[k]!);
  return out;
}

/**
 * A PersistentVolume as the PV cache keeps it (issue 20): without what no reader of the cache uses
 * (metadata.managedFields, creationTimestamp and finalizers; status.lastPhaseTransitionTime: never read,
 * never sent back, as PVs are only patched and deleted with uid/resourceVersion preconditions), and with the
 * strings that repeat from PV to PV (kind, apiVersion, label and annotation values, access modes, reclaim
 * policy, class, volume mode, capacity, node affinity terms, claimRef's namespace/kind, phase) shared.
 * Everything else is kept as it came: name, uid, resourceVersion, deletionTimestamp, labels, annotations,
 * ownerReferences and the whole spec (local.path, claimRef) and status (phase, reason, message).
 * Returns a new object; the argument is not changed.
 */
export function leanPersistentVolume(pv: V1PersistentVolume): V1PersistentVolume {
  const out: V1PersistentVolume = {};
  if (pv.apiVersion !== undefined) out.apiVersion = intern(pv.apiVersion);
  if (pv.kind !== undefined) out.kind = intern(pv.kind);
  if (pv.metadata !== undefined) {
    const { managedFields: _mf, creationTimestamp: _ct, finalizers: _f, ...metadata } = pv.metadata;
    if (metadata.labels !== undefined) metadata.labels = internValues(metadata.labels)!;
    if (metadata.annotations !== undefined) metadata.annotations = internValues(metadata.annotations)!;
    out.metadata = metadata;
  }
  if (pv.spec !== undefined) out.spec = leanSpec(pv.spec);
  if (pv.status !== undefined) {
    const { lastPhaseTransitionTime: _lt, ...status } = pv.status;
    if (status.phase !== undefined) status.phase = intern(status.phase);
    out.status = status;
  }
  return out;
}

/** leanPersistentVolume's spec: a shallow copy with the repeating strings interned (local.path, claimRef name/uid kept as they are). */
function leanSpec(s: V1PersistentVolumeSpec): V1PersistentVolumeSpec {
  const spec = { ...s };
  if (spec.accessModes) spec.accessModes = internAll(spec.accessModes)!;
  if (spec.mountOptions) spec.mountOptions = internAll(spec.mountOptions)!;
  if (spec.capacity) spec.capacity = internValues(spec.capacity)!;
  if (spec.persistentVolumeReclaimPolicy !== undefined) spec.persistentVolumeReclaimPolicy = intern(spec.persistentVolumeReclaimPolicy);
  if (spec.storageClassName !== undefined) spec.storageClassName = intern(spec.storageClassName);
  if (spec.volumeMode !== undefined) spec.volumeMode = intern(spec.volumeMode);
  if (spec.claimRef) {
    const c = { ...spec.claimRef };
    if (c.namespace !== undefined) c.namespace = intern(c.namespace);
    if (c.kind !== undefined) c.kind = intern(c.kind);
    if (c.apiVersion !== undefined) c.apiVersion = intern(c.apiVersion);
    spec.claimRef = c;
  }
  const terms = spec.nodeAffinity?.required?.nodeSelectorTerms;
  if (terms) {
    const lean = (rs: V1NodeSelectorRequirement[] | undefined): V1NodeSelectorRequirement[] | undefined =>
      rs?.map((r) => {
        const x: V1NodeSelectorRequirement = { key: intern(r.key), operator: intern(r.operator) };
        if (r.values !== undefined) x.values = internAll(r.values)!;
        return x;
      });
    spec.nodeAffinity = {
      ...spec.nodeAffinity,
      required: {
        ...spec.nodeAffinity!.required,
        nodeSelectorTerms: terms.map((t) => {
          const x: V1NodeSelectorTerm = { ...t };
          if (t.matchExpressions) x.matchExpressions = lean(t.matchExpressions)!;
          if (t.matchFields) x.matchFields = lean(t.matchFields)!;
          return x;
        }),
      },
    };
  }
  return spec;
}
