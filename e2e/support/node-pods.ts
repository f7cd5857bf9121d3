// A pod for a real node (e2e/harness/node.ts) that makes the kubelet and containerd do the usual
// host work: a pod network (CNI bridge, veth, netns), cgroups, an emptyDir and a container.
import { pauseImage } from '../harness/oci.ts';
import { clientsFor, waitFor } from '../harness/kube.ts';

/** Creates the pod `name` on `node` running the pause image; resolves when it runs. */
export async function runPausePod(kubeconfig: string, namespace: string, node: string, name: string): Promise<void> {
  const { core } = clientsFor(kubeconfig);
  await core.createNamespacedPod({
    namespace,
    body: {
      metadata: { name },
      spec: {
        nodeName: node,
        automountServiceAccountToken: false,
        terminationGracePeriodSeconds: 1,
        containers: [{ name: 'pause', image: pauseImage, imagePullPolicy: 'Never', volumeMounts: [{ name: 'scratch', mountPath: '/scratch' }] }],
        volumes: [{ name: 'scratch', emptyDir: {} }],
      },
    },
  });
  await waitFor(
    async () => {
      const p = await core.readNamespacedPod({ name, namespace });
      const waiting = p.status?.containerStatuses?.[0]?.state?.waiting;
      if (waiting?.reason === 'ErrImageNeverPull' || waiting?.reason === 'CreateContainerError') throw new Error(`pod ${name}: ${waiting.reason}: ${waiting.message ?? ''}`);
      return p.status?.phase === 'Running';
    },
    { what: `pod ${namespace}/${name} Running on ${node}`, timeoutMs: 120_000, intervalMs: 500 },
  );
}
