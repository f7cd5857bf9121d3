// The refusal checks: one invariant for every path that empties a volume or
// deletes a PV after its volume was emptied. A Released PV is cleaned, and
// deleted after its clean, only while ALL of these hold (docs/cleanup.md,
// "Forged PVs" and the safety rules 1, 15-19):
//
// - path_in_use: no other PV on this node (ours or not, any phase) uses the
//   same volume (normalised spec.local.path, or the same <mountDir>/<name>);
// - name_mismatch: the PV's name is the one discovery gives to that volume
//   (generatePVName of <name>, node name, class);
// - identity_mismatch: when the PV records what discovery found at the path
//   (src/identity/identity.ts), the path still resolves to that: a mount point
//   directory, or the block device with the same device number;
// - claim_still_exists (only when asked, it costs API requests): no PVC names
//   this PV in spec.volumeName (the claimRef game: a patched claimRef.uid makes
//   the binder release a PV that a PVC still uses). The PVC named by claimRef
//   is read first; if it does not name this PV, every PVC of the cluster is
//   listed, paginated (no field selector exists for spec.volumeName). An API
//   error means "do not clean now" (verdict unknown), never "clean".
//
// Callers: the deleter on every pass (without the claim lookup), right before
// it starts a clean or creates a cleanup Job, and right before it deletes a PV
// after an in-process clean; the job controller before it deletes a PV after
// its Job succeeded. A refusal (refuse()) is a Warning VolumeCleanRefused on
// the PV (and on each PVC that still uses it) and clean_refused_total{reason},
// once per warn window; the PV is kept. The deleter also withdraws the PV's
// cleanup Job (JobTracker.withdraw).
import { posix } from 'node:path';
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { ClassConfig } from '../config/types.ts';
import { readMountPoints } from '../host/mountinfo.ts';
import { identityMismatch, pathKind, recordedIdentity, type PathKind } from '../identity/identity.ts';
import { pvRef, type ObjectRef } from '../kube/events.ts';
import type { Store } from '../kube/informer.ts';
import { isNotFound } from '../kube/port.ts';
import { REASON_CLEAN_REFUSED } from '../kube/reasons.ts';
import { KeyedBackoff, type BackoffOptions } from '../util/backoff.ts';
import { errorMessage } from '../util/errors.ts';
import type { Logger } from '../util/log.ts';
import type { GenerationEnv } from '../volume/env.ts';
import { generatePVName } from '../volume/naming.ts';

export type RefusalReason = 'path_in_use' | 'name_mismatch' | 'claim_still_exists' | 'identity_mismatch';

export interface Refusal {
  readonly reason: RefusalReason;
  readonly message: string;
  /** claim_still_exists: the PVC that still uses the volume (it gets the Event too). */
  readonly pvc?: ObjectRef | undefined;
}

/** Where a PV's volume is, per its class. */
export interface VolumeTarget {
  readonly className: string;
  readonly cls: ClassConfig;
  /** <name>: the entry below hostDir. */
  readonly entry: string;
  /** <mountDir>/<name>: the volume as this container sees it. */
  readonly containerPath: string;
}

export type Verdict =
  | { readonly kind: 'ok'; readonly target: VolumeTarget }
  | { readonly kind: 'refused'; readonly target: VolumeTarget; readonly refusals: readonly Refusal[] }
  /** The PV's volume cannot be located (no local path, unknown class, not a direct child of hostDir). */
  | { readonly kind: 'invalid'; readonly why: string }
  /** A check could not be made (API error, unreadable mount table): do not clean now. */
  | { readonly kind: 'unknown'; readonly why: string };

/** What the guard caches for one pass of its caller; pass a fresh {} to read everything anew. */
export interface GuardPass {
  mounts?: Promise<ReadonlySet<string>>;
  /** Volume key -> uid -> name of the PVs that use it. */
  paths?: Map<string, Map<string, string>>;
}

export const DEFAULT_WARN_BACKOFF: BackoffOptions = { initialMs: 60_000, maxMs: 60 * 60_000, factor: 2, jitter: 0 };
/** Page size of the cluster-wide PVC list of the claim check. */
export const CLAIM_LIST_PAGE = 500;

export interface CleanGuardOptions {
  /** Every PV known on this node (ours, and other owners' local PVs of this node). */
  readonly allPvs: Store<V1PersistentVolume>;
  /** Window of repeated refusal warnings. */
  readonly warnBackoff?: BackoffOptions | undefined;
  readonly claimPageSize?: number | undefined;
  /** Seams for tests. */
  readonly readMountPoints?: (() => Promise<ReadonlySet<string>>) | undefined;
  readonly pathKind?: ((path: string) => Promise<PathKind>) | undefined;
}

export class CleanGuard {
  readonly #env: GenerationEnv;
  readonly #o: CleanGuardOptions;
  readonly #log: Logger;
  readonly #warn: KeyedBackoff;

