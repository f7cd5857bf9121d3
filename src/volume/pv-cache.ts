// This node's PersistentVolumes: the Go provisioner's populator + cache.
//
// Two scopes:
// - `pvOnThisNode` selects the PVs of the process-scope PV informer
//   (`nodePVSelection`, which also keeps stubs of other owners' local PVs on
//   this node for the deleter's path-in-use check). It does not depend on the
//   config, so the informer survives config reloads (a reload may flip
//   useNodeNameOnly; both name forms are always kept).
// - `PVCache` is rebuilt per controller generation on top of that informer and
//   holds the PVs this provisioner owns: the same rule (pvOnThisNode), so both
//   provisioned-by forms of this node are adopted whatever useNodeNameOnly says
//   now. The Go populator adopts only the current form (plus, with
//   useNodeNameOnly, UID-form PVs labelled with the node name), so flipping
//   useNodeNameOnly strands the Released PVs of the other form there.
import type { V1Node, V1PersistentVolume, V1PersistentVolumeSpec } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { objectKey, type Informer } from '../kube/informer.ts';
import type { GenerationEnv } from './env.ts';
import { PROVISIONER_NAME_PREFIX } from './naming.ts';
import { ANN_PROVISIONED_BY, LABEL_HOSTNAME } from './pv-spec.ts';
import { nodeSelectorMatches } from './node-affinity.ts';
import type { PVIndex } from './pv-index.ts';

const provisionedBy = (pv: V1PersistentVolume): string | undefined => pv.metadata?.annotations?.[ANN_PROVISIONED_BY];

/**
 * True for PVs a provisioner on this node created, in either naming mode:
 * provisioned-by is `local-volume-provisioner-<node>` or
 * `local-volume-provisioner-<node>-<uid>`. Also kept: provisioned-by starting
 * with `local-volume-provisioner-<node>-` and label kubernetes.io/hostname equal
 * to the node name, which the Go populator adopts in useNodeNameOnly mode
 * (PVs made in UID mode, e.g. before the Node object was re-created).
 */
export function pvOnThisNode(pv: V1PersistentVolume, node: { readonly name: string; readonly uid: string }): boolean {
  const by = provisionedBy(pv);
  if (by === undefined) return false;
  const base = `${PROVISIONER_NAME_PREFIX}${node.name}`;
  if (by === base || by === `${base}-${node.uid}`) return true;
  return by.startsWith(`${base}-`) && pv.metadata?.labels?.[LABEL_HOSTNAME] === node.name;
}

/**
 * The selection of the process-scope PV informer, a filter and a transform to
 * use together. Kept: this node's PVs of this provisioner (pvOnThisNode), whole;
 * and every other local PV whose required node affinity selects this node,
 * reduced by the transform to a stub (name, uid, resourceVersion, storage class,
 * spec.local.path; no annotations, no status), so the deleter can tell that a
 * path is in use by someone else while keeping a few hundred bytes per PV
 * whatever the original object held. Other PVs are dropped. Stubs are never
 * adopted by PVCache (no provisioned-by annotation) and never considered by the
 * deleter. Node labels are those of `node` (read at start-up).
 */
export function nodePVSelection(node: V1Node): {
  filter: (pv: V1PersistentVolume) => boolean;
  transform: (pv: V1PersistentVolume) => V1PersistentVolume;
} {
  const id = { name: node.metadata?.name ?? '', uid: node.metadata?.uid ?? '' };
  return {
    filter: (pv) => pvOnThisNode(pv, id) || pv.spec?.local?.path !== undefined,
    transform: (pv) => {
      if (pvOnThisNode(pv, id)) return pv;
      const metadata = { name: pv.metadata?.name, uid: pv.metadata?.uid, resourceVersion: pv.metadata?.resourceVersion };
      const path = pv.spec?.local?.path;
      if (path === undefined || !nodeSelectorMatches(pv.spec?.nodeAffinity?.required, node)) return { metadata };
      const spec: V1PersistentVolumeSpec = { local: { path } };
      if (pv.spec?.storageClassName !== undefined) spec.storageClassName = pv.spec.storageClassName;
      return { apiVersion: 'v1', kind: 'PersistentVolume', metadata, spec };
    },
  };
}

/** What PVCache needs of the GenerationEnv: nodeId (both provisioned-by forms are adopted, see pvOnThisNode), logger, now. */
export type PVCacheEnv = Pick<GenerationEnv, 'nodeId' | 'logger' | 'now'>;

