import type { V1Node, V1NodeSelectorTerm, V1PersistentVolume } from '@kubernetes/client-node';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { nodeSelectorMatches } from '../../src/volume/node-affinity.ts';
import { nodePVSelection, PVCache, pvOnThisNode } from '../../src/volume/pv-cache.ts';
import type { Informer, InformerHandlers } from '../../src/kube/informer.ts';
import { createInformer } from '../../src/kube/reflector.ts';
import { FakeKube } from '../support/fake-kube.ts';
import { testCacheEnv } from '../support/env.ts';

/** A hand-driven Informer: tests push add/update/delete through it. */
class ManualInformer implements Informer<V1PersistentVolume> {
  readonly store = new Map<string, V1PersistentVolume>();
  readonly handlers = new Set<InformerHandlers<V1PersistentVolume>>();
  get(key: string) {
    return this.store.get(key);
  }
  list() {
    return [...this.store.values()];
  }
  start() {}
  stop() {
    return Promise.resolve();
  }
  hasSynced() {
    return true;
  }
  waitForSync() {
    return Promise.resolve();
  }
  on(h: InformerHandlers<V1PersistentVolume>) {
    this.handlers.add(h);
    for (const o of this.store.values()) h.add?.(o);
    return () => void this.handlers.delete(h);
  }
  put(pv: V1PersistentVolume) {
    const name = pv.metadata!.name!;
    const old = this.store.get(name);
    this.store.set(name, pv);
    for (const h of this.handlers) {
      if (old) h.update?.(old, pv);
      else h.add?.(pv);
    }
  }
  remove(name: string) {
    const old = this.store.get(name);
    if (!old) return;
    this.store.delete(name);
    for (const h of this.handlers) h.delete?.(old);
  }
}

const NODE = { name: 'node-a', uid: 'uid-1' };
const UID_NAME = 'local-volume-provisioner-node-a-uid-1';
const NAME_ONLY = 'local-volume-provisioner-node-a';

function pv(name: string, by: string | undefined, path: string, extra: { hostname?: string; uid?: string } = {}): V1PersistentVolume {
  return {
    metadata: {
      name,
      uid: extra.uid ?? `uid-of-${name}`,
      annotations: by === undefined ? {} : { 'pv.kubernetes.io/provisioned-by': by },
      labels: extra.hostname ? { 'kubernetes.io/hostname': extra.hostname } : {},
    },
    spec: { local: { path }, storageClassName: 'sc1' },
  };
}

describe('pvOnThisNode', () => {
  it('accepts both naming modes of this node', () => {
    expect(pvOnThisNode(pv('a', UID_NAME, '/p'), NODE)).toBe(true);
    expect(pvOnThisNode(pv('a', NAME_ONLY, '/p'), NODE)).toBe(true);
  });
  it('rejects other nodes, other provisioners and unannotated PVs', () => {
    expect(pvOnThisNode(pv('a', 'local-volume-provisioner-node-b', '/p'), NODE)).toBe(false);
    expect(pvOnThisNode(pv('a', 'local-volume-provisioner-node-a-b', '/p'), NODE)).toBe(false); // node "node-a-b"
    expect(pvOnThisNode(pv('a', 'local-volume-provisioner-node-a-uid-2', '/p'), NODE)).toBe(false);
    expect(pvOnThisNode(pv('a', 'kubernetes.io/no-provisioner', '/p'), NODE)).toBe(false);
    expect(pvOnThisNode(pv('a', undefined, '/p'), NODE)).toBe(false);
  });
  it('keeps an old-UID PV labelled with this hostname (adoptable in useNodeNameOnly mode)', () => {
    expect(pvOnThisNode(pv('a', 'local-volume-provisioner-node-a-uid-0', '/p', { hostname: 'node-a' }), NODE)).toBe(true);
    expect(pvOnThisNode(pv('a', 'local-volume-provisioner-node-a-b', '/p', { hostname: 'node-a-b' }), NODE)).toBe(false);
  });
});

