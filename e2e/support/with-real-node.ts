// The set-up and teardown every real-node e2e file shares (e2e/real-node.test.ts, health-real-node,
// devices-real-node, alerts), as one vitest beforeAll/afterAll pair: the host snapshot, the product
// image and kustomize, /mnt/disks (DiscoveryRoot) with the file's volumes, a control plane with the
// scheduler and every KCM controller, a real kubelet + containerd node with the image imported, and
// the e2e overlay of the kustomize base applied (support/real-node.ts; the daemon's state dir in the
// overlay's temp dir). It first checks that port 8080, where the hostNetwork daemon listens, is free. Teardown, also after a failed set-up: the file's own teardown, the provisioner
// pods' log tails, node, control plane, /mnt/disks, the overlay (and so the state dir); then the host
// must be as before (diffHost) and the base's state dir on the host (/var/lib/local-volume-provisioner)
// untouched: every error is collected and thrown together at the end.
// (Not in support/real-node.ts: that module is also loaded by scripts outside vitest.)
import { rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { afterAll, beforeAll, inject } from 'vitest';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.ts';
import { diffHost, snapshotHost, type HostSnapshot } from '../harness/host-state.ts';
import { ensureProvisionerImage, type ProvisionerImage } from '../harness/image.ts';
import { clientsFor, type Clients } from '../harness/kube.ts';
import { ensureKustomizeBinary } from '../harness/kustomize.ts';
import { startNode, type RealNode } from '../harness/node.ts';
import { applyBaseOverlay, baseDaemonSet, baseStateHostPath, dirFingerprint, DiscoveryRoot, importExamplesImage, logPodTails, overlayStateDir } from './real-node.ts';

/** What the set-up made, for the tests (each getter throws until the set-up has made it). */
export interface RealNodeRun {
  readonly image: ProvisionerImage;
  readonly disks: DiscoveryRoot;
  readonly cp: ControlPlane;
  readonly api: Clients;
  readonly node: RealNode;
  /** The examples' image imported into the node (options.examplesImage), '' otherwise. */
  readonly examplesImage: string;
  /** ms of the product image's `ctr images import`. */
  readonly importMs: number;
  /** The e2e overlay dir (removed by the teardown). */
  readonly overlay: string;
  /** The daemon's state dir on the host (hostPath of the DaemonSet's provisioner-state volume), in the overlay dir. */
  readonly stateDir: string;
}

export interface RealNodeOptions {
  /** The Node's name. */
  readonly nodeName: string;
  /** Makes the file's volumes under /mnt/disks, before the control plane starts. */
  readonly disks?: (disks: DiscoveryRoot) => void;
  /** Also import the examples' image (busybox) into the node, before the overlay is applied. */
  readonly examplesImage?: boolean;
  /** The file's own set-up, once the overlay is applied (last in beforeAll). */
  readonly setup?: (run: RealNodeRun) => Promise<void> | void;
  /**
   * The file's own teardown, first in afterAll (before the node stops): it pushes what fails to `errors`
   * and goes on (a throw is collected too); they are reported with the others.
   */
  readonly teardown?: (errors: unknown[]) => Promise<void> | void;
  /** Prefixes of the pods (kubelet pod-logs dirs) whose logs' last lines are printed at teardown (default: the base DaemonSet's). */
  readonly podLogs?: readonly string[];
}

/** The port the base's DaemonSet listens on (--listen-address=:8080), on the host's network (hostNetwork). */
export const daemonPort = 8080;

/** Why `port` cannot be listened on by the daemon here (another process has it), undefined when it is free. */
async function portTaken(port: number): Promise<string | undefined> {
  const server = createServer();
  return new Promise((res) => {
    server.once('error', (e: NodeJS.ErrnoException) => res(`${e.code ?? e.message} on :${port}`));
    server.listen(port, () => server.close(() => res(undefined)));
  });
}

/** Registers the shared beforeAll/afterAll of a real-node describe block; returns what the set-up makes. */
export function withRealNode(o: RealNodeOptions): RealNodeRun {
  let before: HostSnapshot | undefined;
  let stateBefore: string[] | undefined;
  const made: { -readonly [K in keyof RealNodeRun]?: RealNodeRun[K] } = {};
  const get = <K extends keyof RealNodeRun>(k: K): RealNodeRun[K] => {
    const v = made[k];
    if (v === undefined) throw new Error(`withRealNode: ${k} is not set up (the set-up failed or has not run)`);
    return v;
  };
  const run: RealNodeRun = {
    get image() {
      return get('image');
    },
    get disks() {
      return get('disks');
    },
    get cp() {
      return get('cp');
    },
    get api() {
      return get('api');
    },
    get node() {
      return get('node');
    },
    get examplesImage() {
      return made.examplesImage ?? '';
    },
    get importMs() {
      return get('importMs');
    },
    get overlay() {
      return get('overlay');
    },
    get stateDir() {
      return overlayStateDir(get('overlay'));
    },
  };
  const hostStateDir = baseStateHostPath();

  beforeAll(async () => {
    // The hostNetwork daemon would crash-loop on a taken port and every wait would time out: say so at once.
    const taken = await portTaken(daemonPort);
    if (taken !== undefined) throw new Error(`port ${daemonPort} is taken on this host (${taken}): the DaemonSet's pod (hostNetwork) listens there; stop what holds it (ss -ltnp)`);
    before = snapshotHost();
    stateBefore = dirFingerprint(hostStateDir);
    made.image = await ensureProvisionerImage({ log: (m) => console.log(m) });
    const kustomize = await ensureKustomizeBinary();
    made.disks = new DiscoveryRoot();
    o.disks?.(made.disks);
    made.cp = await startControlPlane({ binary: inject('binary'), scheduler: true, allControllers: true, log: () => undefined });
    made.api = clientsFor(made.cp.adminKubeconfig);
    made.node = await startNode(made.cp, { name: o.nodeName });
    const t = performance.now();
    await made.node.importImage(made.image.archive);
    made.importMs = performance.now() - t;
    if (o.examplesImage) made.examplesImage = await importExamplesImage(made.node);
    made.overlay = await applyBaseOverlay(made.cp, made.image, kustomize);
    await o.setup?.(run);
  });

  afterAll(async () => {
    const errors: unknown[] = [];
    try {
      await o.teardown?.(errors);
    } catch (e) {
      errors.push(e);
    }
    // Node first (its containers hold copies of the /mnt/disks mounts), then the control plane.
    if (made.node) logPodTails(made.node, o.podLogs ?? [`kube-system_${baseDaemonSet}`]);
    await made.node?.stop().catch((e: unknown) => errors.push(e));
    await made.cp?.stop().catch((e: unknown) => errors.push(e));
    try {
      made.disks?.cleanup();
    } catch (e) {
      errors.push(e);
    }
    if (made.overlay) rmSync(made.overlay, { recursive: true, force: true });
    if (before) {
      const left = diffHost(before, snapshotHost(), { ignoreMount: (m) => m.startsWith(`${tmpdir()}/lsp-`) && !m.startsWith(`${tmpdir()}/lsp-node-`) });
      if (left.length > 0) errors.push(new Error(`the host differs after the run:\n${left.join('\n')}`));
    }
    if (stateBefore) {
      const now = dirFingerprint(hostStateDir);
      const changed = [...stateBefore.filter((l) => !now.includes(l)).map((l) => `- ${l}`), ...now.filter((l) => !stateBefore?.includes(l)).map((l) => `+ ${l}`)];
      if (changed.length > 0) errors.push(new Error(`the run touched the host's ${hostStateDir} (the daemon's state must stay in the run's temp dir):\n${changed.join('\n')}`));
    }
    if (errors.length > 0) throw new AggregateError(errors, errors.map((e) => (e as Error).message).join('\n'));
  });

  return run;
}
