import { testConfig } from '../support/config.ts';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, realpath, rm, stat, symlink, writeFile } from 'node:fs/promises';
import fc from 'fast-check';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1Node, V1PersistentVolume, V1StorageClass } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CreatedPVs, PVCache, pvOnThisNode } from '../../src/volume/pv-cache.ts';
import type { ClassConfig, ProvisionerConfig } from '../../src/config/types.ts';
import { roundDownCapacityPretty } from '../../src/volume/capacity.ts';
import { formatQuantity } from '../../src/util/quantity.ts';
import { Discoverer, type CleanupTracker, type DiscovererOptions } from '../../src/discovery/discoverer.ts';
import { generatePVName } from '../../src/volume/naming.ts';
import { deviceNumbers, filesystemCapacity } from '../../src/host/stat.ts';
import type { EventRecorder, EventType, ObjectRef } from '../../src/kube/events.ts';
import type { Informer, Store } from '../../src/kube/informer.ts';
import { KubeError } from '../../src/kube/port.ts';
import { createInformer } from '../../src/kube/reflector.ts';
import { Metrics } from '../../src/metrics/metrics.ts';
import { MountTableReader } from '../../src/host/mount-snapshot.ts';
import { createHealthChecker } from '../../src/health/check.ts';
import { FakeKube } from '../support/fake-kube.ts';
import { splitEnv, testCacheEnv, testEnv } from '../support/env.ts';
import type { GenerationEnv } from '../../src/volume/env.ts';
import type { PVIndex } from '../../src/volume/pv-index.ts';

/** Every path src/ passes to fs/promises stat (the mode check of discovery). */
const statCalls = vi.hoisted(() => [] as string[]);
vi.mock('node:fs/promises', async (importOriginal) => {
  const orig = await importOriginal<typeof import('node:fs/promises')>();
  const counted = ((path: Parameters<typeof orig.stat>[0], opts?: Parameters<typeof orig.stat>[1]) => {
    statCalls.push(String(path));
    return orig.stat(path, opts);
  }) as typeof orig.stat;
  return { ...orig, stat: counted, default: { ...orig, stat: counted } };
});

const NODE: V1Node = {
  metadata: {
    name: 'test-node',
    uid: 'node-uid-1',
    labels: { 'kubernetes.io/hostname': 'test-node-host', zone: 'z1' },
  },
};
const PROVISIONER = 'local-volume-provisioner-test-node-node-uid-1';

class EventLog implements EventRecorder {
  readonly events: { ref: ObjectRef; type: EventType; reason: string; message: string }[] = [];
  event(ref: ObjectRef, type: EventType, reason: string, message: string): void {
    this.events.push({ ref, type, reason, message });
  }
}

class Tracker implements CleanupTracker {
  readonly running = new Set<string>();
  readonly calls: string[] = [];
  inProgress(pvName: string): boolean {
    this.calls.push(`inProgress ${pvName}`);
    return this.running.has(pvName);
  }
  removeStatus(pvName: string): void {
    this.calls.push(`removeStatus ${pvName}`);
  }
}

class MapStore<T> implements Store<T> {
  readonly m = new Map<string, T>();
  get(key: string) {
    return this.m.get(key);
  }
  list() {
    return [...this.m.values()];
  }
}

const sc = (name: string, extra: Partial<V1StorageClass> = {}): V1StorageClass => ({
  metadata: { name },
  provisioner: 'kubernetes.io/no-provisioner',
  ...extra,
});

/** A PV informer whose watch never delivers anything (a lagging watch). */
const silentInformer: Informer<V1PersistentVolume> = {
  get: () => undefined,
  list: () => [],
  start: () => undefined,
  stop: () => Promise.resolve(),
  hasSynced: () => true,
  waitForSync: () => Promise.resolve(),
  on: () => () => undefined,
};

let root: string;
let kube: FakeKube;
let informer: Informer<V1PersistentVolume>;
let cache: PVCache;
let events: EventLog;
let tracker: Tracker;
let classes: MapStore<V1StorageClass>;
let metrics: Metrics;
let mountinfo: string;
let now: number;

function cls(name: string, over: Partial<ClassConfig> = {}): ClassConfig {
  return {
    hostDir: `/mnt/host/${name}`,
    mountDir: join(root, name),
    blockCleanerCommand: ['/scripts/quick_reset.sh'],
    volumeMode: 'Filesystem',
    namePattern: '*',
    ...over,
  };
}

function config(map: Record<string, ClassConfig>, over: Partial<ProvisionerConfig> = {}): ProvisionerConfig {
  return testConfig(map, { nodeLabelsForPV: ['zone'], ...over });
}

function discoverer(cfg: ProvisionerConfig, over: Partial<DiscovererOptions & GenerationEnv> = {}): Discoverer {
  const [envOver, own] = splitEnv<Partial<DiscovererOptions>>(over);
  const env = testEnv({
    config: cfg,
    node: NODE,
    provisionerName: PROVISIONER,
    kube,
    recorder: events,
    metrics,
    mountInfoPath: mountinfo,
    now: () => now,
    ...envOver,
  });
  return new Discoverer(env, {
    pvCache: cache,
    storageClasses: classes,
    cleanupTracker: tracker,
    ...own,
  });
}

/** Writes the fake mount table with these mount points (plus /). */
async function mounts(...paths: string[]): Promise<void> {
  const lines = ['22 1 8:1 / / rw - ext4 /dev/sda1 rw'];
  paths.forEach((p, i) => lines.push(`${100 + i} 22 0:${50 + i} / ${p.replace(/ /g, '\\040')} rw,relatime - tmpfs tmpfs rw`));
  await writeFile(mountinfo, `${lines.join('\n')}\n`);
}

async function dirs(parent: string, ...names: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const n of names) {
    await mkdir(join(parent, n), { recursive: true });
    out.push(join(parent, n));
  }
  return out;
}

const pvs = () => kube.objects('persistentvolumes');

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'discoverer-'));
  mountinfo = join(root, 'mountinfo');
  await writeFile(mountinfo, '');
  kube = new FakeKube();
  informer = createInformer(kube, 'persistentvolumes', { filter: (pv) => pvOnThisNode(pv, { name: 'test-node', uid: 'node-uid-1' }) });
  informer.start();
  await informer.waitForSync();
  cache = new PVCache(testCacheEnv({ name: 'test-node', uid: 'node-uid-1' }), { informer });
  events = new EventLog();
  tracker = new Tracker();
  classes = new MapStore();
  classes.m.set('sc1', sc('sc1', { mountOptions: ['ro'] }));
  classes.m.set('sc2', sc('sc2', { reclaimPolicy: 'Retain' }));
  metrics = new Metrics({ defaultMetrics: false });
  now = 1_000_000;
});

afterEach(async () => {
  cache.close();
  await informer.stop();
  await rm(root, { recursive: true, force: true });
});

