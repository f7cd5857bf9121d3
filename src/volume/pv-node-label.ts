// --pv-node-label (opt-in, default off): a server-side filter for the PV
// informer. Without it every node lists and watches every PV of the cluster
// (the API cannot select "provisioned by this node" or "local path on this
// node"), so the API server sends each PV change to every node of the fleet
// (docs/performance.md, "Fleet-scale cost"). With it:
// - PVs this node creates carry the label PV_NODE_LABEL=<node name> (the only
//   difference from the Go provisioner's PVs; off, they are byte-identical);
// - this node's PVs that lack the label (made before the option, or by the Go
//   provisioner) get it added (a merge patch; RBAC `patch` on
//   persistentvolumes, deployment component `pv-node-label`);
// - the PV informer is two informers: `PV_NODE_LABEL=<node>` (this node's
//   PVs) and `!PV_NODE_LABEL` (every PV without the label: not yet migrated
//   ones, hand-made ones, other provisioners'), merged (unionInformer).
// The deleter's path-in-use check still sees every unlabelled local PV whose
// node affinity selects this node (hand-made PVs included), as stubs. What it no
// longer sees: a PV labelled for ANOTHER node whose affinity also selects this
// node (a class `selector` widening the affinity to shared disks, or a label set
// by hand); docs/cleanup.md states this trade-off.
import type { V1Node, V1PersistentVolume } from '@kubernetes/client-node';
import type { Informer } from '../kube/informer.ts';
import { leanPersistentVolume } from '../kube/informer.ts';
import type { KubePort } from '../kube/port.ts';
import { isForbidden, isNotFound } from '../kube/port.ts';
import { createInformer } from '../kube/reflector.ts';
import { unionInformer } from '../kube/union-informer.ts';
import type { KubeMetrics } from '../metrics/metrics.ts';
import { errorMessage } from '../util/errors.ts';
import type { Logger } from '../util/log.ts';
import { nodeIdOf } from './env.ts';
import { nodePVSelection, pvOnThisNode } from './pv-cache.ts';

/** The label --pv-node-label puts on this node's PVs; its value is the node name. */
export const PV_NODE_LABEL = 'local-static-provisioner/node';

/** The PV labels --pv-node-label adds for `nodeName` (none when off). */
export function pvNodeLabels(on: boolean, nodeName: string): Record<string, string> {
  return on ? { [PV_NODE_LABEL]: nodeName } : {};
}

export interface NodePVInformerOptions {
  /** --pv-node-label. */
  readonly nodeLabel: boolean;
  readonly logger: Logger;
  readonly metrics?: Pick<KubeMetrics, 'watchRestarts'> | undefined;
}

/**
 * The process-scope PV informer: this node's PVs whole and stubs of other local
 * PVs on this node (nodePVSelection). Off: one informer over every PV. On: the
 * union of `PV_NODE_LABEL=<node>` and `!PV_NODE_LABEL` (labelled PVs first).
 */
export function createNodePVInformer(kube: KubePort, node: V1Node, o: NodePVInformerOptions): Informer<V1PersistentVolume> {
  const selection = nodePVSelection(node);
  const make = (labelSelector: string | undefined, transform: (pv: V1PersistentVolume) => V1PersistentVolume): Informer<V1PersistentVolume> =>
    createInformer(kube, 'persistentvolumes', {
      labelSelector,
      filter: selection.filter,
      transform,
      logger: o.logger,
      metrics: o.metrics,
    });
  const strip = (pv: V1PersistentVolume): V1PersistentVolume => leanPersistentVolume(selection.transform(pv));
  if (!o.nodeLabel) return make(undefined, strip);
  const name = node.metadata?.name ?? '';
  // Stubs keep the node label too, so a stub moving between the two informers is recognised as a move.
  const keepLabel = (pv: V1PersistentVolume): V1PersistentVolume => {
    const out = strip(pv);
    const v = pv.metadata?.labels?.[PV_NODE_LABEL];
    if (v === undefined || out.metadata?.labels?.[PV_NODE_LABEL] === v) return out;
    return { ...out, metadata: { ...out.metadata, labels: { ...out.metadata?.labels, [PV_NODE_LABEL]: v } } };
  };
  const route = (pv: V1PersistentVolume): number | undefined => {
    const v = pv.metadata?.labels?.[PV_NODE_LABEL];
    return v === name ? 0 : v === undefined ? 1 : undefined;
  };
  return unionInformer([make(`${PV_NODE_LABEL}=${name}`, keepLabel), make(`!${PV_NODE_LABEL}`, keepLabel)], route);
}

