// A test-side stand-in for the scheduler + kubelet of one node. There is no kubelet in the e2e
// control plane, so Pods never run by themselves. The node agent polls Pods meant for its node
// (spec.nodeName, or spec.nodeSelector['kubernetes.io/hostname']), binds unscheduled ones to the
// node (pods/binding, as the scheduler would), optionally runs them with a callback, and reports
// the outcome through the pods/status subresource (phase Succeeded/Failed, container terminated).
// With a real kube-scheduler running (startControlPlane({ scheduler: true })), markNodeReady makes
// a Node schedulable the way a kubelet and the node lifecycle controller would; pods without a
// node are then placed by the scheduler, and the agent runs the ones placed on its node.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PatchStrategy, setHeaderOptions, type CoreV1Api, type V1Node, type V1Pod } from '@kubernetes/client-node';

export const hostnameLabel = 'kubernetes.io/hostname';

export interface RunResult {
  readonly exitCode: number;
  /** Optional message for the terminated state (e.g. the error that made the run fail). */
  readonly message?: string;
}

export interface NodeAgentOptions {
  readonly core: CoreV1Api;
  readonly nodeName: string;
  /** Only this namespace (default: all namespaces). */
  readonly namespace?: string;
  /** Runs the pod; a throw counts as exit code 1. Default: succeed at once. */
  readonly run?: (pod: V1Pod) => Promise<RunResult>;
  /** Poll interval (default 250 ms). */
  readonly intervalMs?: number;
  /** Errors while listing/patching (default: console.warn). The agent keeps going. */
  readonly onError?: (err: unknown) => void;
}

export interface HandledPod {
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
  readonly exitCode: number;
}

export interface NodeAgent {
  /** Pods the agent has finished, in order. */
  readonly handled: readonly HandledPod[];
  stop(): Promise<void>;
}

/** True when the pod is meant for `nodeName`. */
export function podTargetsNode(pod: V1Pod, nodeName: string): boolean {
  const bound = pod.spec?.nodeName;
  if (bound !== undefined && bound !== '') return bound === nodeName;
  return pod.spec?.nodeSelector?.[hostnameLabel] === nodeName;
}

/** The pods/status merge patch reporting a finished pod. */
export function terminatedStatus(pod: V1Pod, result: RunResult, startedAt: Date, finishedAt: Date): object {
  const ok = result.exitCode === 0;
  const reason = ok ? 'Completed' : 'Error';
  const terminated = {
    exitCode: result.exitCode,
    reason,
    ...(result.message !== undefined ? { message: result.message } : {}),
    startedAt: startedAt.toISOString(),
    finishedAt: finishedAt.toISOString(),
  };
  return {
    status: {
      phase: ok ? 'Succeeded' : 'Failed',
      startTime: startedAt.toISOString(),
      conditions: [
        { type: 'PodScheduled', status: 'True', lastTransitionTime: startedAt.toISOString() },
        { type: 'Ready', status: 'False', reason: 'PodCompleted', lastTransitionTime: finishedAt.toISOString() },
      ],
      containerStatuses: (pod.spec?.containers ?? []).map((c) => ({
        name: c.name,
        image: c.image ?? '',
        imageID: '',
        ready: false,
        started: false,
        restartCount: 0,
        state: { terminated },
      })),
    },
  };
}

