// Metrics of local-volume-node-cleanup, on their own registry. The Go controller's
// four metrics (pkg/metrics/node-cleanup) keep their names and labels (subsystem
// "local_volume_node_cleanup", no namespace); the rest are ours.
import { collectDefaultMetrics, Counter, Registry } from 'prom-client';
import { createKubeMetrics, EVENT_LOOP_PRECISION_MS, type KubeMetrics } from '../metrics/metrics.ts';

export const NODE_CLEANUP_PREFIX = 'local_volume_node_cleanup_';

/** Outcomes of a deletion timer (the `outcome` label of deletion_timers_total). */
export type TimerOutcome = 'started' | 'node_returned' | 'expired';

export class NodeCleanupMetrics implements KubeMetrics {
  readonly registry = new Registry();

  // --- the Go controller's metrics ---
  readonly pvDeleteTotal = new Counter({
    name: `${NODE_CLEANUP_PREFIX}persistentvolume_delete_total`,
    help: 'Total number of persistent volumes deleted because their nodes are gone, by the phase they had.',
    labelNames: ['phase'] as const,
    registers: [this.registry],
  });
  readonly pvDeleteFailedTotal = new Counter({
    name: `${NODE_CLEANUP_PREFIX}persistentvolume_delete_failed_total`,
    help: 'Total number of failed persistent volume deletes, by the phase the volume had.',
    labelNames: ['phase'] as const,
    registers: [this.registry],
  });
  readonly pvcDeleteTotal = new Counter({
    name: `${NODE_CLEANUP_PREFIX}persistentvolumeclaim_delete_total`,
    help: 'Total number of persistent volume claims deleted because the nodes of their volume are gone.',
    registers: [this.registry],
  });
  readonly pvcDeleteFailedTotal = new Counter({
    name: `${NODE_CLEANUP_PREFIX}persistentvolumeclaim_delete_failed_total`,
    help: 'Total number of failed persistent volume claim deletes.',
    registers: [this.registry],
  });

  // --- ours ---
  readonly #kube = createKubeMetrics(NODE_CLEANUP_PREFIX, this.registry);
  readonly kubeRequests = this.#kube.kubeRequests;
  readonly watchRestarts = this.#kube.watchRestarts;
  readonly deletionTimers = new Counter({
    name: `${NODE_CLEANUP_PREFIX}deletion_timers_total`,
    help:
      'Deletion delays of PVs whose nodes are gone, by outcome: started, node_returned (the delay ended ' +
      'with a node back: nothing deleted), expired (the delay ended with the nodes still gone).',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  constructor(opts: { defaultMetrics?: boolean } = {}) {
    if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: EVENT_LOOP_PRECISION_MS });
    for (const outcome of ['started', 'node_returned', 'expired'] satisfies TimerOutcome[]) this.deletionTimers.inc({ outcome }, 0);
  }
}
