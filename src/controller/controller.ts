// One local controller generation: everything that depends on the config.
// startController() builds the discoverer, the deleter and the job controller
// (with a fresh work queue) for one config, then runs the sync loop:
//   deleter pass -> device links (deviceSelector classes) -> discovery pass -> taint check -> sleep(discovery period)
// The sleep is cut short when a PV of ours changes phase or a cleanup Job
// finishes, so a Released PV is handled at once instead of up to 10 s later.
// stop() ends the loop at a safe point (between volumes), stops the job
// controller and its queue, and resolves when nothing of this generation is
// left running. Process-scope parts (API client, PV/StorageClass informers,
// process table, recorder, metrics, HTTP) come in through ProcessContext and
// outlive the generation.
import { setTimeout as sleep } from 'node:timers/promises';
import type { V1Job, V1Node, V1PersistentVolume, V1StorageClass } from '@kubernetes/client-node';
import { PVCache, type CreatedPVs } from '../volume/pv-cache.ts';
import type { ClassConfig, ProvisionerConfig } from '../config/types.ts';
import { Deleter } from '../deleter/deleter.ts';
import { CleanGuard } from '../deleter/guard.ts';
import { JobController, type JobPresence } from '../deleter/jobcontroller.ts';
import type { ClassMemory } from '../deleter/class-memory.ts';
import type { CleanerRegistry } from '../deleter/orphans.ts';
import type { ProcTable } from '../deleter/proctable.ts';
import { Discoverer, type CleanupTracker } from '../discovery/discoverer.ts';
import { createHealthChecker } from '../health/check.ts';
import { HealthLedger, HealthMonitor } from '../health/monitor.ts';
import type { HealthChecker } from '../health/types.ts';
import { DeviceLinker } from '../devices/linker.ts';
import { MountTableReader } from '../host/mount-snapshot.ts';
import { DeviceLinkStore } from '../devices/link-store.ts';
import { provisionerName } from '../volume/naming.ts';
import type { EventRecorder, ObjectRef } from '../kube/events.ts';
import type { Informer } from '../kube/informer.ts';
import type { KubePort } from '../kube/port.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { Readiness } from '../util/readiness.ts';
import type { KeyedBackoff } from '../util/backoff.ts';
import type { Logger } from '../util/log.ts';
import type { GenerationEnv } from '../volume/env.ts';
import { reportRemovedClasses } from './class-removal.ts';
import type { NodeTaintRemover } from './node-taint.ts';
import type { Generation, GenerationContext } from './supervisor.ts';

export interface ProcessContext {
  readonly kube: KubePort;
  readonly node: V1Node;
  readonly namespace: string;
  readonly jobImage: string;
  /** This node's PVs (nodePVSelection: ours whole, stubs of other local PVs on this node), shared by every generation. */
  readonly pvInformer: Informer<V1PersistentVolume>;
  /**
   * PVs discovery created that pvInformer has not delivered yet, shared by every generation: after
   * a reload the new generation must not create again what the previous one has just created.
   */
  readonly createdPVs: CreatedPVs;
  readonly scInformer: Informer<V1StorageClass>;
  readonly makeJobInformer: (labelSelector: string, onList: (err: unknown) => void) => Informer<V1Job>;
  /** Whether cleanup Jobs of this node may exist (decides whether a generation watches Jobs). */
  readonly jobPresence: JobPresence;
  /** The provisioner Pod and its Node: where process-level Warnings go. */
  readonly eventRefs: readonly ObjectRef[];
  readonly procTable: ProcTable;
  readonly recorder: EventRecorder;
  readonly metrics: Metrics;
  readonly logger: Logger;
  readonly readiness: Readiness;
  readonly taintRemover: NodeTaintRemover;
  readonly discoveryPeriodMs: number;
  readonly cleanTimeoutMs: number;
  readonly maxConcurrentCleans: number;
  /** Labels added to every PV this node creates, over labelsForPV (--pv-node-label). */
  readonly extraPVLabels?: Readonly<Record<string, string>> | undefined;
  /** Mount table (default /proc/self/mountinfo; a seam for tests). */
  readonly mountInfoPath?: string | undefined;
  /** Process-scope retry state, so a config reload does not reset cleanup backoff. */
  readonly cleanRetryBackoff: KeyedBackoff;
  readonly jobFailureBackoff: KeyedBackoff;
  /** Undefined when the state dir cannot be used. */
  readonly cleanerRegistry?: CleanerRegistry | undefined;
  /**
   * The last settings of every class, kept in the state dir across restarts (class-memory.ts):
   * Released PVs of a class removed from the config are cleaned with them.
   */
  readonly classMemory?: ClassMemory | undefined;
  /** The links made for deviceSelector classes (issue 21), kept in the state dir; in memory when undefined. */
  readonly deviceLinks?: DeviceLinkStore | undefined;
  /** Aborted at process shutdown: kills running in-process cleaners. */
  readonly shutdown: AbortSignal;
  /** Volume health state of every PV (issue 19), so a reload neither repeats Events nor restarts grace periods. */
  readonly healthLedger?: HealthLedger | undefined;
  /** The per-volume health check (default: check.ts's, on mountInfoPath). */
  readonly healthChecker?: HealthChecker | undefined;
}

