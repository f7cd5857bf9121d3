// The narrow port through which the daemon talks to the Kubernetes API.
// src/kube/client.ts implements it (requests: src/kube/transport.ts); unit tests use the
// in-memory fake in test/support/fake-kube.ts. Nothing else in src/ imports
// @kubernetes/client-node's API classes, so every API request is visible here
// (and counted: see src/kube/client.ts).
import type {
  CoreV1Event,
  V1Job,
  V1Node,
  V1PersistentVolume,
  V1PersistentVolumeClaim,
  V1Pod,
  V1StorageClass,
} from '@kubernetes/client-node';

/** Resources the daemon lists and watches. */
export type ResourceKind = 'persistentvolumes' | 'persistentvolumeclaims' | 'storageclasses' | 'jobs' | 'nodes' | 'pods' | 'events';

export interface ResourceTypes {
  persistentvolumes: V1PersistentVolume;
  persistentvolumeclaims: V1PersistentVolumeClaim;
  storageclasses: V1StorageClass;
  jobs: V1Job;
  nodes: V1Node;
  pods: V1Pod;
  events: CoreV1Event;
}

export interface ListOptions {
  readonly namespace?: string | undefined;
  readonly labelSelector?: string | undefined;
  readonly fieldSelector?: string | undefined;
}

/** A list request that may be paginated (watch requests take ListOptions only). */
export interface ListPageOptions extends ListOptions {
  /** At most this many items; the result's `continue` then fetches the next page. */
  readonly limit?: number | undefined;
  /** The `continue` token of the previous page (410 Expired once the server compacted past it). */
  readonly continue?: string | undefined;
}

export interface ListResult<T> {
  readonly items: T[];
  readonly resourceVersion: string;
  /** Set when more items follow (a list with `limit`). */
  readonly continue?: string | undefined;
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

export interface WatchEvent<T> {
  readonly type: WatchEventType;
  /** For ERROR this is a metav1.Status (code 410 = resourceVersion too old). */
  readonly object: T | KubeStatus;
}

export interface KubeStatus {
  readonly kind?: string;
  readonly code?: number;
  readonly reason?: string;
  readonly message?: string;
}

export interface WatchOptions extends ListOptions {
  readonly resourceVersion: string;
  readonly timeoutSeconds?: number | undefined;
  readonly allowWatchBookmarks?: boolean | undefined;
}

/** Error thrown by the port: `code` is the HTTP status (0 for network errors). */
export class KubeError extends Error {
  readonly code: number;
  readonly reason: string;
  constructor(code: number, reason: string, message: string) {
    super(message);
    this.name = 'KubeError';
    this.code = code;
    this.reason = reason;
  }
}

export const isNotFound = (e: unknown): boolean => e instanceof KubeError && e.code === 404;
// Both answer 409; the Status reason tells them apart (like apimachinery's
// IsAlreadyExists/IsConflict): a create of an existing name is AlreadyExists, a failed
// precondition or a stale resourceVersion is Conflict (also any 409 of another reason).
export const isAlreadyExists = (e: unknown): boolean => e instanceof KubeError && e.code === 409 && e.reason === 'AlreadyExists';
export const isConflict = (e: unknown): boolean => e instanceof KubeError && e.code === 409 && e.reason !== 'AlreadyExists';
export const isForbidden = (e: unknown): boolean => e instanceof KubeError && e.code === 403;
export const isGone = (e: unknown): boolean => e instanceof KubeError && e.code === 410;

export interface DeleteOptions {
  /** Precondition: only delete the object with this UID. */
  readonly uid?: string | undefined;
  /** Precondition: only delete the object at this resourceVersion (409 Conflict otherwise). */
  readonly resourceVersion?: string | undefined;
  readonly propagationPolicy?: 'Foreground' | 'Background' | 'Orphan' | undefined;
}

export interface KubePort {
  list<K extends ResourceKind>(kind: K, opts: ListPageOptions): Promise<ListResult<ResourceTypes[K]>>;
  /**
   * Streams watch events to `onEvent` until the server ends the watch (resolves),
   * the signal aborts (resolves), or an error happens (rejects with KubeError).
   */
  watch<K extends ResourceKind>(
    kind: K,
    opts: WatchOptions,
    onEvent: (ev: WatchEvent<ResourceTypes[K]>) => void,
    signal: AbortSignal,
  ): Promise<void>;

  getNode(name: string): Promise<V1Node>;
  replaceNode(node: V1Node): Promise<V1Node>;

  createPersistentVolume(pv: V1PersistentVolume): Promise<V1PersistentVolume>;
  /** Reads one PV (discovery, after a create answered AlreadyExists for a PV its informer does not see). */
  getPersistentVolume(name: string): Promise<V1PersistentVolume>;
  deletePersistentVolume(name: string, opts?: DeleteOptions): Promise<void>;
  /** Merge-patches a PV (used to add the node label of --pv-node-label to adopted PVs). */
  patchPersistentVolume(name: string, patch: Partial<V1PersistentVolume>): Promise<V1PersistentVolume>;
  /** One PVC (the deleter's claim check before a clean or a PV delete). */
  getPersistentVolumeClaim(namespace: string, name: string): Promise<V1PersistentVolumeClaim>;
  deletePersistentVolumeClaim(namespace: string, name: string, opts?: DeleteOptions): Promise<void>;

  createJob(namespace: string, job: V1Job): Promise<V1Job>;
  deleteJob(namespace: string, name: string, opts?: DeleteOptions): Promise<void>;

  createEvent(namespace: string, ev: CoreV1Event): Promise<CoreV1Event>;
  /** Merge-patches an existing Event (used to bump count/lastTimestamp of a repeated event). */
  patchEvent(namespace: string, name: string, patch: Partial<CoreV1Event>): Promise<CoreV1Event>;
}