describe('Discoverer', () => {
  it('creates one PV per mount point, byte-identical names, then costs 0 requests on the next pass', async () => {
    const paths = await dirs(join(root, 'sc1'), 'mount1', 'mount2', 'mount3');
    await mounts(...paths);
    const d = discoverer(config({ sc1: cls('sc1') }));

    const r1 = await d.discover();
    expect(r1).toMatchObject({ ready: true, errors: [], warnings: [] });
    const names = ['mount1', 'mount2', 'mount3'].map((n) => generatePVName(n, 'test-node', 'sc1'));
    expect(r1.created).toEqual(names);
    expect(kube.count('create', 'persistentvolumes')).toBe(3);

    const cap = formatQuantity(roundDownCapacityPretty(await filesystemCapacity(paths[0]!)));
    const pv = kube.object('persistentvolumes', names[0]!)!;
    expect(pv.metadata?.labels).toEqual({ zone: 'z1' });
    // The Go provisioner's annotation, plus the identity discovery recorded (a mount point).
    expect(pv.metadata?.annotations).toEqual({ 'local-static-provisioner/volume-identity': 'mount', 'pv.kubernetes.io/provisioned-by': PROVISIONER });
    expect(pv.spec).toMatchObject({
      capacity: { storage: cap },
      local: { path: '/mnt/host/sc1/mount1' },
      accessModes: ['ReadWriteOnce'],
      persistentVolumeReclaimPolicy: 'Delete',
      storageClassName: 'sc1',
      mountOptions: ['ro'],
      volumeMode: 'Filesystem',
      nodeAffinity: {
        required: {
          nodeSelectorTerms: [
            { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: ['test-node-host'] }] },
          ],
        },
      },
    });
    expect(tracker.calls).toContain(`removeStatus ${names[0]!}`);
    expect(tracker.calls.indexOf(`inProgress ${names[0]!}`)).toBeLessThan(tracker.calls.indexOf(`removeStatus ${names[0]!}`));

    // Metrics: 3 discoveries and 3 create requests (the capacity gauge is read from the PVs at scrape time, test/metrics).
    const total = await metrics.discoveryTotal.get();
    expect(total.values.find((v) => v.labels.mode === 'Filesystem')?.value).toBe(3);
    const reqs = await metrics.apiserverRequests.get();
    expect(reqs.values.find((v) => v.labels.method === 'create')?.value).toBe(3);

    // Next pass straight away (the informer may not have delivered yet): nothing sent, nothing recorded.
    const before = kube.requests.length;
    const r2 = await d.discover();
    expect(r2).toMatchObject({ ready: true, created: [], errors: [] });
    expect(kube.requests.length).toBe(before);
    expect(events.events).toEqual([]);

    // Once the informer has them, still nothing.
    await expect.poll(() => cache.pendingCount).toBe(0);
    await d.discover();
    expect(kube.requests.length).toBe(before);
  });

  it.skipIf(process.getuid?.() !== 0)('records the filesystem UUID of an ext4 mount (mount:uuid=<uuid>), from the pass\'s mount table (issue 19)', async () => {
    const img = join(root, 'ext4.img');
    execFileSync('truncate', ['-s', '16M', img]);
    const dev = execFileSync('losetup', ['--find', '--show', img], { encoding: 'utf8' }).trim();
    try {
      execFileSync('mkfs.ext4', ['-q', '-F', dev]);
      const uuid = execFileSync('blkid', ['-o', 'value', '-s', 'UUID', dev], { encoding: 'utf8' }).trim();
      const { major, minor } = deviceNumbers((await stat(dev, { bigint: true })).rdev);
      const [ext, tmp] = await dirs(join(root, 'sc1'), 'disk1', 'ram1');
      // The table says the ext4 on that loop device is mounted at disk1 (the UUID comes from the device it names), a tmpfs at ram1.
      await writeFile(mountinfo, `22 1 8:1 / / rw - ext4 /dev/sda1 rw\n100 22 ${major}:${minor} / ${ext} rw,relatime - ext4 ${dev} rw\n101 22 0:77 / ${tmp} rw - tmpfs tmpfs rw\n`);
      const r = await discoverer(config({ sc1: cls('sc1') })).discover();
      expect(r).toMatchObject({ errors: [], created: [generatePVName('disk1', 'test-node', 'sc1'), generatePVName('ram1', 'test-node', 'sc1')] });
      const identity = (name: string): string | undefined => kube.object('persistentvolumes', generatePVName(name, 'test-node', 'sc1'))?.metadata?.annotations?.['local-static-provisioner/volume-identity'];
      expect(identity('disk1')).toBe(`mount:uuid=${uuid}`);
      expect(identity('ram1')).toBe('mount');
    } finally {
      execFileSync('losetup', ['-d', dev]);
    }
  });

  it('stats no directory entry, in the first pass or later ones; a symlink is still followed (issue 12)', async () => {
    const paths = await dirs(join(root, 'sc1'), 'mount1', 'mount2', 'mount3');
    // The target lies outside every volume (a link into mount1 would be refused: issue 17, 3b).
    const [target] = await dirs(root, 'elsewhere');
    await symlink(target!, join(root, 'sc1', 'link1'));
    await mounts(...paths, join(root, 'sc1', 'link1'));
    const d = discoverer(config({ sc1: cls('sc1') }));
    statCalls.length = 0;
    const r1 = await d.discover();
    expect(r1).toMatchObject({ ready: true, errors: [] });
    expect(r1.created).toHaveLength(4);
    const underRoot = (): string[] => statCalls.filter((p) => p.startsWith(root));
    expect(underRoot()).toEqual([join(root, 'sc1', 'link1')]);
    statCalls.length = 0;
    expect((await d.discover()).created).toEqual([]);
    expect(underRoot()).toEqual([join(root, 'sc1', 'link1')]);
  });

  it('does not create twice while the PV watch lags behind (noteCreated)', async () => {
    const paths = await dirs(join(root, 'sc1'), 'mount1', 'mount2');
    await mounts(...paths);
    const lagging = new PVCache(testCacheEnv({ name: 'test-node', uid: 'node-uid-1' }), { informer: silentInformer });
    const d = discoverer(config({ sc1: cls('sc1') }), { pvCache: lagging });
    expect((await d.discover()).created).toHaveLength(2);
    const before = kube.requests.length;
    const r2 = await d.discover();
    expect(r2).toMatchObject({ ready: true, created: [], errors: [] });
    expect(kube.requests.length).toBe(before);
  });

  it('after a reload, the new generation does not create again what the previous one just created (watch lagging)', async () => {
    const paths = await dirs(join(root, 'sc1'), 'mount1', 'mount2');
    await mounts(...paths);
    // The watch has not delivered the creates yet (a loaded node: the hot-reload stress e2e).
    // As in startController: a PVCache per generation over the process-scope informer and CreatedPVs.
    const created = new CreatedPVs(silentInformer);
    const generation = () => new PVCache(testCacheEnv({ name: 'test-node', uid: 'node-uid-1' }), { informer: silentInformer, created });
    const first = generation();
    expect((await discoverer(config({ sc1: cls('sc1') }), { pvCache: first }).discover()).created).toHaveLength(2);
    first.close();
    const before = kube.requests.length;
    const r = await discoverer(config({ sc1: cls('sc1') }), { pvCache: generation() }).discover();
    expect(r).toMatchObject({ ready: true, created: [], errors: [] });
    expect(kube.requests.length).toBe(before);
    const failed = await metrics.apiserverRequestsFailed.get();
    expect(failed.values.find((v) => v.labels.method === 'create')?.value ?? 0).toBe(0);
  });

  it('picks up entries added later, and only those', async () => {
    const [m1] = await dirs(join(root, 'sc1'), 'mount1');
    await mounts(m1!);
    const d = discoverer(config({ sc1: cls('sc1') }));
    expect((await d.discover()).created).toEqual([generatePVName('mount1', 'test-node', 'sc1')]);
    const [m2] = await dirs(join(root, 'sc1'), 'mount2');
    await mounts(m1!, m2!);
    expect((await d.discover()).created).toEqual([generatePVName('mount2', 'test-node', 'sc1')]);
    expect(pvs()).toHaveLength(2);
  });

  it('with the period\'s shared mount table (MountTableReader): a pass that creates PVs and the health pass after it read the table once between them, parsed once', async () => {
    const [m1, m2] = await dirs(join(root, 'sc1'), 'mount1', 'mount2');
    await mounts(m1!);
    const mountTable = new MountTableReader(mountinfo);
    const d = discoverer(config({ sc1: cls('sc1') }), { mountTable });
    const health = createHealthChecker({ mountTable });
    mountTable.newPeriod();
    expect((await d.discover()).created).toEqual([generatePVName('mount1', 'test-node', 'sc1')]);
    const reads = mountTable.reads;
    expect(reads).toBeGreaterThanOrEqual(2); // read until two reads agree
    const pass = await health.beginPass();
    expect(mountTable.reads).toBe(reads);
    expect([...(await pass.check({ pvName: 'x', path: m1!, mode: 'Filesystem' })).conditions]).toEqual([]);
    // Next period: the table changed (mount2 mounted): discovery sees it, the health pass shares the read.
    await mounts(m1!, m2!);
    mountTable.newPeriod();
    expect((await d.discover()).created).toEqual([generatePVName('mount2', 'test-node', 'sc1')]);
    const reads2 = mountTable.reads;
    await health.beginPass();
    expect(mountTable.reads).toBe(reads2);
  });

  it('a mount point with a space in its name is found (escaped in mountinfo)', async () => {
    const [p] = await dirs(join(root, 'sc1'), 'my disk');
    await mounts(p!);
    const r = await discoverer(config({ sc1: cls('sc1') })).discover();
    expect(r.created).toEqual([generatePVName('my disk', 'test-node', 'sc1')]);
  });

  it('names the PV (field pv) in every log line about an entry, problems included', async () => {
    const dir = join(root, 'sc1');
    const [good] = await dirs(dir, 'good', 'notmounted');
    await writeFile(join(dir, 'stray.txt'), 'x');
    await mounts(good!);
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'debug' }, { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) });
    await discoverer(config({ sc1: cls('sc1') }), { logger }).discover();
    const about = (entry: string): Array<Record<string, unknown>> => lines.filter((l) => String(l['msg']).includes(join(dir, entry)) || String(l['msg']).includes(`/mnt/host/sc1/${entry}`));
    for (const entry of ['good', 'notmounted', 'stray.txt']) {
      expect(about(entry).length, entry).toBeGreaterThan(0);
      for (const l of about(entry)) expect(l['pv'], String(l['msg'])).toBe(generatePVName(entry, 'test-node', 'sc1'));
    }
  });

  it('stray file, broken symlink and unmounted dir: one Event each, no PV, still ready, then silent', async () => {
    const dir = join(root, 'sc1');
    const [good] = await dirs(dir, 'good', 'notmounted');
    await writeFile(join(dir, 'stray.txt'), 'x');
    await symlink(join(root, 'nowhere'), join(dir, 'broken'));
    await mounts(good!);
    const d = discoverer(config({ sc1: cls('sc1') }));

    const r1 = await d.discover();
    expect(r1.ready).toBe(true);
    expect(r1.created).toEqual([generatePVName('good', 'test-node', 'sc1')]);
    expect(r1.warnings).toHaveLength(3);
    expect(events.events).toHaveLength(3);
    for (const e of events.events) {
      expect(e).toMatchObject({ type: 'Warning', reason: 'VolumeNotDiscovered', ref: { kind: 'Node', name: 'test-node', uid: 'node-uid-1' } });
    }
    const messages = events.events.map((e) => e.message);
    expect(messages.some((m) => m.includes(`path "${join(dir, 'notmounted')}" is not a valid mount point`))).toBe(true);
    expect(messages.some((m) => m.includes(`Skipping file "${join(dir, 'stray.txt')}": not a directory nor block device`))).toBe(true);
    expect(messages.some((m) => m.startsWith(`Directory check for "${join(dir, 'broken')}" failed`))).toBe(true);

    const before = kube.requests.length;
    const r2 = await d.discover();
    expect(r2.warnings).toHaveLength(3);
    expect(events.events).toHaveLength(3);
    expect(kube.requests.length).toBe(before);

    // Fixed, then broken again: reported again.
    await rm(join(dir, 'stray.txt'));
    await d.discover();
    await writeFile(join(dir, 'stray.txt'), 'x');
    await d.discover();
    expect(events.events).toHaveLength(4);
  });

  it('a missing StorageClass skips that class with an Event; the other class still works', async () => {
    const [a] = await dirs(join(root, 'sc1'), 'mount1');
    const [b] = await dirs(join(root, 'gone'), 'mount1');
    await mounts(a!, b!);
    const d = discoverer(config({ sc1: cls('sc1'), gone: cls('gone') }));
    const r = await d.discover();
    expect(r.ready).toBe(false);
    expect(r.created).toEqual([generatePVName('mount1', 'test-node', 'sc1')]);
    expect(r.errors).toHaveLength(1);
    expect(r.errors[0]).toContain('storage class "gone"');
    expect(events.events).toEqual([
      expect.objectContaining({ type: 'Warning', reason: 'StorageClassMissing', message: expect.stringContaining('"gone"') }),
    ]);
    expect((await metrics.discoveryErrors.get()).values.find((v) => v.labels.class === 'gone')?.value).toBe(1);

    await d.discover();
    expect(events.events).toHaveLength(1);

    // The StorageClass appears: the class is discovered on the next pass.
    classes.m.set('gone', sc('gone'));
    const r3 = await d.discover();
    expect(r3).toMatchObject({ ready: true, created: [generatePVName('mount1', 'test-node', 'gone')] });
  });

  it('an unsupported reclaim policy skips the class with an Event', async () => {
    classes.m.set('sc1', sc('sc1', { reclaimPolicy: 'Recycle' }));
    const [a] = await dirs(join(root, 'sc1'), 'mount1');
    await mounts(a!);
    const r = await discoverer(config({ sc1: cls('sc1') })).discover();
    expect(r.ready).toBe(false);
    expect(r.errors).toEqual([
      'unsupported ReclaimPolicy "Recycle" from storage class "sc1", supported policy are Retain and Delete',
    ]);
    expect(pvs()).toHaveLength(0);
    expect(events.events).toHaveLength(1);
  });

  it('skips a PV whose cleanup is in progress', async () => {
    const paths = await dirs(join(root, 'sc1'), 'mount1', 'mount2');
    await mounts(...paths);
    const busy = generatePVName('mount2', 'test-node', 'sc1');
    tracker.running.add(busy);
    const d = discoverer(config({ sc1: cls('sc1') }));
    const r = await d.discover();
    expect(r).toMatchObject({ ready: true, created: [generatePVName('mount1', 'test-node', 'sc1')] });
    expect(tracker.calls).not.toContain(`removeStatus ${busy}`);
    tracker.running.delete(busy);
    expect((await d.discover()).created).toEqual([busy]);
  });

  it('skips an entry whose path is already used by a cached PV', async () => {
    const paths = await dirs(join(root, 'sc1'), 'mount1', 'mount2');
    await mounts(...paths);
    kube.put('persistentvolumes', {
      metadata: { name: 'other-pv', annotations: { 'pv.kubernetes.io/provisioned-by': PROVISIONER } },
      spec: { local: { path: '/mnt/host/sc1/mount1' }, storageClassName: 'sc2' },
    });
    await expect.poll(() => cache.get('other-pv')).toBeDefined();
    const d = discoverer(config({ sc1: cls('sc1') }));
    const r = await d.discover();
    expect(r).toMatchObject({ ready: true, created: [generatePVName('mount2', 'test-node', 'sc1')], errors: [] });
    expect(kube.count('create', 'persistentvolumes')).toBe(1);
    expect(events.events).toEqual([]);
  });

  it('applies namePattern (comma-separated globs)', async () => {
    const paths = await dirs(join(root, 'sc1'), 'nvme0', 'nvme1', 'sda', 'sdb', 'other');
    await mounts(...paths);
    const r = await discoverer(config({ sc1: cls('sc1', { namePattern: 'nvme*,sdb' }) })).discover();
    expect(r.created).toEqual(['nvme0', 'nvme1', 'sdb'].map((n) => generatePVName(n, 'test-node', 'sc1')));
  });

  it('a malformed namePattern is an error for that class only', async () => {
    const [a] = await dirs(join(root, 'sc1'), 'mount1');
    const [b] = await dirs(join(root, 'sc2'), 'mount1');
    await mounts(a!, b!);
    const r = await discoverer(config({ sc1: cls('sc1', { namePattern: 'mount[' }), sc2: cls('sc2') })).discover();
    expect(r.ready).toBe(false);
    expect(r.errors[0]).toContain('syntax error in pattern');
    expect(r.created).toEqual([generatePVName('mount1', 'test-node', 'sc2')]);
  });

  it('a missing discovery dir means no volumes (warning, still ready); an unreadable one is an error', async () => {
    const d = discoverer(config({ sc1: cls('sc1') }));
    const r = await d.discover();
    expect(r).toMatchObject({ ready: true, created: [], errors: [] });
    expect(r.warnings[0]).toContain(`mountDir "${join(root, 'sc1')}" of class "sc1" does not exist`);
    await writeFile(join(root, 'sc1'), 'not a dir');
    const r2 = await d.discover();
    expect(r2.ready).toBe(false);
    expect(r2.errors[0]).toContain('not a directory');
  });

  describe('a class whose mountDir the host cannot fill (one discovery root)', () => {
    // A container: overlay root, <root>/disks a hostPath mount with HostToContainer (master:N),
    // <root>/private a hostPath mount without propagation.
    const containerMounts = async (): Promise<void> => {
      const lines = [
        '1 0 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/l1',
        `2 1 8:1 /mnt/disks ${join(root, 'disks')} rw,relatime master:1 - ext4 /dev/sda1 rw`,
        `3 1 8:1 /mnt/private ${join(root, 'private')} rw,relatime - ext4 /dev/sda1 rw`,
        `4 2 0:60 / ${join(root, 'disks', 'sc1', 'mount1')} rw,relatime master:7 - tmpfs tmpfs rw`,
      ];
      await writeFile(mountinfo, `${lines.join('\n')}\n`);
    };
    const nodeWarnings = () => events.events.filter((e) => e.ref.kind === 'Node' && e.type === 'Warning');

    it('a missing mountDir outside every hostPath mount: one Warning on the Node naming the hostPath volume to add and the root to use', async () => {
      await dirs(join(root, 'disks', 'sc1'), 'mount1');
      await containerMounts();
      const cfg = config({ sc1: cls('sc1', { mountDir: join(root, 'disks', 'sc1') }), fast: cls('fast') });
      classes.m.set('fast', sc('fast'));
      const d = discoverer(cfg);
      const r = await d.discover();
      expect(r).toMatchObject({ ready: true, errors: [], created: [generatePVName('mount1', 'test-node', 'sc1')] });
      const msg =
        `mountDir "${join(root, 'fast')}" of class "fast" does not exist in the container; add a hostPath volume for hostDir "/mnt/host/fast" to the DaemonSet, ` +
        `mounted at "${join(root, 'fast')}" with mountPropagation HostToContainer, or put the class under "${join(root, 'disks')}" ` +
        `(hostDir and mountDir "${join(root, 'disks', 'fast')}": a new directory there needs no DaemonSet change)`;
      expect(r.warnings).toEqual([msg]);
      expect(nodeWarnings()).toEqual([{ ref: expect.objectContaining({ kind: 'Node', name: 'test-node' }), type: 'Warning', reason: 'DiscoveryFailed', message: msg }]);
      // Once per appearance, not per pass.
      await d.discover();
      expect(nodeWarnings()).toHaveLength(1);
    });

    it('a missing mountDir under a hostPath mount: create the directory on the host', async () => {
      await mkdir(join(root, 'disks'), { recursive: true });
      await containerMounts();
      classes.m.set('fast', sc('fast'));
      const r = await discoverer(config({ fast: cls('fast', { hostDir: '/mnt/disks/fast', mountDir: join(root, 'disks', 'fast') }) })).discover();
      expect(r.warnings).toEqual([`mountDir "${join(root, 'disks', 'fast')}" of class "fast" does not exist; create hostDir "/mnt/disks/fast" on the host (it is under the mount "${join(root, 'disks')}")`]);
      expect(nodeWarnings()).toHaveLength(1);
    });

    it("a mountDir on the container's own root filesystem: Warning, the volumes there are not the host's", async () => {
      await dirs(join(root, 'fast'), 'vol1');
      await containerMounts();
      classes.m.set('fast', sc('fast'));
      const d = discoverer(config({ fast: cls('fast') }));
      const r = await d.discover();
      expect(r.ready).toBe(true);
      expect(r.warnings[0]).toBe(
        `mountDir "${join(root, 'fast')}" of class "fast" is on the container's own root filesystem (overlay), not on a hostPath mount: volumes under hostDir "/mnt/host/fast" on the host are not seen; ` +
          `add a hostPath volume for hostDir "/mnt/host/fast" to the DaemonSet, mounted at "${join(root, 'fast')}" with mountPropagation HostToContainer, or put the class under a directory the DaemonSet already mounts from the host`,
      );
      expect(nodeWarnings().map((e) => e.reason)).toEqual(['DiscoveryFailed', 'VolumeNotDiscovered']); // and vol1 is no mount point
      await d.discover();
      expect(nodeWarnings()).toHaveLength(2);
    });

    it('a mountDir on a hostPath mount without propagation: Warning naming mountPropagation HostToContainer', async () => {
      await mkdir(join(root, 'private', 'fast'), { recursive: true });
      await containerMounts();
      classes.m.set('fast', sc('fast'));
      const r = await discoverer(config({ fast: cls('fast', { mountDir: join(root, 'private', 'fast') }) })).discover();
      expect(r.warnings).toEqual([
        `mountDir "${join(root, 'private', 'fast')}" of class "fast" is on the mount "${join(root, 'private')}", which does not receive the host's mounts: ` +
          `volumes mounted on the host after the pod started are not seen; set mountPropagation HostToContainer on the volumeMount at "${join(root, 'private')}"`,
      ]);
    });

    it('classes under a HostToContainer root, and any class on a host (not a container): no warning', async () => {
      await dirs(join(root, 'disks', 'sc1'), 'mount1');
      await containerMounts();
      const r = await discoverer(config({ sc1: cls('sc1', { mountDir: join(root, 'disks', 'sc1') }) })).discover();
      expect(r).toMatchObject({ ready: true, warnings: [], created: [generatePVName('mount1', 'test-node', 'sc1')] });
      // On a host: an ext4 root, private mounts (no propagation tags): nothing to report.
      const [m] = await dirs(join(root, 'sc2'), 'mount1');
      await mounts(m!);
      const r2 = await discoverer(config({ sc2: cls('sc2') })).discover();
      expect(r2).toMatchObject({ ready: true, warnings: [] });
      expect(nodeWarnings()).toEqual([]);
    });
  });

  it('a failed create is an error, retried after a backoff instead of every pass', async () => {
    const [a] = await dirs(join(root, 'sc1'), 'mount1');
    await mounts(a!);
    kube.failNext('create', 'persistentvolumes', new KubeError(500, 'InternalError', 'etcd is sad'));
    const d = discoverer(config({ sc1: cls('sc1') }), { createBackoff: { initialMs: 10_000, maxMs: 60_000, jitter: 0 } });
    const name = generatePVName('mount1', 'test-node', 'sc1');
    const r1 = await d.discover();
    expect(r1.ready).toBe(false);
    expect(r1.errors).toEqual([`error creating PV "${name}" for volume at "/mnt/host/sc1/mount1": etcd is sad`]);
    expect(events.events.map((e) => e.reason)).toEqual(['DiscoveryFailed']);
    expect((await metrics.apiserverRequestsFailed.get()).values[0]?.value).toBe(1);

    now += 5_000;
    const r2 = await d.discover();
    expect(r2.ready).toBe(false);
    expect(kube.count('create', 'persistentvolumes')).toBe(1);
    expect(events.events).toHaveLength(1);

    now += 6_000;
    const r3 = await d.discover();
    expect(r3).toMatchObject({ ready: true, created: [name] });
    expect(kube.count('create', 'persistentvolumes')).toBe(2);
  });

  it('AlreadyExists for a PV that is not ours: one Warning naming the conflict, not re-sent every pass', async () => {
    const [a] = await dirs(join(root, 'sc1'), 'mount1');
    await mounts(a!);
    const name = generatePVName('mount1', 'test-node', 'sc1');
    kube.put('persistentvolumes', { metadata: { name, annotations: { 'pv.kubernetes.io/provisioned-by': 'someone-else' } }, spec: {} });
    const d = discoverer(config({ sc1: cls('sc1') }));
    const r = await d.discover();
    expect(r).toMatchObject({ ready: true, created: [], errors: [] });
    expect(kube.count('create', 'persistentvolumes')).toBe(1);
    await d.discover();
    expect(kube.count('create', 'persistentvolumes')).toBe(1);
    expect(events.events).toEqual([
      expect.objectContaining({
        type: 'Warning',
        reason: 'PVNameTaken',
        message: expect.stringContaining(`PV name "${name}" for volume at "/mnt/host/sc1/mount1" is taken by a PV this node did not make for that volume (provisioned-by "someone-else"`),
      }),
    ]);
    expect(r.warnings).toHaveLength(1);
  });

  /** mount1 of sc1 with its PV (ours, same path) already made, labelled for another node. */
  async function ourPVLabelledElsewhere(): Promise<string> {
    const [a] = await dirs(join(root, 'sc1'), 'mount1');
    await mounts(a!);
    const name = generatePVName('mount1', 'test-node', 'sc1');
    kube.put('persistentvolumes', {
      metadata: { name, labels: { 'local-static-provisioner/node': 'elsewhere' }, annotations: { 'pv.kubernetes.io/provisioned-by': PROVISIONER } },
      spec: { local: { path: '/mnt/host/sc1/mount1' }, storageClassName: 'sc1' },
    });
    return name;
  }

  it('issue 17, 5: AlreadyExists for our own PV labelled for another node (--pv-node-label): GET, relabel to this node, no create again', async () => {
    const name = await ourPVLabelledElsewhere();
    // The labelled informer does not see it: a cache over a silent informer.
    const hidden = new PVCache(testCacheEnv({ name: 'test-node', uid: 'node-uid-1' }), { informer: silentInformer });
    const d = discoverer(config({ sc1: cls('sc1') }), { pvCache: hidden, extraLabels: { 'local-static-provisioner/node': 'test-node' } });
    const r = await d.discover();
    expect(r).toMatchObject({ ready: true, created: [], errors: [], warnings: [] });
    expect(kube.object('persistentvolumes', name)?.metadata?.labels).toEqual({ 'local-static-provisioner/node': 'test-node' });
    expect(kube.requests.filter((q) => q.name === name).map((q) => q.verb)).toEqual(['create', 'get', 'patch']);
    now += 60 * 60_000; // long after any backoff
    await d.discover();
    await d.discover();
    expect(kube.count('create', 'persistentvolumes')).toBe(1);
    expect(events.events).toEqual([]);
  });

  it('issue 17, 5: our PV labelled elsewhere whose relabel is forbidden: a Warning naming the label and the fix, create retried only after the backoff', async () => {
    const name = await ourPVLabelledElsewhere();
    kube.failNext('patch', 'persistentvolumes', new KubeError(403, 'Forbidden', 'forbidden'));
    const hidden = new PVCache(testCacheEnv({ name: 'test-node', uid: 'node-uid-1' }), { informer: silentInformer });
    const d = discoverer(config({ sc1: cls('sc1') }), { pvCache: hidden, extraLabels: { 'local-static-provisioner/node': 'test-node' }, createBackoff: { initialMs: 10_000, maxMs: 60_000, jitter: 0 } });
    const r = await d.discover();
    expect(r.warnings).toEqual([
      `PV "${name}" of this node for volume at "/mnt/host/sc1/mount1" carries label local-static-provisioner/node=elsewhere, so this node does not see it (a release is not cleaned); relabelling it local-static-provisioner/node=test-node failed: forbidden (grant patch on persistentvolumes: deployment component pv-node-label)`,
    ]);
    expect(events.events.map((e) => e.reason)).toEqual(['PVNameTaken']);
    now += 5_000;
    expect((await d.discover()).warnings).toHaveLength(1);
    expect(kube.count('create', 'persistentvolumes')).toBe(1);
    expect(events.events).toHaveLength(1);
  });

  it('a directory under a Block class is an error, once as an Event', async () => {
    const [a] = await dirs(join(root, 'sc2'), 'dir1');
    await mounts(a!);
    const d = discoverer(config({ sc2: cls('sc2', { volumeMode: 'Block' }) }));
    const r = await d.discover();
    expect(r.ready).toBe(false);
    expect(r.errors).toEqual([`path "${a!}" of filesystem mode cannot be used to create block volume`]);
    await d.discover();
    expect(events.events).toHaveLength(1);
    expect(pvs()).toHaveLength(0);
  });

  it('reports a cached Block PV whose path is now a directory, on the PV', async () => {
    const [a] = await dirs(join(root, 'sc2'), 'dev1');
    await mounts(a!);
    const name = generatePVName('dev1', 'test-node', 'sc2');
    kube.put('persistentvolumes', {
      metadata: { name, annotations: { 'pv.kubernetes.io/provisioned-by': PROVISIONER } },
      spec: { local: { path: '/mnt/host/sc2/dev1' }, volumeMode: 'Block', storageClassName: 'sc2' },
    });
    await expect.poll(() => cache.get(name)).toBeDefined();
    const r = await discoverer(config({ sc2: cls('sc2', { volumeMode: 'Block' }) })).discover();
    expect(r.errors).toEqual([`incorrect Volume Mode: PV "${name}" requires block mode but path "${a!}" was in fs mode`]);
    expect(events.events).toEqual([
      expect.objectContaining({ reason: 'VolumeFailedDelete', ref: expect.objectContaining({ kind: 'PersistentVolume', name }) }),
    ]);
  });

  const loop = ['/dev/loop0', '/dev/loop1'].find((p) => existsSync(p));
  it.skipIf(!loop)('a block device (symlink) becomes a Block PV sized from sysfs; under a Filesystem class it is allowed', async () => {
    const dev = loop!;
    const { major, minor } = deviceNumbers((await stat(dev, { bigint: true })).rdev);
    const sys = join(root, 'sys');
    await mkdir(join(sys, 'dev', 'block', `${major}:${minor}`), { recursive: true });
    await writeFile(join(sys, 'dev', 'block', `${major}:${minor}`, 'size'), `${(20 * 1024 * 1024) / 512}\n`);
    await mkdir(join(root, 'blk'));
    await mkdir(join(root, 'fsblk'));
    await symlink(dev, join(root, 'blk', 'disk1'));
    await symlink(dev, join(root, 'fsblk', 'disk2'));
    classes.m.set('blk', sc('blk', { mountOptions: ['discard'] }));
    classes.m.set('fsblk', sc('fsblk'));
    const d = discoverer(
      config(
        { blk: cls('blk', { volumeMode: 'Block' }), fsblk: cls('fsblk', { fsType: 'ext4' }) },
        { useJobForCleaning: true },
      ),
      // The real device may be in use by another test on this host: its O_EXCL probe is stubbed here (see the in-use tests).
      { sysRoot: sys, blockUsage: { heldExclusively: () => Promise.resolve(false) } },
    );
    const r = await d.discover();
    expect(r).toMatchObject({ ready: true, errors: [] });
    const blockPV = kube.object('persistentvolumes', generatePVName('disk1', 'test-node', 'blk'))!;
    expect(blockPV.spec).toMatchObject({ capacity: { storage: '20Mi' }, volumeMode: 'Block', local: { path: '/mnt/host/blk/disk1' } });
    const fsPV = kube.object('persistentvolumes', generatePVName('disk2', 'test-node', 'fsblk'))!;
    expect(fsPV.spec).toMatchObject({ volumeMode: 'Filesystem', local: { path: '/mnt/host/fsblk/disk2', fsType: 'ext4' } });
    // Discovery asks the cleanup tracker (in-process cleans and Jobs) before creating either PV.
    expect(tracker.calls).toContain(`inProgress ${generatePVName('disk1', 'test-node', 'blk')}`);
    expect(tracker.calls).toContain(`inProgress ${generatePVName('disk2', 'test-node', 'fsblk')}`);
  });

  it('owner reference and alpha annotation follow the config', async () => {
    const [a] = await dirs(join(root, 'sc1'), 'mount1');
    await mounts(a!);
    await discoverer(config({ sc1: cls('sc1') }, { setPVOwnerRef: true, useAlphaAPI: true })).discover();
    const pv = pvs()[0]!;
    expect(pv.metadata?.ownerReferences).toEqual([{ apiVersion: 'v1', kind: 'Node', name: 'test-node', uid: 'node-uid-1' }]);
    expect(pv.metadata?.annotations?.['volume.alpha.kubernetes.io/node-affinity']).toContain('test-node-host');
    expect(pv.spec?.nodeAffinity).toBeUndefined();
  });

  it('extraLabels (--pv-node-label) are added to the created PVs and win over labelsForPV; without them the labels are unchanged', async () => {
    const [a, b] = await dirs(join(root, 'sc1'), 'mount1', 'mount2');
    await mounts(a!);
    const cfg = config({ sc1: cls('sc1') }, { labelsForPV: { 'local-static-provisioner/node': 'forged', app: 'x' } });
    await discoverer(cfg, { extraLabels: { 'local-static-provisioner/node': 'test-node' } }).discover();
    expect(pvs()[0]?.metadata?.labels).toEqual({ app: 'x', 'local-static-provisioner/node': 'test-node', zone: 'z1' });
    expect(Object.keys(pvs()[0]?.metadata?.labels ?? {})).toEqual(['app', 'local-static-provisioner/node', 'zone']); // sorted, as Go marshals
    await mounts(a!, b!);
    await discoverer(config({ sc1: cls('sc1') })).discover();
    expect(kube.object('persistentvolumes', generatePVName('mount2', 'test-node', 'sc1'))?.metadata?.labels).toEqual({ zone: 'z1' });
  });

  it('a node without the hostname label is reported on every pass, never thrown', async () => {
    const d = discoverer(config({ sc1: cls('sc1') }), { node: { metadata: { name: 'n', uid: 'u', labels: {} } } });
    const r = await d.discover();
    expect(r.ready).toBe(false);
    expect(r.errors[0]).toContain('Node does not have expected label kubernetes.io/hostname');
    expect((await d.discover()).ready).toBe(false);
    expect(events.events).toHaveLength(1);
  });

  it('stops between volumes when the signal aborts', async () => {
    const paths = await dirs(join(root, 'sc1'), 'a', 'b', 'c');
    await mounts(...paths);
    const ac = new AbortController();
    let n = 0;
    const d = discoverer(config({ sc1: cls('sc1') }), {
      signal: ac.signal,
      cleanupTracker: {
        inProgress: () => false,
        removeStatus: () => {
          if (++n === 1) ac.abort();
        },
      },
    });
    const r = await d.discover();
    expect(r.ready).toBe(false);
    expect(r.created).toHaveLength(1);
  });

  it('concurrent discover() calls share one pass', async () => {
    const [a] = await dirs(join(root, 'sc1'), 'mount1');
    await mounts(a!);
    const d = discoverer(config({ sc1: cls('sc1') }));
    const [r1, r2] = await Promise.all([d.discover(), d.discover()]);
    expect(r1).toBe(r2);
    expect(kube.count('create', 'persistentvolumes')).toBe(1);
  });

  it('an unreadable mount table is an error for the classes that need it', async () => {
    const [a] = await dirs(join(root, 'sc1'), 'mount1');
    expect(a).toBeDefined();
    const r = await discoverer(config({ sc1: cls('sc1') }), { mountInfoPath: join(root, 'no-mountinfo') }).discover();
    expect(r.ready).toBe(false);
    expect(r.errors[0]).toMatch(/cannot read the mount table .*no-mountinfo/);
  });
});