/** Sleeps until the timeout, a kick, or an abort; whichever comes first. */
class Waker {
  #wake: (() => void) | undefined;
  #pending = false;
  kick(): void {
    this.#pending = true;
    this.#wake?.();
  }
  sleep(ms: number, signal: AbortSignal): Promise<void> {
    if (this.#pending || signal.aborted) {
      this.#pending = false;
      return Promise.resolve();
    }
    const kicked = new AbortController();
    let finished = false;
    const done = (): void => {
      if (finished) return; // a kick already finished this sleep; a later kick stays pending
      finished = true;
      this.#wake = undefined;
      this.#pending = false;
    };
    this.#wake = () => {
      done();
      kicked.abort();
    };
    return sleep(ms, undefined, { signal: AbortSignal.any([signal, kicked.signal]) }).then(done, done);
  }
}

export async function startController(
  pc: ProcessContext,
  config: ProvisionerConfig,
  ctx: GenerationContext,
): Promise<Generation> {
  const nodeName = pc.node.metadata?.name ?? '';
  const nodeUid = pc.node.metadata?.uid ?? '';
  const name = provisionerName({ name: nodeName, uid: nodeUid }, config.useNodeNameOnly);
  const log = pc.logger.child({ controllerGeneration: ctx.generation, configHash: ctx.hash.slice(0, 12) });
  const abort = new AbortController();
  const waker = new Waker();

  // Wait for the process-scope caches (a no-op after the first generation).
  await Promise.all([pc.pvInformer.waitForSync(ctx.signal), pc.scInformer.waitForSync(ctx.signal)]);

  const env: GenerationEnv = {
    config,
    lookupClass: (className: string): ClassConfig | undefined =>
      config.storageClassMap[className] ?? ctx.lastKnownClasses.get(className) ?? pc.classMemory?.get(className),
    node: pc.node,
    nodeId: { name: nodeName, uid: nodeUid },
    provisionerName: name,
    namespace: pc.namespace,
    jobImage: pc.jobImage,
    kube: pc.kube,
    recorder: pc.recorder,
    metrics: pc.metrics,
    logger: log,
    now: Date.now,
    mountInfoPath: pc.mountInfoPath,
  };

  const pvCache = new PVCache(env, { informer: pc.pvInformer, created: pc.createdPVs });
  // Remember this config's classes (persisted), keep removed ones while PVs of this node name
  // them, and warn about classes removed since the previous config (or while the daemon was down).
  if (pc.classMemory) {
    const named = new Set(pc.pvInformer.list().map((pv) => pv.spec?.storageClassName ?? ''));
    const { removed } = pc.classMemory.apply(config, (c) => named.has(c));
    reportRemovedClasses(removed, pvCache.list(), {
      recorder: pc.recorder,
      refs: pc.eventRefs,
      logger: log,
      remembered: (c) => env.lookupClass(c) !== undefined,
    });
  }
  // Run the loop early when one of our PVs is released (or deleted).
  const unsubscribe = pc.pvInformer.on({
    update: (oldPv, newPv) => {
      if (oldPv.status?.phase !== newPv.status?.phase && newPv.status?.phase === 'Released') waker.kick();
    },
    delete: () => waker.kick(),
  });

  // Jobs started under an earlier config (or process) are followed to
  // completion whatever useJobForCleaning says now; without useJobForCleaning
  // Jobs are only watched while some may exist (JobPresence), so the daemon
  // needs no Jobs RBAC then. Only the creation of new Jobs depends on
  // useJobForCleaning (in the deleter).
  // One set of refusal checks (and one warn window) for the deleter and the job controller.
  const guard = new CleanGuard(env, { allPvs: pc.pvInformer });
  const jobController = new JobController(env, {
    guard,
    informerFactory: pc.makeJobInformer,
    pvs: pvCache,
    failureBackoff: pc.jobFailureBackoff,
    onChange: () => waker.kick(),
    watch: pc.jobPresence.modeFor(config.useJobForCleaning),
    presence: pc.jobPresence,
    eventRefs: pc.eventRefs,
  });
  jobController.start();
  // Know every existing cleanup Job before the first deleter pass, or a Job
  // started under the previous config would look absent and the volume would
  // get a second, concurrent clean. (A 403 with useJobForCleaning on ends the
  // wait too: the loop below then waits, reporting why.)
  try {
    await jobController.waitForSync(ctx.signal);
  } catch (err) {
    await jobController.stop();
    unsubscribe();
    pvCache.close();
    throw err;
  }

  const tracker: CleanupTracker = {
    inProgress: (pv) => pc.procTable.isRunning(pv) || jobController.inProgress(pv),
    removeStatus: async (pv) => {
      if (!pc.procTable.isRunning(pv)) pc.procTable.removeEntry(pv);
      await jobController.removeStatus(pv);
    },
  };

  const deleter = new Deleter(env, {
    pvs: pvCache,
    allPvs: pc.pvInformer,
    guard,
    procTable: pc.procTable,
    jobController,
    cleanTimeoutMs: pc.cleanTimeoutMs,
    maxConcurrentCleans: pc.maxConcurrentCleans,
    retryBackoff: pc.cleanRetryBackoff,
    signal: pc.shutdown,
    cleanerRegistry: pc.cleanerRegistry,
    onChange: () => waker.kick(),
  });
  // One read of the mount table per period for discovery and the health pass (not the deleter: it reads afresh).
  const mountTable = new MountTableReader(pc.mountInfoPath);
  const discoverer = new Discoverer(env, {
    pvCache,
    storageClasses: pc.scInformer,
    cleanupTracker: tracker,
    signal: abort.signal,
    extraLabels: pc.extraPVLabels,
    mountTable,
  });

  const health = new HealthMonitor(env, {
    checker: pc.healthChecker ?? createHealthChecker({ mountTable }),
    pvs: pvCache,
    ledger: pc.healthLedger ?? new HealthLedger(),
    signal: abort.signal,
  });
  const linker = new DeviceLinker(env, {
    pvs: pvCache,
    store: pc.deviceLinks ?? DeviceLinkStore.inMemory(nodeName, log),
    cleaning: (pv) => tracker.inProgress(pv),
  });

  log.info({ provisioner: name, classes: Object.keys(config.storageClassMap) }, 'Controller started');
  const loop = (async () => {
    while (!abort.signal.aborted) {
      const jobsProblem = jobController.problem();
      if (jobsProblem !== undefined) {
        // useJobForCleaning, but the Jobs cannot be listed: neither clean nor create PVs blind.
        pc.readiness.set(false, jobsProblem);
        await waker.sleep(pc.discoveryPeriodMs, abort.signal);
        continue;
      }
      try {
        await deleter.deletePVs();
      } catch (err) {
        log.error({ err }, 'deleter pass failed');
      }
      if (abort.signal.aborted) break;
      // Raw disks of deviceSelector classes are linked (or unlinked) before discovery looks at the dirs.
      await linker.sync();
      if (abort.signal.aborted) break;
      mountTable.newPeriod();
      try {
        const r = await discoverer.discover();
        if (!abort.signal.aborted) pc.readiness.set(r.ready, r.errors.join('; '));
        if (r.errors.length > 0) log.warn({ errors: r.errors }, `Failed to discover local volumes: ${r.errors.length} error(s)`);
      } catch (err) {
        log.error({ err }, 'discovery pass failed');
        pc.readiness.set(false, String(err));
      }
      if (!abort.signal.aborted) {
        try {
          await health.pass();
        } catch (err) {
          log.error({ err }, 'volume health pass failed');
        }
      }
      await pc.taintRemover.maybeRemove(config.removeNodeNotReadyTaint, config.provisionerNotReadyNodeTaintKey, pc.readiness.ready);
      await waker.sleep(pc.discoveryPeriodMs, abort.signal);
    }
  })();

  return {
    async stop(): Promise<void> {
      abort.abort();
      await loop;
      unsubscribe();
      await jobController.stop();
      await deleter.stop();
      // At process shutdown its in-process cleans were aborted (pc.shutdown): wait until they have
      // ended, so no cleaner outlives the daemon and each abort is logged. (On a reload they go on.)
      if (pc.shutdown.aborted) await deleter.idle();
      pvCache.close();
      log.info('Controller stopped');
    },
  };
}
