// `npm run demo -- --real-node`: the shipped kustomize base (with the e2e overlay: hostNetwork and the
// apiserver's address for the loopback-only control plane, the image built from the Dockerfile) on a
// real node (kubelet + containerd, e2e/harness/node.ts) beside a control plane with every controller
// and the scheduler. The DaemonSet's pod discovers tmpfs mounts under /mnt/disks (made for the run;
// refused if it exists), a Pod with a PVC of the base's WaitForFirstConsumer class is scheduled on
// the node, its claim binds to a local PV and the container writes into it. Ctrl-C stops the node
// (its watchdog restores the host), the control plane, and removes /mnt/disks and the temp dirs.
// When the host cannot run a node, exits 1 with the reason.
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { startControlPlane, type ControlPlane } from '../e2e/harness/controlplane.ts';
import { ensureProvisionerImage } from '../e2e/harness/image.ts';
import { clientsFor, waitFor } from '../e2e/harness/kube.ts';
import { ensureKustomizeBinary } from '../e2e/harness/kustomize.ts';
import { startNode, type RealNode } from '../e2e/harness/node.ts';
import { pgrep } from '../e2e/harness/procs.ts';
import { applyBaseOverlay, baseDaemonSet, DiscoveryRoot, importExamplesImage, logPodTails, realNodeUnsupportedReason } from '../e2e/support/real-node.ts';
import { claimTable, clusterAccess, pvTable, stopHint, stopOn } from './demo-output.ts';

const NODE = 'demo-real-node';
const CLASS = 'fast-disks'; // the base's class and StorageClass (WaitForFirstConsumer)

/** Why `--real-node` cannot run here (undefined: it can): the host, or another node running. */
export function realNodeDemoUnsupportedReason(): string | undefined {
  const reason = realNodeUnsupportedReason();
  if (reason !== undefined) return reason;
  const kubelets = pgrep('testplane kubelet');
  return kubelets.length > 0 ? `a kubelet already runs on this host (pid ${kubelets.join(', ')}); one node per host` : undefined;
}

