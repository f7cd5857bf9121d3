// Issue 17, points 1, 2 and 3(c), end to end on the real control plane (the
// real PV binder and Job controller), real tmpfs mounts and loop devices:
// - claimRef game: `kubectl patch pv <bound-pv> -p '{"spec":{"claimRef":{"uid":"<random>"}}}'`
//   makes the binder release a PV whose PVC still uses it: refused
//   (claim_still_exists), Events on the PV and the PVC, data intact; in-process
//   and with cleanup Jobs;
// - volume identity: a Filesystem PV whose path became a symlink to a block
//   device, and a Block PV whose symlink now points to another loop device:
//   refused (identity_mismatch), the other device untouched;
// - a cleanup Job made before a refusal is withdrawn: its pod never runs.
// Plus the cost of the claim lookup (API requests and latency per check).
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1Job, V1PersistentVolume, V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { adminClients, apiStatus, uniqueName, waitFor } from './harness/kube.ts';
import { startNodeAgent, type NodeAgent } from './harness/node-agent.ts';
import { createDeleterCluster, keepLogs, onFailureRunner, pvEvents, readAt, reapPods, startDaemon, writeAt } from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { bindPV, configFiles, eventsAbout, hostJobRunner, logsWith, metric, readPV, waitPV } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';
import { createKubeClient, loadKubeConfig } from '../src/kube/client.ts';
import { CleanGuard } from '../src/deleter/guard.ts';
import { Metrics } from '../src/metrics/metrics.ts';
import { silentLogger } from '../src/util/log.ts';
import type { ClassConfig } from '../src/config/types.ts';

const { core, batch, storage } = adminClients();
const M = 'local_volume_provisioner_';
const JOB_NS = 'kube-system';
const ANN_IDENTITY = 'local-static-provisioner/volume-identity';
const DD_ZERO = join(import.meta.dirname, '..', 'deployment', 'scripts', 'dd_zero.sh');

/** Files with known content in a volume directory; returns a snapshot to compare with later. */
function fill(vol: string): string {
  mkdirSync(join(vol, 'sub'), { recursive: true });
  writeFileSync(join(vol, 'data.txt'), `data of ${vol}`);
  writeFileSync(join(vol, 'sub', 'deep.txt'), 'deep');
  return snapshot(vol);
}
const snapshot = (vol: string): string =>
  JSON.stringify([readdirSync(vol).sort(), ...['data.txt', join('sub', 'deep.txt')].map((f) => (existsSync(join(vol, f)) ? readFileSync(join(vol, f), 'utf8') : '<missing>'))]);

/** The claimRef game: a merge patch of claimRef.uid only, as `kubectl patch pv --type merge` sends it. */
async function patchClaimUid(pv: V1PersistentVolume): Promise<void> {
  const { PatchStrategy, setHeaderOptions } = await import('@kubernetes/client-node');
  await core.patchPersistentVolume(
    { name: pv.metadata?.name ?? '', body: { spec: { claimRef: { uid: randomUUID() } } } },
    setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
  );
}

const waitReleased = (name: string, uid: string): Promise<unknown> =>
  waitFor(
    async () => {
      const pv = await readPV(core, name);
      return pv === undefined || pv.metadata?.uid !== uid || pv.status?.phase === 'Released';
    },
    { what: `PV ${name} to be Released`, timeoutMs: 60_000 },
  );

/**
 * Waits for a VolumeCleanRefused Event on the PV (matching `match`), or for the damage a daemon
 * without the check does (`damaged()`, or the PV deleted); returns the Event message ('' on damage).
 */
async function waitRefusal(pv: V1PersistentVolume, match: (m: string) => boolean, damaged: () => boolean): Promise<string> {
  const ev = await waitFor(
    async () => {
      const found = (await pvEvents(core, pv)).find((e) => e.reason === 'VolumeCleanRefused' && match(e.message ?? ''));
      if (found) return found.message ?? '';
      const gone = (await readPV(core, pv.metadata?.name ?? ''))?.metadata?.uid !== pv.metadata?.uid;
      return gone || damaged() ? '<damage: volume cleaned or PV deleted>' : undefined;
    },
    { what: `a VolumeCleanRefused event on PV ${pv.metadata?.name ?? ''}`, timeoutMs: 90_000 },
  );
  expect(ev).not.toBe('<damage: volume cleaned or PV deleted>');
  return ev;
}

