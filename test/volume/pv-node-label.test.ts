// --pv-node-label: the node PV informer lists and watches by label (labelled for this node, and
// unlabelled), the union hides a PV moving between the two when it gets labelled, the labeler
// adopts this node's unlabelled PVs, and what a node no longer sees (the documented trade-off).
import type { V1Node, V1PersistentVolume } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Informer } from '../../src/kube/informer.ts';
import { KubeError, type KubePort, type ListOptions, type ResourceKind, type WatchOptions } from '../../src/kube/port.ts';
import { createInformer } from '../../src/kube/reflector.ts';
import { unionInformer } from '../../src/kube/union-informer.ts';
import { createLogger, silentLogger } from '../../src/util/log.ts';
import { PVCache } from '../../src/volume/pv-cache.ts';
import { createNodePVInformer, PV_NODE_LABEL, pvNodeLabels, PVNodeLabeler } from '../../src/volume/pv-node-label.ts';
import { FakeKube } from '../support/fake-kube.ts';
import { testCacheEnv } from '../support/env.ts';

const NODE = 'node-a';
const node: V1Node = { metadata: { name: NODE, uid: 'uid-a', labels: { 'kubernetes.io/hostname': NODE } } };
const affinity = (host: string) => ({ required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [host] }] }] } });

/** A local PV on `host`; provisioned-by the provisioner of `owner` unless owner is undefined (hand-made). */
function pv(name: string, o: { host?: string; owner?: string | undefined; label?: string } = {}): V1PersistentVolume {
  const host = o.host ?? NODE;
  const owner = 'owner' in o ? o.owner : host;
  return {
    metadata: {
      name,
      ...(o.label !== undefined ? { labels: { [PV_NODE_LABEL]: o.label } } : {}),
      ...(owner !== undefined ? { annotations: { 'pv.kubernetes.io/provisioned-by': `local-volume-provisioner-${owner}` } } : {}),
    },
    spec: { capacity: { storage: '1Gi' }, local: { path: `/mnt/disks/${name}` }, storageClassName: 'sc1', nodeAffinity: affinity(host) },
  };
}