/** CreatedPVs' options. */
export interface CreatedPVsOptions {
  /** How long a PV noted by note() is trusted without the informer confirming it (default 2 min). */
  readonly pendingTtlMs?: number | undefined;
  readonly now?: (() => number) | undefined;
}

/** PVCache's own options. */
export interface PVCacheOptions extends CreatedPVsOptions {
  readonly informer: Informer<V1PersistentVolume>;
  /**
   * The process-scope notes of PVs created but not yet delivered by the informer. A reload starts
   * a new PVCache while the previous generation's last creates may still be on their way through
   * the watch: with per-generation notes the new discovery would create those PVs again
   * (AlreadyExists). Default: notes of this cache alone (tests).
   */
  readonly created?: CreatedPVs | undefined;
}

const DEFAULT_PENDING_TTL_MS = 2 * 60_000;
const DELETED_UIDS_KEPT = 1024;

/**
 * The PVs discovery created that the informer has not delivered yet, by name. Lives as long as the
 * informer it follows (process scope), so the notes outlive a controller generation: a delivery
 * or a delete event ends a note, and a create response arriving after its PV's delete event does
 * not resurrect it.
 */
export class CreatedPVs {
  readonly #informer: Informer<V1PersistentVolume>;
  readonly #now: () => number;
  readonly #ttl: number;
  /** Created by discovery, not yet delivered by the informer: name -> (pv, noted at). */
  readonly #pending = new Map<string, { pv: V1PersistentVolume; at: number }>();
  /** UIDs of recently deleted PVs, so a late note cannot resurrect one. */
  readonly #deletedUids = new Set<string>();
  readonly #unsubscribe: () => void;

