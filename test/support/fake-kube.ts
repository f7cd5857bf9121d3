// An in-memory KubePort for unit tests: objects per resource kind, one global
// resourceVersion counter, watch with history replay, bookmarks, timeouts and
// 410 after compaction, plus helpers to act as another controller would
// (put/update/remove), inject errors and record every request.
import { randomUUID } from 'node:crypto';
import type { CoreV1Event, V1Job, V1Node, V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import {
  KubeError,
  type DeleteOptions,
  type KubePort,
  type ListOptions,
  type ListPageOptions,
  type ListResult,
  type ResourceKind,
  type ResourceTypes,
  type WatchEvent,
  type WatchEventType,
  type WatchOptions,
} from '../../src/kube/port.ts';
import { objectKey } from '../../src/kube/informer.ts';

interface Meta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  creationTimestamp?: Date;
  labels?: Record<string, string>;
}
type Obj = { metadata?: Meta } & Record<string, unknown>;

export interface FakeRequest {
  verb: string;
  kind: string;
  name?: string;
  namespace?: string;
}

interface OpenWatch {
  kind: ResourceKind;
  opts: WatchOptions;
  send: (ev: WatchEvent<Obj>) => void;
  end: (err?: Error) => void;
}

interface HistoryEntry {
  rv: number;
  kind: ResourceKind;
  type: WatchEventType;
  obj: Obj;
  /** For MODIFIED: the object before the change (a watch whose selector it leaves gets DELETED, one it enters ADDED). */
  prev?: Obj | undefined;
}

const clone = <T>(o: T): T => structuredClone(o);

/** Awaits a promise that must reject with a KubeError, and returns that error (test helper). */
export async function kubeRejection(p: Promise<unknown>): Promise<KubeError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof KubeError) return e;
    throw e;
  }
  throw new Error('expected the call to fail with a KubeError');
}
/** Stored objects are plain JSON-ish objects; these two casts are the only bridge to the typed API objects. */
const raw = (x: unknown): Obj => x as Obj;
const typed = <T>(o: unknown): T => o as T;

/** Matches `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, comma-separated (AND). */
export function matchLabels(selector: string | undefined, labels: Record<string, string> = {}): boolean {
  if (!selector?.trim()) return true;
  const terms = selector.match(/[^,(]+(\([^)]*\))?/g) ?? [];
  return terms.every((raw) => {
    const t = raw.trim();
    const set = /^(\S+)\s+(in|notin)\s*\(([^)]*)\)$/.exec(t);
    if (set) {
      const values = (set[3] ?? '').split(',').map((v) => v.trim());
      const has = values.includes(labels[set[1] ?? ''] ?? '\0');
      return set[2] === 'in' ? has : !has;
    }
    const eq = /^([^!=]+?)\s*(==|=|!=)\s*(.*)$/.exec(t);
    if (eq) {
      const same = labels[(eq[1] ?? '').trim()] === (eq[3] ?? '').trim();
      return eq[2] === '!=' ? !same : same;
    }
    return t.startsWith('!') ? !(t.slice(1) in labels) : t in labels;
  });
}