/** The claimRef game on a Bound PV with data; checks the refusal, the PV and PVC Events and the data. */
async function claimRefGame(prov: ProvisionerProcess, ns: string, pv: V1PersistentVolume, vol: string): Promise<void> {
  const claim = await bindPV(core, pv, ns);
  const before = fill(vol);
  await patchClaimUid(pv);
  await waitReleased(pv.metadata?.name ?? '', pv.metadata?.uid ?? '');
  const msg = await waitRefusal(pv, (m) => m.includes('still names it in spec.volumeName'), () => snapshot(vol) !== before);
  expect(msg).toContain(`PVC "${ns}/${claim}"`);
  expect(snapshot(vol)).toBe(before);
  const still = await readPV(core, pv.metadata?.name ?? '');
  expect(still?.metadata?.uid).toBe(pv.metadata?.uid);
  expect(still?.status?.phase).toBe('Released');
  const pvc = await core.readNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });
  expect(pvc.spec?.volumeName).toBe(pv.metadata?.name);
  // The binder may mark the claim Lost (its PV's claimRef no longer points back); it still names the PV.
  expect(['Bound', 'Lost']).toContain(pvc.status?.phase);
  const onPvc = await waitFor(async () => (await eventsAbout(core, ns, 'PersistentVolumeClaim', claim)).find((e) => e.reason === 'VolumeCleanRefused'), {
    what: `a VolumeCleanRefused event on PVC ${ns}/${claim}`,
  });
  expect(onPvc.type).toBe('Warning');
  expect(await metric(prov, `${M}clean_refused_total`, { reason: 'claim_still_exists' })).toBeGreaterThanOrEqual(1);
  expect(logsWith(prov, `Start cleanup for pv ${pv.metadata?.name ?? ''}`)).toEqual([]);
}

