import { afterEach, describe, expect, it, vi } from 'vitest';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { FakeKube, kubeRejection, matchFields, matchLabels } from '../support/fake-kube.ts';
import { KubeError, type WatchEvent } from '../../src/kube/port.ts';

const pv = (name: string, labels?: Record<string, string>): V1PersistentVolume => ({
  metadata: { name, ...(labels ? { labels } : {}) },
  spec: { capacity: { storage: '1Gi' } },
});


afterEach(() => {
  vi.useRealTimers();
});

describe('FakeKube objects', () => {
  it('create sets uid, creationTimestamp and increasing resourceVersions; duplicates are 409', async () => {
    const k = new FakeKube();
    const a = await k.createPersistentVolume(pv('a'));
    const b = await k.createPersistentVolume(pv('b'));
    expect(a.metadata?.uid).toMatch(/^[0-9a-f-]{36}$/);
    expect(a.metadata?.creationTimestamp).toBeInstanceOf(Date);
    expect(Number(b.metadata?.resourceVersion)).toBeGreaterThan(Number(a.metadata?.resourceVersion));
    const e = await kubeRejection(k.createPersistentVolume(pv('a')));
    expect([e.code, e.reason]).toEqual([409, 'AlreadyExists']);
    expect(k.requests.map((r) => r.verb)).toEqual(['create', 'create', 'create']);
  });

  it('get/delete of a missing object is 404; delete honours the uid precondition', async () => {
    const k = new FakeKube();
    expect((await kubeRejection(k.getNode('n1'))).code).toBe(404);
    expect((await kubeRejection(k.deletePersistentVolume('x'))).reason).toBe('NotFound');
    const a = await k.createPersistentVolume(pv('a'));
    const conflict = await kubeRejection(k.deletePersistentVolume('a', { uid: 'other' }));
    expect([conflict.code, conflict.reason]).toEqual([409, 'Conflict']);
    await k.deletePersistentVolume('a', { uid: a.metadata?.uid });
    expect(k.object('persistentvolumes', 'a')).toBeUndefined();
  });

  it('namespaced objects: list honours namespace and label selectors', async () => {
    const k = new FakeKube();
    await k.createJob('ns1', { metadata: { name: 'j1', labels: { app: 'x', tier: 'a' } } });
    await k.createJob('ns2', { metadata: { name: 'j1', labels: { app: 'x', tier: 'b' } } });
    await k.createJob('ns1', { metadata: { name: 'j2', labels: { app: 'y' } } });
    const names = async (opts: object): Promise<string[]> =>
      (await k.list('jobs', opts)).items.map((j) => `${j.metadata?.namespace ?? ''}/${j.metadata?.name ?? ''}`).sort();
    expect(await names({ namespace: 'ns1' })).toEqual(['ns1/j1', 'ns1/j2']);
    expect(await names({ labelSelector: 'app=x' })).toEqual(['ns1/j1', 'ns2/j1']);
    expect(await names({ labelSelector: 'app=x,tier in (b, c)' })).toEqual(['ns2/j1']);
    expect(await names({ namespace: 'ns1', labelSelector: 'app!=x' })).toEqual(['ns1/j2']);
    expect((await k.list('jobs', {})).resourceVersion).toBe(k.resourceVersion);
  });

  it('matchLabels and matchFields cover the selector forms', () => {
    const l = { a: '1', b: '2' };
    expect(matchLabels('a', l)).toBe(true);
    expect(matchLabels('!a', l)).toBe(false);
    expect(matchLabels('a==1,b=2', l)).toBe(true);
    expect(matchLabels('a notin (1,3)', l)).toBe(false);
    expect(matchLabels('c in (1)', l)).toBe(false);
    expect(matchFields('metadata.name=x', { metadata: { name: 'x' } })).toBe(true);
    expect(matchFields('spec.nodeName!=n1', { spec: { nodeName: 'n1' } })).toBe(false);
  });

  it('replaceNode checks resourceVersion', async () => {
    const k = new FakeKube();
    const n = k.put('nodes', { metadata: { name: 'n1' } });
    const updated = await k.replaceNode({ ...n, spec: { unschedulable: true } });
    expect(updated.spec?.unschedulable).toBe(true);
    expect(updated.metadata?.uid).toBe(n.metadata?.uid);
    expect((await kubeRejection(k.replaceNode(n))).code).toBe(409);
  });

  it('patchEvent merge-patches count and lastTimestamp', async () => {
    const k = new FakeKube();
    await k.createEvent('default', { metadata: { name: 'e1' }, involvedObject: {}, count: 1, reason: 'R' });
    const t = new Date('2030-01-01T00:00:00Z');
    const p = await k.patchEvent('default', 'e1', { count: 2, lastTimestamp: t });
    expect([p.count, p.reason, p.lastTimestamp]).toEqual([2, 'R', t]);
  });

  it('failNext injects one error for the matching verb and kind', async () => {
    const k = new FakeKube();
    k.failNext('list', 'persistentvolumes', new KubeError(500, 'InternalError', 'boom'));
    expect((await kubeRejection(k.list('persistentvolumes', {}))).code).toBe(500);
    await expect(k.list('persistentvolumes', {})).resolves.toMatchObject({ items: [] });
  });

  it('setStatus and remove act like another controller; watch replays history after the given version', async () => {
    const k = new FakeKube();
    await k.createPersistentVolume(pv('a'));
    const rv = k.resourceVersion;
    k.setStatus('persistentvolumes', 'a', { phase: 'Released' });
    expect(k.object('persistentvolumes', 'a')?.status?.phase).toBe('Released');
    k.remove('persistentvolumes', 'a');
    const seen: string[] = [];
    const ac = new AbortController();
    const done = k.watch('persistentvolumes', { resourceVersion: rv }, (ev) => {
      seen.push(`${ev.type}:${(ev.object as V1PersistentVolume).status?.phase ?? '-'}`);
    }, ac.signal);
    await vi.waitFor(() => {
      expect(seen).toEqual(['MODIFIED:Released', 'DELETED:Released']);
    });
    ac.abort();
    await done;
  });
});

