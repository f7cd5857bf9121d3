// Follows this node's cleanup Jobs and finishes what they started. One per
// controller generation: start() builds a fresh work queue and a Job informer
// (selector kubernetes.io/hostname=<node name> in MY_NAMESPACE), stop() tears
// both down. Jobs created by an earlier generation or an earlier process are
// in the informer's first list, so they are followed to completion too.
//
// Jobs are only watched when they may matter (JobWatchMode), so a daemon that
// does not use Jobs needs no Jobs RBAC at all:
// - 'required' (useJobForCleaning): the informer runs; a 403 on its list is a
//   problem (one Warning Event per generation, an error log, /ready false with
//   the reason) and the generation neither cleans nor creates PVs until the
//   list works (the informer keeps retrying; no restart needed).
// - 'ifPresent' (useJobForCleaning off, but Jobs of an earlier config or of an
//   earlier process may exist): one list. Jobs found: followed as above. None,
//   or 403: no Job is followed, and JobPresence remembers it, so later
//   generations make no Job request at all ('off') until a generation with
//   useJobForCleaning runs again.
//
// Unlike the Go job controller (which only logged, while the deleter polled),
// the workers act on Job changes:
// - Succeeded: if the Job's pvuuid label is the UID of the PV and the PV is
//   still Released (reclaim Delete, no deletionTimestamp), re-run every
//   refusal check of guard.ts (claim lookup included): a PV that fails them is
//   kept (Warning VolumeCleanRefused, clean_refused_total) and only the Job is
//   deleted; one whose checks cannot be made now (API error) waits, Job kept,
//   for the work queue's retry. Otherwise delete the PV with a UID
//   precondition, count it, then delete the Job. The PV goes first: if
//   the process dies in between, the leftover Job is finished and stale (its
//   pvuuid names a PV that is gone) and is simply deleted later, while
//   Job-first would leave a Released PV with no Job, i.e. a second full clean.
//   A Job whose PV is gone, has another UID or is no longer Released is only
//   deleted: its result never stands for another PV (upstream #174).
// - Failed (condition Failed/FailureTarget, or more failures than backoffLimit):
//   one Warning event on the PV, delete_failed_total and cleanup_retries_total,
//   delete the Job, and hold the PV in a backoff (30 s doubling to 10 min). The
//   deleter creates a new Job once it is over, after re-checking the volume.
//   Upstream left failed Jobs in place, which blocked the PV forever.
// - Finished Jobs are deleted with propagationPolicy Background: the Job object
//   goes at once (so cleanup-<pv> can be created again without an AlreadyExists
//   race) and the garbage collector removes its Pods.
// - withdraw() (the deleter, on a refusal): deletes the PV's pending or running
//   cleanup Job, if its name, pv label and pvuuid label are that PV's, with
//   propagationPolicy Foreground (the Job object stays until its pods are gone,
//   so no new Job of that name starts while the old pod may still clean).
// - The PV of a Job is the one its name names (cleanup-<pv>); the `pv` label
//   must agree. A Job whose label names another PV (or none) is ignored with a
//   warning: it never makes the controller delete a PV (nor the Job).
import type { V1Job, V1PersistentVolume } from '@kubernetes/client-node';
import type { ObjectRef } from '../kube/events.ts';
import { pvRef } from '../kube/events.ts';
import { objectKey, type Informer, type Store } from '../kube/informer.ts';
import { isConflict, isForbidden, isNotFound } from '../kube/port.ts';
import type { GenerationEnv } from '../volume/env.ts';
import { KeyedBackoff, type BackoffOptions } from '../util/backoff.ts';
import type { Logger } from '../util/log.ts';
import { runWorker, WorkQueue, type WorkQueueBackoffOptions } from '../util/workqueue.ts';
import { errorMessage } from '../util/errors.ts';
import { recordDeleted, type ModeLabel } from './common.ts';
import { CleanGuard } from './guard.ts';
import {
  BLOCK_DEVICE_ENV,
  cleanupJobName,
  jobLabelSelector,
  jobPhase,
  jobStartTime,
  jobTarget,
  JOB_NAME_PREFIX,
  PV_UID_LABEL,
  type JobPhase,
} from './job.ts';
import { REASON_FAILED_DELETE, REASON_JOBS_FORBIDDEN } from '../kube/reasons.ts';

