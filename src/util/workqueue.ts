// A work queue with client-go semantics (k8s.io/client-go/util/workqueue):
// - add() de-duplicates: an item is queued at most once ("dirty");
// - an item handed out by get() is "processing"; adding it again meanwhile only
//   marks it dirty, and done() puts it back on the queue, so one item is never
//   processed by two workers at once;
// - addAfter() delays an add; of several pending delays the earliest wins;
// - addRateLimited() delays by a per-item exponential backoff (5 ms .. 1000 s by
//   default); forget() resets it;
// - shutDown() stops accepting items and wakes every waiting get(); get() still
//   hands out what is queued, then reports shutdown. shutDownWithDrain() also
//   waits until every item handed out is done().
// Timers use setTimeout/Date.now, so vi.useFakeTimers() drives them in tests.

import { KeyedBackoff } from './backoff.ts';

export interface WorkQueueBackoffOptions {
  /** First per-item delay (default 5 ms). */
  readonly baseDelayMs?: number;
  /** Upper bound of the per-item delay (default 1000 s). */
  readonly maxDelayMs?: number;
}

export interface GetResult<T> {
  readonly item: T | undefined;
  readonly shutdown: boolean;
}

/** Per-item exponential backoff without jitter (client-go ItemExponentialFailureRateLimiter). */
export function itemBackoff<T>(opts: WorkQueueBackoffOptions = {}): KeyedBackoff<T> {
  return new KeyedBackoff<T>({ initialMs: opts.baseDelayMs ?? 5, maxMs: opts.maxDelayMs ?? 1_000_000, jitter: 0 });
}

export class WorkQueue<T> {
  #queue: T[] = [];
  readonly #dirty = new Set<T>();
  readonly #processing = new Set<T>();
  readonly #waiting = new Map<T, { readyAt: number; timer: NodeJS.Timeout }>();
  #getters: ((r: GetResult<T>) => void)[] = [];
  #drainWaiters: (() => void)[] = [];
  #shuttingDown = false;
  readonly #backoff: KeyedBackoff<T>;

  constructor(opts: WorkQueueBackoffOptions = {}) {
    this.#backoff = itemBackoff<T>(opts);
  }

  add(item: T): void {
    if (this.#shuttingDown || this.#dirty.has(item)) return;
    this.#dirty.add(item);
    if (this.#processing.has(item)) return;
    this.#queue.push(item);
    this.#wakeOne();
  }

  /** Waits for an item; resolves with shutdown=true once the queue is shut down and empty. */
  get(): Promise<GetResult<T>> {
    const now = this.#take();
    if (now) return Promise.resolve(now);
    return new Promise((resolve) => this.#getters.push(resolve));
  }

  #take(): GetResult<T> | undefined {
    if (this.#queue.length > 0) {
      const item = this.#queue.shift() as T;
      this.#processing.add(item);
      this.#dirty.delete(item);
      return { item, shutdown: false };
    }
    if (this.#shuttingDown) return { item: undefined, shutdown: true };
    return undefined;
  }

  #wakeOne(): void {
    while (this.#getters.length > 0) {
      const r = this.#take();
      if (!r) return;
      (this.#getters.shift() as (r: GetResult<T>) => void)(r);
    }
  }

  /** Marks the item processed; if it was added meanwhile it is queued again. */
  done(item: T): void {
    this.#processing.delete(item);
    if (this.#dirty.has(item)) {
      this.#queue.push(item);
      this.#wakeOne();
    }
    if (this.#processing.size === 0) {
      const ws = this.#drainWaiters;
      this.#drainWaiters = [];
      for (const w of ws) w();
    }
  }

  /** Adds the item after `delayMs`; when a delayed add is already pending, the earlier one wins. */
  addAfter(item: T, delayMs: number): void {
    if (this.#shuttingDown) return;
    if (delayMs <= 0) {
      this.add(item);
      return;
    }
    const readyAt = Date.now() + delayMs;
    const cur = this.#waiting.get(item);
    if (cur) {
      if (cur.readyAt <= readyAt) return;
      clearTimeout(cur.timer);
    }
    const timer = setTimeout(() => {
      this.#waiting.delete(item);
      this.add(item);
    }, delayMs);
    timer.unref();
    this.#waiting.set(item, { readyAt, timer });
  }

  addRateLimited(item: T): void {
    this.addAfter(item, this.#backoff.failure(item));
  }

  /** Resets the item's backoff (call after it was processed successfully). */
  forget(item: T): void {
    this.#backoff.forget(item);
  }

  numRequeues(item: T): number {
    return this.#backoff.failures(item);
  }

  /** Items queued and not handed out yet (delayed items not included). */
  length(): number {
    return this.#queue.length;
  }

  /** Items delayed by addAfter/addRateLimited. */
  waitingCount(): number {
    return this.#waiting.size;
  }

  shuttingDown(): boolean {
    return this.#shuttingDown;
  }

  /** Stops accepting items, cancels delayed adds and wakes every waiting get(). */
  shutDown(): void {
    if (this.#shuttingDown) return;
    this.#shuttingDown = true;
    for (const w of this.#waiting.values()) clearTimeout(w.timer);
    this.#waiting.clear();
    const gs = this.#getters;
    this.#getters = [];
    for (const g of gs) g(this.#take() ?? { item: undefined, shutdown: true });
  }

  /** shutDown(), then resolves once every item handed out by get() is done(). */
  shutDownWithDrain(): Promise<void> {
    this.shutDown();
    if (this.#processing.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }
}

/**
 * One worker on a queue: takes items until the queue shuts down (items still queued
 * then are dropped). An item whose handler throws is re-queued rate-limited, after
 * `onError` (given its requeue count so far); one handled without error has its
 * backoff reset.
 */
export async function runWorker<T>(
  queue: WorkQueue<T>,
  handle: (item: T) => Promise<void>,
  onError: (item: T, err: unknown, retries: number) => void,
): Promise<void> {
  for (;;) {
    const { item, shutdown } = await queue.get();
    if (shutdown || item === undefined) return;
    if (queue.shuttingDown()) {
      queue.done(item);
      return;
    }
    try {
      await handle(item);
      queue.forget(item);
    } catch (e) {
      onError(item, e, queue.numRequeues(item));
      queue.addRateLimited(item);
    } finally {
      queue.done(item);
    }
  }
}
