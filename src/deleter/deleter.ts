// The deleter: cleans Released PVs of this provisioner and deletes them so
// discovery can offer the volume again. One per controller generation;
// deletePVs() is called by the sync loop and never throws.
//
// Selection: phase Released, no deletionTimestamp, provisioned on this node,
// reclaim policy Delete. Retain is ignored; Recycle and unknown policies get a
// Warning event at most once per backoff window (upstream: every loop).
//
// Before ANY clean, the volume must still be the one the PV describes:
// - spec.local.path is a direct child <hostDir>/<name> of its class's hostDir
//   (the class comes from the current config, or for a class removed from the
//   config its last known settings);
// - the refusal checks of guard.ts hold (path_in_use, name_mismatch,
//   identity_mismatch on every pass; claim_still_exists, which costs API
//   requests, right before a clean starts, a cleanup Job is created, or the PV
//   is deleted after an in-process clean); otherwise Warning
//   VolumeCleanRefused and the clean_refused metric, with backoff, the PV is
//   kept and its cleanup Job, if one is pending or running, is withdrawn
//   (deleted with propagation Foreground, so its pod goes too);
// - <mountDir>/<name> exists and is a mount point (Filesystem) or a block
//   device (Block; a PV with volumeMode Block never gets a directory cleaned).
// Otherwise the volume has vanished: Warning event VolumeMissing and the
// volume_missing metric, with backoff; nothing is cleaned and the PV is kept.
//
// A PV is deleted (UID precondition) only after a clean that succeeded for
// that PV's UID: in-process cleans are tracked by the process-scope ProcTable,
// Job cleans by the JobController (which deletes the PV itself). A failed clean
// gives a VolumeFailedDelete event, delete_failed_total and
// cleanup_retries_total, and is retried after an exponential backoff
// (10 s .. 10 min). One PV is never cleaned twice at once: a running
// in-process clean or an existing Job blocks any new clean of that PV name,
// whatever useJobForCleaning says now (upstream #465, mode switches).
// In-process cleans run at most `maxConcurrentCleans` at a time (default 4).
// They outlive the generation: stop() does not abort them; the next
// generation's deleter finds their result in the ProcTable.
import { stat } from 'node:fs/promises';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { pvOnThisNode } from '../volume/pv-cache.ts';
import type { ClassConfig, VolumeMode } from '../config/types.ts';
import type { PathKind } from '../identity/identity.ts';
import { pvRef, type EventType } from '../kube/events.ts';
import type { Store } from '../kube/informer.ts';
import { isAlreadyExists, isConflict, isNotFound } from '../kube/port.ts';
import type { GenerationEnv } from '../volume/env.ts';
import { KeyedBackoff, type BackoffOptions } from '../util/backoff.ts';
import type { Logger } from '../util/log.ts';
import { cleanBlockDevice, cleanFilesystem, type BlockCleanOptions, type CleanResult, type FilesystemCleanOptions } from './cleaner.ts';
import { errorMessage } from '../util/errors.ts';
import {
  recordDeleted,
  type CleanupType,
  type ModeLabel,
} from './common.ts';
import { buildCleanupJob } from './job.ts';
import type { JobStatus } from './jobcontroller.ts';
import type { CleanerRegistry } from './orphans.ts';
import type { ProcTable } from './proctable.ts';
import { CleanGuard, DEFAULT_WARN_BACKOFF, type GuardPass, type Refusal } from './guard.ts';
import { REASON_DELETE, REASON_FAILED_DELETE, REASON_UNKNOWN_POLICY, REASON_UNSUPPORTED_POLICY, REASON_VOLUME_MISSING } from '../kube/reasons.ts';

/** What the deleter needs of the job controller. */
export interface JobTracker {
  status(pvName: string, uid?: string): JobStatus;
  /** Deletes the pending or running cleanup Job of this PV (name and UID), if there is one; true if it did. */
  withdraw?(pvName: string, uid: string): Promise<boolean>;
}

export const DEFAULT_RETRY_BACKOFF: BackoffOptions = { initialMs: 10_000, maxMs: 10 * 60_000, factor: 2, jitter: 0.1 };
export { DEFAULT_WARN_BACKOFF, directChild, normalizePath } from './guard.ts';
export const DEFAULT_MAX_CONCURRENT_CLEANS = 4;

