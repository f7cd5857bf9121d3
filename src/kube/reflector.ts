// A list+watch cache of one resource kind (client-go's Reflector + Informer,
// reduced to what the daemon needs). It lists in pages (limit/continue, like
// client-go's pager). Unlike client-node's ListWatch it never gives up: it relists on 410, backs off with jitter on errors and on watches
// that close too fast, restarts a watch that stalls (no event and no bookmark
// for a while), and a throwing handler is logged and ignored.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { KubeMetrics } from '../metrics/metrics.ts';
import { backoffDelay, type BackoffOptions } from '../util/backoff.ts';
import { silentLogger } from '../util/log.ts';
import { objectKey, type Informer, type InformerHandlers } from './informer.ts';
import { isGone, type KubePort, type KubeStatus, type ResourceKind, type ResourceTypes, type WatchEvent } from './port.ts';

export interface InformerOptions<T> {
  readonly namespace?: string | undefined;
  readonly labelSelector?: string | undefined;
  readonly fieldSelector?: string | undefined;
  /** Objects failing it are not stored (and are removed, with a delete event, when they stop passing). */
  readonly filter?: ((obj: T) => boolean) | undefined;
  /** Applied to every object before it is stored (e.g. drop metadata.managedFields). */
  readonly transform?: ((obj: T) => T) | undefined;
  /** Server-side watch timeout; each watch adds up to 10% jitter (default 300). */
  readonly watchTimeoutSeconds?: number | undefined;
  /** No event or bookmark for this long aborts the watch and opens a new one (default 2x the watch timeout). */
  readonly stallTimeoutMs?: number | undefined;
  /** Retry delays after errors and too-fast closes (default 1 s .. 30 s with jitter). */
  readonly backoff?: BackoffOptions | undefined;
  /** A watch that ends cleanly sooner than this counts as a failure and is backed off (default 1000). */
  readonly minWatchDurationMs?: number | undefined;
  readonly logger?: Logger | undefined;
  readonly metrics?: Pick<KubeMetrics, 'watchRestarts'> | undefined;
  /**
   * Called after every list: with undefined when it succeeded, with the error when it failed
   * (the informer retries either way). Lets the owner report e.g. a 403 at once.
   */
  readonly onList?: ((err: unknown) => void) | undefined;
  /** Objects per list request (default LIST_PAGE_SIZE); the pages are followed with continue tokens. */
  readonly listPageSize?: number | undefined;
  /** Random source for jitter (tests). */
  readonly random?: (() => number) | undefined;
}

/**
 * Objects per list request. One unpaginated list of a big cluster's PVs (10,000 of
 * other nodes) was the daemon's memory peak: the whole response, parsed, at once.
 */
export const LIST_PAGE_SIZE = 500;

/** A continue token that expires (410) restarts the list from its first page this many times, then the list fails (and is retried with backoff). */
const EXPIRED_LIST_RESTARTS = 3;

export const DEFAULT_INFORMER_BACKOFF: BackoffOptions = { initialMs: 1000, maxMs: 30_000, factor: 2, jitter: 0.2 };

type Outcome = 'timeout' | 'closed' | 'gone' | 'stall' | 'error' | 'stopped';

interface Meta {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
}

const STOPPED = Symbol('stopped');

export function createInformer<K extends ResourceKind>(
  port: KubePort,
  kind: K,
  opts: InformerOptions<ResourceTypes[K]> = {},
): Informer<ResourceTypes[K]> {
  return new Reflector<K>(port, kind, opts);
}

class Reflector<K extends ResourceKind> implements Informer<ResourceTypes[K]> {
  readonly #port: KubePort;
  readonly #kind: K;
  readonly #opts: InformerOptions<ResourceTypes[K]>;
  readonly #log: Logger;
  readonly #backoff: BackoffOptions;
  readonly #random: () => number;
  readonly #store = new Map<string, ResourceTypes[K]>();
  readonly #handlers = new Set<InformerHandlers<ResourceTypes[K]>>();
  readonly #syncWaiters = new Set<() => void>();
  readonly #stop = new AbortController();
  #loop: Promise<void> | undefined;
  #synced = false;
  #rv = '';

  constructor(port: KubePort, kind: K, opts: InformerOptions<ResourceTypes[K]>) {
    this.#port = port;
    this.#kind = kind;
    this.#opts = opts;
    this.#log = opts.logger ?? silentLogger;
    this.#backoff = opts.backoff ?? DEFAULT_INFORMER_BACKOFF;
    this.#random = opts.random ?? Math.random;
  }