describe.skipIf(!isRoot())('deleter guard, in-process: claimRef game and volume identity', () => {
  const host = new HostFixtures('lsp-guard-');
  const node = uniqueName('guard-node');
  const ns = uniqueName('guard-ns');
  const cls = { fs: uniqueName('guard-fs'), blk: uniqueName('guard-blk') };
  let prov: ProvisionerProcess | undefined;
  let fsDir = '';
  let blkDir = '';
  const loops: Record<string, string> = {};
  const name = (entry: string, c: string): string => generatePVName(entry, node, c);

  beforeAll(async () => {
    await createDeleterCluster(core, storage, { node, ns, classes: Object.values(cls) });
    fsDir = host.mkdir('fs');
    for (const v of ['claim', 'ident']) host.tmpfs(8, 'fs', v);
    blkDir = host.mkdir('blk');
    for (const d of ['a', 'b', 'other']) loops[d] = host.loopDevice(4, `disk-${d}`);
    host.symlink(loops['a']!, 'blk', 'disk');
    const files = configFiles({
      useJobForCleaning: false,
      classes: {
        // A block cleaner that really zeroes: a daemon without the identity check would wipe the other device.
        [cls.fs]: { hostDir: '/mnt/host/fs', mountDir: fsDir, blockCleanerCommand: [DD_ZERO, '1'] },
        [cls.blk]: { hostDir: '/mnt/host/blk', mountDir: blkDir, volumeMode: 'Block', blockCleanerCommand: [DD_ZERO, '1'] },
      },
    });
    prov = await startDaemon(host, { nodeName: node, files });
  });

  afterAll(async () => {
    await prov?.stop();
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    keepLogs(host, node, ['provisioner.log']);
    host.cleanup();
  });

  it('discovery records the volume identity: mount for a mount point, block:<maj>:<min> for a device', async () => {
    const fs = await waitPV(core, name('claim', cls.fs));
    expect(fs.metadata?.annotations?.[ANN_IDENTITY]).toBe('mount');
    const blk = await waitPV(core, name('disk', cls.blk));
    expect(blk.metadata?.annotations?.[ANN_IDENTITY]).toMatch(/^block:7:\d+$/);
  });

  it('claimRef game, in-process: not cleaned, refused, Events on the PV and the PVC, the PVC still names the PV, data intact', async () => {
    const pv = await waitPV(core, name('claim', cls.fs));
    await claimRefGame(prov!, ns, pv, join(fsDir, 'claim'));
  });

  it('a Filesystem PV whose path became a symlink to a block device: refused (identity_mismatch), the device untouched', async () => {
    const pv = await waitPV(core, name('ident', cls.fs));
    const claim = await bindPV(core, pv, ns);
    const marker = randomBytes(4096);
    writeAt(loops['b']!, 0, marker);
    // The mount goes, and the entry becomes a symlink to another disk (e.g. a tenant's or an admin's mistake).
    host.unmount(join(fsDir, 'ident'));
    rmdirSync(join(fsDir, 'ident'));
    symlinkSync(loops['b']!, join(fsDir, 'ident'));
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });
    await waitReleased(pv.metadata?.name ?? '', pv.metadata?.uid ?? '');
    const msg = await waitRefusal(pv, (m) => m.includes('it was discovered as "mount"'), () => !readAt(loops['b']!, 0, 4096).equals(marker));
    expect(msg).toContain(`"${join(fsDir, 'ident')}" now resolves to block device 7:`);
    expect(readAt(loops['b']!, 0, 4096).equals(marker)).toBe(true);
    expect((await readPV(core, pv.metadata?.name ?? ''))?.metadata?.uid).toBe(pv.metadata?.uid);
    expect(await metric(prov!, `${M}clean_refused_total`, { reason: 'identity_mismatch' })).toBeGreaterThanOrEqual(1);
  });

  it('a Block PV whose symlink now points to another loop device: refused (identity_mismatch), that device untouched', async () => {
    const pv = await waitPV(core, name('disk', cls.blk));
    const claim = await bindPV(core, pv, ns);
    const marker = randomBytes(4096);
    writeAt(loops['other']!, 0, marker);
    rmSync(join(blkDir, 'disk'));
    symlinkSync(loops['other']!, join(blkDir, 'disk'));
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });
    await waitReleased(pv.metadata?.name ?? '', pv.metadata?.uid ?? '');
    const msg = await waitRefusal(pv, (m) => m.includes(`it was discovered as "${pv.metadata?.annotations?.[ANN_IDENTITY] ?? ''}"`), () => !readAt(loops['other']!, 0, 4096).equals(marker));
    expect(msg).toContain('now resolves to block device 7:');
    expect(readAt(loops['other']!, 0, 4096).equals(marker)).toBe(true);
    expect((await readPV(core, pv.metadata?.name ?? ''))?.metadata?.uid).toBe(pv.metadata?.uid);
  });

  it('cost of the claim lookup: API requests and latency per check, against the real API server', async () => {
    const kube = createKubeClient(loadKubeConfig({ KUBECONFIG: inject('provisionerKubeconfig') }), { qps: 1000, burst: 1000 });
    const cls1: ClassConfig = { hostDir: '/mnt/host/fs', mountDir: fsDir, blockCleanerCommand: [], volumeMode: 'Filesystem', namePattern: '*' };
    const pv: V1PersistentVolume = {
      metadata: { name: name('bench', cls.fs), uid: randomUUID() },
      spec: { storageClassName: cls.fs, local: { path: '/mnt/host/fs/bench' }, claimRef: { namespace: ns, name: 'gone', uid: randomUUID() } },
    };
    const guard = new CleanGuard(
      {
        config: { storageClassMap: { [cls.fs]: cls1 } } as never,
        lookupClass: (c) => (c === cls.fs ? cls1 : undefined),
        node: { metadata: { name: node } },
        nodeId: { name: node, uid: '' },
        provisionerName: '',
        namespace: JOB_NS,
        jobImage: '',
        kube,
        recorder: { event: () => undefined },
        metrics: new Metrics({ defaultMetrics: false }),
        logger: silentLogger,
        now: Date.now,
      },
      { allPvs: { get: () => undefined, list: () => [pv] } },
    );
    const measure = async (rounds: number): Promise<{ requests: number; ms: number; pvcs: number }> => {
      const pvcs = (await core.listPersistentVolumeClaimForAllNamespaces()).items.length;
      const before = kube.stats().requests;
      const t0 = performance.now();
      for (let i = 0; i < rounds; i++) expect((await guard.check(pv, {}, { claims: true })).kind).toBe('ok');
      return { requests: (kube.stats().requests - before) / rounds, ms: (performance.now() - t0) / rounds, pvcs };
    };
    const small = await measure(20);
    // 600 more PVCs: two pages of 500.
    const bulk = uniqueName('guard-bench');
    await core.createNamespace({ body: { metadata: { name: bulk } } });
    try {
      for (let i = 0; i < 600; i += 50) {
        await Promise.all(
          Array.from({ length: 50 }, (_, j) =>
            core.createNamespacedPersistentVolumeClaim({
              namespace: bulk,
              body: { metadata: { name: `c${i + j}` }, spec: { storageClassName: 'none', accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Mi' } } } },
            }),
          ),
        );
      }
      const large = await measure(10);
      console.log(
        `claim lookup per check: ${small.pvcs} PVCs: ${small.requests} requests, ${small.ms.toFixed(1)} ms; ` +
          `${large.pvcs} PVCs: ${large.requests} requests, ${large.ms.toFixed(1)} ms (2 checks per clean)`,
      );
      expect(small.requests).toBe(2); // GET (404) + one LIST page
      expect(large.requests).toBe(3); // GET + two LIST pages
    } finally {
      await core.deleteNamespace({ name: bulk }).catch(() => undefined);
    }
  });
});

