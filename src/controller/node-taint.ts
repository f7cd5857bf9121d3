// Removes the "provisioner not ready" taint from this node once discovery is
// ready (removeNodeNotReadyTaint). The Go provisioner's call site has its
// condition inverted, so there the taint is never removed; here it is removed
// once per process, with backoff on failure and without blocking the sync loop.
import type { V1Node } from '@kubernetes/client-node';
import type { KubePort } from '../kube/port.ts';
import { isConflict, isNotFound } from '../kube/port.ts';
import { backoffDelay } from '../util/backoff.ts';
import type { Logger } from '../util/log.ts';

export class NodeTaintRemover {
  #removed = false;
  #attempts = 0;
  #notBefore = 0;
  readonly #kube: KubePort;
  readonly #nodeName: string;
  readonly #logger: Logger;
  readonly #now: () => number;

  constructor(opts: { kube: KubePort; nodeName: string; logger: Logger; now?: () => number }) {
    this.#kube = opts.kube;
    this.#nodeName = opts.nodeName;
    this.#logger = opts.logger;
    this.#now = opts.now ?? Date.now;
  }

  get removed(): boolean {
    return this.#removed;
  }

  /**
   * Called after each discovery pass. Does nothing unless enabled, ready, not yet
   * removed and not backing off. Never throws.
   */
  async maybeRemove(enabled: boolean, taintKey: string, ready: boolean): Promise<void> {
    if (!enabled || !taintKey || !ready || this.#removed || this.#now() < this.#notBefore) return;
    try {
      const node: V1Node = await this.#kube.getNode(this.#nodeName);
      const taints = node.spec?.taints ?? [];
      const kept = taints.filter((t) => t.key !== taintKey);
      if (kept.length === taints.length) {
        this.#logger.info({ node: this.#nodeName, taint: taintKey }, 'node taint was not found on node; nothing to remove');
        this.#removed = true;
        return;
      }
      await this.#kube.replaceNode({ ...node, spec: { ...node.spec, taints: kept } });
      this.#removed = true;
      this.#logger.info({ node: this.#nodeName, taint: taintKey }, `removed node taint ${taintKey} from node ${this.#nodeName}`);
    } catch (err) {
      const delay = backoffDelay({ initialMs: 2000, maxMs: 5 * 60_000 }, this.#attempts++);
      this.#notBefore = this.#now() + delay;
      const level = isConflict(err) || isNotFound(err) ? 'info' : 'warn';
      this.#logger[level]({ err, node: this.#nodeName, retryInMs: delay }, 'failed to remove node taint; will retry');
    }
  }
}
