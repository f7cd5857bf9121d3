// The cache seam: a list+watch cache of one resource kind. src/kube/reflector.ts
// implements it on KubePort; it relists on 410, backs off on errors, restarts
// stalled watches, and never lets a handler exception escape.
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
