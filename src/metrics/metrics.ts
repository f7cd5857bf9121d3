// Every metric the daemon exports, created once per process on one registry.
// Names and labels of the Go provisioner's metrics are kept 1:1 (subsystem
// "local_volume_provisioner", no namespace) so existing dashboards keep working.
// Metrics are never re-registered across controller restarts (hot reload).
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { parseQuantity } from '../util/quantity.ts';
import { VERSION } from '../util/version.ts';

export const METRIC_PREFIX = 'local_volume_provisioner_';

/** Go client's prometheus.DefBuckets, the buckets of every Go provisioner histogram. */
export const GO_DEFAULT_BUCKETS: readonly number[] = Object.freeze([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]);
const buckets = (): number[] => [...GO_DEFAULT_BUCKETS];

export type VolumeModeLabel = 'Block' | 'Filesystem';

/**
 * Total spec.capacity.storage of the given PVs by spec.volumeMode (unset means
 * Filesystem). PVs being deleted and unparseable capacities are left out.
 */
export function capacityByMode(pvs: Iterable<V1PersistentVolume>): Record<VolumeModeLabel, number> {
  const total: Record<VolumeModeLabel, number> = { Block: 0, Filesystem: 0 };
  for (const pv of pvs) {
    if (pv.metadata?.deletionTimestamp !== undefined) continue;
    const bytes = parseQuantity(String(pv.spec?.capacity?.['storage'] ?? ''));
    if (bytes === undefined) continue;
    total[pv.spec?.volumeMode === 'Block' ? 'Block' : 'Filesystem'] += bytes;
  }
  return total;
}

export interface ProcTableStats {
  running: number;
  succeeded: number;
  failed: number;
}

/** The metrics src/kube (client and informers) updates; each entry point creates them under its own prefix. */
export interface KubeMetrics {
  /** Every request sent to the API server, by verb and resource (not only PV create/delete). */
  readonly kubeRequests: Counter<'verb' | 'resource' | 'code'>;
  readonly watchRestarts: Counter<'resource' | 'reason'>;
}

export function createKubeMetrics(prefix: string, registry: Registry): KubeMetrics {
  return {
    kubeRequests: new Counter({
      name: `${prefix}kube_requests_total`,
      help: 'Total number of requests sent to the API server, by verb, resource and result code.',
      labelNames: ['verb', 'resource', 'code'] as const,
      registers: [registry],
    }),
    watchRestarts: new Counter({
      name: `${prefix}watch_restarts_total`,
      help: 'Watch streams re-opened, by resource and reason (timeout, closed, error, gone, stall).',
      labelNames: ['resource', 'reason'] as const,
      registers: [registry],
    }),
  };
}

/** Resolution of the nodejs_eventloop_lag_* histogram, ms. */
export const EVENT_LOOP_PRECISION_MS = 1000;

export class Metrics implements KubeMetrics {
  readonly registry = new Registry();

  // --- Go provisioner metrics (pkg/metrics/metrics.go) ---
  #capacitySource: (() => Iterable<V1PersistentVolume>) | undefined;

