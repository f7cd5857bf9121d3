// Event recording like client-go's recorder + EventCorrelator, reduced:
// - core/v1 Events named `<object>.<16 hex digits of unix nanos>`, in the
//   object's namespace or "default" for cluster-scoped objects (PVs, Nodes);
// - a per-object spam filter (token bucket: burst 25, one token per 5 min);
// - de-duplication: the same (object, type, reason, message) within 10 min
//   bumps count/lastTimestamp of the existing Event by a merge patch, sent at
//   most once per 30 s per key (a later patch carries the accumulated count);
// - asynchronous: event() returns at once; a bounded queue is sent in the
//   background; errors are logged, never thrown;
// - every message has its control characters escaped (\n, \x1b, ...) and is
//   cut to the API limit of 1024 UTF-8 bytes (eventMessage in events.ts).
import type { CoreV1Event } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { eventMessage, type EventRecorder, type EventType, type ObjectRef } from './events.ts';
import { isNotFound, type KubePort } from './port.ts';
import { TokenBucket } from './ratelimit.ts';

export interface EventRecorderOptions {
  /** source.component (the Go provisioner uses its provisioner name). */
  readonly component: string;
  /** source.host (the node name). */
  readonly host?: string | undefined;
  readonly logger: Logger;
  readonly now?: (() => Date) | undefined;
  /** Pending sends kept at most; the oldest is dropped when full (default 1000). */
  readonly queueSize?: number | undefined;
  /** Repeats within this window update the existing Event (default 10 min). */
  readonly dedupWindowMs?: number | undefined;
  /** At most one count update per key per this interval (default 30 s). */
  readonly patchIntervalMs?: number | undefined;
  /** Spam filter per object: bucket size (default 25) and refill interval per token (default 5 min). */
  readonly spamBurst?: number | undefined;
  readonly spamRefillMs?: number | undefined;
  /** Keys remembered for de-duplication and spam filtering (LRU, default 4096). */
  readonly cacheSize?: number | undefined;
}

export interface RunningEventRecorder extends EventRecorder {
  /** Resolves once every queued send has been attempted. */
  flush(): Promise<void>;
  /** Sends pending count updates, flushes, and drops every later event. */
  stop(): Promise<void>;
}

/** One Event on the server and the repeats folded into it. */
interface Aggregate {
  readonly key: string;
  name: string;
  readonly namespace: string;
  readonly base: CoreV1Event;
  count: number;
  first: Date;
  last: Date;
  lastSentMs: number;
  patchQueued: boolean;
  failed: boolean;
  timer: NodeJS.Timeout | undefined;
}

type Job = { op: 'create'; agg: Aggregate } | { op: 'patch'; agg: Aggregate };