/** The deleter's own options; the rest comes from the GenerationEnv. */
export interface DeleterOptions {
  /** This node's PVs of this provisioner. */
  readonly pvs: Store<V1PersistentVolume>;
  /**
   * Every PV known on this node, for the path-in-use check: ours, and other
   * owners' local PVs whose node affinity selects this node (the process PV
   * informer, see nodePVSelection; stubs are enough). Default: `pvs`.
   */
  readonly allPvs?: Store<V1PersistentVolume> | undefined;
  readonly procTable: ProcTable;
  readonly jobController?: JobTracker | undefined;
  /** Timeout of an in-process block clean, and activeDeadlineSeconds of a cleanup Job (default 1 h). */
  readonly cleanTimeoutMs?: number | undefined;
  readonly maxConcurrentCleans?: number | undefined;
  /** Called when an in-process clean finished (e.g. to run the sync loop early). */
  readonly onChange?: (() => void) | undefined;
  /** Retry backoff after failed cleans/deletes; pass a process-scope one to keep it across reloads. */
  readonly retryBackoff?: KeyedBackoff | undefined;
  /** Window of repeated warnings (unsupported policy, vanished volume, unknown class). */
  readonly warnBackoff?: BackoffOptions | undefined;
  /** The refusal checks; share one with the job controller (default: one of its own over allPvs). */
  readonly guard?: CleanGuard | undefined;
  /** Records running block cleaners so a restarted daemon can kill those of a dead one. */
  readonly cleanerRegistry?: CleanerRegistry | undefined;
  /** Aborts running in-process cleans (process shutdown). */
  readonly signal?: AbortSignal | undefined;
  /** Seams for tests. */
  readonly readMountPoints?: (() => Promise<ReadonlySet<string>>) | undefined;
  readonly cleanFilesystem?: ((path: string, opts: FilesystemCleanOptions) => Promise<CleanResult>) | undefined;
  readonly cleanBlockDevice?: ((opts: BlockCleanOptions) => Promise<CleanResult>) | undefined;
  /** Seam of the default guard's identity check. */
  readonly pathKind?: ((path: string) => Promise<PathKind>) | undefined;
}

interface Volume {
  readonly pv: V1PersistentVolume;
  readonly name: string;
  readonly uid: string;
  readonly className: string;
  readonly cls: ClassConfig;
  readonly containerPath: string;
}

/** Per-pass state: the mount table is read, and the path index built, at most once per pass (see GuardPass). */
type Pass = GuardPass;

/** The resourceVersion of `pv` if it is still that PV (UID), of that class, Available, unclaimed and not being deleted. */
function stillUnclaimed(pv: V1PersistentVolume, uid: string, className: string): string | undefined {
  const m = pv.metadata;
  if (m?.uid !== uid || m.deletionTimestamp || !m.resourceVersion) return undefined;
  if (pv.status?.phase !== 'Available' || pv.spec?.claimRef || pv.spec?.storageClassName !== className) return undefined;
  return m.resourceVersion;
}

const modeLabel = (m: string | undefined): ModeLabel => (m === 'Block' || m === 'Filesystem' ? m : 'unknown');

export class Deleter {
  readonly #env: GenerationEnv;
  readonly #o: DeleterOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #retry: KeyedBackoff;
  readonly #warn: KeyedBackoff;
  readonly #guard: CleanGuard;
  readonly #inflight = new Set<Promise<void>>();
  #stopped = false;

  /** The mount table (env.mountInfoPath) is read for the volume checks; the Filesystem cleaner reads it afresh before each clean. */
  constructor(env: GenerationEnv, opts: DeleterOptions) {
    this.#env = env;
    this.#o = opts;
    this.#log = env.logger.child({ component: 'deleter' });
    this.#now = env.now;
    this.#retry = opts.retryBackoff ?? new KeyedBackoff(DEFAULT_RETRY_BACKOFF, this.#now);
    this.#warn = new KeyedBackoff(opts.warnBackoff ?? DEFAULT_WARN_BACKOFF, this.#now);
    this.#guard =
      opts.guard ??
      new CleanGuard(env, { allPvs: opts.allPvs ?? opts.pvs, warnBackoff: opts.warnBackoff, readMountPoints: opts.readMountPoints, pathKind: opts.pathKind });
  }

