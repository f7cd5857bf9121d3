// The volume health monitor (issue 19): after each discovery pass, every PV of this node (Available,
// Bound, Released) is checked (a HealthChecker, check.ts) and compared with what the previous pass
// found. Only a change is reported:
// - Events like CSI's external-health-monitor: VolumeConditionAbnormal / VolumeConditionNormal on the
//   bound PVC (always: it is the workload's signal), on the PV and on each Pod using the claim (the
//   Pods of the claim's namespace are listed only when a Bound PV changed, once per namespace and
//   pass). PV and Pod Events share a budget per pass (eventBudget, default 10); what is left out is
//   summed up in one VolumeHealthChanged Event on the Node, so a disk holding 50 volumes that dies
//   makes 50 PVC Events, 10 PV/Pod Events and 1 Node Event, not 150. The recorder's per-object spam
//   filter and de-duplication apply on top.
// - the gauge local_volume_provisioner_volume_health_abnormal (1 while the condition holds, 0 after it
//   recovered; the series of a PV go when the PV does);
// - with volumeHealth.annotatePVs, a label and an annotation on the PV.
// Nothing is sent to the API server when nothing changed.
// The class's healthPolicy may delete an Available PV whose volume has been missing longer than the
// grace period (precondition on UID and resourceVersion, so a PV bound meanwhile is kept). Bound and
// Released PVs are never deleted or cleaned for health: their volume may come back with the tenant's
// data, and a PV deleted (or a volume wiped) then would hand that data to the next claim.
// The per-PV state lives in a HealthLedger of process scope: a config reload neither repeats the
// Events nor restarts a grace period.
import { posix } from 'node:path';
import type { V1PersistentVolume, V1Pod } from '@kubernetes/client-node';
import { DEFAULT_HEALTH_POLICY, DEFAULT_VOLUME_HEALTH, type ClassConfig, type VolumeHealthConfig } from '../config/types.ts';
import { recordedIdentity } from '../identity/identity.ts';
import { pvRef, type ObjectRef } from '../kube/events.ts';
import { isConflict, isNotFound } from '../kube/port.ts';
import {
  REASON_MISSING_VOLUME_DELETED,
  REASON_VOLUME_ABNORMAL,
  REASON_VOLUME_HEALTH_SUMMARY,
  REASON_VOLUME_NORMAL,
} from '../kube/reasons.ts';
import { errorMessage } from '../util/errors.ts';
import { formatDuration } from '../util/duration.ts';
import type { Logger } from '../util/log.ts';
import type { GenerationEnv } from '../volume/env.ts';
import type { HealthCheckInput, HealthChecker, HealthCondition, VolumeHealth } from './types.ts';

/** PV and Pod Events per pass at most (PVC Events are not counted: they are always sent). */
export const DEFAULT_EVENT_BUDGET = 10;
/** Label and annotation written with volumeHealth.annotatePVs (`kubectl get pv -L local-static-provisioner/volume-health`). */
export const LABEL_VOLUME_HEALTH = 'local-static-provisioner/volume-health';
export const ANN_VOLUME_HEALTH = 'local-static-provisioner/volume-health';
/** The label value of a healthy volume. */
export const HEALTHY_LABEL_VALUE = 'ok';
const POD_PAGE = 500;
/** PV names named in the Node summary Event at most. */
const SUMMARY_NAMES = 10;

const CHECKED_PHASES: ReadonlySet<string> = new Set(['Available', 'Bound', 'Released']);

/** Where a PV's volume is inside this container: <mountDir>/<entry> of its class, if spec.local.path is a direct child of hostDir. */
export function volumeLocation(
  pv: V1PersistentVolume,
  lookupClass: (name: string) => ClassConfig | undefined,
): { className: string; cls: ClassConfig; path: string } | undefined {
  const className = pv.spec?.storageClassName ?? '';
  const cls = lookupClass(className);
  // The same PV object (the informer's, unchanged) and the same class config (frozen, one per generation)
  // give the same answer: each pass would otherwise redo the path arithmetic for every PV.
  const cached = locations.get(pv);
  if (cached !== undefined && cached.cls === cls) return cached.loc;
  const local = pv.spec?.local?.path;
  let loc: { className: string; cls: ClassConfig; path: string } | undefined;
  if (local !== undefined && cls !== undefined && local.startsWith('/')) {
    const rel = posix.relative(posix.normalize(cls.hostDir), posix.normalize(local));
    if (!(rel === '' || rel === '.' || rel.startsWith('..') || rel.includes('/'))) loc = { className, cls, path: posix.join(cls.mountDir, rel) };
  }
  locations.set(pv, { cls, loc });
  return loc;
}