  /**
   * Read at scrape time from this node's PVs (registerCapacitySource). The Go
   * provisioner set it to what the last pass had just created (0 in steady state);
   * here it is the capacity this node offers through its existing PVs.
   */
  readonly capacityBytes: Gauge<'mode'> = new Gauge({
    name: `${METRIC_PREFIX}persistentvolume_capacity_bytes`,
    help: "Capacity in bytes of this node's local persistent volumes (existing PVs, not being deleted), per volume mode.",
    labelNames: ['mode'] as const,
    registers: [this.registry],
    collect: () => {
      const source = this.#capacitySource;
      if (source === undefined) return;
      const total = capacityByMode(source());
      this.capacityBytes.set({ mode: 'Block' }, total.Block);
      this.capacityBytes.set({ mode: 'Filesystem' }, total.Filesystem);
    },
  });
  readonly discoveryTotal = new Counter({
    name: `${METRIC_PREFIX}persistentvolume_discovery_total`,
    help: 'Total number of persistent volumes created by discovery.',
    labelNames: ['mode'] as const,
    registers: [this.registry],
  });
  readonly discoveryDuration = new Histogram({
    name: `${METRIC_PREFIX}persistentvolume_discovery_duration_seconds`,
    help: 'Latency in seconds from finding a volume to its persistent volume being created.',
    labelNames: ['mode'] as const,
    buckets: buckets(),
    registers: [this.registry],
  });
  readonly deleteTotal = new Counter({
    name: `${METRIC_PREFIX}persistentvolume_delete_total`,
    help: 'Total number of persistent volumes deleted after a successful cleanup.',
    labelNames: ['mode', 'type'] as const,
    registers: [this.registry],
  });
  readonly deleteFailedTotal = new Counter({
    name: `${METRIC_PREFIX}persistentvolume_delete_failed_total`,
    help: 'Total number of failed attempts to clean or delete a persistent volume.',
    labelNames: ['mode', 'type'] as const,
    registers: [this.registry],
  });
  readonly deleteDuration = new Histogram({
    name: `${METRIC_PREFIX}persistentvolume_delete_duration_seconds`,
    help: 'Latency in seconds from the start of a cleanup to the persistent volume being deleted.',
    labelNames: ['mode', 'type', 'capacity', 'cleanup_command'] as const,
    buckets: buckets(),
    registers: [this.registry],
  });
  readonly apiserverRequests = new Counter({
    name: `${METRIC_PREFIX}apiserver_requests_total`,
    help: 'Total number of persistent volume create and delete requests sent to the API server.',
    labelNames: ['method'] as const,
    registers: [this.registry],
  });
  readonly apiserverRequestsFailed = new Counter({
    name: `${METRIC_PREFIX}apiserver_requests_failed_total`,
    help: 'Total number of failed persistent volume create and delete requests.',
    labelNames: ['method'] as const,
    registers: [this.registry],
  });
  readonly apiserverRequestsDuration = new Histogram({
    name: `${METRIC_PREFIX}apiserver_requests_duration_seconds`,
    help: 'Latency in seconds of persistent volume create and delete requests.',
    labelNames: ['method'] as const,
    buckets: buckets(),
    registers: [this.registry],
  });

