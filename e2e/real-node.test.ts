// The used-by flow on a real node (issue 10, point 3): the shipped kustomize base (an overlay adds
// only hostNetwork, KUBERNETES_SERVICE_HOST/PORT and the image name) is applied to a control plane
// with every KCM controller and the scheduler; the DaemonSet's pod runs the image built from the
// Dockerfile on a real kubelet + containerd; PVs appear for tmpfs mounts under /mnt/disks; a Pod
// with a PVC of the WaitForFirstConsumer class is scheduled, binds and writes; a ConfigMap patch
// (new classes, one for a loop device, and PV labels) is projected by the kubelet and applied in
// place; deleting the Pod and the PVC cleans the volume and brings the PV back Available, in-process
// and, with the shipped job-cleaning component, through a cleanup Job run as a real container; a
// rollout restart and an image update (another reference of the same image) keep every PV. The node
// has an InternalIP: kubectl logs, exec and port-forward reach the pod, the metrics Service has its
// endpoint, docs/operations.md's troubleshooting commands run as written, and examples/pvc-and-pod.yaml
// and examples/statefulset.yaml run as written (kubectl apply -f, their image imported). Then,
// on the same node and control plane, the same flow with the chart and the real helm binary:
// `helm install` (a post-renderer adds what the kustomize overlay adds), a scheduled PVC, a new class
// by `helm upgrade` applied in place, the PV Available again, `helm uninstall` leaving the PVs.
// Measurements go to the log as `[measure] …` (docs/performance.md, "Real node").
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { AppsV1Api, DiscoveryV1Api, PatchStrategy, setHeaderOptions, type V1ContainerStatus, type V1PersistentVolume, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { ensureHelmBinary, helm } from './harness/helm.ts';
import { waitFor, type Clients } from './harness/kube.ts';
import { kubectl, startKubectl } from './harness/kubectl.ts';
import { ensureKustomizeBinary, kustomizeBuild } from './harness/kustomize.ts';
import { applyObjects, deploymentDir, manifestObjects } from './harness/manifests.ts';
import { baseDaemonSet, e2ePatches, realNodeUnsupportedReason } from './support/real-node.ts';
import { withRealNode } from './support/with-real-node.ts';

const reason = realNodeUnsupportedReason();
const measure = (what: string, ms: number): void => console.log(`[measure] ${what}: ${(ms / 1000).toFixed(1)} s`);

const container = (pod: V1Pod | undefined): V1ContainerStatus | undefined => pod?.status?.containerStatuses?.[0];

/** The chart installed as release `helmRelease`, and its DaemonSet. */
const helmRelease = 'lvp';
const chartDaemonSet = `${helmRelease}-local-static-provisioner`;
const chartDir = join(import.meta.dirname, '..', 'helm', 'local-static-provisioner');

describe.skipIf(reason !== undefined)(`the shipped DaemonSet on a real node${reason ? ` (skipped: ${reason})` : ''}`, { timeout: 300_000 }, () => {
  const nodeName = 'lsp-real-node';
  const cls = 'fast-disks'; // the base's class and StorageClass (WaitForFirstConsumer)
  const namespace = 'default';
  let api: Clients;
  let apps: AppsV1Api;
  /** The provisioner pods' label selector: the kustomize base's, then the chart release's. */
  let podSelector = `app.kubernetes.io/name=${baseDaemonSet}`;

  const pvsOf = async (c: string): Promise<V1PersistentVolume[]> =>
    (await api.core.listPersistentVolume()).items.filter((pv) => pv.spec?.storageClassName === c).sort((a, b) => (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''));
  const provisionerPods = async (): Promise<V1Pod[]> =>
    (await api.core.listNamespacedPod({ namespace: 'kube-system', labelSelector: podSelector })).items;
  const readyPod = async (): Promise<V1Pod | undefined> =>
    (await provisionerPods()).find((p) => p.metadata?.deletionTimestamp === undefined && p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
  const metric = async (name: string): Promise<number> => {
    const text = await (await fetch('http://127.0.0.1:8080/metrics')).text();
    return text
      .split('\n')
      .filter((l) => l.startsWith(name))
      .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
  };

  // The e2e overlay: the loopback-only apiserver needs hostNetwork and its address; the image name.
  const rn = withRealNode({
    nodeName,
    disks: (disks) => {
      disks.volume(cls, 'vol1');
      disks.volume(cls, 'vol2');
    },
    examplesImage: true,
    setup: (run) => {
      api = run.api;
      apps = api.kc.makeApiClient(AppsV1Api);
      measure('node start to Ready', run.node.stats().startToReadyMs);
      measure('image import (ctr images import)', run.importMs);
    },
    podLogs: [`kube-system_${baseDaemonSet}`, `kube-system_${chartDaemonSet}`],
  });

  it('the DaemonSet pod runs the image on the node and creates a PV per mount', async () => {
    const t0 = performance.now();
    const pod = await waitFor(async () => (await provisionerPods()).find((p) => p.status?.phase === 'Running'), { what: 'the provisioner pod Running', timeoutMs: 120_000, intervalMs: 250 });
    const tRunning = performance.now();
    expect(pod.spec?.nodeName).toBe(nodeName);
    expect(pod.spec?.containers[0]?.image).toBe(rn.image.ref);
    const pvs = await waitFor(async () => ((await pvsOf(cls)).length > 0 ? performance.now() : undefined), { what: 'the first PV', timeoutMs: 120_000, intervalMs: 250 });
    measure('DaemonSet applied to pod Running', tRunning - t0);
    measure('pod Running to first PV', pvs - tRunning);
    const all = await waitFor(async () => {
      const l = await pvsOf(cls);
      return l.length === 2 ? l : undefined;
    }, { what: `2 PVs of ${cls}`, timeoutMs: 60_000 });
    expect(all.map((pv) => pv.spec?.local?.path).sort()).toEqual([`/mnt/disks/${cls}/vol1`, `/mnt/disks/${cls}/vol2`]);
    expect(all.map((pv) => pv.spec?.nodeAffinity?.required?.nodeSelectorTerms?.[0]?.matchExpressions?.[0]?.values)).toEqual([[nodeName], [nodeName]]);
    await waitFor(readyPod, { what: 'the provisioner pod Ready (/ready after a discovery pass)', timeoutMs: 60_000 });
  });

  /** `kubectl <args>` (the testplane's, k8s.io/kubectl) against the control plane; fails the test on a non-zero exit. */
  const kubectlOk = async (...args: string[]): Promise<string> => {
    const r = await kubectl(inject('binary'), rn.cp.adminKubeconfig, args, { timeoutMs: 120_000 });
    expect(r.code, `kubectl ${args.join(' ')}: ${r.stderr}`).toBe(0);
    return r.stdout;
  };

  /** `kubectl port-forward -n kube-system pod/<pod> <ports>` running; resolves once it listens, with the local port. */
  async function portForward(pod: string, ports: string): Promise<{ port: string; stderr: () => string; stop: () => Promise<void> }> {
    const pf = startKubectl(inject('binary'), rn.cp.adminKubeconfig, ['port-forward', '-n', 'kube-system', pod, ports]);
    let out = '';
    let err = '';
    pf.stdout?.on('data', (c: Buffer) => (out += c.toString('utf8')));
    pf.stderr?.on('data', (c: Buffer) => (err += c.toString('utf8')));
    const exited = new Promise<void>((res) => pf.once('exit', () => res()));
    const stop = async (): Promise<void> => {
      if (pf.exitCode === null && pf.signalCode === null) pf.kill('SIGTERM');
      await exited;
    };
    try {
      const port = await waitFor(() => {
        if (pf.exitCode !== null) throw new Error(`kubectl port-forward exited ${String(pf.exitCode)}: ${err}`);
        return /Forwarding from 127\.0\.0\.1:(\d+) -> 8080/.exec(out)?.[1];
      }, { what: 'kubectl port-forward to listen', timeoutMs: 60_000, intervalMs: 100 });
      return { port, stderr: () => err, stop };
    } catch (e) {
      await stop();
      throw e;
    }
  }

  it('the node has an InternalIP: kubectl logs, exec and port-forward reach the provisioner pod, the metrics Service has its endpoint', async () => {
    const n = await api.core.readNode({ name: nodeName });
    const internal = n.status?.addresses?.find((a) => a.type === 'InternalIP')?.address;
    expect(internal, `the Node's addresses: ${JSON.stringify(n.status?.addresses)}`).toBeDefined();
    const address = rn.node.address;
    expect(address).toMatch(/^10\.250\.77\.\d+$/);
    expect(internal).toBe(address);
    const pod = await waitFor(readyPod, { what: 'the provisioner pod Ready', timeoutMs: 120_000 });
    const podName = pod.metadata?.name ?? '';
    expect(pod.status?.podIP, 'a hostNetwork pod has the node IP').toBe(address);

    // The headless metrics Service (deployment/kubernetes/service.yaml) lists the pod at the node IP.
    const slice = await waitFor(async () => {
      const l = await api.kc.makeApiClient(DiscoveryV1Api).listNamespacedEndpointSlice({ namespace: 'kube-system', labelSelector: `kubernetes.io/service-name=${baseDaemonSet}` });
      return l.items.find((e) => e.endpoints?.some((ep) => ep.addresses.includes(address) && ep.conditions?.ready === true));
    }, { what: `an endpoint ${address} of the Service ${baseDaemonSet}`, timeoutMs: 120_000 });
    expect(slice.ports?.map((p) => [p.name, p.port])).toEqual([['metrics', 8080]]);
    expect(slice.endpoints?.find((ep) => ep.addresses.includes(address))?.targetRef?.name).toBe(podName);
    expect(await kubectlOk('get', 'endpointslices', '-n', 'kube-system', '-l', `kubernetes.io/service-name=${baseDaemonSet}`)).toContain(`${address}`);

    // kubectl logs: the daemon's lines naming the PVs it created.
    const pvNames = (await pvsOf(cls)).map((pv) => pv.metadata?.name ?? '');
    expect(pvNames).toHaveLength(2);
    const logs = await kubectlOk('logs', '-n', 'kube-system', `ds/${baseDaemonSet}`);
    for (const pv of pvNames) expect(logs).toContain(pv);

    // kubectl exec into the container.
    expect(await kubectlOk('exec', '-n', 'kube-system', podName, '--', 'node', '/app/dist/main.js', '--version')).toMatch(/\d+\.\d+\.\d+/);
    expect((await kubectlOk('exec', '-n', 'kube-system', podName, '--', 'ls', '/mnt/disks/fast-disks')).split('\n').filter((l) => l !== '').sort()).toEqual(['vol1', 'vol2']);

    // kubectl port-forward to the pod's metrics port; a scrape through it.
    const pf = await portForward(podName, ':8080');
    try {
      expect(await (await fetch(`http://127.0.0.1:${pf.port}/metrics`)).text()).toMatch(/^local_volume_provisioner_build_info\{/m);
    } finally {
      await pf.stop();
    }
    expect(pf.stderr()).toBe('');
  });

  it("docs/operations.md's troubleshooting commands work as written on the real node", async () => {
    const docs = readFileSync(join(import.meta.dirname, '..', 'docs', 'operations.md'), 'utf8');
    /** The doc's command (it must be in the doc as written), with its <placeholders> filled. */
    const fromDoc = (cmd: string, fill: Record<string, string> = {}): string[] => {
      expect(docs).toContain(cmd);
      return Object.entries(fill)
        .reduce((c, [k, v]) => c.replaceAll(`<${k}>`, v), cmd)
        .split(' ');
    };
    const pod = await waitFor(readyPod, { what: 'the provisioner pod Ready', timeoutMs: 120_000 });
    const podIp = pod.status?.podIP ?? '';
    // "No PV appears for a disk", step 1: the pod's readiness, then the node's Events.
    const [, ...getPods] = fromDoc('kubectl get pods -n kube-system -o wide -l app.kubernetes.io/name=local-volume-provisioner');
    const wide = await kubectlOk(...getPods);
    expect(wide).toMatch(new RegExp(`^${pod.metadata?.name ?? ''} +1/1 +Running .* ${podIp.replaceAll('.', '\\.')} +${nodeName} `, 'm'));
    const [curl, ...curlArgs] = fromDoc('curl -s <pod-ip>:8080/ready?verbose', { 'pod-ip': podIp });
    const ready = await promisify(execFile)(curl ?? '', curlArgs, { timeout: 60_000 });
    expect(ready.stdout).toContain('readyz check passed');
    const [, , , , pfPod, pfPorts] = fromDoc('kubectl port-forward -n kube-system <pod> 18080:8080', { pod: pod.metadata?.name ?? '' });
    const pf = await portForward(pfPod ?? '', pfPorts ?? '');
    try {
      const [curl2, ...curl2Args] = fromDoc('curl -s localhost:18080/ready?verbose');
      expect((await promisify(execFile)(curl2 ?? '', curl2Args, { timeout: 60_000 })).stdout).toContain('readyz check passed');
    } finally {
      await pf.stop();
    }
    const [, ...events] = fromDoc('kubectl get events --field-selector involvedObject.kind=Node,involvedObject.name=<node>', { node: nodeName });
    await kubectlOk(...events);
    // "Events": every Event of the daemon, and the failed cleanups.
    const [, ...all] = fromDoc('kubectl get events -A --field-selector source=local-volume-provisioner --sort-by=.lastTimestamp');
    await kubectlOk(...all);
    const [, ...failed] = fromDoc('kubectl get events -A --field-selector involvedObject.kind=PersistentVolume,reason=VolumeFailedDelete');
    await kubectlOk(...failed);
    // "The pod crash-loops ...": the previous container's log (none yet: the pod never restarted).
    const [, ...previous] = fromDoc('kubectl logs -n kube-system --previous <pod>', { pod: pod.metadata?.name ?? '' });
    const prev = await kubectl(inject('binary'), rn.cp.adminKubeconfig, previous);
    expect(prev.stderr).toMatch(/previous terminated container .* not found/);
    // "Which version runs where?": build_info on each pod's /metrics, at the pod IP.
    expect(docs).toContain("`local_volume_provisioner_build_info` on each pod's `/metrics`");
    expect(await (await fetch(`http://${podIp}:8080/metrics`)).text()).toMatch(/^local_volume_provisioner_build_info\{/m);
  });

  /**
   * A PVC of `cls` and a Pod (no node named: the scheduler places it) that writes into it; resolves
   * with the bound PV's host path once the file is there.
   */
  async function claimAndWrite(claimName: string, podName: string, storageClassName = cls): Promise<string> {
    await api.core.createNamespacedPersistentVolumeClaim({
      namespace,
      body: { metadata: { name: claimName }, spec: { storageClassName, accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '10Mi' } } } },
    });
    await api.core.createNamespacedPod({
      namespace,
      body: {
        metadata: { name: podName },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [
            {
              name: 'app',
              image: rn.image.ref,
              command: ['bash', '-c', `echo "written by ${podName}" > /data/hello && exec sleep infinity`],
              volumeMounts: [{ name: 'data', mountPath: '/data' }],
            },
          ],
          volumes: [{ name: 'data', persistentVolumeClaim: { claimName } }],
        },
      },
    });
    const running = await waitFor(async () => {
      const p = await api.core.readNamespacedPod({ name: podName, namespace });
      return p.status?.phase === 'Running' ? p : undefined;
    }, { what: `pod ${podName} Running`, timeoutMs: 120_000 });
    expect(running.spec?.nodeName).toBe(nodeName);
    const claim = await api.core.readNamespacedPersistentVolumeClaim({ name: claimName, namespace });
    expect(claim.status?.phase).toBe('Bound');
    const pv = await api.core.readPersistentVolume({ name: claim.spec?.volumeName ?? '' });
    const file = join(pv.spec?.local?.path ?? '', 'hello');
    await waitFor(() => existsSync(file), { what: `${file} written by the pod`, timeoutMs: 30_000 });
    expect(readFileSync(file, 'utf8')).toBe(`written by ${podName}\n`);
    return pv.spec?.local?.path ?? '';
  }

  /** Deletes the Pod and the PVC; resolves with the PV once it is Available again, and the time that took. */
  async function releaseAndWait(claimName: string, podName: string): Promise<{ pv: V1PersistentVolume; ms: number; uidBefore: string | undefined }> {
    const pvName = (await api.core.readNamespacedPersistentVolumeClaim({ name: claimName, namespace })).spec?.volumeName ?? '';
    const uidBefore = (await api.core.readPersistentVolume({ name: pvName })).metadata?.uid;
    const t0 = performance.now();
    await api.core.deleteNamespacedPod({ name: podName, namespace });
    await api.core.deleteNamespacedPersistentVolumeClaim({ name: claimName, namespace });
    const pv = await waitFor(
      async () => {
        const p = await api.core.readPersistentVolume({ name: pvName }).catch(() => undefined);
        return p?.status?.phase === 'Available' && p.spec?.claimRef === undefined ? p : undefined;
      },
      { what: `PV ${pvName} Available again`, timeoutMs: 180_000, intervalMs: 250 },
    );
    return { pv, ms: performance.now() - t0, uidBefore };
  }

  it('a Pod with a PVC of the WaitForFirstConsumer class is scheduled, binds and writes into the local volume', async () => {
    await claimAndWrite('data', 'app');
  });

  /**
   * Runs `change` (something that changes the provisioner ConfigMap); resolves with when it started
   * once the daemon has applied the new config (its metric), measured as `what`.
   */
  async function reloadAfter(what: string, change: () => Promise<void>): Promise<number> {
    const appliedMetric = 'local_volume_provisioner_config_reload_total{result="applied"}';
    const applied = await metric(appliedMetric);
    const t0 = performance.now();
    await change();
    await waitFor(async () => (await metric(appliedMetric)) > applied, { what: `the reload applied (${appliedMetric})`, timeoutMs: 120_000, intervalMs: 250 });
    measure(what, performance.now() - t0);
    return t0;
  }

  /** Merge-patches the provisioner ConfigMap's data; resolves when the daemon has applied it (its metric). */
  const patchConfigAndWait = (data: Record<string, string>): Promise<number> =>
    reloadAfter('ConfigMap patch to reload applied (kubelet sync included)', async () => {
      await api.core.patchNamespacedConfigMap(
        { name: 'local-volume-provisioner-config', namespace: 'kube-system', body: { data } },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
    });

  const pvUidsNow = async (): Promise<Map<string, string>> => new Map((await api.core.listPersistentVolume()).items.map((pv) => [pv.metadata?.name ?? '', pv.metadata?.uid ?? '']));

  /**
   * A tmpfs for a new Filesystem class and a loop device for a new Block class, their StorageClasses,
   * then one ConfigMap patch adding both classes and labelsForPV. Returns when the patch was made.
   */
  async function addClassesAndLabel(): Promise<number> {
    rn.disks.volume('e2e-new', 'vol1');
    rn.disks.blockDevice('e2e-block', 'disk0', 32);
    for (const name of ['e2e-new', 'e2e-block']) {
      await api.storage.createStorageClass({
        body: { metadata: { name }, provisioner: 'kubernetes.io/no-provisioner', volumeBindingMode: 'WaitForFirstConsumer', reclaimPolicy: 'Delete' },
      });
    }
    const cm = await api.core.readNamespacedConfigMap({ name: 'local-volume-provisioner-config', namespace: 'kube-system' });
    return patchConfigAndWait({
      storageClassMap:
        `${cm.data?.['storageClassMap'] ?? ''}e2e-new:\n  hostDir: /mnt/disks/e2e-new\n  mountDir: /mnt/disks/e2e-new\n` +
        'e2e-block:\n  hostDir: /mnt/disks/e2e-block\n  mountDir: /mnt/disks/e2e-block\n  volumeMode: Block\n  blockCleanerCommand: ["/scripts/quick_reset.sh"]\n',
      labelsForPV: 'lsp-e2e/generation: "2"\n',
    });
  }

  it('a ConfigMap patch (new classes, one for a loop device; PV labels) is projected by the kubelet and applied in place', async () => {
    const before = await readyPod();
    const containerId = container(before)?.containerID ?? '';
    expect(containerId).toMatch(/^containerd:\/\//);
    const fastBefore = await pvsOf(cls);
    const t0 = await addClassesAndLabel();
    const fresh = await waitFor(async () => {
      const l = await pvsOf('e2e-new');
      return l.length === 1 ? { pv: l[0], at: performance.now() } : undefined;
    }, { what: 'a PV of the new class', timeoutMs: 60_000, intervalMs: 250 });
    measure('ConfigMap patch to the new class PV', fresh.at - t0);
    // The loop device, seen through the pod's /dev (a hostPath), as a Block PV of its size.
    const block = await waitFor(async () => (await pvsOf('e2e-block'))[0], { what: 'a Block PV for the loop device', timeoutMs: 60_000 });
    expect(block.spec).toMatchObject({ volumeMode: 'Block', local: { path: '/mnt/disks/e2e-block/disk0' }, capacity: { storage: '32Mi' } });
    // New PVs get the new labels; existing ones are never edited by a reload (docs/hot-reload.md).
    expect(fresh.pv?.metadata?.labels?.['lsp-e2e/generation']).toBe('2');
    expect((await pvsOf(cls)).map((pv) => pv.metadata?.resourceVersion)).toEqual(fastBefore.map((pv) => pv.metadata?.resourceVersion));

    const after = await readyPod();
    expect(after?.metadata?.uid).toBe(before?.metadata?.uid);
    expect(container(after)).toMatchObject({ containerID: containerId, restartCount: 0 });
    const mem = await rn.node.containerMemory(containerId);
    console.log(`[measure] provisioner container RSS: ${Math.round((mem?.rssKiB ?? 0) / 1024)} MiB (pids ${mem?.pids.join(', ') ?? ''})`);
  });

  it('deleting the Pod and the PVC cleans the volume and the PV comes back Available', async () => {
    const { pv, ms, uidBefore } = await releaseAndWait('data', 'app');
    measure('Pod+PVC delete to PV Available', ms);
    expect(readdirSync(pv.spec?.local?.path ?? '')).toEqual([]); // cleaned in-process (Filesystem volume: contents removed)
    // reclaimPolicy Delete: the PV was deleted after the clean and discovered again, as a new PV
    // of the reloaded config (with its label).
    expect(pv.metadata?.uid).not.toBe(uidBefore);
    expect(pv.metadata?.labels?.['lsp-e2e/generation']).toBe('2');
  });

  it('with the shipped job-cleaning component, the clean runs as a Job: a real container of the image and its scripts', async () => {
    // The component's RBAC and its ConfigMap key, from the same overlay with the component added.
    const withJobs = mkdtempSync(join(tmpdir(), 'lsp-real-node-overlay-'));
    let rendered: ReturnType<typeof manifestObjects>;
    try {
      const base = readFileSync(join(rn.overlay, 'kustomization.yaml'), 'utf8').replace(
        /^resources: \[(.*)\]$/m,
        (_, r: string) => `resources: [${relative(withJobs, join(rn.overlay, r))}]\ncomponents: [${relative(withJobs, join(deploymentDir, 'components', 'job-cleaning'))}]`,
      );
      writeFileSync(join(withJobs, 'kustomization.yaml'), base);
      rendered = manifestObjects(await kustomizeBuild(await ensureKustomizeBinary(), withJobs));
    } finally {
      rmSync(withJobs, { recursive: true, force: true });
    }
    await applyObjects(rn.cp.adminKubeconfig, rendered.filter((o) => o.kind === 'Role' || o.kind === 'RoleBinding'), 'the job-cleaning component');
    const cm = rendered.find((o) => o.kind === 'ConfigMap') as { data?: Record<string, string> } | undefined;
    expect(cm?.data?.['useJobForCleaning']).toBe('true');
    await patchConfigAndWait({ useJobForCleaning: cm?.data?.['useJobForCleaning'] ?? '' });

    const path = await claimAndWrite('data2', 'app2');
    // Watch the cleanup Job's pods while the release runs (the daemon may delete a finished Job).
    const pods = new Map<string, V1Pod>();
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        for (const p of (await api.core.listNamespacedPod({ namespace: 'kube-system', labelSelector: 'job-name' })).items) pods.set(p.metadata?.name ?? '', p);
        await new Promise((res) => setTimeout(res, 250));
      }
    })();
    let released: Awaited<ReturnType<typeof releaseAndWait>>;
    try {
      released = await releaseAndWait('data2', 'app2');
    } finally {
      watching = false;
      await watcher;
    }
    measure('Pod+PVC delete to PV Available, cleaned by a Job', released.ms);
    expect(released.pv.spec?.local?.path).toBe(path);
    expect(readdirSync(path)).toEqual([]);
    const ran = [...pods.values()];
    expect(ran.length, 'a cleanup Job pod was seen').toBeGreaterThan(0);
    for (const p of ran) {
      expect(p.spec?.nodeName).toBe(nodeName);
      expect(p.spec?.containers[0]?.image).toBe(rn.image.ref);
    }
    expect(ran.some((p) => p.status?.phase === 'Succeeded')).toBe(true);
  });

  /**
   * Strategic-merge-patches the base DaemonSet's pod template; resolves with the new Ready pod (not
   * `old`) that `accept` takes, the pod it replaced, and the time from the patch to it Ready.
   */
  async function rollTemplate(template: Record<string, unknown>, what: string, accept: (p: V1Pod) => boolean = () => true): Promise<{ pod: V1Pod; old: V1Pod | undefined; ms: number }> {
    const old = await readyPod();
    const t0 = performance.now();
    await apps.patchNamespacedDaemonSet(
      { name: baseDaemonSet, namespace: 'kube-system', body: { spec: { template } } },
      setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
    );
    const pod = await waitFor(async () => {
      const p = await readyPod();
      return p && p.metadata?.uid !== old?.metadata?.uid && accept(p) ? p : undefined;
    }, { what, timeoutMs: 180_000, intervalMs: 250 });
    expect(container(pod)?.restartCount).toBe(0);
    return { pod, old, ms: performance.now() - t0 };
  }

  it('a rollout restart replaces the pod and keeps every PV', async () => {
    const pvUids = await pvUidsNow();
    expect(pvUids.size).toBe(4); // fast-disks vol1, vol2; e2e-new vol1; e2e-block disk0
    await rollTemplate({ metadata: { annotations: { 'kubectl.kubernetes.io/restartedAt': new Date().toISOString() } } }, 'the restarted provisioner pod Ready');
    expect(await pvUidsNow()).toEqual(pvUids);
    const rss = rn.node.stats().rssKiB;
    console.log(`[measure] RSS after the flow: kubelet ${Math.round((rss?.kubelet ?? 0) / 1024)} MiB, containerd ${Math.round((rss?.containerd ?? 0) / 1024)} MiB`);
  });

  it('an image update (another reference of the product image) replaces the container, keeps every PV, and the new pod discovers', async () => {
    // A second name for the same image in the node's store: an update the kubelet runs without a registry.
    const updated = `${rn.image.ref}-update`;
    await rn.node.ctr(['images', 'tag', rn.image.ref, updated]);
    const pvUids = await pvUidsNow();
    const { pod, old, ms } = await rollTemplate(
      { spec: { containers: [{ name: 'provisioner', image: updated }] } },
      `the provisioner pod of ${updated} Ready`,
      (p) => p.spec?.containers[0]?.image === updated,
    );
    measure('image update to new pod Ready', ms);
    // A new container of the same image content. (Its status names the image by its first tag, the
    // old reference: the kubelet reports one of the image's tags, not the one the spec asked for.)
    expect(container(pod)?.containerID).not.toBe(container(old)?.containerID);
    expect(container(pod)?.imageID).toBe(container(old)?.imageID);
    expect(pod.spec?.nodeName).toBe(nodeName);
    // No PV created or deleted, none replaced (same names, same UIDs).
    expect(await pvUidsNow()).toEqual(pvUids);
    // The new container discovers: a volume mounted now gets a PV.
    rn.disks.volume(cls, 'vol3');
    const fresh = await waitFor(async () => (await pvsOf(cls)).find((pv) => pv.spec?.local?.path === `/mnt/disks/${cls}/vol3`), { what: 'a PV for a volume mounted after the update', timeoutMs: 60_000 });
    expect(pvUids.has(fresh.metadata?.name ?? '')).toBe(false);
    expect(await pvUidsNow()).toEqual(new Map([...pvUids, [fresh.metadata?.name ?? '', fresh.metadata?.uid ?? '']]));
  });

  it('examples/pvc-and-pod.yaml and examples/statefulset.yaml run on the node as written (kubectl apply -f): claims Bound, pods Running', async () => {
    const examples = join(import.meta.dirname, '..', 'examples');
    const files = ['pvc-and-pod.yaml', 'statefulset.yaml'].map((f) => join(examples, f));
    for (const f of files) expect(readFileSync(f, 'utf8')).toContain(`image: ${rn.examplesImage.replace(/^docker\.io\/library\//, '')}`);
    for (const f of files) await kubectlOk('apply', '-f', f);
    try {
      const runningWithClaim = async (pod: string, claim: string): Promise<V1Pod> => {
        const p = await waitFor(async () => {
          const r = await api.core.readNamespacedPod({ name: pod, namespace }).catch(() => undefined);
          return r?.status?.phase === 'Running' ? r : undefined;
        }, { what: `pod ${pod} Running (events: kubectl get events --field-selector involvedObject.name=${pod})`, timeoutMs: 180_000 });
        expect((await api.core.readNamespacedPersistentVolumeClaim({ name: claim, namespace })).status?.phase).toBe('Bound');
        expect(p.spec?.nodeName).toBe(nodeName);
        return p;
      };
      await runningWithClaim('example-local-pod', 'example-local-claim');
      await runningWithClaim('example-db-0', 'data-example-db-0');
      // What the containers wrote into their local volumes, read back with kubectl.
      await waitFor(async () => /\d{2}:\d{2}:\d{2}/.test(await kubectlOk('logs', 'example-local-pod')), { what: 'the date in the log of example-local-pod', timeoutMs: 60_000 });
      await waitFor(async () => (await kubectlOk('exec', 'example-db-0', '--', 'cat', '/data/owners')).trim() === 'example-db-0', { what: 'example-db-0 in /data/owners', timeoutMs: 60_000 });
    } finally {
      for (const f of files) await kubectl(inject('binary'), rn.cp.adminKubeconfig, ['delete', '-f', f, '--wait=false']);
    }
  });

  describe('the same flow with helm install', () => {
    const helmCls = 'helm-disks';
    const helmNewCls = 'helm-new';
    let helmBin = '';
    let scratch = '';
    let postRenderer = '';

    /** Values for the chart: the image, classes under the discovery root, each with its StorageClass. */
    const valuesFile = (name: string, classes: readonly string[]): string => {
      const file = join(scratch, `${name}.yaml`);
      writeFileSync(file, toYaml({ image: rn.image.ref, classes: classes.map((c) => ({ name: c, hostDir: `/mnt/disks/${c}`, storageClass: true })) }));
      return file;
    };
    /** `helm <args>` against the control plane in the release namespace; fails the test on a non-zero exit. */
    const helmRun = async (...args: string[]): Promise<string> => {
      const r = await helm(helmBin, [...args, '--namespace', 'kube-system', '--kubeconfig', rn.cp.adminKubeconfig], scratch);
      expect(r.code, `helm ${args.join(' ')}: ${r.stderr}`).toBe(0);
      return r.stdout;
    };

    beforeAll(async () => {
      helmBin = await ensureHelmBinary({ log: (m) => console.log(`[helm] ${m}`) });
      scratch = mkdtempSync(join(tmpdir(), 'lsp-real-node-helm-'));
      // The kustomize overlay's patches, applied to what helm renders by a post-renderer (kustomize
      // reading the rendering from stdin): the chart itself is installed unchanged.
      const render = join(scratch, 'render');
      mkdirSync(render);
      writeFileSync(
        join(render, 'kustomization.yaml'),
        ['apiVersion: kustomize.config.k8s.io/v1beta1', 'kind: Kustomization', 'resources: [all.yaml]', ...e2ePatches(chartDaemonSet, new URL(rn.cp.server).port, rn.stateDir), ''].join('\n'),
      );
      postRenderer = join(scratch, 'post-render');
      writeFileSync(postRenderer, `#!/bin/sh\nset -e\ncat > '${render}/all.yaml'\nexec '${await ensureKustomizeBinary()}' build '${render}'\n`, { mode: 0o755 });
      // One provisioner per node: the base's DaemonSet goes (its PVs stay, nobody manages them now).
      await apps.deleteNamespacedDaemonSet({ name: baseDaemonSet, namespace: 'kube-system' });
      await waitFor(async () => ((await provisionerPods()).length === 0 ? true : undefined), { what: `the pods of ${baseDaemonSet} gone`, timeoutMs: 120_000 });
      podSelector = `app.kubernetes.io/instance=${helmRelease}`;
      rn.disks.volume(helmCls, 'vol1');
      rn.disks.volume(helmCls, 'vol2');
    }, 900_000);
    afterAll(() => {
      if (scratch) rmSync(scratch, { recursive: true, force: true });
    });

    it('helm install: the DaemonSet pod runs the image on the node and creates a PV per mount of the chart class', async () => {
      const t0 = performance.now();
      await helmRun('install', helmRelease, chartDir, '-f', valuesFile('install', [helmCls]), '--post-renderer', postRenderer);
      const first = await waitFor(async () => ((await pvsOf(helmCls)).length > 0 ? performance.now() : undefined), { what: `the first PV of ${helmCls}`, timeoutMs: 120_000, intervalMs: 250 });
      measure('helm install to first PV', first - t0);
      const all = await waitFor(async () => {
        const l = await pvsOf(helmCls);
        return l.length === 2 ? l : undefined;
      }, { what: `2 PVs of ${helmCls}`, timeoutMs: 60_000 });
      expect(all.map((pv) => pv.spec?.local?.path)).toEqual([`/mnt/disks/${helmCls}/vol1`, `/mnt/disks/${helmCls}/vol2`]);
      const pod = await waitFor(readyPod, { what: 'the chart provisioner pod Ready', timeoutMs: 60_000 });
      expect(pod.metadata?.ownerReferences?.[0]?.name).toBe(chartDaemonSet);
      expect(pod.spec?.nodeName).toBe(nodeName);
      expect(pod.spec?.containers[0]?.image).toBe(rn.image.ref);
      expect((await api.storage.readStorageClass({ name: helmCls })).volumeBindingMode).toBe('WaitForFirstConsumer');
    });

    it("a Pod with a PVC of the chart's StorageClass is scheduled, binds and writes", async () => {
      await claimAndWrite('hdata', 'happ', helmCls);
    });

    it('helm upgrade with a new class: the ConfigMap change is applied in place (same container, no rollout)', async () => {
      rn.disks.volume(helmNewCls, 'vol1');
      const before = await readyPod();
      const ds = await apps.readNamespacedDaemonSet({ name: chartDaemonSet, namespace: 'kube-system' });
      const t0 = await reloadAfter('helm upgrade to reload applied (kubelet sync included)', async () => {
        await helmRun('upgrade', helmRelease, chartDir, '-f', valuesFile('upgrade', [helmCls, helmNewCls]), '--post-renderer', postRenderer);
      });
      const fresh = await waitFor(async () => ((await pvsOf(helmNewCls)).length === 1 ? performance.now() : undefined), { what: `a PV of ${helmNewCls}`, timeoutMs: 60_000, intervalMs: 250 });
      measure('helm upgrade to the new class PV', fresh - t0);
      const after = await readyPod();
      expect(after?.metadata?.uid).toBe(before?.metadata?.uid);
      expect(container(after)).toMatchObject({ containerID: container(before)?.containerID, restartCount: 0 });
      // The pod template did not change: no rollout (docs/helm.md, "One discovery root").
      expect((await apps.readNamespacedDaemonSet({ name: chartDaemonSet, namespace: 'kube-system' })).metadata?.generation).toBe(ds.metadata?.generation);
    });

    it('deleting the Pod and the PVC cleans the volume and the PV comes back Available', async () => {
      const { pv, ms } = await releaseAndWait('hdata', 'happ');
      measure('Pod+PVC delete to PV Available (helm install)', ms);
      expect(readdirSync(pv.spec?.local?.path ?? '')).toEqual([]);
    });

    it("helm uninstall removes the chart's objects and leaves every PV (the daemon's, not the chart's)", async () => {
      const pvUids = await pvUidsNow();
      expect([...(await pvsOf(helmCls)), ...(await pvsOf(helmNewCls))]).toHaveLength(3);
      await helmRun('uninstall', helmRelease, '--wait', '--timeout', '120s');
      await waitFor(async () => ((await provisionerPods()).length === 0 ? true : undefined), { what: 'the chart pods gone', timeoutMs: 120_000 });
      expect(await apps.readNamespacedDaemonSet({ name: chartDaemonSet, namespace: 'kube-system' }).catch(() => undefined)).toBeUndefined();
      expect(await api.storage.readStorageClass({ name: helmCls }).catch(() => undefined)).toBeUndefined();
      expect(await pvUidsNow()).toEqual(pvUids);
      expect((await pvsOf(helmCls)).map((pv) => pv.status?.phase)).toEqual(['Available', 'Available']);
    });
  });
});