const locations = new WeakMap<V1PersistentVolume, { cls: ClassConfig | undefined; loc: ReturnType<typeof volumeLocation> }>();

/** One PV checked. */
export interface CheckedPV {
  readonly pv: V1PersistentVolume;
  readonly className: string;
  readonly cls: ClassConfig;
  readonly health: VolumeHealth;
}

/** How many volumes one pass checks at the same time. */
const CHECKS_IN_FLIGHT = 64;

/** A located PV with its check input, kept per PV object (and class config and threshold) across passes. */
interface Located {
  readonly pv: V1PersistentVolume;
  readonly className: string;
  readonly cls: ClassConfig;
  readonly full: number | undefined;
  readonly input: HealthCheckInput;
  /** The last result made of it: returned again while the check answers with the same object. */
  last?: CheckedPV;
}

const locatedByPV = new WeakMap<V1PersistentVolume, Located>();

function locate(pv: V1PersistentVolume, lookupClass: (name: string) => ClassConfig | undefined, full: number | undefined): Located | undefined {
  const loc = volumeLocation(pv, lookupClass);
  if (loc === undefined) return undefined;
  const l = locatedByPV.get(pv);
  if (l !== undefined && l.cls === loc.cls && l.full === full) return l;
  const fresh: Located = {
    pv,
    className: loc.className,
    cls: loc.cls,
    full,
    input: {
      pvName: pv.metadata?.name ?? '',
      path: loc.path,
      mode: pv.spec?.volumeMode === 'Block' ? 'Block' : 'Filesystem',
      recordedIdentity: recordedIdentity(pv),
      fullThresholdPercent: full,
    },
  };
  locatedByPV.set(pv, fresh);
  return fresh;
}

/** The CheckedPV of a located PV and its health: the previous one when the health is the same object. */
function checkedOf(l: Located, health: VolumeHealth): CheckedPV {
  if (l.last?.health !== health) l.last = { pv: l.pv, className: l.className, cls: l.cls, health };
  return l.last;
}

/** Thrown by checkPVs when its signal is aborted: the pass started no check after the abort. */
export class HealthPassAborted extends Error {
  constructor() {
    super('the volume health pass was aborted');
    this.name = 'HealthPassAborted';
  }
}

/**
 * Checks the PVs that can be located (volumeLocation) in one pass of the checker: Available, Bound
 * and Released PVs not being deleted. Also used by --dry-run.
 * With a signal: once it is aborted no further check is started (those in flight, at most
 * CHECKS_IN_FLIGHT, are awaited) and the pass throws HealthPassAborted, so a stopping controller
 * generation waits for the checks in flight, not for a pass over every volume.
 */
export async function checkPVs(
  checker: HealthChecker,
  pvs: readonly V1PersistentVolume[],
  lookupClass: (name: string) => ClassConfig | undefined,
  settings: VolumeHealthConfig,
  signal?: AbortSignal,
): Promise<CheckedPV[]> {
  if (signal?.aborted) throw new HealthPassAborted();
  const wanted = pvs.filter((pv) => pv.metadata?.deletionTimestamp === undefined && CHECKED_PHASES.has(pv.status?.phase ?? ''));
  if (wanted.length === 0) return [];
  const pass = await checker.beginPass();
  if (signal?.aborted) throw new HealthPassAborted();
  const located: Located[] = [];
  for (const pv of wanted) {
    const l = locate(pv, lookupClass, settings.fullThresholdPercent);
    if (l !== undefined) located.push(l);
  }
  // What the checker knows without a read (the same input, nothing it depends on changed) is taken at
  // once: an idle pass over tmpfs volumes then allocates nothing per PV (docs/performance.md §10).
  const out: CheckedPV[] = new Array<CheckedPV>(located.length);
  const todo: number[] = [];
  for (let i = 0; i < located.length; i++) {
    const health = pass.known?.(located[i]!.input);
    if (health === undefined) todo.push(i);
    else out[i] = checkedOf(located[i]!, health);
  }
  // Up to CHECKS_IN_FLIGHT checks at a time: at 2,000 volumes a pass costs about half the CPU of one
  // check after the other (bench/health-check.ts, docs/performance.md §10); results keep the PVs' order.
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let k = next++; k < todo.length && signal?.aborted !== true; k = next++) {
      const i = todo[k]!;
      out[i] = checkedOf(located[i]!, await pass.check(located[i]!.input));
    }
  };
  await Promise.all(Array.from({ length: Math.min(CHECKS_IN_FLIGHT, todo.length) }, worker));
  if (signal?.aborted) throw new HealthPassAborted();
  return out;
}