export function createEventRecorder(port: KubePort, opts: EventRecorderOptions): RunningEventRecorder {
  const log = opts.logger;
  const now = opts.now ?? (() => new Date());
  const queueSize = Math.max(1, opts.queueSize ?? 1000);
  const windowMs = opts.dedupWindowMs ?? 10 * 60_000;
  const patchMs = opts.patchIntervalMs ?? 30_000;
  const burst = opts.spamBurst ?? 25;
  const refillMs = opts.spamRefillMs ?? 5 * 60_000;
  const cacheSize = opts.cacheSize ?? 4096;

  const aggregates = new Map<string, Aggregate>();
  const buckets = new Map<string, TokenBucket>();
  let bucketClock = 0; // the time of the event being filtered, in ms
  const queue: Job[] = [];
  let pumping: Promise<void> | undefined;
  let stopped = false;
  let seq = 0;

  /** LRU insert: re-inserting moves a key to the end; the oldest entries are evicted. */
  const remember = <V>(m: Map<string, V>, k: string, v: V, evicted?: (v: V) => void): void => {
    m.delete(k);
    m.set(k, v);
    while (m.size > cacheSize) {
      const oldest = m.keys().next().value as string;
      const ov = m.get(oldest);
      m.delete(oldest);
      if (ov !== undefined) evicted?.(ov);
    }
  };

  const allow = (objKey: string, t: number): boolean => {
    bucketClock = t;
    const b = buckets.get(objKey) ?? new TokenBucket({ qps: 1000 / refillMs, burst, now: () => bucketClock });
    const ok = b.tryAcquire();
    remember(buckets, objKey, b);
    return ok;
  };

  const eventName = (name: string, t: Date): string => {
    const nanos = BigInt(t.getTime()) * 1_000_000n + BigInt(seq++ % 1_000_000);
    return `${name}.${nanos.toString(16).padStart(16, '0')}`;
  };

  const enqueue = (job: Job): void => {
    if (stopped && job.op === 'create') return;
    if (queue.length >= queueSize) {
      const dropped = queue.shift();
      if (dropped?.op === 'patch') dropped.agg.patchQueued = false;
      log.warn({ queueSize, reason: dropped?.agg.base.reason, object: dropped?.agg.base.involvedObject.name }, 'event queue full; dropped the oldest event');
    }
    queue.push(job);
    pumping ??= pump().finally(() => {
      pumping = undefined;
    });
  };

  const schedulePatch = (agg: Aggregate, t: number): void => {
    if (agg.patchQueued || agg.timer) return;
    const due = agg.lastSentMs + patchMs;
    if (t >= due) {
      agg.patchQueued = true;
      agg.lastSentMs = t;
      enqueue({ op: 'patch', agg });
      return;
    }
    agg.timer = setTimeout(() => {
      agg.timer = undefined;
      schedulePatch(agg, now().getTime());
    }, due - t);
    agg.timer.unref();
  };

  const toEvent = (agg: Aggregate): CoreV1Event => ({
    ...agg.base,
    metadata: { name: agg.name, namespace: agg.namespace },
    count: agg.count,
    firstTimestamp: agg.first,
    lastTimestamp: agg.last,
  });

  async function send(job: Job): Promise<void> {
    const agg = job.agg;
    if (job.op === 'create') {
      try {
        await port.createEvent(agg.namespace, toEvent(agg));
      } catch (e) {
        agg.failed = true;
        if (aggregates.get(agg.key) === agg) aggregates.delete(agg.key);
        log.warn({ err: e, event: agg.name, reason: agg.base.reason }, `could not record event ${agg.name}`);
      }
      return;
    }
    agg.patchQueued = false;
    if (agg.failed) return;
    try {
      await port.patchEvent(agg.namespace, agg.name, { count: agg.count, lastTimestamp: agg.last });
    } catch (e) {
      if (isNotFound(e)) {
        // The Event expired on the server (events have a TTL): record it again under a new name.
        agg.name = eventName(agg.base.involvedObject.name ?? '', agg.last);
        await send({ op: 'create', agg });
        return;
      }
      log.warn({ err: e, event: agg.name, reason: agg.base.reason }, `could not update event ${agg.name}`);
    }
  }

  async function pump(): Promise<void> {
    await Promise.resolve(); // never send from inside the caller's event() call
    for (let job = queue.shift(); job; job = queue.shift()) {
      try {
        await send(job);
      } catch (e) {
        log.warn({ err: e }, 'event send failed');
      }
    }
  }

  const flush = async (): Promise<void> => {
    while (pumping) await pumping;
  };

  return {
    event(ref: ObjectRef, type: EventType, reason: string, message: string): void {
      try {
        if (stopped) {
          log.debug({ reason, object: ref.name }, 'event recorder stopped; event dropped');
          return;
        }
        const t = now();
        const ms = t.getTime();
        const namespace = ref.namespace || 'default';
        const objKey = [ref.kind, ref.namespace ?? '', ref.name, ref.uid ?? ''].join('\u0000');
        if (!allow(objKey, ms)) {
          log.debug({ reason, object: ref.name }, 'event dropped by the per-object spam filter');
          return;
        }
        const msg = eventMessage(message);
        const key = [objKey, type, reason, msg].join('\u0000');
        const existing = aggregates.get(key);
        if (existing && !existing.failed && ms - existing.last.getTime() < windowMs) {
          existing.count++;
          existing.last = t;
          remember(aggregates, key, existing);
          schedulePatch(existing, ms);
          return;
        }
        if (existing?.timer) clearTimeout(existing.timer);
        const involvedObject: CoreV1Event['involvedObject'] = { kind: ref.kind, name: ref.name };
        if (ref.namespace) involvedObject.namespace = ref.namespace;
        if (ref.uid) involvedObject.uid = ref.uid;
        if (ref.apiVersion) involvedObject.apiVersion = ref.apiVersion;
        const agg: Aggregate = {
          key,
          name: eventName(ref.name, t),
          namespace,
          base: {
            metadata: {},
            involvedObject,
            reason,
            message: msg,
            type,
            source: opts.host ? { component: opts.component, host: opts.host } : { component: opts.component },
          },
          count: 1,
          first: t,
          last: t,
          lastSentMs: ms,
          patchQueued: false,
          failed: false,
          timer: undefined,
        };
        remember(aggregates, key, agg, (old) => {
          clearTimeout(old.timer);
        });
        enqueue({ op: 'create', agg });
      } catch (e) {
        log.warn({ err: e, reason }, 'could not record event');
      }
    },

    flush,

    async stop(): Promise<void> {
      stopped = true;
      for (const agg of aggregates.values()) {
        if (agg.timer) {
          clearTimeout(agg.timer);
          agg.timer = undefined;
          if (!agg.patchQueued) {
            agg.patchQueued = true;
            enqueue({ op: 'patch', agg });
          }
        }
      }
      await flush();
    },
  };
}