  constructor(env: GenerationEnv, opts: CleanGuardOptions) {
    this.#env = env;
    this.#o = opts;
    this.#log = env.logger.child({ component: 'clean-guard' });
    this.#warn = new KeyedBackoff(opts.warnBackoff ?? DEFAULT_WARN_BACKOFF, env.now);
  }

  /** The class, entry and container path of a PV's volume, or why it has none. */
  target(pv: V1PersistentVolume): VolumeTarget | string {
    const localPath = pv.spec?.local?.path;
    if (!localPath) return 'Unsupported volume type: only local volumes are cleaned';
    const className = pv.spec?.storageClassName ?? '';
    const cls = this.#env.lookupClass(className);
    if (!cls) {
      return `Unknown storage class name ${className}: the class is not in the configuration and its last settings are not known on this node, so the volume is not cleaned and the PV is kept (add the class back to the configuration to have it cleaned, or clean the volume and delete the PV by hand)`;
    }
    const entry = directChild(cls.hostDir, localPath);
    if (entry === undefined) {
      return `refusing to clean: path ${JSON.stringify(localPath)} is not a direct child of hostDir ${JSON.stringify(cls.hostDir)} of class ${JSON.stringify(className)}`;
    }
    return { className, cls, entry, containerPath: posix.join(cls.mountDir, entry) };
  }