/** The fake API server, recording the options of every list and watch. */
function recording(fake: FakeKube): { port: KubePort; lists: ListOptions[]; watches: WatchOptions[] } {
  const lists: ListOptions[] = [];
  const watches: WatchOptions[] = [];
  const port = new Proxy(fake, {
    get(target, prop) {
      if (prop === 'list')
        return (kind: ResourceKind, opts: ListOptions) => {
          if (kind === 'persistentvolumes') lists.push(opts);
          return target.list(kind, opts);
        };
      if (prop === 'watch')
        return (kind: ResourceKind, opts: WatchOptions, ...rest: [never, AbortSignal]) => {
          if (kind === 'persistentvolumes') watches.push(opts);
          return target.watch(kind, opts, ...rest);
        };
      const v: unknown = Reflect.get(target, prop);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { port, lists, watches };
}

let fake: FakeKube;
const started: Array<{ stop(): Promise<void> }> = [];

async function startInformer(port: KubePort, on: boolean): Promise<Informer<V1PersistentVolume>> {
  const inf = createNodePVInformer(port, node, { nodeLabel: on, logger: silentLogger });
  started.push(inf);
  inf.start();
  await inf.waitForSync();
  return inf;
}

const names = (inf: Informer<V1PersistentVolume>): string[] => inf.list().map((p) => p.metadata?.name ?? '').sort();

beforeEach(() => {
  fake = new FakeKube();
});

afterEach(async () => {
  for (const s of started.splice(0).reverse()) await s.stop();
});

describe('createNodePVInformer', () => {
  beforeEach(() => {
    fake.put('persistentvolumes', pv('ours-labelled', { label: NODE }));
    fake.put('persistentvolumes', pv('ours-unlabelled'));
    fake.put('persistentvolumes', pv('other-node', { host: 'node-b', label: 'node-b' }));
    fake.put('persistentvolumes', pv('hand-made-here', { owner: undefined }));
  });

  it('off: one list and one watch of every PV, no selector', async () => {
    const r = recording(fake);
    const inf = await startInformer(r.port, false);
    await expect.poll(() => r.watches.length).toBe(1);
    expect(r.lists.map((o) => o.labelSelector)).toEqual([undefined]);
    expect(r.watches.map((o) => o.labelSelector)).toEqual([undefined]);
    expect(names(inf)).toEqual(['hand-made-here', 'ours-labelled', 'ours-unlabelled']);
  });

  it('on: lists and watches labelled-for-this-node and unlabelled PVs only; a hand-made local PV here is still seen (as a stub)', async () => {
    const r = recording(fake);
    const inf = await startInformer(r.port, true);
    await expect.poll(() => r.watches.length).toBe(2);
    const expected = [`${PV_NODE_LABEL}=${NODE}`, `!${PV_NODE_LABEL}`];
    expect(r.lists.map((o) => o.labelSelector)).toEqual(expected);
    expect(r.watches.map((o) => o.labelSelector).sort()).toEqual([...expected].sort());
    expect(names(inf)).toEqual(['hand-made-here', 'ours-labelled', 'ours-unlabelled']);
    // The stub carries what the deleter's path-in-use check needs, and nothing to adopt.
    expect(inf.get('hand-made-here')).toMatchObject({ spec: { local: { path: '/mnt/disks/hand-made-here' } } });
    expect(inf.get('hand-made-here')?.metadata?.annotations).toBeUndefined();
  });

  it('on: the documented trade-off: a PV labelled for another node is not seen here, even when its affinity selects this node', async () => {
    // E.g. a shared disk: node-b's class selector widens its PV's affinity to node-a. Off, node-a keeps a stub of it.
    fake.put('persistentvolumes', pv('b-shared', { owner: 'node-b', label: 'node-b' }));
    const on = await startInformer(fake, true);
    const off = await startInformer(fake, false);
    expect(on.get('b-shared')).toBeUndefined();
    expect(off.get('b-shared')).toMatchObject({ spec: { local: { path: '/mnt/disks/b-shared' } } });
  });

  it('on: changes of PVs labelled for other nodes are not delivered at all', async () => {
    const inf = await startInformer(fake, true);
    const seen: string[] = [];
    inf.on({ add: (p) => seen.push(`add ${p.metadata?.name ?? ''}`), update: (_o, p) => seen.push(`update ${p.metadata?.name ?? ''}`) });
    seen.length = 0;
    fake.update('persistentvolumes', 'other-node', (p) => (p.metadata = { ...p.metadata, annotations: { touched: 'yes' } }));
    fake.update('persistentvolumes', 'ours-labelled', (p) => (p.metadata = { ...p.metadata, annotations: { ...p.metadata?.annotations, touched: 'yes' } }));
    await expect.poll(() => seen).toEqual(['update ours-labelled']);
  });
});

describe('unionInformer', () => {
  it('a PV moving from the unlabelled to the labelled informer is an update for the consumer, never a delete (either order)', async () => {
    for (const labelFirst of [true, false]) {
      const f = new FakeKube();
      f.put('persistentvolumes', pv('mover'));
      const labelled = createInformer(f, 'persistentvolumes', { labelSelector: `${PV_NODE_LABEL}=${NODE}` });
      const unlabelled = createInformer(f, 'persistentvolumes', { labelSelector: `!${PV_NODE_LABEL}` });
      // The order the two watches deliver in follows the order of start().
      const parts = labelFirst ? [labelled, unlabelled] : [unlabelled, labelled];
      const u = unionInformer(parts, (p) => parts.indexOf(p.metadata?.labels?.[PV_NODE_LABEL] === NODE ? labelled : unlabelled));
      started.push(u);
      u.start();
      await u.waitForSync();
      const seen: string[] = [];
      u.on({
        add: (p) => seen.push(`add ${p.metadata?.labels?.[PV_NODE_LABEL] ?? '-'}`),
        update: (_o, p) => seen.push(`update ${p.metadata?.labels?.[PV_NODE_LABEL] ?? '-'}`),
        delete: () => seen.push('delete'),
      });
      f.update('persistentvolumes', 'mover', (p) => (p.metadata = { ...p.metadata, labels: pvNodeLabels(true, NODE) }));
      await expect.poll(() => [labelled.get('mover') !== undefined, unlabelled.get('mover') === undefined]).toEqual([true, true]);
      expect(seen[0]).toBe('add -'); // the replay of the synced informer
      expect(seen).not.toContain('delete');
      expect(seen.at(-1)).toBe(`update ${NODE}`);
      expect(u.list().map((p) => p.metadata?.labels?.[PV_NODE_LABEL])).toEqual([NODE]);
      f.update('persistentvolumes', 'mover', (p) => (p.metadata = { ...p.metadata, labels: {} }));
      await expect.poll(() => u.list().map((p) => p.metadata?.labels?.[PV_NODE_LABEL] ?? '-')).toEqual(['-']);
      expect(seen).not.toContain('delete');
      await f.deletePersistentVolume('mover');
      await expect.poll(() => seen.at(-1)).toBe('delete');
    }
  });
});

describe('PVNodeLabeler', () => {
  it("labels this node's unlabelled PVs (both provisioned-by forms), nothing else; the PV stays in the PV cache throughout", async () => {
    fake.put('persistentvolumes', pv('ours-unlabelled'));
    const uidForm = pv('ours-uid-form', { owner: `${NODE}-uid-a` });
    fake.put('persistentvolumes', uidForm);
    fake.put('persistentvolumes', pv('ours-labelled', { label: NODE }));
    fake.put('persistentvolumes', pv('hand-made-here', { owner: undefined }));
    fake.put('persistentvolumes', pv('other-node', { host: 'node-b', owner: 'node-b' }));
    const inf = await startInformer(fake, true);
    const cache = new PVCache(testCacheEnv({ name: NODE, uid: 'uid-a' }), { informer: inf });
    const deleted: string[] = [];
    inf.on({ delete: (p) => deleted.push(p.metadata?.name ?? '') });
    const labeler = new PVNodeLabeler(fake, node, inf, silentLogger);
    started.push(labeler);
    await labeler.idle();
    const label = (n: string) => fake.object('persistentvolumes', n)?.metadata?.labels?.[PV_NODE_LABEL];
    expect(fake.requests.filter((r) => r.verb === 'patch').map((r) => r.name).sort()).toEqual(['ours-uid-form', 'ours-unlabelled']);
    expect([label('ours-unlabelled'), label('ours-uid-form'), label('hand-made-here'), label('other-node')]).toEqual([NODE, NODE, undefined, undefined]);
    // The labelled copies arrive through the labelled informer; the cache keeps both PVs, no delete on the way.
    await expect.poll(() => cache.get('ours-unlabelled')?.metadata?.labels?.[PV_NODE_LABEL]).toBe(NODE);
    await expect.poll(() => cache.get('ours-uid-form')?.metadata?.labels?.[PV_NODE_LABEL]).toBe(NODE);
    expect(cache.list().map((p) => p.metadata?.name).sort()).toEqual(['ours-labelled', 'ours-uid-form', 'ours-unlabelled']);
    expect(deleted).toEqual([]);
    cache.close();
  });

  it('issue 17, 5: our PV patched to label another node leaves our view: it is labelled back at once and comes back into the cache (a release stays visible)', async () => {
    fake.put('persistentvolumes', pv('ours', { label: NODE }));
    const inf = await startInformer(fake, true);
    const cache = new PVCache(testCacheEnv({ name: NODE, uid: 'uid-a' }), { informer: inf });
    const lines: string[] = [];
    const labeler = new PVNodeLabeler(fake, node, inf, createLogger({ level: 'warn', format: 'json', write: (l) => lines.push(l) }));
    started.push(labeler);
    await expect.poll(() => cache.get('ours')).toBeDefined();
    await fake.patchPersistentVolume('ours', { metadata: { labels: { [PV_NODE_LABEL]: 'elsewhere' } } });
    await expect.poll(() => fake.object('persistentvolumes', 'ours')?.metadata?.labels?.[PV_NODE_LABEL]).toBe(NODE);
    await labeler.idle();
    await expect.poll(() => cache.get('ours')?.metadata?.labels?.[PV_NODE_LABEL]).toBe(NODE);
    expect(lines.some((l) => l.includes(`labelled pv \\"ours\\" ${PV_NODE_LABEL}=${NODE}`) && l.includes(`it was labelled ${PV_NODE_LABEL}=elsewhere`))).toBe(true);
    // A real delete (our label) is not patched.
    const patches = fake.count('patch', 'persistentvolumes');
    await fake.deletePersistentVolume('ours');
    await expect.poll(() => cache.get('ours')).toBeUndefined();
    await labeler.idle();
    expect(fake.count('patch', 'persistentvolumes')).toBe(patches);
    cache.close();
  });

  it('a forbidden patch (no RBAC) is one warning naming the PV and the fix; the PV is still managed', async () => {
    fake.put('persistentvolumes', pv('ours-unlabelled'));
    fake.failNext('patch', 'persistentvolumes', new KubeError(403, 'Forbidden', 'persistentvolumes "ours-unlabelled" is forbidden'));
    const lines: string[] = [];
    const inf = await startInformer(fake, true);
    const labeler = new PVNodeLabeler(fake, node, inf, createLogger({ level: 'warn', format: 'json', write: (l) => lines.push(l) }));
    started.push(labeler);
    await labeler.idle();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('could not label pv \\"ours-unlabelled\\"');
    expect(lines[0]).toContain('grant patch on persistentvolumes');
    expect(inf.get('ours-unlabelled')).toBeDefined();
    expect(fake.object('persistentvolumes', 'ours-unlabelled')?.metadata?.labels).toBeUndefined();
  });
});