  /** One pass over the Released PVs; never throws. */
  async deletePVs(): Promise<void> {
    if (this.#stopped) return;
    const pass: Pass = {};
    const live = new Set<string>();
    for (const pv of this.#o.pvs.list()) {
      if (this.#stopped) return;
      const uid = pv.metadata?.uid ?? '';
      live.add(uid);
      try {
        await this.#consider(pv, pass);
      } catch (e) {
        this.#log.error({ pv: pv.metadata?.name, err: e }, 'unexpected error handling a released PV');
      }
    }
    // Keep the backoff maps bounded: drop keys of PVs that are gone.
    const keep = (k: string): boolean => live.has(k.split('/')[0] ?? '');
    this.#retry.retain(keep);
    this.#warn.retain(keep);
    this.#guard.retain(keep);
  }

  /** No new cleans after this; running in-process cleans go on (see the file comment). */
  stop(): Promise<void> {
    this.#stopped = true;
    return Promise.resolve();
  }

  /** Resolves when the in-process cleans started by this deleter have finished. */
  async idle(): Promise<void> {
    while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight]);
  }

  async #consider(pv: V1PersistentVolume, pass: Pass): Promise<void> {
    const phase = pv.status?.phase;
    if ((phase !== 'Released' && phase !== 'Available') || pv.metadata?.deletionTimestamp) return;
    const node = { name: this.#env.node.metadata?.name ?? '', uid: this.#env.node.metadata?.uid ?? '' };
    if (!pvOnThisNode(pv, node)) return;
    if (phase === 'Available') {
      await this.#withdrawAvailable(pv);
      return;
    }
    const policy = pv.spec?.persistentVolumeReclaimPolicy;
    if (policy === 'Retain') {
      this.#log.debug({ pv: pv.metadata?.name }, 'released PV has reclaim policy Retain; leaving it');
      return;
    }
    if (policy === 'Recycle') {
      this.#warnOnce(pv, 'Warning', REASON_UNSUPPORTED_POLICY, 'Volume has unsupported PersistentVolumeReclaimPolicy: Recycle');
      return;
    }
    if (policy !== 'Delete') {
      this.#warnOnce(pv, 'Warning', REASON_UNKNOWN_POLICY, 'Volume has unrecognized PersistentVolumeReclaimPolicy');
      return;
    }
    const vol = await this.#resolve(pv, pass);
    if (vol) await this.#deletePV(vol, pass);
  }