/** "missing: <message>; read-only: <message>" in the order of the conditions found. */
export function describeConditions(conditions: ReadonlyMap<HealthCondition, { readonly message: string } | string>): string {
  return [...conditions].map(([c, m]) => `${c}: ${typeof m === 'string' ? m : m.message}`).join('; ');
}

type SeriesLabels = Record<'persistentvolume' | 'storageclass' | 'condition' | 'namespace' | 'persistentvolumeclaim', string>;

interface Tracked {
  readonly name: string;
  /** Abnormal conditions now, each with the time it was first seen (env.now) and its last message. */
  conditions: Map<HealthCondition, { since: number; message: string }>;
  /** The gauge's label set of this PV without `condition` (as JSON, to compare) and the conditions it has series for. */
  seriesBase: string;
  readonly exported: Set<HealthCondition>;
  /** The number of the last pass that saw this PV (HealthLedger.passes). */
  seen: number;
  /**
   * The result and settings the last pass recorded and reported completely (conditions, series, label in
   * sync): a pass with the very same objects has nothing to do for this PV.
   */
  settled?: { readonly checked: CheckedPV; readonly settings: VolumeHealthConfig } | undefined;
}

/** Per-PV health state, by PV UID, of process scope (outlives controller generations). */
export class HealthLedger {
  readonly byUid = new Map<string, Tracked>();
  /** Passes that recorded something (numbers Tracked.seen). */
  passes = 0;
}

export interface HealthMonitorOptions {
  readonly checker: HealthChecker;
  /** This node's PVs (the generation's PVCache). */
  readonly pvs: { list(): V1PersistentVolume[] };
  readonly ledger: HealthLedger;
  /** PV and Pod Events per pass at most (default DEFAULT_EVENT_BUDGET). */
  readonly eventBudget?: number | undefined;
  /**
   * The generation's stop signal. An abort during the checks ends the pass before it changes anything
   * (ledger, gauge, Events, labels: the next generation's pass finds the same changes and reports them
   * once); an abort after the checks lets the changes be recorded and reported (they are in the
   * ledger, so the next generation would miss them otherwise) but deletes no further PV.
   */
  readonly signal?: AbortSignal | undefined;
}

/** What one pass did (tests, logs). */
export interface HealthPassResult {
  readonly checked: number;
  readonly changed: number;
  /** PV and Pod Events left out over the budget (summed up on the Node). */
  readonly suppressed: number;
  readonly deleted: readonly string[];
  /** True when the signal ended the pass during the checks: nothing was recorded or reported. */
  readonly aborted?: boolean;
}

interface Change {
  readonly checked: CheckedPV;
  readonly tracked: Tracked;
  readonly before: readonly HealthCondition[];
}

const nodeRefOf = (env: GenerationEnv): ObjectRef => ({ kind: 'Node', apiVersion: 'v1', name: env.node.metadata?.name ?? '', uid: env.node.metadata?.uid });

const sameKeys = <K>(a: ReadonlyMap<K, unknown>, b: ReadonlyMap<K, unknown>): boolean => a.size === b.size && [...a.keys()].every((k) => b.has(k));

export class HealthMonitor {
  readonly #env: GenerationEnv;
  readonly #o: HealthMonitorOptions;
  readonly #log: Logger;

  constructor(env: GenerationEnv, opts: HealthMonitorOptions) {
    this.#env = env;
    this.#o = opts;
    this.#log = env.logger.child({ component: 'health-monitor' });
  }