describe('PVCache adoption', () => {
  // The Go populator adopts only the current provisioned-by form (plus, with useNodeNameOnly,
  // UID-form PVs labelled with the node name): flipping useNodeNameOnly strands the Released PVs
  // of the other form. Here both forms of this node are adopted, whatever the config says.
  it('adopts both provisioned-by forms of this node (UID and node name only)', () => {
    const inf = new ManualInformer();
    inf.put(pv('uid-form', UID_NAME, '/mnt/1'));
    inf.put(pv('name-form', NAME_ONLY, '/mnt/2'));
    inf.put(pv('name-form-labelled', NAME_ONLY, '/mnt/3', { hostname: 'node-a' }));
    const cache = new PVCache(testCacheEnv(NODE), { informer: inf });
    expect(cache.list().map((p) => p.metadata?.name).sort()).toEqual(['name-form', 'name-form-labelled', 'uid-form']);
    expect(cache.lookupByPath('/mnt/2').map((p) => p.metadata?.name)).toEqual(['name-form']);
  });

  it('also adopts UID-form PVs of an earlier Node object labelled with the node name', () => {
    const inf = new ManualInformer();
    inf.put(pv('olduid', 'local-volume-provisioner-node-a-uid-0', '/mnt/1', { hostname: 'node-a' }));
    inf.put(pv('nolabel', 'local-volume-provisioner-node-a-uid-0', '/mnt/2'));
    inf.put(pv('otherlabel', 'local-volume-provisioner-node-a-uid-0', '/mnt/3', { hostname: 'node-a.example.com' }));
    const cache = new PVCache(testCacheEnv(NODE), { informer: inf });
    expect(cache.list().map((p) => p.metadata?.name)).toEqual(['olduid']);
  });

  it('never adopts other nodes\' PVs, other provisioners\' or unannotated ones', () => {
    const inf = new ManualInformer();
    inf.put(pv('other-node', 'local-volume-provisioner-node-b', '/mnt/1', { hostname: 'node-b' }));
    inf.put(pv('other-node-uid', 'local-volume-provisioner-node-b-uid-9', '/mnt/2', { hostname: 'node-b' }));
    inf.put(pv('prefix-node', 'local-volume-provisioner-node-a-b', '/mnt/3', { hostname: 'node-a-b' }));
    inf.put(pv('csi', 'csi.example.com', '/mnt/4', { hostname: 'node-a' }));
    inf.put(pv('manual', undefined, '/mnt/5', { hostname: 'node-a' }));
    const cache = new PVCache(testCacheEnv(NODE), { informer: inf });
    expect(cache.list()).toEqual([]);
  });

  it('a cached PV stays cached across updates even if it stops matching; deletes remove it', () => {
    const inf = new ManualInformer();
    const cache = new PVCache(testCacheEnv(NODE), { informer: inf });
    inf.put(pv('x', UID_NAME, '/mnt/x'));
    inf.put(pv('x', 'someone-else', '/mnt/x2'));
    expect(cache.get('x')?.spec?.local?.path).toBe('/mnt/x2');
    expect(cache.lookupByPath('/mnt/x')).toEqual([]);
    expect(cache.lookupByPath('/mnt/x2').map((p) => p.metadata?.name)).toEqual(['x']);
    inf.remove('x');
    expect(cache.get('x')).toBeUndefined();
    expect(cache.lookupByPath('/mnt/x2')).toEqual([]);
  });

  it('lookupByPath compares spec.local.path exactly and returns every holder', () => {
    const inf = new ManualInformer();
    inf.put(pv('a', UID_NAME, '/mnt/disks/v1'));
    inf.put(pv('b', UID_NAME, '/mnt/disks/v1'));
    inf.put(pv('c', UID_NAME, '/mnt/disks/v10'));
    const cache = new PVCache(testCacheEnv(NODE), { informer: inf });
    expect(cache.lookupByPath('/mnt/disks/v1').map((p) => p.metadata?.name).sort()).toEqual(['a', 'b']);
    expect(cache.lookupByPath('/mnt/disks/v1/')).toEqual([]);
  });

  it('close() stops following the informer', () => {
    const inf = new ManualInformer();
    const cache = new PVCache(testCacheEnv(NODE), { informer: inf });
    cache.close();
    inf.put(pv('late', UID_NAME, '/mnt/late'));
    expect(cache.get('late')).toBeUndefined();
    expect(inf.handlers.size).toBe(0);
  });
});