/** How a generation follows cleanup Jobs; see the file comment. */
export type JobWatchMode = 'required' | 'ifPresent' | 'off';

/** Process scope: may cleanup Jobs of this node exist? Yes (unknown) until a list finds none. */
export class JobPresence {
  #mayExist = true;

  /** The watch mode of a generation with this useJobForCleaning. */
  modeFor(useJobForCleaning: boolean): JobWatchMode {
    if (useJobForCleaning) return 'required';
    return this.#mayExist ? 'ifPresent' : 'off';
  }

  /** A generation that creates Jobs started. */
  possible(): void {
    this.#mayExist = true;
  }

  /** A list found no cleanup Job of this node (or Jobs may not be listed while they are not used). */
  none(): void {
    this.#mayExist = false;
  }
}

export const DEFAULT_JOB_FAILURE_BACKOFF: BackoffOptions = { initialMs: 30_000, maxMs: 10 * 60_000, factor: 2, jitter: 0.1 };

/** The job controller's own options; the rest (namespace: where cleanup Jobs live) comes from the GenerationEnv. */
export interface JobControllerOptions {
  /** Builds the Job informer for a label selector (createInformer(kube, 'jobs', { namespace, labelSelector, onList }) in production). */
  readonly informerFactory: (labelSelector: string, onList: (err: unknown) => void) => Informer<V1Job>;
  /** This node's PVs of this provisioner. */
  readonly pvs: Store<V1PersistentVolume>;
  /** Parallel workers (default 2). */
  readonly workers?: number | undefined;
  /** Per-PV backoff after a failed Job; pass a process-scope one to keep it across reloads. */
  readonly failureBackoff?: KeyedBackoff | undefined;
  /** Retry delays of the work queue after an API error (default 1 s .. 5 min). */
  readonly queueRateLimit?: WorkQueueBackoffOptions | undefined;
  /** Called after a PV was deleted or a Job went away (e.g. to run the sync loop early). */
  readonly onChange?: (() => void) | undefined;
  /** Default 'required'. */
  readonly watch?: JobWatchMode | undefined;
  /** Process-scope memory of whether Jobs may exist (updated by start()). */
  readonly presence?: JobPresence | undefined;
  /** Where the CleanupJobsForbidden Warning goes (the Pod and the Node). */
  readonly eventRefs?: readonly ObjectRef[] | undefined;
  /** The refusal checks; share the deleter's (default: one of its own over `pvs`). */
  readonly guard?: CleanGuard | undefined;
}

export interface JobStatus {
  /** Unknown: the Jobs are being listed (or cannot be): wait. */
  readonly state: 'NotFound' | 'Backoff' | 'Unknown' | JobPhase;
  /** The Job belongs to another PV with the same name (its pvuuid differs). */
  readonly stale?: boolean | undefined;
  /** ms left of the failure backoff (state Backoff). */
  readonly retryInMs?: number | undefined;
}

const modeOf = (job: V1Job): ModeLabel => {
  const env = job.spec?.template.spec?.containers[0]?.env ?? [];
  return env.some((e) => e.name === BLOCK_DEVICE_ENV) ? 'Block' : 'Filesystem';
};
const commandOf = (job: V1Job): string => job.spec?.template.spec?.containers[0]?.command?.[0] ?? '';
const isCleanupJob = (job: V1Job): boolean => job.metadata?.name?.startsWith(JOB_NAME_PREFIX) ?? false;