  // ---------- Store / Informer ----------

  get(key: string): ResourceTypes[K] | undefined {
    return this.#store.get(key);
  }

  list(): Array<ResourceTypes[K]> {
    return [...this.#store.values()];
  }

  hasSynced(): boolean {
    return this.#synced;
  }

  start(): void {
    if (this.#loop || this.#stop.signal.aborted) return;
    this.#loop = this.#run().catch((e: unknown) => {
      // #run catches everything itself; this is a last line of defence.
      this.#log.error({ err: e, resource: this.#kind }, 'informer loop failed unexpectedly');
    });
  }

  async stop(): Promise<void> {
    this.#stop.abort();
    await this.#loop;
  }

  waitForSync(signal?: AbortSignal): Promise<void> {
    if (this.#synced) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        this.#syncWaiters.delete(done);
        reject(signal?.reason instanceof Error ? signal.reason : new Error(`waiting for the ${this.#kind} cache to sync was aborted`));
      };
      const done = (): void => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      if (signal?.aborted) {
        onAbort();
        return;
      }
      this.#syncWaiters.add(done);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  on(handlers: InformerHandlers<ResourceTypes[K]>): () => void {
    this.#handlers.add(handlers);
    if (this.#synced) for (const obj of this.#store.values()) this.#call(handlers, 'add', obj);
    return () => {
      this.#handlers.delete(handlers);
    };
  }

  // ---------- the loop ----------

  async #run(): Promise<void> {
    const signal = this.#stop.signal;
    let needList = true;
    let failures = 0;
    while (!signal.aborted) {
      if (failures > 0) {
        const delay = backoffDelay(this.#backoff, failures - 1, this.#random);
        this.#log.debug({ resource: this.#kind, delayMs: delay, failures }, 'informer backing off');
        await this.#sleep(delay);
        if (signal.aborted) break;
      }
      let listed = false;
      if (needList) {
        try {
          if (!(await this.#listAndReplace())) break;
          needList = false;
          listed = true;
          this.#listed(undefined);
        } catch (e) {
          failures++;
          this.#log.warn({ err: e, resource: this.#kind, failures }, `failed to list ${this.#kind}; will retry`);
          this.#listed(e);
          continue;
        }
      }
      const startedAt = Date.now();
      const outcome = await this.#watchOnce();
      if (outcome === 'stopped') break;
      const healthy = Date.now() - startedAt >= (this.#opts.minWatchDurationMs ?? 1000);
      let reason: string = outcome;
      switch (outcome) {
        case 'gone':
          // An expired version relists at once; a 410 right after a fresh list is backed off (no list/410 loop).
          needList = true;
          failures = listed ? failures + 1 : 0;
          break;
        case 'timeout':
          if (healthy) failures = 0;
          else {
            reason = 'closed';
            failures++;
          }
          break;
        case 'stall':
          failures = 0;
          break;
        case 'error':
          failures = healthy ? 1 : failures + 1;
          break;
        default:
          break;
      }
      this.#opts.metrics?.watchRestarts.inc({ resource: this.#kind, reason });
    }
    this.#log.debug({ resource: this.#kind }, 'informer stopped');
  }

  #listed(err: unknown): void {
    try {
      this.#opts.onList?.(err);
    } catch (e) {
      this.#log.error({ err: e, resource: this.#kind }, `${this.#kind} list callback threw`);
    }
  }

  /**
   * Lists (page by page) and replaces the store; false when stopped. A method of its
   * own so the pages die with this frame: kept in #run's suspended frame they would
   * stay in memory for as long as the watch runs. Each page is reduced to the objects
   * that are kept before the next one is fetched.
   */
  async #listAndReplace(): Promise<boolean> {
    const next = new Map<string, ResourceTypes[K]>();
    let resourceVersion: string;
    let token: string | undefined;
    let restarts = 0;
    let listed = 0;
    for (;;) {
      let page;
      try {
        page = await this.#untilStopped(
          this.#port.list(this.#kind, {
            namespace: this.#opts.namespace,
            labelSelector: this.#opts.labelSelector,
            fieldSelector: this.#opts.fieldSelector,
            limit: this.#opts.listPageSize ?? LIST_PAGE_SIZE,
            continue: token,
          }),
        );
      } catch (e) {
        if (token === undefined || !isGone(e) || ++restarts > EXPIRED_LIST_RESTARTS) throw e;
        this.#log.info({ resource: this.#kind, restarts }, `the ${this.#kind} list's continue token expired; listing again from the first page`);
        next.clear();
        listed = 0;
        token = undefined;
        continue;
      }
      if (page === STOPPED) return false;
      this.#keep(page.items, next);
      listed += page.items.length;
      resourceVersion = page.resourceVersion;
      token = page.continue;
      if (token === undefined) break;
    }
    this.#replace(next, resourceVersion, listed);
    return true;
  }

  /** One watch from the current resourceVersion; resolves with why it ended. */
  async #watchOnce(): Promise<Outcome> {
    const base = this.#opts.watchTimeoutSeconds ?? 300;
    const timeoutSeconds = Math.max(1, Math.floor(base * (1 + 0.1 * this.#random())));
    const stallMs = this.#opts.stallTimeoutMs ?? 2 * base * 1000;
    const ac = new AbortController();
    const onStop = (): void => {
      ac.abort();
    };
    this.#stop.signal.addEventListener('abort', onStop, { once: true });
    let outcome: Outcome | undefined;
    const end = (o: Outcome): void => {
      outcome ??= o;
      ac.abort();
    };
    let stallTimer: NodeJS.Timeout | undefined;
    const arm = (): void => {
      clearTimeout(stallTimer);
      stallTimer = setTimeout(() => {
        this.#log.warn({ resource: this.#kind, stallMs }, `no ${this.#kind} watch event or bookmark for ${stallMs} ms; restarting the watch`);
        end('stall');
      }, stallMs);
    };
    const aborted = new Promise<void>((resolve) => {
      ac.signal.addEventListener('abort', () => {
        resolve();
      }, { once: true });
    });
    try {
      arm();
      const watching = this.#port.watch(
        this.#kind,
        {
          resourceVersion: this.#rv,
          timeoutSeconds,
          allowWatchBookmarks: true,
          namespace: this.#opts.namespace,
          labelSelector: this.#opts.labelSelector,
          fieldSelector: this.#opts.fieldSelector,
        },
        (ev) => {
          if (outcome !== undefined || ac.signal.aborted) return;
          arm();
          try {
            this.#onEvent(ev, end);
          } catch (e) {
            this.#log.error({ err: e, resource: this.#kind }, 'failed to process a watch event');
          }
        },
        ac.signal,
      );
      // A port that does not resolve on abort must not keep us waiting.
      await Promise.race([watching, aborted]);
      watching.catch(() => undefined);
      if (this.#stop.signal.aborted) return 'stopped';
      return outcome ?? 'timeout';
    } catch (e) {
      if (this.#stop.signal.aborted) return 'stopped';
      if (outcome) return outcome;
      if (isGone(e)) {
        this.#log.info({ resource: this.#kind, resourceVersion: this.#rv }, `${this.#kind} resourceVersion expired; relisting`);
        return 'gone';
      }
      this.#log.warn({ err: e, resource: this.#kind }, `${this.#kind} watch failed; will retry`);
      return 'error';
    } finally {
      clearTimeout(stallTimer);
      this.#stop.signal.removeEventListener('abort', onStop);
      if (!ac.signal.aborted) ac.abort();
    }
  }

  #onEvent(ev: WatchEvent<ResourceTypes[K]>, end: (o: Outcome) => void): void {
    if (ev.type === 'ERROR') {
      const st = ev.object as KubeStatus;
      if (st.code === 410) {
        this.#log.info({ resource: this.#kind, resourceVersion: this.#rv }, `${this.#kind} resourceVersion expired; relisting`);
        end('gone');
      } else {
        this.#log.warn({ resource: this.#kind, status: st }, `${this.#kind} watch returned an error: ${st.message ?? st.reason ?? 'unknown'}`);
        end('error');
      }
      return;
    }
    const rv = (ev.object as Meta).metadata?.resourceVersion;
    if (ev.type === 'BOOKMARK') {
      if (rv) this.#rv = rv;
      return;
    }
    const obj = this.#prepare(ev.object as ResourceTypes[K]);
    const key = objectKey(obj);
    const old = this.#store.get(key);
    if (ev.type === 'DELETED') {
      if (old) {
        this.#store.delete(key);
        this.#emit('delete', obj);
      }
    } else if (this.#passes(obj)) {
      this.#store.set(key, obj);
      if (old) this.#emit('update', old, obj);
      else this.#emit('add', obj);
    } else if (old) {
      this.#store.delete(key);
      this.#emit('delete', old);
    }
    if (rv) this.#rv = rv;
  }

  /** Replaces the store with a fresh list and emits the differences. */
  /** Adds the listed objects that pass the filter (transformed) to `into`. */
  #keep(items: Array<ResourceTypes[K]>, into: Map<string, ResourceTypes[K]>): void {
    for (const item of items) {
      try {
        const obj = this.#prepare(item);
        if (this.#passes(obj)) into.set(objectKey(obj), obj);
      } catch (e) {
        this.#log.error({ err: e, resource: this.#kind }, 'failed to process a listed object');
      }
    }
  }

  /** `listed`: how many objects the list returned (kept or not), for the log. */
  #replace(next: Map<string, ResourceTypes[K]>, resourceVersion: string, listed: number): void {
    const old = new Map(this.#store);
    this.#store.clear();
    for (const [k, v] of next) this.#store.set(k, v);
    this.#rv = resourceVersion;
    for (const [k, v] of old) if (!next.has(k)) this.#emit('delete', v);
    for (const [k, v] of next) {
      const prev = old.get(k);
      if (!prev) this.#emit('add', v);
      else if (rvOf(prev) !== rvOf(v)) this.#emit('update', prev, v);
    }
    if (!this.#synced) {
      this.#synced = true;
      const selector = this.#opts.labelSelector;
      this.#log.debug({ resource: this.#kind, count: next.size, listed, ...(selector ? { selector } : {}) }, 'informer synced');
      for (const w of [...this.#syncWaiters]) w();
      this.#syncWaiters.clear();
    }
  }

  #prepare(obj: ResourceTypes[K]): ResourceTypes[K] {
    return this.#opts.transform ? this.#opts.transform(obj) : obj;
  }

  #passes(obj: ResourceTypes[K]): boolean {
    if (!this.#opts.filter) return true;
    try {
      return this.#opts.filter(obj);
    } catch (e) {
      this.#log.error({ err: e, resource: this.#kind, key: objectKey(obj) }, 'informer filter threw; object ignored');
      return false;
    }
  }

  #emit(what: 'add' | 'delete', obj: ResourceTypes[K]): void;
  #emit(what: 'update', oldObj: ResourceTypes[K], newObj: ResourceTypes[K]): void;
  #emit(what: 'add' | 'update' | 'delete', a: ResourceTypes[K], b?: ResourceTypes[K]): void {
    for (const h of [...this.#handlers]) this.#call(h, what, a, b);
  }

  #call(h: InformerHandlers<ResourceTypes[K]>, what: 'add' | 'update' | 'delete', a: ResourceTypes[K], b?: ResourceTypes[K]): void {
    try {
      if (what === 'add') h.add?.(a);
      else if (what === 'delete') h.delete?.(a);
      else if (b) h.update?.(a, b);
    } catch (e) {
      this.#log.error({ err: e, resource: this.#kind, key: objectKey(b ?? a), handler: what }, `${this.#kind} ${what} handler threw`);
    }
  }

  /** Sleeps, waking early (and clearing the timer) when the informer stops. */
  async #sleep(ms: number): Promise<void> {
    await sleep(ms, undefined, { signal: this.#stop.signal }).catch(() => undefined);
  }

  /** Races a request with stop(): a hung request must not keep stop() waiting. */
  #untilStopped<T>(p: Promise<T>): Promise<T | typeof STOPPED> {
    const signal = this.#stop.signal;
    if (signal.aborted) {
      p.catch(() => undefined);
      return Promise.resolve(STOPPED);
    }
    return new Promise<T | typeof STOPPED>((resolve, reject) => {
      const onAbort = (): void => {
        p.catch(() => undefined);
        resolve(STOPPED);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      p.then(
        (v) => {
          signal.removeEventListener('abort', onAbort);
          resolve(v);
        },
        (e: unknown) => {
          signal.removeEventListener('abort', onAbort);
          reject(e instanceof Error ? e : new Error(String(e)));
        },
      );
    });
  }
}

const rvOf = (o: unknown): string | undefined => (o as Meta).metadata?.resourceVersion;