describe('PVCache.noteCreated', () => {
  const mk = (now: () => number) => {
    const inf = new ManualInformer();
    const cache = new PVCache(testCacheEnv(NODE, now), {
      informer: inf,
      pendingTtlMs: 1000,
    });
    return { inf, cache };
  };

  it('is visible at once, then replaced by the informer copy', () => {
    const { inf, cache } = mk(() => 0);
    const created = pv('new', UID_NAME, '/mnt/new', { uid: 'u-new' });
    cache.noteCreated(created);
    expect(cache.get('new')).toBe(created);
    expect(cache.lookupByPath('/mnt/new')).toEqual([created]);
    expect(cache.list()).toEqual([created]);
    expect(cache.pendingCount).toBe(1);
    const delivered = { ...created, metadata: { ...created.metadata, resourceVersion: '5' } };
    inf.put(delivered);
    expect(cache.pendingCount).toBe(0);
    expect(cache.get('new')).toBe(delivered);
    expect(cache.list()).toEqual([delivered]);
  });

  it('is dropped when the informer reports the delete', () => {
    const { inf, cache } = mk(() => 0);
    const created = pv('gone', UID_NAME, '/mnt/gone', { uid: 'u-gone' });
    inf.put(created);
    cache.noteCreated(created); // already known: ignored
    expect(cache.pendingCount).toBe(0);
    inf.remove('gone');
    expect(cache.get('gone')).toBeUndefined();
    // A create response arriving after the delete event does not resurrect it.
    cache.noteCreated(created);
    expect(cache.get('gone')).toBeUndefined();
  });

  it('a delete of another object with the same name keeps the note', () => {
    const { inf, cache } = mk(() => 0);
    const old = pv('n', UID_NAME, '/mnt/n', { uid: 'u-old' });
    inf.put(old);
    inf.remove('n');
    const fresh = pv('n', UID_NAME, '/mnt/n', { uid: 'u-fresh' });
    cache.noteCreated(fresh);
    // a stale replayed delete for the old object
    for (const h of inf.handlers) h.delete?.(old);
    expect(cache.get('n')).toBe(fresh);
  });

  it('expires when the informer never confirms it', () => {
    let t = 0;
    const { cache } = mk(() => t);
    cache.noteCreated(pv('lost', UID_NAME, '/mnt/lost'));
    t = 500;
    expect(cache.get('lost')).toBeDefined();
    t = 1500;
    expect(cache.get('lost')).toBeUndefined();
    expect(cache.lookupByPath('/mnt/lost')).toEqual([]);
    expect(cache.pendingCount).toBe(0);
  });
});

describe('PVCache on the real reflector', () => {
  it('follows PV creates and deletes through FakeKube', async () => {
    const kube = new FakeKube();
    kube.put('persistentvolumes', pv('pre', UID_NAME, '/mnt/pre'));
    kube.put('persistentvolumes', pv('foreign', 'local-volume-provisioner-node-b', '/mnt/f'));
    const inf = createInformer(kube, 'persistentvolumes', { filter: (p) => pvOnThisNode(p, NODE) });
    inf.start();
    try {
      await inf.waitForSync();
      const cache = new PVCache(testCacheEnv(NODE), { informer: inf });
      expect(cache.list().map((p) => p.metadata?.name)).toEqual(['pre']);
      await kube.createPersistentVolume(pv('made', UID_NAME, '/mnt/made'));
      await expect.poll(() => cache.get('made')?.spec?.local?.path).toBe('/mnt/made');
      await kube.deletePersistentVolume('pre');
      await expect.poll(() => cache.get('pre')).toBeUndefined();
      cache.close();
    } finally {
      await inf.stop();
    }
  });
});

describe('nodePVSelection (the process PV informer)', () => {
  const node: V1Node = { metadata: { name: 'node-a', uid: 'uid-1', labels: { 'kubernetes.io/hostname': 'host-a', zone: 'z1' } } };
  const affinity = (key: string, values: string[]): V1PersistentVolume['spec'] => ({
    nodeAffinity: { required: { nodeSelectorTerms: [{ matchExpressions: [{ key, operator: 'In', values }] }] } },
  });
  const withSpec = (p: V1PersistentVolume, spec: V1PersistentVolume['spec']): V1PersistentVolume => ({ ...p, spec: { ...p.spec, ...spec } });

  it('keeps ours whole, stubs of other local PVs on this node, and drops the rest; PVCache never adopts a stub', async () => {
    const kube = new FakeKube();
    const ours = kube.put('persistentvolumes', withSpec(pv('ours', NAME_ONLY, '/mnt/disks/a'), affinity('kubernetes.io/hostname', ['host-a'])));
    const manual = pv('manual', undefined, '/mnt/disks/b');
    manual.metadata = { ...manual.metadata, annotations: { big: 'x'.repeat(10_000) }, labels: { team: 'db' } };
    kube.put('persistentvolumes', withSpec(manual, { ...affinity('kubernetes.io/hostname', ['host-a']), capacity: { storage: '1Ti' } }));
    kube.put('persistentvolumes', withSpec(pv('elsewhere', undefined, '/mnt/disks/b'), affinity('kubernetes.io/hostname', ['host-b'])));
    kube.put('persistentvolumes', withSpec(pv('other-prov', 'local-volume-provisioner-node-b', '/mnt/disks/a'), affinity('zone', ['z2'])));
    const nfs: V1PersistentVolume = { metadata: { name: 'nfs', uid: 'u-nfs' }, spec: { nfs: { server: 's', path: '/x' } } };
    kube.put('persistentvolumes', nfs);
    const sel = nodePVSelection(node);
    const inf = createInformer(kube, 'persistentvolumes', sel);
    inf.start();
    try {
      await inf.waitForSync();
      expect(inf.list().map((p) => p.metadata?.name).sort()).toEqual(['manual', 'ours']);
      expect(inf.get('ours')).toEqual(ours);
      expect(inf.get('manual')).toEqual({
        apiVersion: 'v1',
        kind: 'PersistentVolume',
        metadata: { name: 'manual', uid: 'uid-of-manual', resourceVersion: expect.any(String) },
        spec: { local: { path: '/mnt/disks/b' }, storageClassName: 'sc1' },
      });
      const cache = new PVCache(testCacheEnv(NODE), { informer: inf });
      expect(cache.list().map((p) => p.metadata?.name)).toEqual(['ours']);
      cache.close();
      // A PV whose affinity moves off this node leaves the store.
      kube.update('persistentvolumes', 'manual', (p) => {
        p.spec = { ...p.spec, ...affinity('zone', ['z2']) };
      });
      await expect.poll(() => inf.get('manual')).toBeUndefined();
    } finally {
      await inf.stop();
    }
  });
});

