import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { FakeKube } from '../support/fake-kube.ts';
import { createInformer, type InformerOptions } from '../../src/kube/reflector.ts';
import type { Informer } from '../../src/kube/informer.ts';
import { KubeError } from '../../src/kube/port.ts';
import { Metrics } from '../../src/metrics/metrics.ts';

type PV = V1PersistentVolume;

const pv = (name: string, labels?: Record<string, string>): PV => ({
  metadata: { name, ...(labels ? { labels } : {}) },
  spec: { capacity: { storage: '1Gi' } },
});

/** Lets pending promise chains and due timers run. */
const settle = async (ms = 0): Promise<void> => {
  for (let i = 0; i < 10; i++) await vi.advanceTimersByTimeAsync(0);
  if (ms > 0) await vi.advanceTimersByTimeAsync(ms);
  for (let i = 0; i < 10; i++) await vi.advanceTimersByTimeAsync(0);
};

/** Records handler calls as short strings. */
const recordEvents = (inf: Informer<PV>): string[] => {
  const log: string[] = [];
  inf.on({
    add: (o) => log.push(`add:${o.metadata?.name ?? ''}`),
    update: (a, b) => log.push(`update:${b.metadata?.name ?? ''}:${a.metadata?.resourceVersion ?? ''}->${b.metadata?.resourceVersion ?? ''}`),
    delete: (o) => log.push(`delete:${o.metadata?.name ?? ''}`),
  });
  return log;
};

const restarts = async (metrics: Metrics): Promise<Record<string, number>> => {
  const out: Record<string, number> = {};
  for (const v of (await metrics.watchRestarts.get()).values) out[String(v.labels.reason)] = v.value;
  return out;
};

/** Starts an informer that counts its watch restarts; the returned function reads the counts by reason. */
const startCountingRestarts = (opts: InformerOptions<PV>): (() => Promise<Record<string, number>>) => {
  const metrics = new Metrics({ defaultMetrics: false });
  make({ ...opts, metrics }).start();
  return () => restarts(metrics);
};

let fake: FakeKube;
let informers: Array<Informer<PV>>;
const make = (opts: InformerOptions<PV> = {}): Informer<PV> => {
  const inf = createInformer(fake, 'persistentvolumes', { random: () => 0, ...opts });
  informers.push(inf);
  return inf;
};

beforeEach(() => {
  vi.useFakeTimers();
  fake = new FakeKube();
  informers = [];
});
afterEach(async () => {
  for (const inf of informers) await inf.stop();
  vi.useRealTimers();
});