/** Also the discoverer's CleanupTracker (the Go CleanupStatusTracker): inProgress and removeStatus. */
export class JobController {
  readonly #env: GenerationEnv;
  readonly #o: JobControllerOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #backoff: KeyedBackoff;
  readonly #guard: CleanGuard;
  #queue: WorkQueue<string> | undefined;
  #informer: Informer<V1Job> | undefined;
  #unsubscribe: (() => void) | undefined;
  #workers: Promise<void>[] = [];
  #stopped = false;
  /** idle: not started; probing: the one list of 'ifPresent'; following: informer; none: no Job followed. */
  #phase: 'idle' | 'probing' | 'following' | 'none' = 'idle';
  #problem: string | undefined;
  readonly #settled = Promise.withResolvers<void>();
  readonly #abort = new AbortController();
  /** UIDs of failed Jobs already reported (one event per failed Job, even if its delete is retried). */
  readonly #reported = new Set<string>();
  /** UIDs of Jobs ignored because their name and pv label disagree (warned once each). */
  readonly #ignored = new Set<string>();

  constructor(env: GenerationEnv, opts: JobControllerOptions) {
    this.#env = env;
    this.#o = opts;
    this.#log = env.logger.child({ component: 'job-controller' });
    this.#now = env.now;
    this.#backoff = opts.failureBackoff ?? new KeyedBackoff(DEFAULT_JOB_FAILURE_BACKOFF, this.#now);
    this.#guard = opts.guard ?? new CleanGuard(env, { allPvs: opts.pvs });
  }

  /** Starts following this node's Jobs as the watch mode says; idempotent. */
  start(): void {
    if (this.#phase !== 'idle' || this.#stopped) return;
    const mode = this.#o.watch ?? 'required';
    if (mode === 'required') {
      this.#o.presence?.possible();
      this.#follow();
    } else if (mode === 'ifPresent') {
      this.#phase = 'probing';
      void this.#probe();
    } else {
      this.#followNone();
    }
  }

  /** 'ifPresent': one list; follow the Jobs only if there are any. */
  async #probe(): Promise<void> {
    const namespace = this.#env.namespace;
    try {
      const res = await this.#env.kube.list('jobs', { namespace, labelSelector: jobLabelSelector(this.#env.nodeId.name) });
      if (this.#stopped) return;
      const n = res.items.filter(isCleanupJob).length;
      if (n > 0) {
        this.#log.info({ namespace, jobs: n }, 'found cleanup Jobs of an earlier configuration or process; following them to completion');
        this.#follow();
        return;
      }
      this.#log.debug({ namespace }, 'no cleanup Job of this node; not watching Jobs');
    } catch (e) {
      if (this.#stopped) return;
      if (!isForbidden(e)) {
        // Transient: let the informer retry (its own 403 still ends up in #followNone).
        this.#log.warn({ namespace, err: e }, 'cannot list cleanup Jobs; watching them until the list works');
        this.#follow();
        return;
      }
      this.#forbiddenWhileUnused(e);
    }
    this.#followNone();
  }

  /** The base RBAC grants no Jobs: expected while no class uses them, so one debug line, without a stack. */
  #forbiddenWhileUnused(e: unknown): void {
    this.#log.debug(
      { namespace: this.#env.namespace, reason: errorMessage(e) },
      'not allowed to list cleanup Jobs; useJobForCleaning is off, so no Job is followed',
    );
  }

  /** No Job is followed by this generation, nor (until useJobForCleaning is on again) by later ones. */
  #followNone(): void {
    this.#o.presence?.none();
    this.#phase = 'none';
    this.#settled.resolve();
  }