  /** Every refusal check (the claim lookup only with `claims`); never throws. */
  async check(pv: V1PersistentVolume, pass: GuardPass, opts: { readonly claims: boolean }): Promise<Verdict> {
    const target = this.target(pv);
    if (typeof target === 'string') return { kind: 'invalid', why: target };
    const refusals: Refusal[] = [...this.#pathInUse(pv, pass), ...this.#nameMismatch(pv, target)];
    try {
      const identity = await this.#identity(pv, target);
      if (identity) refusals.push(identity);
    } catch (e) {
      return { kind: 'unknown', why: `cannot check the volume identity: ${errorMessage(e)}` };
    }
    // No API request for a PV that is refused anyway.
    if (opts.claims && refusals.length === 0) {
      try {
        refusals.push(...(await this.#claims(pv)));
      } catch (e) {
        return { kind: 'unknown', why: `cannot look up the claims of PV ${JSON.stringify(pv.metadata?.name ?? '')}: ${errorMessage(e)}` };
      }
    }
    return refusals.length === 0 ? { kind: 'ok', target } : { kind: 'refused', target, refusals };
  }

  /** Warning VolumeCleanRefused on the PV (and each PVC that uses it) and the metric, once per warn window. */
  refuse(pv: V1PersistentVolume, refusals: readonly Refusal[]): void {
    const key = `${pv.metadata?.uid ?? ''}/${REASON_CLEAN_REFUSED}`;
    if (!this.#warn.ready(key)) return;
    this.#warn.failure(key);
    const name = pv.metadata?.name ?? '';
    const msg = `Refusing to clean PV ${JSON.stringify(name)}: ${refusals.map((r) => r.message).join('; ')}. The volume is not cleaned and the PV is kept; delete the PV by hand if it was not made by this provisioner.`;
    this.#log.warn({ pv: name, reasons: refusals.map((r) => r.reason) }, msg);
    this.#env.recorder.event(pvRef(pv), 'Warning', REASON_CLEAN_REFUSED, msg);
    for (const r of refusals) {
      this.#env.metrics.cleanRefused.inc({ reason: r.reason });
      if (r.pvc) {
        this.#env.recorder.event(r.pvc, 'Warning', REASON_CLEAN_REFUSED, `PV ${JSON.stringify(name)} of this claim is Released but not cleaned: ${r.message}. Check its claimRef.`);
      }
    }
  }

  /** Drops the warn windows of PVs not in `keep` (keys are "<uid>/<reason>"). */
  retain(keep: (key: string) => boolean): void {
    this.#warn.retain(keep);
  }

  /** This pass's mount points (read once per pass). */
  mounts(pass: GuardPass): Promise<ReadonlySet<string>> {
    pass.mounts ??= this.#o.readMountPoints ? this.#o.readMountPoints() : readMountPoints(this.#env.mountInfoPath);
    return pass.mounts;
  }

  #pathInUse(pv: V1PersistentVolume, pass: GuardPass): Refusal[] {
    const uid = pv.metadata?.uid ?? '';
    const others = new Map<string, string>();
    const index = this.#pathIndex(pass);
    for (const key of this.#volumeKeys(pv)) {
      for (const [otherUid, otherName] of index.get(key) ?? []) if (otherUid !== uid) others.set(otherUid, otherName);
    }
    if (others.size === 0) return [];
    const names = [...new Set(others.values())].sort().map((n) => JSON.stringify(n));
    return [{ reason: 'path_in_use', message: `its volume ${JSON.stringify(pv.spec?.local?.path ?? '')} is also used by PV ${names.join(', ')}` }];
  }

  #nameMismatch(pv: V1PersistentVolume, t: VolumeTarget): Refusal[] {
    const expected = generatePVName(t.entry, this.#env.node.metadata?.name ?? '', t.className);
    if ((pv.metadata?.name ?? '') === expected) return [];
    return [
      {
        reason: 'name_mismatch',
        message: `its name is not ${JSON.stringify(expected)}, the name this node gives to volume ${JSON.stringify(t.entry)} of class ${JSON.stringify(t.className)}`,
      },
    ];
  }

  /** identity_mismatch, or undefined. */
  async #identity(pv: V1PersistentVolume, t: VolumeTarget): Promise<Refusal | undefined> {
    const recorded = recordedIdentity(pv);
    if (recorded === undefined) return undefined; // Go provisioner / older version: the earlier checks only
    const now = await (this.#o.pathKind ?? pathKind)(t.containerPath);
    const why = identityMismatch(recorded, now, t.containerPath);
    return why === undefined ? undefined : { reason: 'identity_mismatch', message: why };
  }

  /** claim_still_exists for every PVC whose spec.volumeName names this PV; throws on an API error. */
  async #claims(pv: V1PersistentVolume): Promise<Refusal[]> {
    const name = pv.metadata?.name ?? '';
    const ref = pv.spec?.claimRef;
    const users: V1PersistentVolumeClaim[] = [];
    if (ref?.namespace && ref.name) {
      try {
        const pvc = await this.#env.kube.getPersistentVolumeClaim(ref.namespace, ref.name);
        if (pvc.spec?.volumeName === name) users.push(pvc);
      } catch (e) {
        if (!isNotFound(e)) throw e;
      }
    }
    if (users.length === 0) {
      let cont: string | undefined;
      do {
        const page = await this.#env.kube.list('persistentvolumeclaims', { limit: this.#o.claimPageSize ?? CLAIM_LIST_PAGE, continue: cont });
        users.push(...page.items.filter((c) => c.spec?.volumeName === name));
        cont = page.continue;
      } while (cont);
    }
    return users.map((c) => {
      const pvcName = `${c.metadata?.namespace ?? ''}/${c.metadata?.name ?? ''}`;
      const uid = c.metadata?.uid ?? '';
      const how = uid === ref?.uid ? 'its claimRef' : `its claimRef names UID ${JSON.stringify(ref?.uid ?? '')}`;
      return {
        reason: 'claim_still_exists' as const,
        message: `PVC ${JSON.stringify(pvcName)} (UID ${JSON.stringify(uid)}, phase ${c.status?.phase ?? 'unknown'}) still names it in spec.volumeName while ${how}`,
        pvc: { kind: 'PersistentVolumeClaim', apiVersion: 'v1', namespace: c.metadata?.namespace, name: c.metadata?.name ?? '', uid: c.metadata?.uid },
      };
    });
  }

  /** The keys of a PV's volume: its normalised host path and, when its class is known, its path in the container. */
  #volumeKeys(pv: V1PersistentVolume): string[] {
    const path = pv.spec?.local?.path;
    if (path === undefined) return [];
    const keys = [`host:${normalizePath(path)}`];
    const cls = this.#env.lookupClass(pv.spec?.storageClassName ?? '');
    const entry = cls ? directChild(cls.hostDir, path) : undefined;
    if (cls && entry !== undefined) keys.push(`mount:${posix.join(normalizePath(cls.mountDir), entry)}`);
    return keys;
  }

  /** Volume key -> uid -> name of every PV on this node; built once per pass. */
  #pathIndex(pass: GuardPass): Map<string, Map<string, string>> {
    if (pass.paths) return pass.paths;
    const index = new Map<string, Map<string, string>>();
    for (const pv of this.#o.allPvs.list()) {
      const uid = pv.metadata?.uid ?? '';
      for (const key of this.#volumeKeys(pv)) {
        let uids = index.get(key);
        if (!uids) index.set(key, (uids = new Map<string, string>()));
        uids.set(uid, pv.metadata?.name ?? '');
      }
    }
    pass.paths = index;
    return index;
  }
}

/** The single path component of `path` directly below `dir`, or undefined (not a direct child, ".", ".."). */
export function directChild(dir: string, path: string): string | undefined {
  if (!dir.startsWith('/') || !path.startsWith('/')) return undefined;
  const d = normalizePath(dir);
  const p = normalizePath(path);
  if (posix.dirname(p) !== d) return undefined;
  const base = posix.basename(p);
  return base === '' || base === '.' || base === '..' ? undefined : base;
}

/** posix.normalize without trailing slashes ("/" stays "/"). */
export const normalizePath = (path: string): string => posix.normalize(path).replace(/\/+$/, '') || '/';