  /** One pass: check, report changes, apply the health policies. Never throws. */
  async pass(): Promise<HealthPassResult> {
    const settings = this.#env.config.volumeHealth ?? DEFAULT_VOLUME_HEALTH;
    const idle: HealthPassResult = { checked: 0, changed: 0, suppressed: 0, deleted: [] };
    if (!settings.enabled) {
      this.#forget(-1);
      return idle;
    }
    let checked: CheckedPV[];
    try {
      checked = await checkPVs(this.#o.checker, this.#o.pvs.list(), this.#env.lookupClass, settings, this.#o.signal);
    } catch (err) {
      if (err instanceof HealthPassAborted) {
        this.#log.debug('volume health pass abandoned: the controller generation is stopping');
        return { ...idle, aborted: true };
      }
      this.#log.error({ err }, 'volume health check failed');
      return idle;
    }
    const now = this.#env.now();
    const ledger = this.#o.ledger.byUid;
    const changes: Change[] = [];
    const stamp = ++this.#o.ledger.passes;
    for (const c of checked) {
      const uid = c.pv.metadata?.uid ?? '';
      let t = ledger.get(uid);
      if (t === undefined) {
        t = { name: c.pv.metadata?.name ?? '', conditions: new Map(), seriesBase: '', exported: new Set(), seen: stamp };
        ledger.set(uid, t);
      }
      t.seen = stamp;
      // The same PV object, the same check result and the same settings as a pass that left everything in
      // sync: no change, the same series and label (the idle case: no allocation per PV).
      if (t.settled?.checked === c && t.settled.settings === settings) continue;
      t.settled = undefined;
      const next = new Map<HealthCondition, { since: number; message: string }>();
      for (const [cond, message] of c.health.conditions) next.set(cond, { since: t.conditions.get(cond)?.since ?? now, message });
      const before = [...t.conditions.keys()];
      const changed = !sameKeys(t.conditions, next);
      t.conditions = next;
      if (changed) changes.push({ checked: c, tracked: t, before });
      this.#updateSeries(c, t);
      let inSync = true;
      if (settings.annotatePVs || c.pv.metadata?.labels?.[LABEL_VOLUME_HEALTH] !== undefined) inSync = await this.#annotate(c, t, settings.annotatePVs);
      // A change is settled once reported (below); a label patched (or not patched: failed) is looked at again.
      if (inSync) t.settled = { checked: c, settings };
    }
    this.#forget(stamp);
    const suppressed = await this.#report(changes);
    const deleted = await this.#applyPolicy(checked, now);
    return { checked: checked.length, changed: changes.length, suppressed, deleted };
  }

  /** Drops the state and the gauge series of every tracked PV not seen by pass `stamp` (gone, or the monitor is off: -1). */
  #forget(stamp: number): void {
    for (const [uid, t] of this.#o.ledger.byUid) {
      if (t.seen === stamp) continue;
      this.#removeSeries(t);
      this.#o.ledger.byUid.delete(uid);
    }
  }