  constructor(informer: Informer<V1PersistentVolume>, opts: CreatedPVsOptions = {}) {
    this.#informer = informer;
    this.#now = opts.now ?? Date.now;
    this.#ttl = opts.pendingTtlMs ?? DEFAULT_PENDING_TTL_MS;
    this.#unsubscribe = informer.on({
      add: (pv) => this.#pending.delete(objectKey(pv)),
      update: (_old, pv) => this.#pending.delete(objectKey(pv)),
      delete: (pv) => this.#deleted(pv),
    });
  }

  /** Records a PV that discovery just created, until the informer delivers it (or it is deleted). */
  note(pv: V1PersistentVolume): void {
    const name = objectKey(pv);
    if (!name || this.#informer.get(name)) return;
    const uid = pv.metadata?.uid;
    if (uid && this.#deletedUids.has(uid)) return;
    this.#pending.set(name, { pv, at: this.#now() });
  }

  /** The noted PV of this name, unless the note has expired. */
  get(name: string): V1PersistentVolume | undefined {
    const p = this.#pending.get(name);
    if (!p) return undefined;
    if (this.#now() - p.at > this.#ttl) {
      // Never confirmed: forget it. If it does exist, a create gets AlreadyExists and is skipped.
      this.#pending.delete(name);
      return undefined;
    }
    return p.pv;
  }

  /** The live notes. */
  list(): V1PersistentVolume[] {
    const out: V1PersistentVolume[] = [];
    for (const name of [...this.#pending.keys()]) {
      const p = this.get(name);
      if (p) out.push(p);
    }
    return out;
  }

  /** Number of notes not yet confirmed by the informer (expired ones included until read). */
  get size(): number {
    return this.#pending.size;
  }

  close(): void {
    this.#unsubscribe();
  }

  #deleted(pv: V1PersistentVolume): void {
    const name = objectKey(pv);
    const uid = pv.metadata?.uid;
    if (uid) {
      this.#deletedUids.add(uid);
      if (this.#deletedUids.size > DELETED_UIDS_KEPT) {
        const first = this.#deletedUids.values().next().value;
        if (first !== undefined) this.#deletedUids.delete(first);
      }
    }
    const pending = this.#pending.get(name);
    if (pending && (!uid || !pending.pv.metadata?.uid || pending.pv.metadata.uid === uid)) this.#pending.delete(name);
  }
}

/** The PV objects whose "Added pv" line was written (by this generation's cache or an earlier one's). */
const announced = new WeakSet<V1PersistentVolume>();

/**
 * The PVs this provisioner owns, by name and by spec.local.path. Fed by the
 * informer's handlers, plus the CreatedPVs notes; `close()` unsubscribes (end of the generation).
 */
export class PVCache implements PVIndex {
  readonly #env: PVCacheEnv;
  readonly #log: Logger;
  readonly #pvs = new Map<string, V1PersistentVolume>();
  readonly #created: CreatedPVs;
  /** Whether #created is this cache's own (closed with it). */
  readonly #ownCreated: boolean;
  readonly #byPath = new Map<string, Set<string>>();
  readonly #unsubscribe: () => void;

  constructor(env: PVCacheEnv, opts: PVCacheOptions) {
    this.#env = env;
    this.#log = env.logger;
    this.#ownCreated = opts.created === undefined;
    this.#created = opts.created ?? new CreatedPVs(opts.informer, { pendingTtlMs: opts.pendingTtlMs, now: opts.now ?? env.now });
    this.#unsubscribe = opts.informer.on({
      add: (pv) => this.#upsert(pv),
      update: (_old, pv) => this.#upsert(pv),
      delete: (pv) => this.#remove(pv),
    });
  }

  /**
   * Whether a PV not yet cached is ours: pvOnThisNode, i.e. either
   * provisioned-by form of this node, whatever the current useNodeNameOnly (a
   * PV made by the Go provisioner, or by us under the other setting, is cleaned
   * when Released instead of being stranded).
   */
  adopts(pv: V1PersistentVolume): boolean {
    return pvOnThisNode(pv, this.#env.nodeId);
  }

  get(name: string): V1PersistentVolume | undefined {
    return this.#pvs.get(name) ?? this.#created.get(name);
  }

  list(): V1PersistentVolume[] {
    return [...this.#pvs.values(), ...this.#created.list().filter((pv) => !this.#pvs.has(objectKey(pv)))];
  }

  /** PVs whose spec.local.path is exactly `localPath`. */
  lookupByPath(localPath: string): V1PersistentVolume[] {
    const out: V1PersistentVolume[] = [];
    for (const name of this.#byPath.get(localPath) ?? []) {
      const pv = this.#pvs.get(name);
      if (pv) out.push(pv);
    }
    for (const p of this.#created.list()) if (p.spec?.local?.path === localPath && !this.#pvs.has(objectKey(p))) out.push(p);
    return out;
  }

  /** Records a PV that discovery just created, until the informer delivers it (or it is deleted). */
  noteCreated(pv: V1PersistentVolume): void {
    if (this.#pvs.has(objectKey(pv))) return;
    this.#created.note(pv);
  }

  /** Number of PVs noted by noteCreated and not yet confirmed by the informer. */
  get pendingCount(): number {
    return this.#created.size;
  }

  close(): void {
    this.#unsubscribe();
    if (this.#ownCreated) this.#created.close();
  }

  #upsert(pv: V1PersistentVolume): void {
    const name = objectKey(pv);
    const old = this.#pvs.get(name);
    if (!old && !this.adopts(pv)) return;
    if (old) this.#unindex(name, old);
    this.#pvs.set(name, pv);
    this.#index(name, pv);
    if (old) this.#log.debug({ pv: name }, `Updated pv ${JSON.stringify(name)} to cache`);
    else if (!announced.has(pv)) {
      // Once per PV object and process: a new generation's cache is filled from the process-scope informer,
      // and 500 lines for PVs that did not change cost a reload ~150 ms of synchronous log writes on a loaded
      // node (bench/reload-latency.ts, docs/performance.md §3).
      announced.add(pv);
      this.#log.info({ pv: name }, `Added pv ${JSON.stringify(name)} to cache`);
    }
  }

  #remove(pv: V1PersistentVolume): void {
    const name = objectKey(pv);
    const old = this.#pvs.get(name);
    if (!old) return;
    this.#unindex(name, old);
    this.#pvs.delete(name);
    this.#log.info({ pv: name }, `Deleted pv ${JSON.stringify(name)} from cache`);
  }

  #index(name: string, pv: V1PersistentVolume): void {
    const path = pv.spec?.local?.path;
    if (path === undefined) return;
    let set = this.#byPath.get(path);
    if (!set) this.#byPath.set(path, (set = new Set()));
    set.add(name);
  }

  #unindex(name: string, pv: V1PersistentVolume): void {
    const path = pv.spec?.local?.path;
    if (path === undefined) return;
    const set = this.#byPath.get(path);
    set?.delete(name);
    if (set?.size === 0) this.#byPath.delete(path);
  }
}