export function startNodeAgent(opts: NodeAgentOptions): NodeAgent {
  const { core, nodeName } = opts;
  const intervalMs = opts.intervalMs ?? 250;
  const onError = opts.onError ?? ((err: unknown) => console.warn(`node agent ${nodeName}: ${(err as Error).message}`));
  const seen = new Set<string>();
  const handled: HandledPod[] = [];
  const inFlight = new Set<Promise<void>>();
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let polling: Promise<void> = Promise.resolve();

  const handle = async (pod: V1Pod): Promise<void> => {
    const name = pod.metadata?.name ?? '';
    const namespace = pod.metadata?.namespace ?? 'default';
    try {
      if (pod.spec?.nodeName === undefined || pod.spec.nodeName === '') {
        await core.createNamespacedPodBinding({
          name,
          namespace,
          body: { metadata: { name, namespace }, target: { apiVersion: 'v1', kind: 'Node', name: nodeName } },
        });
      }
      const startedAt = new Date();
      let result: RunResult;
      try {
        result = opts.run ? await opts.run(pod) : { exitCode: 0 };
      } catch (err) {
        result = { exitCode: 1, message: (err as Error).message };
      }
      const body = terminatedStatus(pod, result, startedAt, new Date());
      await core.patchNamespacedPodStatus(
        { name, namespace, body },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
      handled.push({ namespace, name, uid: pod.metadata?.uid ?? '', exitCode: result.exitCode });
    } catch (err) {
      // Retry on a later poll (the pod may have been deleted or changed meanwhile).
      seen.delete(pod.metadata?.uid ?? '');
      onError(err);
    }
  };

  const poll = async (): Promise<void> => {
    try {
      const list = opts.namespace !== undefined
        ? await core.listNamespacedPod({ namespace: opts.namespace })
        : await core.listPodForAllNamespaces({});
      for (const pod of list.items) {
        const uid = pod.metadata?.uid ?? '';
        if (stopped || uid === '' || seen.has(uid)) continue;
        if ((pod.status?.phase ?? 'Pending') !== 'Pending' || pod.metadata?.deletionTimestamp !== undefined) continue;
        if (!podTargetsNode(pod, nodeName)) continue;
        seen.add(uid);
        const p = handle(pod).finally(() => inFlight.delete(p));
        inFlight.add(p);
      }
    } catch (err) {
      onError(err);
    }
  };

  const loop = (): void => {
    if (stopped) return;
    polling = poll().finally(() => {
      if (!stopped) timer = setTimeout(loop, intervalMs);
    });
  };
  loop();

  return {
    handled,
    async stop(): Promise<void> {
      stopped = true;
      if (timer) clearTimeout(timer);
      await polling;
      await Promise.allSettled([...inFlight]);
    },
  };
}

/** Taints the node lifecycle controller owns; the TaintNodesByCondition admission plugin adds the first to every new Node. */
export const lifecycleTaints = ['node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable'] as const;

/** What markNodeReady reports as the node's capacity and allocatable (the scheduler's NodeResourcesFit). */
export const standInCapacity = { cpu: '4', memory: '8Gi', pods: '110', 'ephemeral-storage': '20Gi' } as const;

/** The Node status a kubelet reports for a healthy node: Ready, no pressure, capacity = allocatable. */
export function readyNodeStatus(now: Date, capacity: Record<string, string> = standInCapacity): object {
  const t = now.toISOString();
  const condition = (type: string, status: string, reason: string): object => ({
    type,
    status,
    reason,
    message: `set by the e2e node agent (kubelet stand-in)`,
    lastHeartbeatTime: t,
    lastTransitionTime: t,
  });
  return {
    status: {
      capacity,
      allocatable: capacity,
      conditions: [
        condition('Ready', 'True', 'KubeletReady'),
        condition('MemoryPressure', 'False', 'KubeletHasSufficientMemory'),
        condition('DiskPressure', 'False', 'KubeletHasNoDiskPressure'),
        condition('PIDPressure', 'False', 'KubeletHasSufficientPID'),
      ],
    },
  };
}

/**
 * Makes a Node schedulable for a real kube-scheduler: reports it Ready with capacity (what a
 * kubelet does) and removes the not-ready/unreachable taints (what the node lifecycle controller
 * does once the node is Ready; the e2e KCM does not run that controller, there being no kubelet
 * heartbeats). Other taints stay. Idempotent.
 */
export async function markNodeReady(core: CoreV1Api, name: string): Promise<V1Node> {
  await core.patchNodeStatus({ name, body: readyNodeStatus(new Date()) }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
  const node = await core.readNode({ name });
  const taints = node.spec?.taints ?? [];
  const kept = taints.filter((t) => !(lifecycleTaints as readonly string[]).includes(t.key));
  if (kept.length === taints.length) return node;
  // A JSON patch with a test op: fails (and is retried by the caller) if the taints changed meanwhile.
  return core.patchNode(
    {
      name,
      body: [
        { op: 'test', path: '/spec/taints', value: taints },
        { op: 'replace', path: '/spec/taints', value: kept },
      ],
    },
    setHeaderOptions('Content-Type', PatchStrategy.JsonPatch),
  );
}

/**
 * A `run` callback standing in for a container that writes to its volume: writes
 * "written by <pod>" to `file` in the local PV bound to the pod's first PersistentVolumeClaim
 * (spec.local.path on this host). Fails when the pod has no claim or the claim is not bound.
 */
export function claimWriter(core: CoreV1Api, file = 'hello'): (pod: V1Pod) => Promise<RunResult> {
  return async (pod) => {
    const namespace = pod.metadata?.namespace ?? 'default';
    const claimName = pod.spec?.volumes?.find((v) => v.persistentVolumeClaim)?.persistentVolumeClaim?.claimName;
    if (claimName === undefined) throw new Error(`pod ${namespace}/${pod.metadata?.name ?? ''} has no PersistentVolumeClaim volume`);
    const claim = await core.readNamespacedPersistentVolumeClaim({ name: claimName, namespace });
    const volumeName = claim.spec?.volumeName;
    if (volumeName === undefined || volumeName === '') throw new Error(`PVC ${namespace}/${claimName} is not bound`);
    const path = (await core.readPersistentVolume({ name: volumeName })).spec?.local?.path;
    if (path === undefined) throw new Error(`PV ${volumeName} is not a local volume`);
    await writeFile(join(path, file), `written by ${pod.metadata?.name ?? ''}\n`);
    return { exitCode: 0 };
  };
}

/** Creates a Node object (no kubelet behind it) labelled kubernetes.io/hostname=<name>; returns the existing one on 409. */
export async function createNode(core: CoreV1Api, name: string, labels: Record<string, string> = {}): Promise<V1Node> {
  try {
    return await core.createNode({ body: { metadata: { name, labels: { [hostnameLabel]: name, ...labels } } } });
  } catch (err) {
    if ((err as { code?: number }).code === 409) return core.readNode({ name });
    throw err;
  }
}