  // --- Our additions ---
  readonly buildInfo = new Gauge({
    name: `${METRIC_PREFIX}build_info`,
    help: 'Always 1; the labels are the provisioner version (package.json) and the Node.js version running it.',
    labelNames: ['version', 'node_version'] as const,
    registers: [this.registry],
  });
  readonly #kube = createKubeMetrics(METRIC_PREFIX, this.registry);
  readonly kubeRequests = this.#kube.kubeRequests;
  readonly watchRestarts = this.#kube.watchRestarts;
  readonly discoveryErrors = new Counter({
    name: `${METRIC_PREFIX}discovery_errors_total`,
    help: 'Errors met while discovering volumes, by storage class.',
    labelNames: ['class'] as const,
    registers: [this.registry],
  });
  readonly volumeMissing = new Counter({
    name: `${METRIC_PREFIX}persistentvolume_volume_missing_total`,
    help: 'Released persistent volumes whose volume path is gone or no longer a mount point (not cleaned, not deleted).',
    labelNames: ['class'] as const,
    registers: [this.registry],
  });
  readonly cleanRefused = new Counter({
    name: `${METRIC_PREFIX}clean_refused_total`,
    help: 'Released persistent volumes not cleaned (nor deleted) because another PV uses the same path (path_in_use), the PV name is not the one this node gives to that volume (name_mismatch), a PVC still names the PV (claim_still_exists), or the path is not what discovery recorded (identity_mismatch).',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly cleanupRetries = new Counter({
    name: `${METRIC_PREFIX}cleanup_retries_total`,
    help: 'Cleanups scheduled for a retry after a failure, by cleanup type.',
    labelNames: ['type'] as const,
    registers: [this.registry],
  });
  readonly configLastReloadSuccessful = new Gauge({
    name: `${METRIC_PREFIX}config_last_reload_successful`,
    help: 'Whether the last configuration reload attempt was successful (1) or rejected (0).',
    registers: [this.registry],
  });
  readonly configLastReloadSuccessTimestamp = new Gauge({
    name: `${METRIC_PREFIX}config_last_reload_success_timestamp_seconds`,
    help: 'Unix time of the last successful configuration load or reload.',
    registers: [this.registry],
  });
  readonly configReloadTotal = new Counter({
    name: `${METRIC_PREFIX}config_reload_total`,
    help: 'Configuration checks, by result: applied, invalid or unchanged.',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });
  readonly configInfo = new Gauge({
    name: `${METRIC_PREFIX}config_info`,
    help: 'Always 1; the hash label is the canonical hash of the configuration in use.',
    labelNames: ['hash'] as const,
    registers: [this.registry],
  });
  /** Issue 19: labels line up with the kubelet's kubelet_volume_stats_health_status_abnormal{namespace,persistentvolumeclaim}. */
  readonly volumeHealthAbnormal = new Gauge({
    name: `${METRIC_PREFIX}volume_health_abnormal`,
    help: 'Whether a local volume of this node has the condition (1) or had it and recovered (0); namespace and persistentvolumeclaim are empty for a PV not bound. The series of a PV go when the PV does.',
    labelNames: ['persistentvolume', 'storageclass', 'condition', 'namespace', 'persistentvolumeclaim'] as const,
    registers: [this.registry],
  });
  readonly controllerRestarts = new Counter({
    name: `${METRIC_PREFIX}controller_restarts_total`,
    help: 'Number of times the local controller was restarted with a new configuration.',
    registers: [this.registry],
  });

  constructor(opts: { defaultMetrics?: boolean } = {}) {
    // Event-loop delay sampled once a second, not every 10 ms (prom-client's default): the
    // 100 wake-ups a second cost ~0.3 s CPU a minute on an idle daemon (issue 12).
    if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: EVENT_LOOP_PRECISION_MS });
    this.buildInfo.set({ version: VERSION, node_version: process.version }, 1);
    this.configReloadTotal.inc({ result: 'applied' }, 0);
    this.configReloadTotal.inc({ result: 'invalid' }, 0);
    this.configReloadTotal.inc({ result: 'unchanged' }, 0);
  }

  /** Exposes the process table, read at scrape time (the Go provisioner's ProcTableCollector). */
  registerProcTable(stats: () => ProcTableStats): void {
    const mk = (name: string, help: string, pick: (s: ProcTableStats) => number): void => {
      new Gauge({
        name: `${METRIC_PREFIX}proctable_${name}`,
        help,
        registers: [this.registry],
        collect() {
          this.set(pick(stats()));
        },
      });
    };
    mk('running', 'Number of cleanup processes running now.', (s) => s.running);
    mk('succeeded', 'Number of cleanup processes that succeeded (cumulative).', (s) => s.succeeded);
    mk('failed', 'Number of cleanup processes that failed (cumulative).', (s) => s.failed);
  }

  /** Makes persistentvolume_capacity_bytes read these PVs (this node's) at every scrape. */
  registerCapacitySource(pvs: () => Iterable<V1PersistentVolume>): void {
    this.#capacitySource = pvs;
  }

  /** Records one PV create/delete request the way the Go provisioner's APIUtil does. */
  async timePvRequest<T>(method: 'create' | 'delete', fn: () => Promise<T>): Promise<T> {
    this.apiserverRequests.inc({ method });
    const end = this.apiserverRequestsDuration.startTimer({ method });
    try {
      return await fn();
    } catch (e) {
      this.apiserverRequestsFailed.inc({ method });
      throw e;
    } finally {
      end();
    }
  }

  setConfigHash(hash: string): void {
    this.configInfo.reset();
    this.configInfo.set({ hash }, 1);
  }
}

/** The Go provisioner's CapacityBreakDown: ceil(bytes / 500GiB) * 500 + "G". */
export function capacityBreakDown(bytes: number): string {
  const unit = 500 * 1024 ** 3;
  return `${Math.ceil(bytes / unit) * 500}G`;
}