describe('informer sync and live events', () => {
  it('lists, stores, marks synced, then follows live events', async () => {
    fake.put('persistentvolumes', pv('a'));
    fake.put('persistentvolumes', pv('b'));
    const inf = make();
    const log = recordEvents(inf);
    expect(inf.hasSynced()).toBe(false);
    inf.start();
    inf.start(); // idempotent
    await inf.waitForSync();
    expect(inf.hasSynced()).toBe(true);
    expect(log).toEqual(['add:a', 'add:b']);
    expect(inf.list().map((p) => p.metadata?.name).sort()).toEqual(['a', 'b']);
    await settle();
    expect(fake.openWatches).toBe(1);

    await fake.createPersistentVolume(pv('c'));
    const before = fake.object('persistentvolumes', 'a')?.metadata?.resourceVersion ?? '';
    const after = fake.setStatus('persistentvolumes', 'a', { phase: 'Released' }).metadata?.resourceVersion ?? '';
    fake.remove('persistentvolumes', 'b');
    expect(log.slice(2)).toEqual(['add:c', `update:a:${before}->${after}`, 'delete:b']);
    expect(inf.get('a')?.status?.phase).toBe('Released');
    expect(inf.get('b')).toBeUndefined();
    expect(fake.count('list')).toBe(1);
    expect(fake.count('watch')).toBe(1);
  });

  it('on() after sync replays add for cached objects; unsubscribe stops delivery', async () => {
    fake.put('persistentvolumes', pv('a'));
    const inf = make();
    inf.start();
    await inf.waitForSync();
    const log = recordEvents(inf);
    expect(log).toEqual(['add:a']);
    const seen: string[] = [];
    const off = inf.on({ add: (o) => seen.push(o.metadata?.name ?? '') });
    expect(seen).toEqual(['a']);
    off();
    await settle();
    await fake.createPersistentVolume(pv('z'));
    expect(seen).toEqual(['a']);
    expect(log).toEqual(['add:a', 'add:z']);
  });

  it('waitForSync rejects when its signal aborts first', async () => {
    fake.failNext('list', 'persistentvolumes', new KubeError(500, 'InternalError', 'down'));
    const inf = make();
    inf.start();
    const ac = new AbortController();
    const waiting = inf.waitForSync(ac.signal);
    ac.abort();
    await expect(waiting).rejects.toThrow();
    await expect(inf.waitForSync(AbortSignal.abort())).rejects.toThrow();
  });

  it('watches with bookmarks, a jittered timeout and the selectors', async () => {
    const inf = make({ labelSelector: 'a=b', fieldSelector: 'metadata.name=x', watchTimeoutSeconds: 100, random: () => 0.5 });
    const seen: unknown[] = [];
    const orig = fake.watch.bind(fake);
    fake.watch = (kind, opts, onEvent, signal) => {
      seen.push(opts);
      return orig(kind, opts, onEvent, signal);
    };
    inf.start();
    await settle();
    expect(seen[0]).toMatchObject({ allowWatchBookmarks: true, timeoutSeconds: 105, labelSelector: 'a=b', fieldSelector: 'metadata.name=x', resourceVersion: '0' });
  });
});