describe('nodeSelectorMatches', () => {
  const node: V1Node = { metadata: { name: 'node-a', labels: { 'kubernetes.io/hostname': 'host-a', gen: '5' } } };
  const sel = (...terms: V1NodeSelectorTerm[]) => ({ nodeSelectorTerms: terms });
  const expr = (key: string, operator: string, values?: string[]) => ({ matchExpressions: [{ key, operator, values }] });
  it('follows the scheduler: terms ORed, requirements ANDed, empty terms select nothing', () => {
    expect(nodeSelectorMatches(undefined, node)).toBe(true);
    expect(nodeSelectorMatches(sel(expr('kubernetes.io/hostname', 'In', ['host-a'])), node)).toBe(true);
    expect(nodeSelectorMatches(sel(expr('kubernetes.io/hostname', 'In', ['host-b'])), node)).toBe(false);
    expect(nodeSelectorMatches(sel(expr('x', 'In', ['1']), expr('gen', 'Gt', ['4'])), node)).toBe(true);
    expect(nodeSelectorMatches(sel(expr('gen', 'Lt', ['5'])), node)).toBe(false);
    expect(nodeSelectorMatches(sel(expr('zone', 'NotIn', ['z1'])), node)).toBe(true);
    expect(nodeSelectorMatches(sel(expr('zone', 'Exists')), node)).toBe(false);
    expect(nodeSelectorMatches(sel(expr('zone', 'DoesNotExist')), node)).toBe(true);
    expect(nodeSelectorMatches(sel(expr('gen', 'Bogus', ['5'])), node)).toBe(false);
    expect(nodeSelectorMatches(sel({}), node)).toBe(false);
    const both = { matchExpressions: [{ key: 'gen', operator: 'Exists' }], matchFields: [{ key: 'metadata.name', operator: 'In', values: ['node-a'] }] };
    expect(nodeSelectorMatches(sel(both), node)).toBe(true);
    expect(nodeSelectorMatches(sel({ ...both, matchFields: [{ key: 'metadata.name', operator: 'In', values: ['node-b'] }] }), node)).toBe(false);
    expect(nodeSelectorMatches(sel({ matchFields: [{ key: 'metadata.uid', operator: 'In', values: ['node-a'] }] }), node)).toBe(false);
  });
});

describe('PVCache: the "Added pv" log line', () => {
  it('is written once per PV object and process: a reload\'s new cache over the same informer writes none for unchanged PVs, one for a PV that changed meanwhile', () => {
    const inf = new ManualInformer();
    for (let i = 0; i < 500; i++) inf.put(pv(`pv-${i}`, UID_NAME, `/mnt/disks/vol${i}`));
    const lines: string[] = [];
    const logger = pino({ level: 'debug' }, { write: (s: string) => lines.push(String((JSON.parse(s) as { msg: unknown }).msg)) });
    const env = { ...testCacheEnv(NODE), logger };
    const first = new PVCache(env, { informer: inf });
    expect(lines.filter((l) => l.startsWith('Added pv'))).toHaveLength(500);
    expect(first.list()).toHaveLength(500);
    first.close();
    lines.length = 0;
    inf.put({ ...pv('pv-7', UID_NAME, '/mnt/disks/vol7'), status: { phase: 'Bound' } }); // changed while no cache listened
    const second = new PVCache(env, { informer: inf });
    expect(second.list()).toHaveLength(500);
    expect(lines).toEqual(['Added pv "pv-7" to cache']);
    inf.put(pv('pv-new', UID_NAME, '/mnt/disks/new'));
    expect(lines).toEqual(['Added pv "pv-7" to cache', 'Added pv "pv-new" to cache']);
    second.close();
  });
});