describe.skipIf(!isRoot())('deleter guard, with cleanup Jobs: a refusal withdraws the Job; the claimRef game', () => {
  const host = new HostFixtures('lsp-guardj-');
  const node = uniqueName('guardj-node');
  const ns = uniqueName('guardj-ns');
  const cls = uniqueName('guardj-fs');
  let prov: ProvisionerProcess | undefined;
  let agent: NodeAgent | undefined;
  let fsDir = '';
  const ran: string[] = [];
  /** Pods wait here until the test opens the gate; a pod deleted meanwhile never runs (as with a kubelet). */
  let gate = Promise.withResolvers<void>();
  const madeHere: string[] = [];
  const name = (entry: string): string => generatePVName(entry, node, cls);

  const readJob = async (jobName: string): Promise<V1Job | undefined> => {
    try {
      return await batch.readNamespacedJob({ name: jobName, namespace: JOB_NS });
    } catch (err) {
      if (apiStatus(err) === 404) return undefined;
      throw err;
    }
  };
  const podGone = async (pod: V1Pod): Promise<boolean> => {
    try {
      const cur = await core.readNamespacedPod({ name: pod.metadata?.name ?? '', namespace: JOB_NS });
      return cur.metadata?.uid !== pod.metadata?.uid || cur.metadata?.deletionTimestamp !== undefined;
    } catch (err) {
      if (apiStatus(err) === 404) return true;
      throw err;
    }
  };

  beforeAll(async () => {
    await createDeleterCluster(core, storage, { node, ns, classes: [cls] });
    fsDir = host.mkdir('fs');
    for (const v of ['job', 'claim']) host.tmpfs(8, 'fs', v);
    const runner = onFailureRunner({ core, exec: hostJobRunner([]) });
    agent = startNodeAgent({
      core,
      nodeName: node,
      namespace: JOB_NS,
      run: async (pod) => {
        await gate.promise;
        if (await podGone(pod)) return { exitCode: 137, message: 'deleted before it could start' };
        ran.push(pod.metadata?.name ?? '');
        return runner(pod);
      },
      onError: () => undefined,
    });
    const files = configFiles({ useJobForCleaning: true, classes: { [cls]: { hostDir: '/mnt/host/fs', mountDir: fsDir } } });
    prov = await startDaemon(host, { nodeName: node, files });
  });

  afterAll(async () => {
    gate.resolve();
    await agent?.stop();
    await prov?.stop();
    for (const pv of madeHere) await core.deletePersistentVolume({ name: pv }).catch(() => undefined);
    await reapPods(core, JOB_NS, node).catch(() => undefined);
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    keepLogs(host, node, ['provisioner.log']);
    host.cleanup();
  });

  it('a Job created before the refusal is withdrawn when a hand-made Bound PV for the same path appears: data intact, PV kept', async () => {
    const pv = await waitPV(core, name('job'));
    const claim = await bindPV(core, pv, ns);
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });
    const jobName = `cleanup-${pv.metadata?.name ?? ''}`;
    const job = await waitFor(() => readJob(jobName), { what: `the cleanup Job ${jobName}`, timeoutMs: 60_000 });
    expect(job.metadata?.labels?.['pvuuid']).toBe(pv.metadata?.uid);

    // Someone makes a PV by hand for the same volume, binds it and writes data, while the Job waits to run.
    const manual = uniqueName('manual');
    madeHere.push(manual);
    const created = await core.createPersistentVolume({
      body: {
        metadata: { name: manual },
        spec: {
          capacity: { storage: '8Mi' },
          accessModes: ['ReadWriteOnce'],
          persistentVolumeReclaimPolicy: 'Retain',
          storageClassName: cls,
          volumeMode: 'Filesystem',
          local: { path: '/mnt/host/fs/job' },
          nodeAffinity: { required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [node] }] }] } },
        },
      },
    });
    await bindPV(core, created, ns);
    const vol = join(fsDir, 'job');
    const before = fill(vol);

    await waitRefusal(pv, (m) => m.includes(`is also used by PV "${manual}"`), () => snapshot(vol) !== before);
    // The Job is withdrawn (deleted, propagation Foreground: it may linger while the GC removes its pod).
    await waitFor(async () => {
      const j = await readJob(jobName);
      return j === undefined || j.metadata?.uid !== job.metadata?.uid || j.metadata?.deletionTimestamp !== undefined;
    }, { what: `the Job ${jobName} to be withdrawn`, timeoutMs: 60_000 });
    expect(logsWith(prov!, `withdrew cleanup job`).length).toBeGreaterThanOrEqual(1);
    // Now let pods run: the withdrawn Job's pod must not (it is gone or terminating), nor a new Job's.
    gate.resolve();
    await reapPods(core, JOB_NS, node); // what the kubelet does with a deleted pod
    await waitFor(async () => (await readJob(jobName)) === undefined, { what: `the Job ${jobName} to be gone`, timeoutMs: 90_000 });
    expect(ran.filter((p) => p.startsWith(jobName))).toEqual([]);
    expect(snapshot(vol)).toBe(before);
    const still = await readPV(core, pv.metadata?.name ?? '');
    expect(still?.metadata?.uid).toBe(pv.metadata?.uid);
    expect(still?.status?.phase).toBe('Released');
    expect((await readPV(core, manual))?.status?.phase).toBe('Bound');
    gate = Promise.withResolvers<void>();
    gate.resolve();
  });

  it('claimRef game with Jobs: no Job is created, refused, Events on the PV and the PVC, data intact', async () => {
    const pv = await waitPV(core, name('claim'));
    await claimRefGame(prov!, ns, pv, join(fsDir, 'claim'));
    expect(await readJob(`cleanup-${pv.metadata?.name ?? ''}`)).toBeUndefined();
    expect(await metric(prov!, `${M}kube_requests_total`, { verb: 'create', resource: 'jobs' })).toBe(1); // the first test's Job only
  });
});