  /**
   * An Available PV of a class removed from the config is deleted, so that no claim binds it
   * (docs/hot-reload.md, "Removing a storage class"). It holds no claim's data, its volume is not
   * touched, and discovery makes a new PV for it if the class comes back. Only a class this daemon
   * had configured (its settings are remembered) qualifies: a PV of a class it never knew is left
   * alone. The PV is read again and deleted only if it is still that PV (UID), still Available
   * with no claimRef (a scheduler or binder may have picked it meanwhile) and not changed since
   * (resourceVersion precondition): a Bound or Released PV is never deleted here.
   */
  async #withdrawAvailable(pv: V1PersistentVolume): Promise<void> {
    const className = pv.spec?.storageClassName ?? '';
    if (className in this.#env.config.storageClassMap || this.#env.lookupClass(className) === undefined) return;
    if (pv.spec?.claimRef) return; // pre-bound to a claim: about to be Bound
    const name = pv.metadata?.name ?? '';
    const uid = pv.metadata?.uid ?? '';
    if (!this.#retry.ready(uid)) return;
    const fresh = await this.#env.kube.getPersistentVolume(name).catch((e: unknown) => {
      if (!isNotFound(e)) {
        this.#retry.failure(uid);
        this.#log.warn({ pv: name, err: e }, `cannot read PV ${JSON.stringify(name)} of removed storage class ${JSON.stringify(className)}; retrying later`);
      }
      return undefined;
    });
    if (fresh === undefined) return;
    const rv = stillUnclaimed(fresh, uid, className);
    if (rv === undefined) {
      this.#log.debug({ pv: name, phase: fresh.status?.phase }, 'PV of a removed storage class changed meanwhile; not deleting it');
      return;
    }
    try {
      await this.#env.metrics.timePvRequest('delete', () => this.#env.kube.deletePersistentVolume(name, { uid, resourceVersion: rv }));
    } catch (e) {
      if (isNotFound(e)) return;
      if (isConflict(e)) {
        this.#log.info({ pv: name }, `PV ${JSON.stringify(name)} changed meanwhile (precondition failed); not deleting it`);
        return;
      }
      const delay = this.#retry.failure(uid);
      this.#log.warn({ pv: name, err: e, retryInMs: delay }, `cannot delete Available PV ${JSON.stringify(name)} of removed storage class ${JSON.stringify(className)}`);
      return;
    }
    this.#retry.forget(uid);
    this.#log.warn(
      { pv: name, class: className, path: fresh.spec?.local?.path },
      `Deleted Available PV ${JSON.stringify(name)}: its storage class ${JSON.stringify(className)} is no longer in the configuration, so it must not be offered; its volume is left untouched`,
    );
  }

  /** Records an event (and runs `also`) at most once per warn-backoff window per PV and reason. */
  #warnOnce(pv: V1PersistentVolume, type: EventType, reason: string, message: string, also?: () => void): void {
    const key = `${pv.metadata?.uid ?? ''}/${reason}`;
    if (!this.#warn.ready(key)) return;
    this.#warn.failure(key);
    this.#log.warn({ pv: pv.metadata?.name, reason }, message);
    this.#env.recorder.event(pvRef(pv), type, reason, message);
    also?.();
  }

  /**
   * The class and container path of a PV, or undefined (after a warning) when
   * it cannot be cleaned safely: its volume cannot be located, or a refusal
   * check without API requests fails (see guard.ts). Anyone who may create or
   * patch PVs can forge one with our annotation, the path of a Bound volume,
   * reclaim Delete and a claimRef to a missing claim: the binder marks it
   * Released, and cleaning it would empty the Bound volume.
   */
  async #resolve(pv: V1PersistentVolume, pass: Pass): Promise<Volume | undefined> {
    const verdict = await this.#guard.check(pv, pass, { claims: false });
    return this.#admit(pv, verdict);
  }

  /** The Volume of an ok verdict; otherwise the warning (and the Job withdrawn on a refusal) and undefined. */
  async #admit(pv: V1PersistentVolume, verdict: Awaited<ReturnType<CleanGuard['check']>>): Promise<Volume | undefined> {
    const name = pv.metadata?.name ?? '';
    const uid = pv.metadata?.uid ?? '';
    switch (verdict.kind) {
      case 'ok': {
        const t = verdict.target;
        return { pv, name, uid, className: t.className, cls: t.cls, containerPath: t.containerPath };
      }
      case 'invalid':
        this.#warnOnce(pv, 'Warning', REASON_FAILED_DELETE, `Error cleaning PV ${JSON.stringify(name)}: ${verdict.why}`, () =>
          this.#env.metrics.deleteFailedTotal.inc({ mode: 'unknown', type: this.#useJob() ? 'job' : 'process' }),
        );
        return undefined;
      case 'unknown':
        this.#retry.failure(uid);
        this.#log.warn({ pv: name }, `not cleaning PV ${JSON.stringify(name)} now: ${verdict.why}`);
        return undefined;
      case 'refused':
        await this.#refuse(pv, verdict.refusals);
        return undefined;
    }
  }

  /** A refusal: the Event and metric (once per warn window), the PV kept, its cleanup Job withdrawn (every time). */
  async #refuse(pv: V1PersistentVolume, refusals: readonly Refusal[]): Promise<void> {
    this.#guard.refuse(pv, refusals);
    const name = pv.metadata?.name ?? '';
    try {
      if (await this.#o.jobController?.withdraw?.(name, pv.metadata?.uid ?? '')) {
        this.#log.warn({ pv: name }, `withdrew the cleanup job of refused PV ${JSON.stringify(name)}`);
      }
    } catch (e) {
      this.#log.error({ pv: name, err: e }, `cannot withdraw the cleanup job of refused PV ${JSON.stringify(name)}; retrying next pass`);
    }
  }

  /**
   * Every refusal check again, with the claim lookup (API requests), right
   * before a clean starts or a PV is deleted after its clean. False (after the
   * warning, and a retry backoff) when the volume must not be touched now.
   */
  async #recheck(v: Volume): Promise<boolean> {
    const verdict = await this.#guard.check(v.pv, {}, { claims: true });
    if (verdict.kind === 'ok') return true;
    if (verdict.kind === 'refused') this.#retry.failure(v.uid);
    await this.#admit(v.pv, verdict);
    return false;
  }

  #useJob(): boolean {
    return this.#env.config.useJobForCleaning && this.#o.jobController !== undefined;
  }

  async #deletePV(v: Volume, pass: Pass): Promise<void> {
    const pt = this.#o.procTable;
    if (pt.isRunning(v.name)) return; // wait for it
    const job = this.#o.jobController?.status(v.name, v.uid);
    if (job && job.state !== 'NotFound') return; // a Job exists (the job controller finishes it) or is in backoff

    const entry = pt.get(v.name);
    if (entry && entry.uid !== v.uid) {
      pt.removeEntry(v.name, v.uid); // a finished clean of an older PV with the same name: never reuse it (#174)
      this.#log.warn({ pv: v.name, staleUid: entry.uid }, 'dropped the cleanup result of an older PV with the same name');
    } else if (entry?.state === 'Succeeded') {
      if (this.#retry.ready(v.uid) && (await this.#recheck(v))) await this.#deleteAfterClean(v);
      return;
    } else if (entry?.state === 'Failed') {
      const r = pt.removeEntry(v.name, v.uid);
      this.#cleanFailed(v, modeLabel(r.info?.mode), 'process', r.error ?? 'cleanup failed');
      return;
    }

    if (!this.#retry.ready(v.uid)) return;
    const mode = await this.#checkVolume(v, pass);
    if (!mode || !(await this.#recheck(v))) return;
    if (this.#useJob()) await this.#startJob(v, mode);
    else this.#startProcess(v, mode);
  }

  /** Deletes the PV after its in-process clean succeeded; the entry is consumed only once the PV is gone. */
  async #deleteAfterClean(v: Volume): Promise<void> {
    if (!this.#retry.ready(v.uid)) return;
    const entry = this.#o.procTable.get(v.name);
    this.#log.info({ pv: v.name }, `Deleting pv ${v.name} after successful cleanup`);
    try {
      await this.#env.metrics.timePvRequest('delete', () => this.#env.kube.deletePersistentVolume(v.name, { uid: v.uid }));
    } catch (e) {
      if (isConflict(e)) {
        this.#log.info({ pv: v.name }, 'PV was replaced meanwhile (UID precondition failed); not deleting it');
        this.#o.procTable.removeEntry(v.name, v.uid);
        return;
      }
      if (!isNotFound(e)) {
        const delay = this.#retry.failure(v.uid);
        this.#env.metrics.deleteFailedTotal.inc({ mode: modeLabel(entry?.info?.mode), type: 'process' });
        this.#env.recorder.event(pvRef(v.pv), 'Warning', REASON_FAILED_DELETE, `Error deleting PV ${JSON.stringify(v.name)}: ${errorMessage(e)}; retrying in ${Math.round(delay / 1000)}s`);
        return;
      }
    }
    const r = this.#o.procTable.removeEntry(v.name, v.uid);
    this.#retry.forget(v.uid);
    recordDeleted(this.#env.metrics, {
      mode: modeLabel(r.info?.mode),
      type: 'process',
      pv: v.pv,
      command: r.info?.command ?? '',
      startTime: r.startTime,
      now: this.#now(),
    });
  }

  #cleanFailed(v: Volume, mode: ModeLabel, type: CleanupType, error: string): void {
    const delay = this.#retry.failure(v.uid);
    this.#env.metrics.deleteFailedTotal.inc({ mode, type });
    this.#env.metrics.cleanupRetries.inc({ type });
    const msg = `Error cleaning PV ${JSON.stringify(v.name)}: ${error}; retrying in ${Math.round(delay / 1000)}s`;
    this.#log.warn({ pv: v.name, retryInMs: delay }, msg);
    this.#env.recorder.event(pvRef(v.pv), 'Warning', REASON_FAILED_DELETE, msg);
  }

  /** The detected mode of the volume path, or undefined (after a VolumeMissing warning) when it vanished. */
  async #checkVolume(v: Volume, pass: Pass): Promise<VolumeMode | undefined> {
    const missing = (why: string): undefined => {
      this.#warnOnce(
        v.pv,
        'Warning',
        REASON_VOLUME_MISSING,
        `Volume of PV ${JSON.stringify(v.name)} is missing: ${why}. It is not cleaned and the PV is kept; delete the PV by hand if the volume is gone for good.`,
        () => this.#env.metrics.volumeMissing.inc({ class: v.className }),
      );
      return undefined;
    };
    let st;
    try {
      st = await stat(v.containerPath);
    } catch (e) {
      return missing(`path ${JSON.stringify(v.containerPath)} cannot be read (${errorMessage(e)})`);
    }
    if (st.isBlockDevice()) return 'Block';
    if (!st.isDirectory()) return missing(`path ${JSON.stringify(v.containerPath)} is neither a directory nor a block device`);
    if (v.pv.spec?.volumeMode === 'Block') return missing(`path ${JSON.stringify(v.containerPath)} is a directory, not the block device of this Block PV`);
    let mounts: ReadonlySet<string>;
    try {
      mounts = await this.#guard.mounts(pass);
    } catch (e) {
      this.#log.warn({ err: e }, 'cannot read the mount table; not cleaning filesystem volumes in this pass');
      return undefined;
    }
    if (!mounts.has(v.containerPath)) return missing(`path ${JSON.stringify(v.containerPath)} is not a valid mount point`);
    return 'Filesystem';
  }

  async #startJob(v: Volume, mode: VolumeMode): Promise<void> {
    const job = buildCleanupJob({
      pvName: v.name,
      pvUid: v.uid,
      nodeName: this.#env.node.metadata?.name ?? '',
      namespace: this.#env.namespace,
      image: this.#env.jobImage,
      mode,
      blockCleanerCommand: v.cls.blockCleanerCommand,
      containerPath: v.containerPath,
      hostDir: v.cls.hostDir,
      mountDir: v.cls.mountDir,
      tolerations: this.#env.config.jobTolerations,
      startTime: new Date(this.#now()),
      deadlineMs: this.#o.cleanTimeoutMs,
    });
    try {
      await this.#env.kube.createJob(this.#env.namespace, job);
      this.#log.info({ pv: v.name, job: job.metadata?.name, mode }, 'started cleanup job');
    } catch (e) {
      if (isAlreadyExists(e)) return; // the job informer has not seen it yet
      this.#cleanFailed(v, mode, 'job', `cannot create cleanup job: ${errorMessage(e)}`);
    }
  }

  #startProcess(v: Volume, mode: VolumeMode): void {
    const pt = this.#o.procTable;
    const limit = this.#o.maxConcurrentCleans ?? DEFAULT_MAX_CONCURRENT_CLEANS;
    if (pt.stats().running >= limit) {
      this.#log.debug({ pv: v.name, limit }, 'cleanup limit reached; the PV waits for the next pass');
      return;
    }
    // The cleanup_command label is blockCleanerCommand[0] for both modes, as in the Go provisioner.
    const metricCommand = v.cls.blockCleanerCommand[0] ?? '';
    pt.markRunning(v.name, v.uid, { mode, command: metricCommand });
    if (mode === 'Block') {
      this.#env.recorder.event(pvRef(v.pv), 'Normal', REASON_DELETE, `Starting cleanup of Block PV ${JSON.stringify(v.name)}, this may take a while`);
    }
    this.#log.info({ pv: v.name, mode, path: v.containerPath }, `Start cleanup for pv ${v.name}`);
    const run = this.#runClean(v, mode).finally(() => this.#inflight.delete(run));
    this.#inflight.add(run);
  }

  async #runClean(v: Volume, mode: VolumeMode): Promise<void> {
    let r: CleanResult;
    try {
      if (mode === 'Filesystem') {
        const clean = this.#o.cleanFilesystem ?? cleanFilesystem;
        // The cleaner re-reads the mount table itself right before cleaning (not this pass's cached copy).
        r = await clean(v.containerPath, { mountInfoPath: this.#env.mountInfoPath, signal: this.#o.signal });
      } else {
        const clean = this.#o.cleanBlockDevice ?? cleanBlockDevice;
        r = await clean({
          command: v.cls.blockCleanerCommand,
          devicePath: v.containerPath,
          timeoutMs: this.#o.cleanTimeoutMs,
          signal: this.#o.signal,
          onLine: (stream, line) => this.#log.info({ pv: v.name, stream }, `Cleanup pv ${JSON.stringify(v.name)}: ${line}`),
          onSpawn: (pgid) => this.#o.cleanerRegistry?.add(pgid, v.name, v.cls.blockCleanerCommand),
          onExit: (pgid) => this.#o.cleanerRegistry?.remove(pgid),
        });
      }
    } catch (e) {
      r = { ok: false, error: errorMessage(e), durationMs: 0, skipped: [], removed: 0, stdout: [], stderr: [] };
    }
    try {
      if (r.ok) {
        this.#o.procTable.markSucceeded(v.name, v.uid);
        this.#log.info({ pv: v.name, durationMs: r.durationMs }, `Completed cleanup of pv ${JSON.stringify(v.name)}`);
      } else {
        this.#o.procTable.markFailed(v.name, v.uid, r.error);
        this.#log.warn({ pv: v.name, err: r.error, durationMs: r.durationMs }, 'cleanup failed');
      }
    } catch (e) {
      this.#log.error({ pv: v.name, err: e }, 'cannot record the cleanup result');
    }
    if (!this.#stopped) this.#o.onChange?.();
  }
}