/**
 * Adds PV_NODE_LABEL=<node> to this node's PVs (pvOnThisNode) that lack it, as
 * the informer delivers them. One patch in flight per PV; a failure is logged
 * (once per PV and reason) and retried at the PV's next change or the next
 * start. The PV keeps being managed meanwhile: the `!label` informer sees it.
 */
export class PVNodeLabeler {
  readonly #kube: KubePort;
  readonly #id: { name: string; uid: string };
  readonly #log: Logger;
  readonly #inFlight = new Map<string, Promise<void>>();
  readonly #warned = new Set<string>();
  readonly #off: () => void;

  constructor(kube: KubePort, node: V1Node, informer: Informer<V1PersistentVolume>, logger: Logger) {
    this.#kube = kube;
    this.#id = nodeIdOf(node);
    this.#log = logger;
    // A delete whose object is labelled for another node is our PV leaving our view (someone changed the
    // label; the union informer sends delete then, issue 17 point 5): label it back at once, so its release
    // is still seen and cleaned. A real delete keeps our label and is ignored.
    this.#off = informer.on({
      add: (pv) => this.#check(pv),
      update: (_old, pv) => this.#check(pv),
      delete: (pv) => {
        const v = pv.metadata?.labels?.[PV_NODE_LABEL];
        if (v !== undefined && v !== this.#id.name) this.#check(pv);
      },
    });
  }

  /** Resolves when no patch is in flight. */
  async idle(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.all([...this.#inFlight.values()]);
  }

  async stop(): Promise<void> {
    this.#off();
    await this.idle();
  }

  #check(pv: V1PersistentVolume): void {
    const name = pv.metadata?.name;
    if (name === undefined || this.#inFlight.has(name)) return;
    if (pv.metadata?.labels?.[PV_NODE_LABEL] === this.#id.name || !pvOnThisNode(pv, this.#id)) return;
    const p = this.#label(name, pv.metadata?.labels?.[PV_NODE_LABEL]).finally(() => this.#inFlight.delete(name));
    this.#inFlight.set(name, p);
  }

  async #label(name: string, from: string | undefined): Promise<void> {
    try {
      await this.#kube.patchPersistentVolume(name, { metadata: { labels: pvNodeLabels(true, this.#id.name) } });
      const was = from === undefined ? '' : ` (it was labelled ${PV_NODE_LABEL}=${from}, which hid it from this node)`;
      const line = `labelled pv ${JSON.stringify(name)} ${PV_NODE_LABEL}=${this.#id.name} (--pv-node-label)${was}`;
      if (from === undefined) this.#log.info({ pv: name, label: PV_NODE_LABEL }, line);
      else this.#log.warn({ pv: name, label: PV_NODE_LABEL }, line);
    } catch (err) {
      if (isNotFound(err)) return;
      const key = `${name}\0${isForbidden(err) ? 'forbidden' : 'other'}`;
      if (this.#warned.has(key)) return;
      this.#warned.add(key);
      const hint = isForbidden(err) ? ' (grant patch on persistentvolumes: deployment component pv-node-label)' : '';
      this.#log.warn({ pv: name, err: errorMessage(err) }, `could not label pv ${JSON.stringify(name)} ${PV_NODE_LABEL}=${this.#id.name}${hint}; it is still managed`);
    }
  }
}