describe('informer recovery', () => {
  it('relists on 410 and emits add/update/delete for what changed while disconnected', async () => {
    fake.put('persistentvolumes', pv('a'));
    fake.put('persistentvolumes', pv('b'));
    fake.put('persistentvolumes', pv('same'));
    const metrics = new Metrics({ defaultMetrics: false });
    const inf = make({ metrics });
    const log = recordEvents(inf);
    inf.start();
    await inf.waitForSync();
    await settle();
    log.length = 0;

    // The connection drops; while the informer backs off, things change and history is compacted.
    fake.closeWatches(new KubeError(0, 'NetworkError', 'connection reset'));
    await settle();
    const oldA = fake.object('persistentvolumes', 'a')?.metadata?.resourceVersion ?? '';
    const newA = fake.setStatus('persistentvolumes', 'a', { phase: 'Released' }).metadata?.resourceVersion ?? '';
    fake.remove('persistentvolumes', 'b');
    fake.put('persistentvolumes', pv('c'));
    fake.compact();
    await settle(1000);

    expect(fake.count('list')).toBe(2);
    expect(log[0]).toBe('delete:b'); // deletions first, then adds/updates in list order
    expect(log.slice(1).sort()).toEqual(['add:c', `update:a:${oldA}->${newA}`]);
    expect(inf.list().map((p) => p.metadata?.name).sort()).toEqual(['a', 'c', 'same']);
    expect(await restarts(metrics)).toMatchObject({ error: 1, gone: 1 });
    // And it follows live events again.
    await fake.createPersistentVolume(pv('d'));
    expect(log.at(-1)).toBe('add:d');
  });

  it('a 410 returned as a KubeError also relists', async () => {
    const inf = make();
    inf.start();
    await inf.waitForSync();
    fake.failNext('watch', 'persistentvolumes', new KubeError(410, 'Gone', 'too old'));
    fake.closeWatches();
    await settle(1000);
    expect(fake.count('list')).toBe(2);
    expect(fake.openWatches).toBe(1);
  });

  it('backs off on errors (no hot loop) and recovers', async () => {
    for (let i = 0; i < 4; i++) fake.failNext('list', 'persistentvolumes', new KubeError(0, 'NetworkError', 'refused'));
    fake.put('persistentvolumes', pv('a'));
    const inf = make();
    inf.start();
    // Lists at 0, 1 s, 3 s, 7 s (1 s, 2 s, 4 s backoff); the fifth one at 15 s succeeds.
    await settle(6_900);
    expect(fake.count('list')).toBe(3);
    expect(inf.hasSynced()).toBe(false);
    await settle(100);
    expect(fake.count('list')).toBe(4);
    await settle(8_000);
    expect(fake.count('list')).toBe(5);
    expect(inf.hasSynced()).toBe(true);
    expect(inf.get('a')).toBeDefined();

    // A watch that ran for a while and then breaks: rewatch from the last version, backing off 1, 2, 4, 8, 16 s.
    await settle(5_000);
    for (let i = 0; i < 5; i++) fake.failNext('watch', 'persistentvolumes', new KubeError(503, 'ServiceUnavailable', 'busy'));
    fake.closeWatches(new KubeError(0, 'NetworkError', 'reset'));
    await settle(60_000);
    expect(fake.count('watch')).toBe(6);
    expect(fake.openWatches).toBe(0);
    await settle(2_000);
    expect(fake.count('watch')).toBe(7);
    expect(fake.openWatches).toBe(1);
    expect(fake.count('list')).toBe(5);
  });

  it('onList reports every list outcome (a 403 at once, then the recovery); a throwing callback is harmless', async () => {
    fake.failNext('list', 'persistentvolumes', new KubeError(403, 'Forbidden', 'persistentvolumes is forbidden'));
    fake.failNext('list', 'persistentvolumes', new KubeError(403, 'Forbidden', 'persistentvolumes is forbidden'));
    const seen: string[] = [];
    const inf = make({
      onList: (err) => {
        seen.push(err instanceof KubeError ? String(err.code) : String(err));
        throw new Error('callback bug');
      },
    });
    inf.start();
    await settle();
    expect(seen).toEqual(['403']);
    expect(inf.hasSynced()).toBe(false);
    await settle(1_000);
    expect(seen).toEqual(['403', '403']);
    await settle(2_000);
    expect(seen).toEqual(['403', '403', 'undefined']);
    expect(inf.hasSynced()).toBe(true);
  });

  it('a watch that closes cleanly too fast is backed off', async () => {
    const restartCounts = startCountingRestarts({ watchTimeoutSeconds: 1, minWatchDurationMs: 5000 });
    await settle(30_000);
    // Watches at 0, 2, 5, 10, 19 s (each lasts 1 s, then 1, 2, 4, 8, 16 s of backoff); without backoff it would be ~30.
    expect(fake.count('watch')).toBe(5);
    expect((await restartCounts())['closed']).toBe(5);
    expect(fake.count('list')).toBe(1);
  });

  it('a normal server-side timeout re-watches at once from the last version', async () => {
    const restartCounts = startCountingRestarts({ watchTimeoutSeconds: 10 });
    await settle(35_000);
    expect(fake.count('watch')).toBe(4);
    expect((await restartCounts())['timeout']).toBe(3);
    expect(fake.count('list')).toBe(1);
  });

  it('restarts a stalled watch; bookmarks keep it alive', async () => {
    const restartCounts = startCountingRestarts({ stallTimeoutMs: 5000 });
    await settle();
    for (let i = 0; i < 4; i++) {
      await settle(3000);
      fake.bookmark();
    }
    expect(fake.count('watch')).toBe(1);
    await settle(5000);
    expect(fake.count('watch')).toBe(2);
    expect(fake.openWatches).toBe(1);
    expect((await restartCounts())['stall']).toBe(1);
  });

  it('a bookmark moves the resume version forward', async () => {
    const inf = make();
    inf.start();
    await settle();
    fake.put('storageclasses', { metadata: { name: 'sc' }, provisioner: 'kubernetes.io/no-provisioner' }); // bumps the global version only
    fake.bookmark();
    const rv = fake.resourceVersion;
    const seen: string[] = [];
    const orig = fake.watch.bind(fake);
    fake.watch = (kind, opts, onEvent, signal) => {
      seen.push(opts.resourceVersion);
      return orig(kind, opts, onEvent, signal);
    };
    fake.closeWatches();
    await settle(2000);
    expect(seen).toEqual([rv]);
  });
});