  /** Starts the informer and the workers. */
  #follow(): void {
    this.#phase = 'following';
    const queue = new WorkQueue<string>({ baseDelayMs: 1000, maxDelayMs: 5 * 60_000, ...this.#o.queueRateLimit });
    this.#queue = queue;
    const informer = this.#o.informerFactory(jobLabelSelector(this.#env.nodeId.name), (err) => this.#onList(err));
    this.#informer = informer;
    const enqueue = (job: V1Job): void => {
      if (isCleanupJob(job)) queue.add(objectKey(job));
    };
    this.#unsubscribe = informer.on({
      add: enqueue,
      update: (_old, job) => enqueue(job),
      delete: (job) => {
        if (job.metadata?.uid) {
          this.#reported.delete(job.metadata.uid);
          this.#ignored.delete(job.metadata.uid);
        }
        enqueue(job);
      },
    });
    informer.start();
    informer.waitForSync(this.#abort.signal).then(
      () => this.#settled.resolve(),
      () => undefined,
    );
    const n = Math.max(1, this.#o.workers ?? 2);
    for (let i = 0; i < n; i++) {
      this.#workers.push(
        runWorker(queue, (key) => this.#process(key), (job, e, retries) => {
          const pv = job.slice(job.indexOf('/') + 1 + JOB_NAME_PREFIX.length);
          this.#log.warn({ pv, job, err: e, retries }, 'processing cleanup job failed; will retry');
        }),
      );
    }
  }

  /** Every list of the Job informer: a 403 is a problem with useJobForCleaning, the end of the watch without. */
  #onList(err: unknown): void {
    if (err === undefined) {
      this.#setProblem(undefined);
      return;
    }
    if (!isForbidden(err) || this.#stopped) return;
    if ((this.#o.watch ?? 'required') === 'required') {
      this.#setProblem(`cannot list cleanup Jobs in namespace ${this.#env.namespace} although useJobForCleaning is on: ${errorMessage(err)}`);
      this.#settled.resolve();
    } else if (!this.#informer?.hasSynced()) {
      this.#forbiddenWhileUnused(err);
      void this.#stopFollowing();
      this.#followNone();
    }
  }

  #setProblem(problem: string | undefined): void {
    const had = this.#problem !== undefined;
    this.#problem = problem;
    if (had === (problem !== undefined)) return;
    if (problem !== undefined) {
      const msg = `${problem}. Nothing is cleaned and no PV is created until the Jobs can be listed: grant the Role of deployment/kubernetes/components/job-cleaning, or set useJobForCleaning to false.`;
      this.#log.error({ namespace: this.#env.namespace }, msg);
      for (const ref of this.#o.eventRefs ?? []) this.#env.recorder.event(ref, 'Warning', REASON_JOBS_FORBIDDEN, msg);
    } else {
      this.#log.info({ namespace: this.#env.namespace }, 'cleanup Jobs can be listed again; resuming');
    }
    this.#o.onChange?.();
  }

  /** Why this generation cannot go on (useJobForCleaning on, Jobs forbidden), or undefined. */
  problem(): string | undefined {
    return this.#problem;
  }

  /** Stops the workers (after their current item), the queue and the informer. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#abort.abort();
    await this.#stopFollowing();
  }

  async #stopFollowing(): Promise<void> {
    this.#queue?.shutDown();
    this.#unsubscribe?.();
    const informer = this.#informer;
    this.#informer = undefined;
    await Promise.allSettled([informer?.stop(), ...this.#workers]);
    this.#workers = [];
  }

  /** True once the Jobs to follow are known (the informer synced, or none are followed). */
  hasSynced(): boolean {
    return this.#phase === 'none' || (this.#informer?.hasSynced() ?? false);
  }

  /**
   * Resolves once the Jobs to follow are known (see hasSynced), or once listing them
   * was forbidden with useJobForCleaning on (problem() then says so). Rejects if the
   * signal aborts first.
   */
  waitForSync(signal?: AbortSignal): Promise<void> {
    if (this.#phase === 'idle') return Promise.reject(new Error('job controller not started'));
    if (!signal) return this.#settled.promise;
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => reject(new Error('waiting for the cleanup Jobs to be listed was aborted'));
      if (signal.aborted) {
        onAbort();
        return;
      }
      signal.addEventListener('abort', onAbort, { once: true });
      void this.#settled.promise.then(() => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      });
    });
  }

  /** The Jobs are being listed (or cannot be): nothing about a PV's Job is known yet. */
  #unknown(): boolean {
    return this.#phase === 'probing' || (this.#phase === 'following' && !(this.#informer?.hasSynced() ?? false));
  }

  #job(pvName: string): V1Job | undefined {
    return this.#informer?.get(`${this.#env.namespace}/${cleanupJobName(pvName)}`);
  }

  /** True while a cleanup Job of this PV name exists (running, or finished and not yet handled), or may exist. */
  inProgress(pvName: string): boolean {
    return this.#unknown() || this.#job(pvName) !== undefined;
  }

  /** The cleanup state of a PV (with its UID, to tell a stale Job of an older PV apart). */
  status(pvName: string, uid?: string): JobStatus {
    if (this.#unknown()) return { state: 'Unknown' };
    const job = this.#job(pvName);
    if (job) {
      const stale = uid !== undefined && job.metadata?.labels?.[PV_UID_LABEL] !== uid;
      return { state: job.metadata?.deletionTimestamp ? 'Running' : jobPhase(job), stale };
    }
    const wait = this.#backoff.remaining(pvName);
    return wait > 0 ? { state: 'Backoff', retryInMs: wait } : { state: 'NotFound' };
  }

  /** Discovery, before re-creating a PV: deletes a finished cleanup Job of that name. */
  async removeStatus(pvName: string): Promise<void> {
    this.#backoff.forget(pvName);
    const job = this.#job(pvName);
    if (!job || jobPhase(job) === 'Running') return;
    await this.#deleteJob(job);
  }

  /** The deleter refused the PV: deletes its pending or running cleanup Job (ours for this name and UID); true if it did. */
  async withdraw(pvName: string, uid: string): Promise<boolean> {
    const job = this.#job(pvName);
    if (!job || job.metadata?.deletionTimestamp) return false;
    const target = jobTarget(job);
    if (target.problem !== undefined || target.pvName !== pvName || job.metadata?.labels?.[PV_UID_LABEL] !== uid) return false;
    try {
      await this.#env.kube.deleteJob(this.#env.namespace, job.metadata?.name ?? '', { uid: job.metadata?.uid, propagationPolicy: 'Foreground' });
    } catch (e) {
      if (isNotFound(e) || isConflict(e)) return false;
      throw e;
    }
    this.#log.warn({ pv: pvName, job: objectKey(job) }, `withdrew cleanup job ${objectKey(job)}: the deleter refused PV ${JSON.stringify(pvName)}`);
    return true;
  }

  async #process(key: string): Promise<void> {
    const job = this.#informer?.get(key);
    if (!job) {
      this.#o.onChange?.();
      return;
    }
    if (job.metadata?.deletionTimestamp) return;
    const phase = jobPhase(job);
    if (phase === 'Running') return;
    const target = jobTarget(job);
    if (target.problem !== undefined) {
      this.#ignore(job, target.problem);
      return;
    }
    const pvName = target.pvName;
    const pv = this.#o.pvs.get(pvName);
    const ours = pv !== undefined && pv.metadata?.uid === job.metadata?.labels?.[PV_UID_LABEL];
    if (phase === 'Succeeded') await this.#succeeded(job, pvName, ours ? pv : undefined);
    else await this.#failed(job, pvName, ours ? pv : undefined);
  }

  /** A Job that does not say consistently which PV it cleaned: never acted on, never deleted; one warning per Job. */
  #ignore(job: V1Job, problem: string): void {
    const uid = job.metadata?.uid ?? objectKey(job);
    if (this.#ignored.has(uid)) return;
    this.#ignored.add(uid);
    this.#log.warn({ job: objectKey(job) }, `ignoring cleanup job ${objectKey(job)}: ${problem}; no PV is deleted because of it`);
  }

  async #succeeded(job: V1Job, pvName: string, pv: V1PersistentVolume | undefined): Promise<void> {
    const releasedForDelete =
      pv !== undefined &&
      pv.status?.phase === 'Released' &&
      pv.spec?.persistentVolumeReclaimPolicy === 'Delete' &&
      !pv.metadata?.deletionTimestamp;
    if (pv && releasedForDelete) {
      if (await this.#passesChecks(job, pvName, pv)) await this.#deletePV(job, pvName, pv);
    } else {
      this.#log.info({ pv: pvName, job: objectKey(job) }, 'cleanup job finished for a PV that is gone, replaced or no longer Released; deleting the job only');
    }
    await this.#deleteJob(job);
    this.#o.onChange?.();
  }

  /** Every refusal check again before the PV delete; throws (the Job stays, retried) when they cannot be made now. */
  async #passesChecks(job: V1Job, pvName: string, pv: V1PersistentVolume): Promise<boolean> {
    const verdict = await this.#guard.check(pv, {}, { claims: true });
    switch (verdict.kind) {
      case 'ok':
        return true;
      case 'unknown':
        throw new Error(verdict.why);
      case 'refused':
        this.#guard.refuse(pv, verdict.refusals);
        this.#log.warn({ pv: pvName, job: objectKey(job) }, 'cleanup job finished for a PV that fails the refusal checks now; keeping the PV, deleting the job only');
        return false;
      case 'invalid':
        this.#log.warn({ pv: pvName, job: objectKey(job) }, `cleanup job finished for a PV whose volume cannot be located (${verdict.why}); keeping the PV, deleting the job only`);
        return false;
    }
  }

  async #deletePV(job: V1Job, pvName: string, pv: V1PersistentVolume): Promise<void> {
    const uid = pv.metadata?.uid;
    this.#log.info({ pv: pvName, job: objectKey(job) }, 'deleting PV after a successful cleanup job');
    try {
      await this.#env.metrics.timePvRequest('delete', () => this.#env.kube.deletePersistentVolume(pvName, { uid }));
      recordDeleted(this.#env.metrics, {
        mode: modeOf(job),
        type: 'job',
        pv,
        command: commandOf(job),
        startTime: jobStartTime(job),
        now: this.#now(),
      });
      this.#backoff.forget(pvName);
    } catch (e) {
      if (isConflict(e)) {
        this.#log.info({ pv: pvName }, 'PV was replaced meanwhile (UID precondition failed); not deleting it');
      } else if (!isNotFound(e)) {
        this.#env.metrics.deleteFailedTotal.inc({ mode: modeOf(job), type: 'job' });
        this.#env.recorder.event(pvRef(pv), 'Warning', REASON_FAILED_DELETE, `Error deleting PV ${JSON.stringify(pvName)} after its cleanup: ${errorMessage(e)}`);
        throw e; // retried with backoff; the Job stays so the clean is not repeated
      }
    }
  }

  async #failed(job: V1Job, pvName: string, pv: V1PersistentVolume | undefined): Promise<void> {
    const jobUid = job.metadata?.uid ?? objectKey(job);
    if (!this.#reported.has(jobUid)) {
      this.#reported.add(jobUid);
      const delay = this.#backoff.failure(pvName);
      const cond = job.status?.conditions?.find((c) => (c.type === 'Failed' || c.type === 'FailureTarget') && c.status === 'True');
      const why = cond ? `${cond.reason ?? 'Failed'}${cond.message ? `: ${cond.message}` : ''}` : `${job.status?.failed ?? 0} failed pods`;
      const msg = `Cleanup job ${objectKey(job)} failed (${why}); a new one starts in ${Math.round(delay / 1000)}s`;
      this.#log.warn({ pv: pvName, job: objectKey(job), retryInMs: delay }, msg);
      this.#env.metrics.deleteFailedTotal.inc({ mode: modeOf(job), type: 'job' });
      this.#env.metrics.cleanupRetries.inc({ type: 'job' });
      if (pv) this.#env.recorder.event(pvRef(pv), 'Warning', REASON_FAILED_DELETE, msg);
    }
    await this.#deleteJob(job);
    // The uid stays in #reported until the informer reports the Job deleted: an
    // update of the same failed Job still queued must not count as a new failure.
    this.#o.onChange?.();
  }

  async #deleteJob(job: V1Job): Promise<void> {
    try {
      await this.#env.kube.deleteJob(this.#env.namespace, job.metadata?.name ?? '', {
        uid: job.metadata?.uid,
        propagationPolicy: 'Background',
      });
    } catch (e) {
      if (!isNotFound(e) && !isConflict(e)) throw e;
    }
  }
}
