// The node-cleanup controller: deletes the PVCs and local PVs that deleted Nodes
// leave behind (the Go provisioner's CleanupController and Deleter, merged into one
// work queue of PV names). For a PV of a listed StorageClass whose every pinned
// node (pinnedHostnames) is gone:
//   1. the first time it is seen gone, a deletion timer of --pvc-deletion-delay starts
//      (log line, Warning Event ReferencedNodeDeleted on the claim, metric);
//   2. a node seen again (add/update in the Node cache) resets the gone-since time,
//      so a Node deleted and re-created within the delay costs nothing;
//   3. once the nodes have been gone for the whole delay, every node is looked up
//      with a GET (and a hostname-label list) right before each delete, and
//      - the PVC bound to the PV is deleted (UID precondition), then, on a later pass
//        once the PV is Released,
//      - the PV is deleted (UID and resourceVersion preconditions) if Available or
//        Released with reclaim policy Delete.
// Fixed here, compared with the Go controller: a PV whose affinity is not pinned to
// hostnames is never touched, and the delay applies to PV deletes too (the Go
// deleter deletes Available PVs of a gone node at once, before the node can come back).
import type { V1Node, V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { LABEL_HOSTNAME } from '../volume/pv-spec.ts';
import type { EventRecorder, ObjectRef } from '../kube/events.ts';
import { objectKey, stripManagedFields, type Informer } from '../kube/informer.ts';
import { isNotFound, type KubePort } from '../kube/port.ts';
import { createInformer } from '../kube/reflector.ts';
import { formatDuration } from '../util/duration.ts';
import { silentLogger, type Logger } from '../util/log.ts';
import { runWorker, WorkQueue, type WorkQueueBackoffOptions } from '../util/workqueue.ts';
import type { NodeCleanupMetrics, TimerOutcome } from './metrics.ts';
import { isClaimOf, isLocalPVOfClasses, nodeHostnames, pinnedHostnames, pvDeletable } from './pv.ts';
import { REASON_NODE_DELETED } from '../kube/reasons.ts';

export interface NodeCleanupControllerOptions {
  readonly kube: KubePort;
  readonly storageClassNames: readonly string[];
  /** --pvc-deletion-delay */
  readonly deletionDelayMs: number;
  /** --stale-pv-discovery-interval: every PV in the cache is checked again this often. */
  readonly scanIntervalMs: number;
  readonly workers: number;
  readonly recorder: EventRecorder;
  readonly metrics: Pick<NodeCleanupMetrics, 'pvDeleteTotal' | 'pvDeleteFailedTotal' | 'pvcDeleteTotal' | 'pvcDeleteFailedTotal' | 'deletionTimers'> &
    Partial<Pick<NodeCleanupMetrics, 'watchRestarts'>>;
  readonly logger?: Logger | undefined;
  readonly now?: (() => number) | undefined;
  /** Retry delays after an API error (default 1 s .. 5 min). */
  readonly queueRateLimit?: WorkQueueBackoffOptions | undefined;
}

/** What one pass over a PV did (for logs and tests). */
export type SyncOutcome =
  | { readonly action: 'none'; readonly reason: string }
  | { readonly action: 'wait'; readonly dueInMs: number }
  | { readonly action: 'deleted-pvc'; readonly claim: string }
  | { readonly action: 'deleted-pv'; readonly phase: string };

const none = (reason: string): SyncOutcome => ({ action: 'none', reason });

/** The Node cache reduced to what is needed: names and hostname labels (Nodes are big). */
const slimNode = (n: V1Node): V1Node => ({
  metadata: {
    name: n.metadata?.name ?? '',
    ...(n.metadata?.uid ? { uid: n.metadata.uid } : {}),
    ...(n.metadata?.resourceVersion ? { resourceVersion: n.metadata.resourceVersion } : {}),
    ...(n.metadata?.labels?.[LABEL_HOSTNAME] !== undefined ? { labels: { [LABEL_HOSTNAME]: n.metadata.labels[LABEL_HOSTNAME] } } : {}),
  },
});

/** Hostname values (node names and kubernetes.io/hostname labels) of the Nodes in the cache. */
class HostnameIndex {
  readonly #byNode = new Map<string, string[]>();
  readonly #refs = new Map<string, number>();

  set(node: V1Node): void {
    this.delete(node);
    const names = nodeHostnames(node);
    this.#byNode.set(node.metadata?.name ?? '', names);
    for (const n of names) this.#refs.set(n, (this.#refs.get(n) ?? 0) + 1);
  }

  delete(node: V1Node): void {
    const key = node.metadata?.name ?? '';
    for (const n of this.#byNode.get(key) ?? []) {
      const c = (this.#refs.get(n) ?? 0) - 1;
      if (c > 0) this.#refs.set(n, c);
      else this.#refs.delete(n);
    }
    this.#byNode.delete(key);
  }

  has(hostname: string): boolean {
    return this.#refs.has(hostname);
  }
}

export class NodeCleanupController {
  readonly #o: NodeCleanupControllerOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #classes: ReadonlySet<string>;
  readonly #nodes: Informer<V1Node>;
  readonly #pvs: Informer<V1PersistentVolume>;
  readonly #pvcs: Informer<V1PersistentVolumeClaim>;
  readonly #queue: WorkQueue<string>;
  readonly #index = new HostnameIndex();
  /** Hostname value -> when it was first seen with no Node answering to it. */
  readonly #goneSinceByName = new Map<string, number>();
  /** PV name -> end of its running deletion delay. */
  readonly #due = new Map<string, number>();
  /** PVs already reported as out of reach (no hostname pinning), to log that once. */
  readonly #unpinnedReported = new Set<string>();
  readonly #stop = new AbortController();
  #unsubscribe: Array<() => void> = [];
  #workers: Promise<void>[] = [];
  #started: Promise<void> | undefined;
  #scanTimer: NodeJS.Timeout | undefined;

  constructor(opts: NodeCleanupControllerOptions) {
    this.#o = opts;
    this.#log = opts.logger ?? silentLogger;
    this.#now = opts.now ?? Date.now;
    this.#classes = new Set(opts.storageClassNames);
    this.#queue = new WorkQueue<string>({ baseDelayMs: 1000, maxDelayMs: 5 * 60_000, ...opts.queueRateLimit });
    const common = { metrics: opts.metrics.watchRestarts ? { watchRestarts: opts.metrics.watchRestarts } : undefined };
    this.#nodes = createInformer(opts.kube, 'nodes', { ...common, transform: slimNode, logger: this.#log.child({ informer: 'nodes' }) });
    this.#pvs = createInformer(opts.kube, 'persistentvolumes', {
      ...common,
      filter: (pv) => isLocalPVOfClasses(pv, this.#classes),
      transform: stripManagedFields,
      logger: this.#log.child({ informer: 'persistentvolumes' }),
    });
    // A PVC can only be bound to a PV of its own class, so other classes are never needed.
    this.#pvcs = createInformer(opts.kube, 'persistentvolumeclaims', {
      ...common,
      filter: (pvc) => this.#classes.has(pvc.spec?.storageClassName ?? ''),
      transform: stripManagedFields,
      logger: this.#log.child({ informer: 'persistentvolumeclaims' }),
    });
  }

  /** Starts the caches; once they are synced, the handlers, a first pass, the workers and the periodic pass. Idempotent. */
  start(): void {
    if (this.#started || this.#stop.signal.aborted) return;
    for (const i of [this.#nodes, this.#pvs, this.#pvcs]) i.start();
    this.#started = this.waitForSync(this.#stop.signal).then(
      () => this.#run(),
      (err: unknown) => {
        if (!this.#stop.signal.aborted) this.#log.error({ err }, 'node-cleanup caches did not sync');
      },
    );
  }

  /** Resolves once the Node, PV and PVC caches hold a first list. */
  async waitForSync(signal?: AbortSignal): Promise<void> {
    await Promise.all([this.#nodes.waitForSync(signal), this.#pvs.waitForSync(signal), this.#pvcs.waitForSync(signal)]);
  }

  /** Stops the timers, the workers (after their current PV) and the caches. */
  async stop(): Promise<void> {
    this.#stop.abort();
    clearInterval(this.#scanTimer);
    this.#queue.shutDown();
    for (const u of this.#unsubscribe) u();
    this.#unsubscribe = [];
    await this.#started;
    await Promise.allSettled([...this.#workers, this.#nodes.stop(), this.#pvs.stop(), this.#pvcs.stop()]);
    this.#workers = [];
  }

  #run(): void {
    if (this.#stop.signal.aborted) return;
    this.#unsubscribe.push(
      this.#nodes.on({
        add: (n) => this.#nodeSeen(n),
        update: (_old, n) => this.#nodeSeen(n),
        delete: (n) => {
          this.#index.delete(n);
          this.#log.info({ node: n.metadata?.name }, 'Node deleted; checking the PVs pinned to it');
          this.#scan();
        },
      }),
      this.#pvs.on({
        add: (pv) => this.#enqueueIfOrphaned(pv),
        update: (_old, pv) => this.#enqueueIfOrphaned(pv),
        delete: (pv) => {
          const name = pv.metadata?.name ?? '';
          this.#due.delete(name);
          this.#unpinnedReported.delete(name);
        },
      }),
    );
    const n = Math.max(1, this.#o.workers);
    for (let i = 0; i < n; i++) {
      this.#workers.push(
        runWorker(this.#queue, (pv) => this.#work(pv), (pv, err, retries) =>
          this.#log.warn({ pv, err, retries }, `cleaning up PV ${pv} failed; will retry`),
        ),
      );
    }
    this.#log.info({ workers: n, classes: [...this.#classes], delay: formatDuration(this.#o.deletionDelayMs) }, 'Started workers');
    this.#scan();
    this.#scanTimer = setInterval(() => this.#scan(), this.#o.scanIntervalMs);
    this.#scanTimer.unref();
  }

  async #work(name: string): Promise<void> {
    const out = await this.syncPV(name);
    this.#log.debug({ pv: name, ...out }, 'PV checked');
  }

  #nodeSeen(node: V1Node): void {
    this.#index.set(node);
    for (const n of nodeHostnames(node)) this.#goneSinceByName.delete(n);
  }

  /** Queues a PV whose pinned nodes are all missing from the cache (cheap: no API call). */
  #enqueueIfOrphaned(pv: V1PersistentVolume): void {
    const names = this.#pinned(pv);
    if (names && !names.some((n) => this.#index.has(n))) this.#queue.add(pv.metadata?.name ?? '');
  }

  /** Queues every orphaned PV, and forgets gone-since times of names no PV is pinned to any more. */
  #scan(): void {
    const pinned = new Set<string>();
    for (const pv of this.#pvs.list()) {
      for (const n of pinnedHostnames(pv) ?? []) pinned.add(n);
      this.#enqueueIfOrphaned(pv);
    }
    for (const n of this.#goneSinceByName.keys()) if (!pinned.has(n)) this.#goneSinceByName.delete(n);
  }

  /**
   * One pass over one PV (from the cache): decides, and deletes at most one object.
   * Throws on API errors (the caller retries with backoff).
   */
  async syncPV(name: string): Promise<SyncOutcome> {
    const pv = this.#pvs.get(name);
    if (!pv) {
      this.#due.delete(name);
      return none('the PV is gone');
    }
    if (!isLocalPVOfClasses(pv, this.#classes)) return none('not a local PV of a listed StorageClass');
    const names = this.#pinned(pv);
    if (!names) return none('the node affinity is not pinned to hostnames');
    const now = this.#now();
    if (names.some((n) => this.#index.has(n))) return this.#nodeIsBack(pv, names, now);

    const due = this.#goneSince(names, now) + this.#o.deletionDelayMs;
    if (now < due) {
      this.#arm(pv, names, due);
      this.#queue.addAfter(name, due - now);
      return { action: 'wait', dueInMs: due - now };
    }
    if (this.#due.delete(name)) {
      this.#timer('expired');
      this.#log.info({ pv: name, nodes: names }, `deletion delay of PV ${name} ended with its nodes still gone`);
    }
    return this.#cleanUp(pv, names);
  }

  /** pinnedHostnames, logging (once per PV) a PV that is never cleaned up. */
  #pinned(pv: V1PersistentVolume): string[] | undefined {
    const name = pv.metadata?.name ?? '';
    const names = pinnedHostnames(pv);
    if (!names) {
      this.#due.delete(name);
      if (!this.#unpinnedReported.has(name)) {
        this.#unpinnedReported.add(name);
        this.#log.info({ pv: name }, `PV ${name} is not pinned to hostnames in every node-affinity term; it is never cleaned up`);
      }
    }
    return names;
  }

  /** Since when all these hostnames have been missing (the first time each was seen missing is now, at the latest). */
  #goneSince(names: readonly string[], now: number): number {
    let since = 0;
    for (const n of names) {
      let t = this.#goneSinceByName.get(n);
      if (t === undefined) this.#goneSinceByName.set(n, (t = now));
      since = Math.max(since, t);
    }
    return since;
  }

  /**
   * The delay is over. Decides from the cache what there is to delete (the bound claim, or else
   * the PV); only then asks the API server about the nodes (so a PV left alone costs no request),
   * and deletes.
   */
  async #cleanUp(pv: V1PersistentVolume, names: readonly string[]): Promise<SyncOutcome> {
    const pvc = this.#boundClaim(pv);
    if (pvc?.metadata?.deletionTimestamp) return none('the PVC is being deleted');
    if (!pvc) {
      if (pv.metadata?.deletionTimestamp) return none('the PV is being deleted');
      if (!pvDeletable(pv)) return none(`phase ${pv.status?.phase ?? 'unknown'}, reclaim policy ${pv.spec?.persistentVolumeReclaimPolicy ?? 'unknown'}`);
    }
    for (const n of names) {
      if (await this.#nodeExists(n)) {
        this.#goneSinceByName.delete(n);
        return none(`node ${n} exists (API)`);
      }
    }
    if (pvc) {
      await this.#deletePVC(pvc, names);
      return { action: 'deleted-pvc', claim: objectKey(pvc) };
    }
    const phase = pv.status?.phase ?? '';
    await this.#deletePV(pv, phase, names);
    return { action: 'deleted-pv', phase };
  }

  /** The PVC in the cache that is the claim bound to this PV, if any. */
  #boundClaim(pv: V1PersistentVolume): V1PersistentVolumeClaim | undefined {
    const claim = pv.spec?.claimRef;
    if (!claim?.name) return undefined;
    const pvc = this.#pvcs.get(`${claim.namespace ?? ''}/${claim.name}`);
    if (!pvc || isClaimOf(pvc, pv)) return pvc;
    const name = pv.metadata?.name ?? '';
    this.#log.debug({ pv: name, pvc: objectKey(pvc) }, `PVC ${objectKey(pvc)} is not the claim bound to PV ${name}; not deleting it`);
    return undefined;
  }

  /** A node of the PV is in the cache: end a deletion delay that is over, or make sure it will be checked when it is. */
  #nodeIsBack(pv: V1PersistentVolume, names: readonly string[], now: number): SyncOutcome {
    const name = pv.metadata?.name ?? '';
    const due = this.#due.get(name);
    if (due !== undefined) {
      if (now >= due) {
        this.#due.delete(name);
        this.#timer('node_returned');
        this.#log.info({ pv: name, nodes: names }, `deletion delay of PV ${name} ended with a node back; nothing deleted`);
      } else {
        this.#queue.addAfter(name, due - now);
      }
    }
    return none('a node of the PV exists');
  }

  /** Starts (or moves) the deletion delay of a PV; reports a new one. */
  #arm(pv: V1PersistentVolume, names: readonly string[], due: number): void {
    const name = pv.metadata?.name ?? '';
    if (this.#due.get(name) === due) return;
    const restarted = this.#due.has(name);
    this.#due.set(name, due);
    this.#timer('started');
    const delay = formatDuration(this.#o.deletionDelayMs);
    const claim = pv.spec?.claimRef;
    this.#log.info(
      { pv: name, nodes: names, claim: claim?.name ? `${claim.namespace ?? ''}/${claim.name}` : undefined, delay, due: new Date(due).toISOString() },
      `Starting timer for resource deletion of PV ${name}${restarted ? ' (a node came and went again)' : ''}: its nodes are gone`,
    );
    const ref: ObjectRef = claim?.name
      ? { kind: 'PersistentVolumeClaim', apiVersion: 'v1', namespace: claim.namespace, name: claim.name, uid: claim.uid }
      : { kind: 'PersistentVolume', apiVersion: 'v1', name, uid: pv.metadata?.uid };
    const what = claim?.name ? 'PVC' : 'PV';
    this.#o.recorder.event(
      ref,
      'Warning',
      REASON_NODE_DELETED,
      `${what} is tied to a deleted Node. ${what} will be cleaned up in ${delay} if the Node doesn't come back`,
    );
  }

  #timer(outcome: TimerOutcome): void {
    this.#o.metrics.deletionTimers.inc({ outcome });
  }

  /** A GET of the Node, then a list by hostname label: exists unless both say no. Errors propagate (nothing is deleted). */
  async #nodeExists(hostname: string): Promise<boolean> {
    try {
      await this.#o.kube.getNode(hostname);
      return true;
    } catch (e) {
      if (!isNotFound(e)) throw e;
    }
    const byLabel = await this.#o.kube.list('nodes', { labelSelector: `${LABEL_HOSTNAME}=${hostname}` });
    return byLabel.items.length > 0;
  }

  async #deletePVC(pvc: V1PersistentVolumeClaim, nodes: readonly string[]): Promise<void> {
    const ns = pvc.metadata?.namespace ?? '';
    const name = pvc.metadata?.name ?? '';
    try {
      // The UID pins the very claim: its spec.volumeName cannot change once set.
      await this.#o.kube.deletePersistentVolumeClaim(ns, name, { uid: pvc.metadata?.uid });
    } catch (e) {
      if (isNotFound(e)) {
        this.#log.info({ pvc: `${ns}/${name}` }, `PVC ${ns}/${name} no longer exists`);
        return;
      }
      this.#o.metrics.pvcDeleteFailedTotal.inc();
      throw e;
    }
    this.#o.metrics.pvcDeleteTotal.inc();
    this.#log.info({ pvc: `${ns}/${name}`, pv: pvc.spec?.volumeName, nodes }, `Deleted PVC ${ns}/${name} that pointed to non-existent Nodes ${nodes.join(', ')}`);
  }

  async #deletePV(pv: V1PersistentVolume, phase: string, nodes: readonly string[]): Promise<void> {
    const name = pv.metadata?.name ?? '';
    try {
      // resourceVersion: only the PV as checked here (a claim bound to it meanwhile makes this a 409).
      await this.#o.kube.deletePersistentVolume(name, { uid: pv.metadata?.uid, resourceVersion: pv.metadata?.resourceVersion });
    } catch (e) {
      if (isNotFound(e)) {
        this.#log.info({ pv: name }, `PV ${name} no longer exists`);
        return;
      }
      this.#o.metrics.pvDeleteFailedTotal.inc({ phase });
      throw e;
    }
    this.#o.metrics.pvDeleteTotal.inc({ phase });
    this.#log.info({ pv: name, phase, nodes }, `Deleted PV ${name} (${phase}) that pointed to non-existent Nodes ${nodes.join(', ')}`);
  }
}