describe('FakeKube watch', () => {
  const collect = (k: FakeKube, rv: string, opts: object = {}) => {
    const events: Array<WatchEvent<V1PersistentVolume>> = [];
    const ac = new AbortController();
    const done = k.watch('persistentvolumes', { resourceVersion: rv, ...opts }, (ev) => events.push(ev), ac.signal);
    return { events, ac, done };
  };

  it('streams live ADDED/MODIFIED/DELETED and bookmarks; ends cleanly on closeWatches', async () => {
    const k = new FakeKube();
    const w = collect(k, k.resourceVersion, { allowWatchBookmarks: true });
    await vi.waitFor(() => {
      expect(k.openWatches).toBe(1);
    });
    await k.createPersistentVolume(pv('a'));
    k.update('persistentvolumes', 'a', (o) => {
      o.metadata = { ...o.metadata, labels: { x: 'y' } };
    });
    k.bookmark();
    await k.deletePersistentVolume('a');
    k.closeWatches();
    await w.done;
    expect(w.events.map((e) => e.type)).toEqual(['ADDED', 'MODIFIED', 'BOOKMARK', 'DELETED']);
    expect(k.openWatches).toBe(0);
  });

  it('closeWatches(error) rejects open watches; the signal resolves them', async () => {
    const k = new FakeKube();
    const w = collect(k, '0');
    await vi.waitFor(() => {
      expect(k.openWatches).toBe(1);
    });
    k.closeWatches(new KubeError(0, 'NetworkError', 'reset'));
    expect((await kubeRejection(w.done)).code).toBe(0);
    const w2 = collect(k, '0');
    await vi.waitFor(() => {
      expect(k.openWatches).toBe(1);
    });
    w2.ac.abort();
    await expect(w2.done).resolves.toBeUndefined();
  });

  it('sends ERROR 410 for a resourceVersion older than the compaction point', async () => {
    const k = new FakeKube();
    await k.createPersistentVolume(pv('a'));
    const old = '0';
    await k.createPersistentVolume(pv('b'));
    k.compact();
    const w = collect(k, old);
    await w.done;
    expect(w.events).toHaveLength(1);
    expect(w.events[0]).toMatchObject({ type: 'ERROR', object: { code: 410 } });
    // From the current version it works.
    const w2 = collect(k, k.resourceVersion);
    await vi.waitFor(() => {
      expect(k.openWatches).toBe(1);
    });
    w2.ac.abort();
    await w2.done;
  });

  it('ends after timeoutSeconds and filters by label selector', async () => {
    vi.useFakeTimers();
    const k = new FakeKube();
    const w = collect(k, '0', { timeoutSeconds: 5, labelSelector: 'keep=yes' });
    await vi.advanceTimersByTimeAsync(0);
    await k.createPersistentVolume(pv('a', { keep: 'yes' }));
    await k.createPersistentVolume(pv('b'));
    let ended = false;
    void w.done.then(() => (ended = true));
    await vi.advanceTimersByTimeAsync(4999);
    expect(ended).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(ended).toBe(true);
    expect(w.events.map((e) => (e.object as V1PersistentVolume).metadata?.name)).toEqual(['a']);
  });
});