/** Runs the demo; never resolves (Ctrl-C, --once or a failure exits the process after the cleanup). */
export async function realNodeDemo(once: boolean): Promise<never> {
  const log = (m: string): void => console.error(`[demo] ${m}`);
  const reason = realNodeDemoUnsupportedReason();
  if (reason !== undefined) {
    console.error(`npm run demo -- --real-node: cannot run a real node here: ${reason}`);
    process.exit(1);
  }
  let disks: DiscoveryRoot | undefined;
  let cp: ControlPlane | undefined;
  let node: RealNode | undefined;
  let overlay: string | undefined;
  let cleaning = false;
  const cleanup = async (code: number): Promise<never> => {
    if (cleaning) process.exit(code);
    cleaning = true;
    log('cleaning up: the node (its watchdog restores the host), the control plane, /mnt/disks, temp dirs');
    let failed = false;
    const step = async (what: string, fn: () => unknown): Promise<void> => {
      try {
        await fn();
      } catch (err) {
        failed = true;
        console.error(`[demo] cleanup: ${what} failed: ${(err as Error).message}`);
      }
    };
    // The node first: its containers hold copies of the /mnt/disks mounts.
    await step('stopping the node', () => node?.stop());
    await step('stopping the control plane', () => cp?.stop());
    await step('removing /mnt/disks', () => disks?.cleanup());
    if (overlay) rmSync(overlay, { recursive: true, force: true });
    log('done');
    process.exit(failed ? 1 : code);
  };
  stopOn(() => cleanup(0));

  try {
    // The control plane first: its kubeconfig is printed before the minutes of a cold image build.
    cp = await startControlPlane({ log, scheduler: true, allControllers: true });
    console.log(clusterAccess(cp, [`  kubectl logs -n kube-system ds/${baseDaemonSet}    (once the node is Ready and the DaemonSet applied)`]));
    const image = await ensureProvisionerImage({ log });
    const kustomize = await ensureKustomizeBinary();
    disks = new DiscoveryRoot();
    for (const v of ['vol1', 'vol2', 'vol3']) disks.volume(CLASS, v);
    log(`mounted 3 tmpfs volumes under ${disks.root}/${CLASS} (a self bind mount made rshared)`);
    const { core } = clientsFor(cp.adminKubeconfig);
    node = await startNode(cp, { name: NODE, log });
    log(`node ${NODE} Ready at ${node.address} (kubelet + containerd, logs in ${node.dir})`);
    await node.importImage(image.archive);
    log(`imported ${image.ref} into the node`);
    log(`imported ${await importExamplesImage(node)} into the node (the image of examples/: \`kubectl apply -f examples/pvc-and-pod.yaml\` runs as written)`);
    overlay = await applyBaseOverlay(cp, image, kustomize);
    log(`applied the kustomize base (DaemonSet ${baseDaemonSet} in kube-system) with the overlay ${overlay}`);

    const pvs = await waitFor(
      async () => {
        const l = (await core.listPersistentVolume()).items.filter((pv) => pv.spec?.storageClassName === CLASS);
        return l.length >= 3 ? l : undefined;
      },
      { what: `3 PersistentVolumes of ${CLASS}`, timeoutMs: 240_000, intervalMs: 500 },
    );
    console.log(`\n${pvTable(pvs)}\n`);

    await core.createNamespacedPersistentVolumeClaim({
      namespace: 'default',
      body: { metadata: { name: 'demo-claim' }, spec: { storageClassName: CLASS, accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '10Mi' } } } },
    });
    await core.createNamespacedPod({
      namespace: 'default',
      body: {
        metadata: { name: 'demo-app' },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [
            {
              name: 'app',
              image: image.ref,
              command: ['bash', '-c', 'echo "written by demo-app" > /data/hello.txt && exec sleep infinity'],
              volumeMounts: [{ name: 'data', mountPath: '/data' }],
            },
          ],
          volumes: [{ name: 'data', persistentVolumeClaim: { claimName: 'demo-claim' } }],
        },
      },
    });
    log(`created PVC demo-claim (${CLASS}, 10Mi) and Pod demo-app using it; waiting for the scheduler and the kubelet`);
    const pod = await waitFor(
      async () => {
        const p = await core.readNamespacedPod({ name: 'demo-app', namespace: 'default' });
        return p.status?.phase === 'Running' ? p : undefined;
      },
      { what: 'Pod demo-app Running', timeoutMs: 180_000, intervalMs: 500 },
    );
    const pvc = await core.readNamespacedPersistentVolumeClaim({ name: 'demo-claim', namespace: 'default' });
    const pv = await core.readPersistentVolume({ name: pvc.spec?.volumeName ?? '' });
    const file = join(pv.spec?.local?.path ?? '', 'hello.txt');
    const written = await waitFor(
      () => {
        try {
          return readFileSync(file, 'utf8').trim() || undefined;
        } catch {
          return undefined;
        }
      },
      { what: `${file} written by the pod`, timeoutMs: 60_000 },
    );
    console.log(`\n${claimTable(pvc, pv, pod)}\n`);
    console.log(`the pod wrote ${file}: ${written}\n`);
    if (once) return await cleanup(0);
    console.log(`export KUBECONFIG=${cp.adminKubeconfig}`);
    console.log(`pod logs: kubectl logs -n kube-system ds/${baseDaemonSet}; files under ${join(node.dir, 'pod-logs')} (kubelet ${node.logs.kubelet}, containerd ${node.logs.containerd})`);
    console.log(stopHint);
  } catch (err) {
    console.error(`[demo] failed: ${(err as Error).message}`);
    if (node) logPodTails(node, [`kube-system_${baseDaemonSet}`], (m) => console.error(m));
    return await cleanup(1);
  }
  setInterval(() => undefined, 2 ** 30); // alive until Ctrl-C
  return new Promise<never>(() => undefined);
}