// Issue 17, point 3(b): nothing inside another volume, no symlink a tenant could have written.
describe('Discoverer: entries inside a volume (issue 17, 3b)', () => {
  /** A mountinfo line: id, MAJ:MIN, root of the mount, mount point. */
  const line = (id: number, devno: string, mroot: string, point: string, fs = 'tmpfs', src = 'tmpfs'): string =>
    `${id} 22 ${devno} ${mroot} ${point.replace(/ /g, '\\040')} rw,relatime - ${fs} ${src} rw`;
  const table = async (...lines: string[]): Promise<void> => {
    await writeFile(mountinfo, `${['22 1 8:1 / / rw - ext4 /dev/sda1 rw', ...lines].join('\n')}\n`);
  };
  const refusals = () => events.events.filter((e) => e.reason === 'VolumeDiscoveryRefused');

  beforeEach(() => {
    classes.m.set('a', sc('a'));
    classes.m.set('b', sc('b'));
  });

  it("nested classes (validation bypassed): class b's mountDir inside a's volume vol1; b's mount and a tenant's symlink get no PV, a Warning each", async () => {
    const vol1 = join(root, 'a', 'vol1');
    const [sub] = await dirs(vol1, 'sub');
    await mkdir(join(root, 'outside'));
    await symlink(join(root, 'outside'), join(vol1, 'evil')); // what `ln -s /dev/<disk> evil` in the volume does
    await table(line(100, '0:50', '/', vol1), line(101, '0:51', '/', sub!), line(102, '8:1', '/outside', join(vol1, 'evil')));
    const cfg = config({ a: cls('a'), b: cls('b', { hostDir: '/mnt/host/a/vol1', mountDir: vol1 }) });
    const d = discoverer(cfg);
    const r = await d.discover();
    expect(r.created).toEqual([generatePVName('vol1', 'test-node', 'a')]);
    expect(pvs().map((p) => p.spec?.local?.path)).toEqual(['/mnt/host/a/vol1']);
    expect(refusals().map((e) => e.message)).toEqual([
      `not creating a PV for "${join(vol1, 'evil')}" (class "b", host path "/mnt/host/a/vol1/evil"): its discovery dir (mountDir "${vol1}") is not trusted: it lies inside the mountDir "${join(root, 'a')}" of another class, where tenants' volumes live`,
      `not creating a PV for "${sub!}" (class "b", host path "/mnt/host/a/vol1/sub"): its discovery dir (mountDir "${vol1}") is not trusted: it lies inside the mountDir "${join(root, 'a')}" of another class, where tenants' volumes live`,
    ]);
    expect(r.ready).toBe(true);
    // Rate-limited like the other discovery problems: once per appearance.
    await d.discover();
    expect(refusals()).toHaveLength(2);
  });

  it("a bind mount puts class b's discovery dir inside a's volume (no path says so): b's entries get no PV", async () => {
    const [vol1] = await dirs(join(root, 'a'), 'vol1');
    const bdir = join(root, 'b');
    const [x] = await dirs(bdir, 'x');
    await mkdir(join(root, 'outside'));
    await symlink(join(root, 'outside'), join(bdir, 'evil'));
    // <root>/b is a bind mount of vol1/sub (same tmpfs 0:50, root /sub); x is a tmpfs mounted there.
    await table(line(100, '0:50', '/', vol1!), line(101, '0:50', '/sub', bdir), line(102, '0:60', '/', x!), line(103, '8:1', '/outside', join(bdir, 'evil')));
    const r = await discoverer(config({ a: cls('a'), b: cls('b') })).discover();
    expect(r.created).toEqual([generatePVName('vol1', 'test-node', 'a')]);
    expect(refusals()).toHaveLength(2);
    for (const e of refusals()) expect(e.message).toContain(`is not trusted: it lies inside the volume mounted at "${vol1!}" (same filesystem 0:50, under its root "/")`);
  });

  it("a symlink whose target lies inside another class's volume gets no PV; a link elsewhere does", async () => {
    const [vol1] = await dirs(join(root, 'a'), 'vol1');
    const [inner] = await dirs(vol1!, 'inner');
    await mkdir(join(root, 'b'));
    const [ok] = await dirs(root, 'ok');
    await symlink(inner!, join(root, 'b', 'into-vol1'));
    await symlink(ok!, join(root, 'b', 'fine'));
    await table(line(100, '0:50', '/', vol1!), line(101, '0:50', '/inner', join(root, 'b', 'into-vol1')), line(102, '8:1', '/ok', join(root, 'b', 'fine')));
    const r = await discoverer(config({ a: cls('a'), b: cls('b') })).discover();
    expect(r.created.sort()).toEqual([generatePVName('vol1', 'test-node', 'a'), generatePVName('fine', 'test-node', 'b')].sort());
    expect(refusals().map((e) => e.message)).toEqual([
      `not creating a PV for "${join(root, 'b', 'into-vol1')}" (class "b", host path "/mnt/host/b/into-vol1"): it is a symlink to "${inner!}", which lies inside the volume mounted at "${vol1!}"`,
    ]);
  });

  it("a mount of a directory inside another volume (bind of a/vol1/sub as b/y) gets no PV; bind mounts of one disk's directories (the upstream pattern) do", async () => {
    const [vol1] = await dirs(join(root, 'a'), 'vol1');
    const [y, d1, d2] = await dirs(join(root, 'b'), 'y', 'disk1', 'disk2');
    // disk1/disk2: bind mounts of /data/disk1, /data/disk2 of the root filesystem (8:1), like the discovery dirs themselves.
    await table(line(100, '0:50', '/', vol1!), line(101, '0:50', '/sub', y!), line(102, '8:1', '/data/disk1', d1!, 'ext4', '/dev/sda1'), line(103, '8:1', '/data/disk2', d2!, 'ext4', '/dev/sda1'));
    const r = await discoverer(config({ a: cls('a'), b: cls('b') })).discover();
    expect(r.created.sort()).toEqual(
      [generatePVName('vol1', 'test-node', 'a'), generatePVName('disk1', 'test-node', 'b'), generatePVName('disk2', 'test-node', 'b')].sort(),
    );
    expect(refusals().map((e) => e.message)).toEqual([
      `not creating a PV for "${y!}" (class "b", host path "/mnt/host/b/y"): it is a mount of "/sub" on 0:50, which lies inside the volume mounted at "${vol1!}" (0:50, root "/")`,
    ]);
  });

  it('the upstream recipe (`mount --bind /mnt/disks/volN /mnt/disks/volN` on one disk) is not nested: every volume gets its PV', async () => {
    const paths = await dirs(join(root, 'a'), 'vol1', 'vol2', 'vol3');
    await table(...paths.map((p, i) => line(100 + i, '8:1', p, p, 'ext4', '/dev/sda1')));
    const r = await discoverer(config({ a: cls('a') })).discover();
    expect(r.created.sort()).toEqual(['vol1', 'vol2', 'vol3'].map((v) => generatePVName(v, 'test-node', 'a')).sort());
    expect(refusals()).toEqual([]);
  });

  it('--dry-run-style result: a refused entry is listed with its reason among the warnings', async () => {
    const vol1 = join(root, 'a', 'vol1');
    const [sub] = await dirs(vol1, 'sub');
    await table(line(100, '0:50', '/', vol1), line(101, '0:51', '/', sub!));
    const r = await discoverer(config({ a: cls('a'), b: cls('b', { mountDir: vol1 }) })).discover();
    expect(r.warnings.some((w) => w.startsWith(`not creating a PV for "${sub!}"`) && w.includes('is not trusted'))).toBe(true);
  });
});