/** Matches `a.b=v` / `a.b==v` / `a.b!=v` terms against dotted paths of the object. */
export function matchFields(selector: string | undefined, obj: unknown): boolean {
  if (!selector?.trim()) return true;
  return selector.split(',').every((raw) => {
    const m = /^([^!=]+?)\s*(==|=|!=)\s*(.*)$/.exec(raw.trim());
    if (!m) return false;
    let v: unknown = obj;
    for (const p of (m[1] ?? '').split('.')) v = v && typeof v === 'object' ? (v as Record<string, unknown>)[p] : undefined;
    const same = (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean' ? String(v) : '') === (m[3] ?? '');
    return m[2] === '!=' ? !same : same;
  });
}

export class FakeKube implements KubePort {
  /** Every port call, in order. */
  readonly requests: FakeRequest[] = [];
  #rv = 0;
  #compactedRv = 0;
  readonly #objects = new Map<ResourceKind, Map<string, Obj>>();
  readonly #history: HistoryEntry[] = [];
  readonly #watches = new Set<OpenWatch>();
  readonly #failures: Array<{ verb: string; kind: string; error: Error }> = [];

  /** Current global resourceVersion. */
  get resourceVersion(): string {
    return String(this.#rv);
  }

  /** Number of watches currently open. */
  get openWatches(): number {
    return this.#watches.size;
  }

  /** Requests so far matching verb (and kind). */
  count(verb: string, kind?: string): number {
    return this.requests.filter((r) => r.verb === verb && (kind === undefined || r.kind === kind)).length;
  }

  // ---------- test helpers ----------

  /** The next call with this verb and kind fails with `error` (queued, one per call). */
  failNext(verb: string, kind: string, error: Error): void {
    this.#failures.push({ verb, kind, error });
  }

  /** Creates or replaces an object as another controller would; emits ADDED/MODIFIED. */
  put<K extends ResourceKind>(kind: K, obj: ResourceTypes[K]): ResourceTypes[K] {
    const o = raw(clone(obj));
    const old = this.#store(kind).get(objectKey(o));
    o.metadata = { ...o.metadata, uid: o.metadata?.uid ?? old?.metadata?.uid ?? randomUUID() };
    o.metadata.creationTimestamp ??= old?.metadata?.creationTimestamp ?? new Date();
    return typed<ResourceTypes[K]>(this.#write(kind, o, old ? 'MODIFIED' : 'ADDED'));
  }

  /** Mutates a stored object (e.g. set a PV's status.phase); emits MODIFIED. */
  update<K extends ResourceKind>(kind: K, key: string, mutate: (obj: ResourceTypes[K]) => void): ResourceTypes[K] {
    const cur = this.#store(kind).get(key);
    if (!cur) throw new KubeError(404, 'NotFound', `${kind} "${key}" not found`);
    const o = clone(cur);
    mutate(typed<ResourceTypes[K]>(o));
    return typed<ResourceTypes[K]>(this.#write(kind, o, 'MODIFIED'));
  }

  /** Sets `status` of a stored object (merged). */
  setStatus<K extends ResourceKind>(kind: K, key: string, status: Record<string, unknown>): ResourceTypes[K] {
    return this.update(kind, key, (o) => {
      const r = raw(o);
      r['status'] = { ...(r['status'] as object | undefined), ...status };
    });
  }

  /** Removes an object as another controller would; emits DELETED. No-op when missing. */
  remove(kind: ResourceKind, key: string): void {
    const cur = this.#store(kind).get(key);
    if (cur) this.#erase(kind, key, cur);
  }

  /** A copy of a stored object, or undefined. */
  object<K extends ResourceKind>(kind: K, key: string): ResourceTypes[K] | undefined {
    const o = this.#store(kind).get(key);
    return o ? (typed<ResourceTypes[K]>(clone(o))) : undefined;
  }

  /** Copies of all stored objects of a kind. */
  objects<K extends ResourceKind>(kind: K): Array<ResourceTypes[K]> {
    return [...this.#store(kind).values()].map((o) => typed<ResourceTypes[K]>(clone(o)));
  }

  /** Sends a BOOKMARK at the current resourceVersion to every watch that asked for bookmarks. */
  bookmark(): void {
    for (const w of this.#watches) {
      if (w.opts.allowWatchBookmarks) w.send({ type: 'BOOKMARK', object: { metadata: { resourceVersion: this.resourceVersion } } });
    }
  }

  /** Ends every open watch: cleanly, or with `error` (the watch promise rejects). */
  closeWatches(error?: Error): void {
    for (const w of [...this.#watches]) w.end(error);
  }

  /** Forgets history: a watch from any resourceVersion older than now gets ERROR 410. */
  compact(): void {
    this.#compactedRv = this.#rv;
    this.#history.length = 0;
  }

  // ---------- KubePort ----------

  /**
   * Lists in key order; with `limit`, a page and a continue token ("<list rv>/<last key>")
   * that answers 410 Expired once compact() passed its resourceVersion.
   */
  list<K extends ResourceKind>(kind: K, opts: ListPageOptions): Promise<ListResult<ResourceTypes[K]>> {
    return this.#call('list', kind, opts.namespace, undefined, () => {
      let listRv = this.resourceVersion;
      let after = '';
      if (opts.continue !== undefined) {
        const slash = opts.continue.indexOf('/');
        listRv = opts.continue.slice(0, slash);
        after = opts.continue.slice(slash + 1);
        if (Number(listRv) < this.#compactedRv) {
          throw new KubeError(410, 'Expired', 'The provided continue parameter is too old to display a consistent list result.');
        }
      }
      const all = [...this.#store(kind).entries()].filter(([k, o]) => k > after && this.#matches(o, opts)).sort(([a], [b]) => (a < b ? -1 : 1));
      const page = opts.limit !== undefined && opts.limit > 0 ? all.slice(0, opts.limit) : all;
      const last = page.at(-1)?.[0];
      return {
        items: page.map(([, o]) => typed<ResourceTypes[K]>(clone(o))),
        resourceVersion: listRv,
        ...(page.length < all.length && last !== undefined ? { continue: `${listRv}/${last}` } : {}),
      };
    });
  }

  async watch<K extends ResourceKind>(
    kind: K,
    opts: WatchOptions,
    onEvent: (ev: WatchEvent<ResourceTypes[K]>) => void,
    signal: AbortSignal,
  ): Promise<void> {
    await this.#call('watch', kind, opts.namespace, undefined, () => undefined);
    if (signal.aborted) return;
    const from = Number(opts.resourceVersion || this.#rv);
    if (from < this.#compactedRv) {
      onEvent({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired', message: `too old resource version: ${from} (${this.#compactedRv})` } });
      return;
    }
    await new Promise<void>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const w: OpenWatch = {
        kind,
        opts,
        send: (ev) => {
          onEvent(typed<WatchEvent<ResourceTypes[K]>>(ev));
        },
        end: (err) => {
          if (!this.#watches.delete(w)) return;
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
          if (err) reject(err);
          else resolve();
        },
      };
      const onAbort = (): void => {
        w.end();
      };
      this.#watches.add(w);
      signal.addEventListener('abort', onAbort, { once: true });
      if (opts.timeoutSeconds) timer = setTimeout(onAbort, opts.timeoutSeconds * 1000);
      for (const h of this.#history) {
        if (h.rv > from && this.#watches.has(w)) this.#deliver(w, h);
      }
    });
  }

  getNode(name: string): Promise<V1Node> {
    return this.#call('get', 'nodes', undefined, name, () => clone(this.#must('nodes', name)) as V1Node);
  }

  replaceNode(node: V1Node): Promise<V1Node> {
    const name = node.metadata?.name ?? '';
    return this.#call('update', 'nodes', undefined, name, () => {
      const cur = this.#must('nodes', name);
      const rv = node.metadata?.resourceVersion;
      if (rv && rv !== cur.metadata?.resourceVersion) {
        throw new KubeError(409, 'Conflict', `Operation cannot be fulfilled on nodes "${name}": the object has been modified`);
      }
      const o = clone(node) as Obj;
      o.metadata = { ...o.metadata, uid: cur.metadata?.uid, creationTimestamp: cur.metadata?.creationTimestamp };
      return typed<V1Node>(this.#write('nodes', o, 'MODIFIED'));
    });
  }

  createPersistentVolume(pv: V1PersistentVolume): Promise<V1PersistentVolume> {
    return this.#create('persistentvolumes', undefined, pv);
  }

  deletePersistentVolume(name: string, opts?: DeleteOptions): Promise<void> {
    return this.#delete('persistentvolumes', undefined, name, opts);
  }

  getPersistentVolume(name: string): Promise<V1PersistentVolume> {
    return this.#call('get', 'persistentvolumes', undefined, name, () => clone(this.#must('persistentvolumes', name)) as V1PersistentVolume);
  }

  patchPersistentVolume(name: string, patch: Partial<V1PersistentVolume>): Promise<V1PersistentVolume> {
    return this.#call('patch', 'persistentvolumes', undefined, name, () => {
      const cur = clone(this.#must('persistentvolumes', name));
      return typed<V1PersistentVolume>(this.#write('persistentvolumes', mergePatch(cur, raw(patch)), 'MODIFIED'));
    });
  }

  getPersistentVolumeClaim(namespace: string, name: string): Promise<V1PersistentVolumeClaim> {
    return this.#call('get', 'persistentvolumeclaims', namespace, name, () => clone(this.#must('persistentvolumeclaims', `${namespace}/${name}`)) as V1PersistentVolumeClaim);
  }

  deletePersistentVolumeClaim(namespace: string, name: string, opts?: DeleteOptions): Promise<void> {
    return this.#delete('persistentvolumeclaims', namespace, name, opts);
  }

  createJob(namespace: string, job: V1Job): Promise<V1Job> {
    return this.#create('jobs', namespace, job);
  }

  deleteJob(namespace: string, name: string, opts?: DeleteOptions): Promise<void> {
    return this.#delete('jobs', namespace, name, opts);
  }

  createEvent(namespace: string, ev: CoreV1Event): Promise<CoreV1Event> {
    return this.#create('events', namespace, ev);
  }

  patchEvent(namespace: string, name: string, patch: Partial<CoreV1Event>): Promise<CoreV1Event> {
    return this.#call('patch', 'events', namespace, name, () => {
      const cur = clone(this.#must('events', `${namespace}/${name}`));
      return typed<CoreV1Event>(this.#write('events', mergePatch(cur, raw(patch)), 'MODIFIED'));
    });
  }

  // ---------- internals ----------

  #store(kind: ResourceKind): Map<string, Obj> {
    let m = this.#objects.get(kind);
    if (!m) this.#objects.set(kind, (m = new Map<string, Obj>()));
    return m;
  }

  #must(kind: ResourceKind, key: string): Obj {
    const o = this.#store(kind).get(key);
    if (!o) throw new KubeError(404, 'NotFound', `${kind} "${key.split('/').pop() ?? key}" not found`);
    return o;
  }

  #matches(o: Obj, opts: ListOptions): boolean {
    return (
      (!opts.namespace || o.metadata?.namespace === opts.namespace) &&
      matchLabels(opts.labelSelector, o.metadata?.labels) &&
      matchFields(opts.fieldSelector, o)
    );
  }

  /** Records the request, applies an injected failure, and runs `fn` asynchronously. */
  async #call<T>(verb: string, kind: ResourceKind, namespace: string | undefined, name: string | undefined, fn: () => T): Promise<T> {
    const req: FakeRequest = { verb, kind };
    if (name !== undefined) req.name = name;
    if (namespace !== undefined) req.namespace = namespace;
    this.requests.push(req);
    await Promise.resolve();
    const i = this.#failures.findIndex((f) => f.verb === verb && f.kind === kind);
    const failure = i >= 0 ? this.#failures.splice(i, 1)[0] : undefined;
    if (failure) throw failure.error;
    return fn();
  }

  #create<K extends ResourceKind>(kind: K, namespace: string | undefined, obj: ResourceTypes[K]): Promise<ResourceTypes[K]> {
    return this.#call('create', kind, namespace, obj.metadata?.name, () => {
      const o = raw(clone(obj));
      const meta: Meta = { ...o.metadata };
      if (namespace !== undefined) meta.namespace = namespace;
      if (!meta.name && meta.generateName) meta.name = meta.generateName + randomUUID().slice(0, 5);
      if (!meta.name) throw new KubeError(422, 'Invalid', `${kind}: metadata.name: Required value`);
      o.metadata = meta;
      if (this.#store(kind).has(objectKey(o))) {
        throw new KubeError(409, 'AlreadyExists', `${kind} "${meta.name}" already exists`);
      }
      meta.uid = randomUUID();
      meta.creationTimestamp = new Date();
      return typed<ResourceTypes[K]>(this.#write(kind, o, 'ADDED'));
    });
  }

  #delete(kind: ResourceKind, namespace: string | undefined, name: string, opts?: DeleteOptions): Promise<void> {
    return this.#call('delete', kind, namespace, name, () => {
      const key = namespace ? `${namespace}/${name}` : name;
      const cur = this.#must(kind, key);
      if (opts?.uid && opts.uid !== cur.metadata?.uid) {
        throw new KubeError(409, 'Conflict', `Precondition failed: UID in precondition: ${opts.uid}, UID in object meta: ${cur.metadata?.uid ?? ''}`);
      }
      if (opts?.resourceVersion && opts.resourceVersion !== cur.metadata?.resourceVersion) {
        throw new KubeError(
          409,
          'Conflict',
          `Precondition failed: ResourceVersion in precondition: ${opts.resourceVersion}, ResourceVersion in object meta: ${cur.metadata?.resourceVersion ?? ''}`,
        );
      }
      this.#erase(kind, key, cur);
    });
  }

  #write(kind: ResourceKind, o: Obj, type: WatchEventType): Obj {
    const prev = this.#store(kind).get(objectKey(o));
    o.metadata = { ...o.metadata, resourceVersion: String(++this.#rv) };
    this.#store(kind).set(objectKey(o), o);
    this.#emit({ rv: this.#rv, kind, type, obj: clone(o), prev: type === 'MODIFIED' && prev ? clone(prev) : undefined });
    return clone(o);
  }

  #erase(kind: ResourceKind, key: string, cur: Obj): void {
    this.#store(kind).delete(key);
    const o = clone(cur);
    o.metadata = { ...o.metadata, resourceVersion: String(++this.#rv) };
    this.#emit({ rv: this.#rv, kind, type: 'DELETED', obj: o });
  }

  #emit(h: HistoryEntry): void {
    this.#history.push(h);
    for (const w of [...this.#watches]) this.#deliver(w, h);
  }

  #deliver(w: OpenWatch, h: HistoryEntry): void {
    if (w.kind !== h.kind) return;
    const now = this.#matches(h.obj, w.opts);
    const before = h.prev === undefined ? now : this.#matches(h.prev, w.opts);
    // Like the API server: a change that moves an object out of a watch's selector is a DELETED there, into it an ADDED.
    if (now) w.send({ type: before ? h.type : 'ADDED', object: clone(h.obj) });
    else if (before) w.send({ type: 'DELETED', object: clone(h.obj) });
  }
}

/** JSON merge patch (RFC 7386): objects merge recursively, null deletes, anything else replaces. */
function mergePatch(target: Obj, patch: Obj): Obj {
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete target[k];
    else if (v && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Date)) {
      const t = target[k];
      target[k] = mergePatch(t && typeof t === 'object' && !Array.isArray(t) ? (t as Obj) : {}, v as Obj);
    } else target[k] = v;
  }
  return target;
}