  #removeSeries(t: Tracked): void {
    if (t.seriesBase === '') return;
    const base = JSON.parse(t.seriesBase) as Omit<SeriesLabels, 'condition'>;
    for (const condition of t.exported) this.#env.metrics.volumeHealthAbnormal.remove({ ...base, condition });
    t.exported.clear();
    t.seriesBase = '';
  }

  /** 1 for each condition now, 0 for one that recovered; re-labelled when the PV is bound or unbound. */
  #updateSeries(c: CheckedPV, t: Tracked): void {
    const claim = c.pv.status?.phase === 'Bound' ? c.pv.spec?.claimRef : undefined;
    const base: Omit<SeriesLabels, 'condition'> = {
      persistentvolume: t.name,
      storageclass: c.className,
      namespace: claim?.namespace ?? '',
      persistentvolumeclaim: claim?.name ?? '',
    };
    const key = JSON.stringify(base);
    if (t.seriesBase !== '' && t.seriesBase !== key) {
      const old = JSON.parse(t.seriesBase) as Omit<SeriesLabels, 'condition'>;
      for (const condition of t.exported) this.#env.metrics.volumeHealthAbnormal.remove({ ...old, condition });
    }
    for (const cond of t.conditions.keys()) t.exported.add(cond);
    if (t.exported.size === 0) return;
    t.seriesBase = key;
    for (const condition of t.exported) this.#env.metrics.volumeHealthAbnormal.set({ ...base, condition }, t.conditions.has(condition) ? 1 : 0);
  }

  /** Label and annotation on the PV (annotatePVs); removed again when annotatePVs is turned off. True: they were right already. */
  async #annotate(c: CheckedPV, t: Tracked, on: boolean): Promise<boolean> {
    const name = t.name;
    const labelValue = on ? (t.conditions.size === 0 ? HEALTHY_LABEL_VALUE : [...t.conditions.keys()].join('.')) : undefined;
    const annValue = on ? (t.conditions.size === 0 ? '' : describeConditions(t.conditions)) : undefined;
    const meta = c.pv.metadata;
    if (meta?.labels?.[LABEL_VOLUME_HEALTH] === labelValue && meta?.annotations?.[ANN_VOLUME_HEALTH] === annValue) return true;
    // A JSON merge patch: null removes the key.
    const patch = { metadata: { labels: { [LABEL_VOLUME_HEALTH]: labelValue ?? null }, annotations: { [ANN_VOLUME_HEALTH]: annValue ?? null } } };
    try {
      await this.#env.kube.patchPersistentVolume(name, patch as unknown as Partial<V1PersistentVolume>);
    } catch (err) {
      if (!isNotFound(err)) this.#log.warn({ err, pv: name }, 'cannot write the volume health label onto the PV (volumeHealth.annotatePVs needs persistentvolumes patch)');
    }
    return false;
  }

  /** Events for the changes of this pass; returns how many PV/Pod Events were left out over the budget. */
  async #report(changes: readonly Change[]): Promise<number> {
    if (changes.length === 0) return 0;
    const budget = this.#o.eventBudget ?? DEFAULT_EVENT_BUDGET;
    let used = 0;
    const leftOut: string[] = [];
    let suppressed = 0;
    const nodeName = this.#env.node.metadata?.name ?? '';
    const podsByNs = new Map<string, Promise<V1Pod[] | undefined>>();
    // Bound PVs first: their Pods are the workloads to tell.
    const ordered = [...changes].sort((a, b) => Number(b.checked.pv.status?.phase === 'Bound') - Number(a.checked.pv.status?.phase === 'Bound'));
    const byCondition = new Map<string, number>();
    let recovered = 0;
    for (const { checked, tracked, before } of ordered) {
      const pv = checked.pv;
      const abnormal = tracked.conditions.size > 0;
      const reason = abnormal ? REASON_VOLUME_ABNORMAL : REASON_VOLUME_NORMAL;
      const type = abnormal ? 'Warning' : 'Normal';
      const message = abnormal
        ? `Volume ${tracked.name} on node ${nodeName}: ${describeConditions(tracked.conditions)}`
        : `The volume ${tracked.name} on node ${nodeName} returns to the healthy state (was: ${before.join(', ')})`;
      if (abnormal) for (const c of tracked.conditions.keys()) byCondition.set(c, (byCondition.get(c) ?? 0) + 1);
      else recovered++;
      const log = { pv: tracked.name, phase: pv.status?.phase, conditions: [...tracked.conditions.keys()], before };
      if (abnormal) this.#log.warn(log, `volume health: ${describeConditions(tracked.conditions)}`);
      else this.#log.info(log, 'volume health: back to normal');

      const claim = pv.status?.phase === 'Bound' ? pv.spec?.claimRef : undefined;
      if (claim?.name !== undefined && claim.namespace !== undefined) {
        const pvcRef: ObjectRef = { kind: 'PersistentVolumeClaim', apiVersion: 'v1', name: claim.name, namespace: claim.namespace, uid: claim.uid };
        this.#env.recorder.event(pvcRef, type, reason, message);
      }
      const refs: ObjectRef[] = [pvRef(pv)];
      if (claim?.name !== undefined && claim.namespace !== undefined) {
        const ns = claim.namespace;
        let pods = podsByNs.get(ns);
        if (pods === undefined) {
          pods = this.#listPods(ns);
          podsByNs.set(ns, pods);
        }
        for (const pod of (await pods) ?? []) {
          if (!usesClaim(pod, claim.name)) continue;
          refs.push({ kind: 'Pod', apiVersion: 'v1', name: pod.metadata?.name ?? '', namespace: ns, uid: pod.metadata?.uid });
        }
      }
      let cut = false;
      for (const ref of refs) {
        if (used < budget) {
          used++;
          this.#env.recorder.event(ref, type, reason, message);
        } else {
          suppressed++;
          cut = true;
        }
      }
      if (cut) leftOut.push(tracked.name);
    }
    if (suppressed > 0) {
      const conds = [...byCondition].map(([c, n]) => `${c}: ${n}`).join(', ');
      const names = `${leftOut.slice(0, SUMMARY_NAMES).join(', ')}${leftOut.length > SUMMARY_NAMES ? ` and ${leftOut.length - SUMMARY_NAMES} more` : ''}`;
      const abnormal = changes.length - recovered;
      this.#env.recorder.event(
        nodeRefOf(this.#env),
        abnormal > 0 ? 'Warning' : 'Normal',
        REASON_VOLUME_HEALTH_SUMMARY,
        `${changes.length} local volume(s) of this node changed health in one pass: ${abnormal} abnormal${conds ? ` (${conds})` : ''}, ${recovered} back to normal. ${suppressed} PV and Pod Event(s) over the limit of ${budget} per pass were left out (PVC Events are all sent), for the PVs ${names}`,
      );
    }
    return suppressed;
  }

  /** The Pods of one namespace (paginated); undefined when they cannot be listed (logged). */
  async #listPods(namespace: string): Promise<V1Pod[] | undefined> {
    const pods: V1Pod[] = [];
    try {
      let cont: string | undefined;
      do {
        const page = await this.#env.kube.list('pods', { namespace, limit: POD_PAGE, continue: cont });
        pods.push(...page.items);
        cont = page.continue;
      } while (cont);
      return pods;
    } catch (err) {
      this.#log.warn({ err, namespace }, 'cannot list the Pods of the namespace: no volume health Events on its Pods (RBAC: pods list)');
      return undefined;
    }
  }

  /** healthPolicy.deleteMissingAvailable: Available PVs missing longer than the grace period are deleted. */
  async #applyPolicy(checked: readonly CheckedPV[], now: number): Promise<string[]> {
    const deleted: string[] = [];
    for (const c of checked) {
      if (this.#o.signal?.aborted) break; // the next generation's pass goes on (the ledger keeps `since`)
      const pv = c.pv;
      if (pv.status?.phase !== 'Available') continue; // never Bound or Released (see the header)
      const uid = pv.metadata?.uid ?? '';
      const missing = this.#o.ledger.byUid.get(uid)?.conditions.get('missing');
      if (missing === undefined) continue;
      const policy = c.cls.healthPolicy ?? DEFAULT_HEALTH_POLICY;
      if (!policy.deleteMissingAvailable || now - missing.since < policy.gracePeriodMs) continue;
      const name = pv.metadata?.name ?? '';
      const resourceVersion = pv.metadata?.resourceVersion;
      try {
        await this.#env.metrics.timePvRequest('delete', () => this.#env.kube.deletePersistentVolume(name, { uid, resourceVersion }));
      } catch (err) {
        if (isConflict(err)) this.#log.info({ pv: name }, 'Available PV with a missing volume changed meanwhile (bound?): not deleted, checked again next pass');
        else if (!isNotFound(err)) this.#log.error({ err, pv: name }, `cannot delete the Available PV whose volume is missing: ${errorMessage(err)}`);
        continue;
      }
      deleted.push(name);
      const message = `Deleted the Available PV ${name}: its volume has been missing for ${formatDuration(now - missing.since)}, over the grace period ${formatDuration(policy.gracePeriodMs)} of class ${c.className} (healthPolicy.deleteMissingAvailable); discovery creates it again when the volume is back (${missing.message})`;
      this.#env.recorder.event(pvRef(pv), 'Warning', REASON_MISSING_VOLUME_DELETED, message);
      this.#log.warn({ pv: name, className: c.className, missingForMs: now - missing.since }, message);
      const t = this.#o.ledger.byUid.get(uid);
      if (t !== undefined) this.#removeSeries(t);
      this.#o.ledger.byUid.delete(uid);
    }
    return deleted;
  }
}

/** True when the Pod mounts the claim and has not finished. */
export function usesClaim(pod: V1Pod, claimName: string): boolean {
  if (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') return false;
  return (pod.spec?.volumes ?? []).some((v) => v.persistentVolumeClaim?.claimName === claimName);
}