// Issue 17, point 4: a block device in use gets no PV. Real device nodes (mknod) with made-up numbers, a
// sysfs tree laid out as the kernel's (dev/block/<MAJ:MIN> -> devices/.../<disk>[/<partition>]).
describe.skipIf(process.getuid?.() !== 0)('Discoverer: block devices in use (issue 17, 4)', () => {
  const MAJOR = 250;
  interface FakeDev {
    minor: number;
    size?: number;
    holders?: string[];
    parts?: Array<{ name: string; minor: number; holders?: string[] }>;
  }
  let excl: Set<string>;

  async function fakeDisk(name: string, d: FakeDev): Promise<string> {
    const sys = join(root, 'sys');
    const write = async (dir: string, minor: number, holders: string[] = [], partition = false): Promise<void> => {
      await mkdir(join(dir, 'holders'), { recursive: true });
      await writeFile(join(dir, 'dev'), `${MAJOR}:${minor}\n`);
      await writeFile(join(dir, 'size'), `${d.size ?? 2048}\n`);
      if (partition) await writeFile(join(dir, 'partition'), '1\n');
      for (const h of holders) await mkdir(join(dir, 'holders', h));
      await mkdir(join(sys, 'dev', 'block'), { recursive: true });
      await symlink(dir, join(sys, 'dev', 'block', `${MAJOR}:${minor}`));
    };
    const dir = join(sys, 'devices', 'virtual', 'block', name);
    await write(dir, d.minor, d.holders);
    for (const p of d.parts ?? []) await write(join(dir, p.name), p.minor, p.holders, true);
    await mkdir(join(root, 'nodes'), { recursive: true });
    const node = join(root, 'nodes', name);
    execFileSync('mknod', [node, 'b', String(MAJOR), String(d.minor)]);
    for (const p of d.parts ?? []) execFileSync('mknod', [join(root, 'nodes', p.name), 'b', String(MAJOR), String(p.minor)]);
    return node;
  }
  /** The entry: blk/<entry> -> by-id/<entry> -> nodes/<dev> (what users of the Go provisioner do with /dev/disk/by-id). */
  async function entry(name: string, target: string): Promise<void> {
    await mkdir(join(root, 'by-id'), { recursive: true });
    await mkdir(join(root, 'blk'), { recursive: true });
    await symlink(target, join(root, 'by-id', `ata-${name}`));
    await symlink(join(root, 'by-id', `ata-${name}`), join(root, 'blk', name));
  }
  const blockDiscoverer = (pvCache: PVIndex = cache) =>
    discoverer(config({ blk: cls('blk', { volumeMode: 'Block' }) }), {
      pvCache,
      sysRoot: join(root, 'sys'),
      blockUsage: {
        swapsPath: join(root, 'swaps'),
        kubeletRoot: '/var/lib/kubelet',
        heldExclusively: (p) =>
          realpath(p).then((r) => {
            if (r.endsWith('/nd11')) throw Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' });
            return excl.has(r);
          }),
      },
    });
  const inUse = () => events.events.filter((e) => e.reason === 'BlockDeviceInUse');

  beforeEach(async () => {
    excl = new Set();
    classes.m.set('blk', sc('blk'));
    await writeFile(join(root, 'swaps'), 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n');
  });

  it('mounted, partition mounted, holders, partition holders, swap, / and kubelet root, O_EXCL, 0 bytes: no PV, one Warning per device and reason; a free by-id device gets its PV', async () => {
    await entry('free', await fakeDisk('fd0', { minor: 0, parts: [{ name: 'fd0p1', minor: 1 }] }));
    await entry('mounted', await fakeDisk('md1', { minor: 10 }));
    await entry('part-mounted', await fakeDisk('md2', { minor: 20, parts: [{ name: 'md2p1', minor: 21 }] }));
    await entry('holders', await fakeDisk('hd3', { minor: 30, holders: ['dm-0'] }));
    await entry('part-holders', await fakeDisk('hd4', { minor: 40, parts: [{ name: 'hd4p1', minor: 41, holders: ['md127'] }] }));
    await entry('swap', await fakeDisk('zram5', { minor: 50 }));
    await entry('root', await fakeDisk('rd6', { minor: 60, parts: [{ name: 'rd6p1', minor: 61 }] }));
    await entry('kubelet', await fakeDisk('kd7', { minor: 70 }));
    await entry('excl', await fakeDisk('xd8', { minor: 80 }));
    await entry('empty', await fakeDisk('loop9', { minor: 90, size: 0 }));
    await fakeDisk('pd10', { minor: 100, holders: ['dm-3'], parts: [{ name: 'pd10p1', minor: 101 }] });
    await entry('part-of-held', join(root, 'nodes', 'pd10p1'));
    await entry('no-open', await fakeDisk('nd11', { minor: 110 }));
    excl.add(join(root, 'nodes', 'xd8'));
    await writeFile(join(root, 'swaps'), 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/dev/zram5                              partition\t8388604\t\t0\t\t100\n');
    await writeFile(
      mountinfo,
      [
        '22 1 8:1 / / rw - ext4 /dev/sda1 rw',
        `23 22 ${MAJOR}:61 / / rw - ext4 /dev/rd6p1 rw`,
        `30 23 ${MAJOR}:10 / /mnt/x rw - ext4 /dev/md1 rw`,
        `31 23 ${MAJOR}:21 / /mnt/y rw - xfs /dev/md2p1 rw`,
        `32 23 ${MAJOR}:70 / /var/lib/kubelet rw - ext4 /dev/kd7 rw`,
        '',
      ].join('\n'),
    );
    const d = blockDiscoverer();
    const r = await d.discover();
    expect(r.created).toEqual([generatePVName('free', 'test-node', 'blk')]);
    expect(r.ready).toBe(true);
    const got = inUse().map((e) => e.message.replace(/^not creating a PV for block device "[^"]*\/blk\/([^"]+)" \(class "blk", host path "[^"]+"\): it is in use /, '$1 '));
    expect(got.sort()).toEqual(
      [
        'empty (empty): device 250:90 has size 0 (an unattached loop device or an empty device)',
        'excl (exclusive-open): device 250:80 is opened exclusively (O_EXCL) by another process',
        'no-open (exclusive-open): device 250:110 could not be opened to check for an exclusive holder (permission denied)',
        'holders (holders): device 250:30 (hd3) is held by dm-0 (/sys/class/block/hd3/holders)',
        'kubelet (kubelet-device): device 250:70 (kd7) holds "/var/lib/kubelet"',
        'kubelet (mounted): device 250:70 (kd7) is mounted at "/var/lib/kubelet"',
        'mounted (mounted): device 250:10 (md1) is mounted at "/mnt/x"',
        'part-holders (holders): its partition 250:41 (hd4p1) is held by md127 (/sys/class/block/hd4p1/holders)',
        'part-mounted (mounted): its partition 250:21 (md2p1) is mounted at "/mnt/y"',
        'part-of-held (holders): its whole disk 250:100 (pd10) is held by dm-3 (/sys/class/block/pd10/holders)',
        'root (mounted): its partition 250:61 (rd6p1) is mounted at "/"',
        'root (root-device): its partition 250:61 (rd6p1) holds "/"',
        'swap (swap): device 250:50 (zram5) is active swap',
      ].sort(),
    );
    expect(inUse().every((e) => e.type === 'Warning' && e.ref.kind === 'Node')).toBe(true);
    // Rate-limited: nothing new on the next pass, no create either.
    const creates = kube.count('create', 'persistentvolumes');
    await d.discover();
    expect(inUse()).toHaveLength(13);
    expect(kube.count('create', 'persistentvolumes')).toBe(creates);
    // Freed (unmounted): the PV comes on the next pass.
    await writeFile(mountinfo, '22 1 8:1 / / rw - ext4 /dev/sda1 rw\n');
    expect((await d.discover()).created).toContain(generatePVName('mounted', 'test-node', 'blk'));
  });

  it('property: a device with any of mounted / partition mounted / holders / partition holders / swap / O_EXCL / size 0 is never given a PV; a free one always is', async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          mounted: fc.boolean(),
          partMounted: fc.boolean(),
          holders: fc.boolean(),
          partHolders: fc.boolean(),
          swap: fc.boolean(),
          excl: fc.boolean(),
          empty: fc.boolean(),
          partition: fc.boolean(),
        }),
        async (s) => {
          const i = n++;
          const name = `gd${i}`;
          const minor = 1000 + i * 2;
          const node = await fakeDisk(name, {
            minor,
            size: s.empty ? 0 : 4096,
            holders: s.holders ? ['dm-9'] : [],
            parts: s.partition ? [{ name: `${name}p1`, minor: minor + 1, holders: s.partHolders ? ['md9'] : [] }] : [],
          });
          const e = `e${i}`;
          await rm(join(root, 'blk'), { recursive: true, force: true });
          await entry(e, node);
          excl = new Set(s.excl ? [node] : []);
          const lines = ['22 1 8:1 / / rw - ext4 /dev/sda1 rw'];
          if (s.mounted) lines.push(`30 22 ${MAJOR}:${minor} / /mnt/m rw - ext4 /dev/x rw`);
          if (s.partMounted && s.partition) lines.push(`31 22 ${MAJOR}:${minor + 1} / /mnt/p rw - ext4 /dev/y rw`);
          await writeFile(mountinfo, `${lines.join('\n')}\n`);
          await writeFile(join(root, 'swaps'), `Filename Type Size Used Priority\n${s.swap ? `/dev/${name} partition 100 0 -2\n` : ''}`);
          kube = new FakeKube();
          const r = await blockDiscoverer(new PVCache(testCacheEnv({ name: 'test-node', uid: 'node-uid-1' }), { informer: silentInformer })).discover();
          const busy = s.mounted || (s.partition && (s.partMounted || s.partHolders)) || s.holders || s.swap || s.excl || s.empty;
          expect(r.created).toEqual(busy ? [] : [generatePVName(e, 'test-node', 'blk')]);
          expect(kube.count('create', 'persistentvolumes')).toBe(busy ? 0 : 1);
        },
      ),
      { numRuns: 40 },
    );
  }, 60_000);
});
