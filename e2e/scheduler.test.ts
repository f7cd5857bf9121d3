// Issue 10, first step: a real kube-scheduler (started by the global setup) places a Pod whose PVC
// is of a WaitForFirstConsumer class on the one node that has a matching local PV, found by the
// real daemon on real tmpfs mounts; the PVC binds to that PV. A second, Ready node without volumes
// is not chosen, and a Pod whose PVC no local PV can satisfy stays Pending with the scheduler's event.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PatchStrategy, setHeaderOptions, type CoreV1Event, type V1PersistentVolume, type V1PersistentVolumeClaim, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClients, apiStatus, uniqueName, waitFor } from './harness/kube.ts';
import { claimWriter, createNode, markNodeReady, startNodeAgent, type NodeAgent } from './harness/node-agent.ts';
import { pgrep, runNodeScript } from './harness/procs.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { startDaemon } from './support/cleanup.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';

const { core, storage } = adminClients();
const ignore404 = (err: unknown): void => {
  if (apiStatus(err) !== 404) throw err;
};

describe.skipIf(!isRoot())('kube-scheduler with WaitForFirstConsumer local volumes', () => {
  let host: HostFixtures | undefined; // made in beforeAll: a filtered-out run creates no temp dir
  const nodeA = uniqueName('sched-a');
  const nodeB = uniqueName('sched-b');
  const cls = uniqueName('wffc');
  const namespace = uniqueName('sched');
  let prov: ProvisionerProcess | undefined;
  let agent: NodeAgent | undefined;
  let pvsOfA: V1PersistentVolume[] = [];

  const claim = (name: string, storageSize: string): V1PersistentVolumeClaim => ({
    metadata: { name },
    spec: { storageClassName: cls, accessModes: ['ReadWriteOnce'], resources: { requests: { storage: storageSize } } },
  });
  // No nodeName, no nodeSelector: only the scheduler can place it.
  const podWith = (name: string, claimName: string): V1Pod => ({
    metadata: { name },
    spec: {
      restartPolicy: 'Never',
      containers: [{ name: 'app', image: 'writer:e2e', command: ['write', '/data/hello'], volumeMounts: [{ name: 'data', mountPath: '/data' }] }],
      volumes: [{ name: 'data', persistentVolumeClaim: { claimName } }],
    },
  });
  const readClaim = (name: string): Promise<V1PersistentVolumeClaim> => core.readNamespacedPersistentVolumeClaim({ name, namespace });

  beforeAll(async () => {
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    for (const n of [nodeA, nodeB]) await createNode(core, n);
    // A taint of someone else's, which markNodeReady must keep (PreferNoSchedule: B stays a candidate).
    await core.patchNode(
      { name: nodeB, body: [{ op: 'add', path: '/spec/taints/-', value: { key: 'example.com/keep', effect: 'PreferNoSchedule' } }] },
      setHeaderOptions('Content-Type', PatchStrategy.JsonPatch),
    );
    for (const n of [nodeA, nodeB]) await markNodeReady(core, n);
    await storage.createStorageClass({
      body: { metadata: { name: cls }, provisioner: 'kubernetes.io/no-provisioner', volumeBindingMode: 'WaitForFirstConsumer', reclaimPolicy: 'Retain' },
    });
    const h = (host = new HostFixtures('lsp-sched-'));
    const fsDir = h.mkdir('fs');
    for (const v of ['vol1', 'vol2']) h.tmpfs(16, 'fs', v);
    prov = await startDaemon(h, { nodeName: nodeA, files: { storageClassMap: `${cls}:\n  hostDir: ${fsDir}\n  mountDir: ${fsDir}\n`, useNodeNameOnly: 'true' } });
    pvsOfA = await waitFor(
      async () => {
        const l = (await core.listPersistentVolume()).items.filter((pv) => pv.spec?.storageClassName === cls);
        return l.length >= 2 ? l : undefined;
      },
      { what: `2 PVs of class ${cls} on ${nodeA}`, timeoutMs: 60_000 },
    );
    // The stand-in kubelet of node A "runs" the pods placed there: it writes into the bound volume.
    agent = startNodeAgent({
      core,
      nodeName: nodeA,
      namespace,
      onError: () => undefined,
      run: claimWriter(core),
    });
  });

  afterAll(async () => {
    await agent?.stop();
    await prov?.stop();
    // No kubelet confirms a graceful deletion: delete the pods at once, then what else was made here.
    for (const pod of (await core.listNamespacedPod({ namespace })).items) {
      await core.deleteNamespacedPod({ name: pod.metadata?.name ?? '', namespace, gracePeriodSeconds: 0 }).catch(ignore404);
    }
    await core.deleteNamespace({ name: namespace }).catch(ignore404);
    for (const pv of (await core.listPersistentVolume()).items.filter((p) => p.spec?.storageClassName === cls)) {
      await core.deletePersistentVolume({ name: pv.metadata?.name ?? '' }).catch(ignore404);
    }
    await storage.deleteStorageClass({ name: cls }).catch(ignore404);
    for (const n of [nodeA, nodeB]) await core.deleteNode({ name: n }).catch(ignore404);
    host?.cleanup();
  });

  it('markNodeReady: Ready with capacity, the not-ready taint gone, other taints kept', async () => {
    const b = await core.readNode({ name: nodeB });
    expect(b.status?.conditions?.find((c) => c.type === 'Ready')?.status).toBe('True');
    expect(b.status?.allocatable?.['pods']).toBe('110');
    expect(b.spec?.taints?.map((t) => t.key)).toEqual(['example.com/keep']);
    expect((await core.readNode({ name: nodeA })).spec?.taints ?? []).toEqual([]);
  });

  it('schedules the pod onto the node with the local PV, and the PVC binds to that PV', async () => {
    expect(pvsOfA.map((pv) => pv.spec?.nodeAffinity?.required?.nodeSelectorTerms?.[0]?.matchExpressions?.[0]?.values)).toEqual([[nodeA], [nodeA]]);
    await core.createNamespacedPersistentVolumeClaim({ namespace, body: claim('data', '10Mi') });
    // WaitForFirstConsumer: no binding before a pod uses the claim.
    expect((await readClaim('data')).status?.phase).toBe('Pending');
    await core.createNamespacedPod({ namespace, body: podWith('app', 'data') });

    const bound = await waitFor(
      async () => {
        const c = await readClaim('data');
        return c.status?.phase === 'Bound' ? c : undefined;
      },
      { what: 'PVC data Bound', timeoutMs: 90_000 },
    );
    expect(pvsOfA.map((pv) => pv.metadata?.name)).toContain(bound.spec?.volumeName);
    // The scheduler's VolumeBinding plugin chose node A for the PV's node affinity, pre-bound the PV
    // to the claim (the PV controller completed it), then bound the pod (pods/binding).
    const pod = await waitFor(
      async () => {
        const p = await core.readNamespacedPod({ name: 'app', namespace });
        return p.spec?.nodeName ? p : undefined;
      },
      { what: 'pod app bound to a node', timeoutMs: 30_000 },
    );
    expect(pod.spec?.nodeName).toBe(nodeA);
    const events = await waitFor(
      async () => {
        const l = (await core.listNamespacedEvent({ namespace, fieldSelector: 'involvedObject.name=app' })).items;
        return l.some((e) => e.reason === 'Scheduled') ? l : undefined;
      },
      { what: 'the Scheduled event of pod app', timeoutMs: 30_000 },
    );
    const scheduled = events.find((e) => e.reason === 'Scheduled');
    expect(scheduled?.source?.component ?? scheduled?.reportingComponent).toBe('default-scheduler');
    expect(scheduled?.message).toContain(nodeA);

    // The node agent ran it on node A, in the volume the PVC is bound to.
    const pv = await core.readPersistentVolume({ name: bound.spec?.volumeName ?? '' });
    expect(pv.spec?.claimRef?.name).toBe('data');
    await waitFor(async () => ((await core.readNamespacedPod({ name: 'app', namespace })).status?.phase === 'Succeeded' ? true : undefined), {
      what: 'pod app Succeeded',
      timeoutMs: 30_000,
    });
    expect(readFileSync(join(pv.spec?.local?.path ?? '', 'hello'), 'utf8')).toBe('written by app\n');
  });

  it('leaves a pod whose claim no local PV satisfies Pending, with the FailedScheduling event', async () => {
    await core.createNamespacedPersistentVolumeClaim({ namespace, body: claim('too-big', '1Gi') });
    await core.createNamespacedPod({ namespace, body: podWith('starved', 'too-big') });
    const failed: CoreV1Event = await waitFor(
      async () => {
        const l = (await core.listNamespacedEvent({ namespace, fieldSelector: 'involvedObject.name=starved' })).items;
        return l.find((e) => e.reason === 'FailedScheduling');
      },
      { what: 'the FailedScheduling event of pod starved', timeoutMs: 60_000 },
    );
    expect(failed.message).toMatch(/didn't find available persistent volumes to bind/);
    const pod = await core.readNamespacedPod({ name: 'starved', namespace });
    expect(pod.spec?.nodeName ?? '').toBe('');
    expect(pod.status?.phase).toBe('Pending');
    expect(pod.status?.conditions?.find((c) => c.type === 'PodScheduled')).toMatchObject({ status: 'False', reason: 'Unschedulable' });
    const c = await readClaim('too-big');
    expect(c.status?.phase).toBe('Pending');
    expect(c.metadata?.annotations?.['volume.kubernetes.io/selected-node']).toBeUndefined();
  });
});

// `npm run demo` (scripts/demo.ts) ends with a PVC Bound to a local PV through the scheduler, and
// Ctrl-C removes its processes, mounts, loop device and temp dirs.
describe.skipIf(!isRoot())('npm run demo', () => {
  it('prints the PVC Bound to a local PV by a scheduled Pod; on Ctrl-C leaves nothing behind', async () => {
    const root = mkdtempSync(join(tmpdir(), 'lsp-e2e-demo-')); // private TMPDIR: the demo's dirs go here
    const demo = runNodeScript(join(import.meta.dirname, '..', 'scripts', 'demo.ts'), [], { TMPDIR: root });
    try {
      await waitFor(
        () => {
          if (demo.child.exitCode !== null) throw new Error(`demo exited with ${demo.child.exitCode}: ${demo.stderr()}`);
          return demo.stdout().includes('Ctrl-C to stop');
        },
        { what: 'the demo to print "Ctrl-C to stop"', timeoutMs: 150_000 },
      );
      const out = demo.stdout();
      const err = demo.stderr();
      const row = /^demo-claim\s+(\S+)\s+(local-pv-\S+)\s+\S+\s+local-fs\s+demo-app\s+demo-node\s+Succeeded$/m.exec(out);
      expect(row?.[1], out).toBe('Bound');
      expect(out).toMatch(/the pod wrote \S+\/hello\.txt: written by demo-app/);
      expect(err).toMatch(/PVC demo-claim Bound in \d+\.\d s/);
      const dirs = [...new Set(err.match(new RegExp(`${root}/lsp-[a-z]+-[A-Za-z0-9]+`, 'g')) ?? [])];
      expect(dirs.length).toBeGreaterThanOrEqual(2); // the control plane's and the mounts'
      expect(pgrep(root).length).toBeGreaterThanOrEqual(5); // etcd, apiserver, KCM, scheduler, provisioner

      expect(await demo.interrupt()).toBe(0);
      expect(pgrep(root)).toEqual([]);
      for (const d of dirs) expect(existsSync(d)).toBe(false);
      expect(readFileSync('/proc/mounts', 'utf8')).not.toContain(root);
      expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(root);
      expect(execFileSync('losetup', ['-a'], { encoding: 'utf8' })).not.toContain(root); // the loop device's backing file
    } finally {
      await demo.interrupt();
      rmSync(root, { recursive: true, force: true });
    }
  });
});