describe('informer robustness', () => {
  it('a throwing handler is logged; other handlers and the informer keep working', async () => {
    fake.put('persistentvolumes', pv('a'));
    const inf = make();
    inf.on({
      add: () => {
        throw new Error('handler bug');
      },
      update: () => {
        throw new Error('handler bug');
      },
    });
    const log = recordEvents(inf);
    inf.start();
    await inf.waitForSync();
    await settle();
    await fake.createPersistentVolume(pv('b'));
    fake.setStatus('persistentvolumes', 'b', { phase: 'Bound' });
    expect(log.map((l) => l.split(':').slice(0, 2).join(':'))).toEqual(['add:a', 'add:b', 'update:b']);
    expect(inf.get('b')?.status?.phase).toBe('Bound');
    expect(fake.count('watch')).toBe(1);
  });

  it('filter keeps matching objects only and deletes objects that stop matching; transform is applied', async () => {
    fake.put('persistentvolumes', { ...pv('mine', { node: 'n1' }), metadata: { name: 'mine', labels: { node: 'n1' }, managedFields: [{ manager: 'x' }] } });
    fake.put('persistentvolumes', pv('other', { node: 'n2' }));
    const inf = make({
      filter: (p) => p.metadata?.labels?.['node'] === 'n1',
      transform: (p) => {
        if (p.metadata) delete p.metadata.managedFields;
        return p;
      },
    });
    const log = recordEvents(inf);
    inf.start();
    await inf.waitForSync();
    await settle();
    expect(inf.list().map((p) => p.metadata?.name)).toEqual(['mine']);
    expect(inf.get('mine')?.metadata?.managedFields).toBeUndefined();
    fake.update('persistentvolumes', 'other', (p) => {
      p.metadata = { ...p.metadata, labels: { node: 'n1' } };
    });
    fake.update('persistentvolumes', 'mine', (p) => {
      p.metadata = { ...p.metadata, labels: { node: 'n3' } };
    });
    fake.remove('persistentvolumes', 'mine'); // already gone from the cache: no second delete
    expect(log).toEqual(['add:mine', 'add:other', 'delete:mine']);
    expect(inf.list().map((p) => p.metadata?.name)).toEqual(['other']);
  });

  it('a throwing filter ignores the object instead of crashing', async () => {
    fake.put('persistentvolumes', pv('a'));
    const inf = make({
      filter: () => {
        throw new Error('filter bug');
      },
    });
    inf.start();
    await inf.waitForSync();
    expect(inf.list()).toEqual([]);
  });

  it('stop() ends the watch and leaves no timers, also while backing off and while a list hangs', async () => {
    const inf = make({ stallTimeoutMs: 5000 });
    inf.start();
    await inf.waitForSync();
    await settle();
    expect(vi.getTimerCount()).toBeGreaterThan(0);
    await inf.stop();
    expect(fake.openWatches).toBe(0);
    expect(vi.getTimerCount()).toBe(0);

    fake.failNext('list', 'persistentvolumes', new KubeError(500, 'InternalError', 'x'));
    const backingOff = make();
    backingOff.start();
    await settle(10);
    expect(vi.getTimerCount()).toBe(1);
    await backingOff.stop();
    expect(vi.getTimerCount()).toBe(0);

    const hung = createInformer(
      { ...fake, list: () => new Promise<never>(() => undefined) } as unknown as FakeKube,
      'persistentvolumes',
      {},
    );
    hung.start();
    await settle();
    await hung.stop();
    expect(vi.getTimerCount()).toBe(0);
    // Started after stop: stays stopped.
    hung.start();
    await settle();
    expect(hung.hasSynced()).toBe(false);
  });
});
