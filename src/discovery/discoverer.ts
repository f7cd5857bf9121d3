// One discovery pass: scan every class's mountDir, and create a PV for each
// new mount point / block device (the Go provisioner's DiscoverLocalVolumes).
//
// Differences from the Go provisioner, on purpose:
// - Classes are visited in sorted order and entries in name order (deterministic).
// - A class whose StorageClass is missing or has an unsupported reclaim policy is
//   skipped with an error and a Warning Event on the Node; the other classes keep working.
// - A stray regular file, a broken symlink and a directory that is not a mount
//   point are skipped with a Warning Event (`VolumeNotDiscovered`) and a log
//   line, but do not make the pod unready: they are not volumes, and upstream's
//   "never ready because of a stray file" helps nobody. Errors that mean a real
//   volume could not be provisioned (capacity, API, misconfiguration) still do.
// - A missing discovery directory (ENOENT) means "no volumes yet" (as in the Go
//   provisioner's NoDir test: no PVs); it is logged and reported with one
//   Warning Event that names the missing hostPath mount (host-mounts.ts), and
//   does not affect readiness. Any other read error does. In a container, a
//   mountDir that exists but is not on a mount receiving the host's mounts gets
//   the same kind of warning (checked once per class and generation).
// - Every Event is emitted only when the problem for that class/path appears
//   or changes, so a steady state costs 0 API requests per pass.
// - A created PV is put into the cache at once (noteCreated), so the next pass
//   cannot create it twice; a failed create is retried with a per-PV backoff
//   instead of on every pass. An AlreadyExists answer is followed by a GET: a PV
//   of ours (this node, same path) is noted, and with --pv-node-label labelled
//   back to this node if someone moved its label; any other PV of that name is a
//   Warning `PVNameTaken` (issue 17, 5).
// - Only a NEW entry (no PV, path not in use) is checked before its create, so a
//   volume with a PV costs nothing more per pass (issue 17, docs/cleanup.md
//   Safety rules 25-28): where it lies (not inside another volume, not a symlink
//   a tenant could have written or one pointing into a volume: host/volume-nesting.ts)
//   and, for a block device, whether it is in use (host/block-usage.ts).
// - The mount table is /proc/self/mountinfo with escapes decoded, read at most
//   once per pass and only when a new filesystem entry needs the check.
// - The capacity gauge is not set here: it is read at scrape time from this
//   node's PVs (src/metrics, registerCapacitySource), so it is right in steady
//   state and after deletes, unlike the Go provisioner's per-pass value.
import type { Dirent } from 'node:fs';
import { lstat, readdir, realpath } from 'node:fs/promises';
import { join } from 'node:path';
import type { V1NodeSelectorTerm, V1OwnerReference, V1PersistentVolume, V1StorageClass } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { ClassConfig, VolumeMode } from '../config/types.ts';
import type { ObjectRef } from '../kube/events.ts';
import { pvRef } from '../kube/events.ts';
import type { Store } from '../kube/informer.ts';
import { isAlreadyExists, isForbidden, isNotFound } from '../kube/port.ts';
import { KeyedBackoff, type BackoffOptions } from '../util/backoff.ts';
import { globSyntaxError, matchesNamePattern } from '../util/glob.ts';
import { mountDirProblem } from '../host/host-mounts.ts';
import { DEFAULT_MOUNTINFO_PATH, parseMountInfo, parseMountPropagation, readMountPoints, readMountPropagation, type MountPropagation } from '../host/mountinfo.ts';
import type { MountTableReader } from '../host/mount-snapshot.ts';
import { blockDeviceCapacity, detectVolumeMode, filesystemCapacity } from '../host/stat.ts';
import { blockDeviceUsage, readBlockHostFacts, type BlockHostFacts, type BlockHostFactsOptions, type BlockUsageOptions } from '../host/block-usage.ts';
import { discoveredVolumes, discoveryDirProblem, volumeHolding, volumeHoldingMount } from '../host/volume-nesting.ts';
import { PV_NODE_LABEL } from '../volume/pv-node-label.ts';
import { pvOnThisNode } from '../volume/pv-cache.ts';
import { roundDownCapacityPretty } from '../volume/capacity.ts';
import { generatePVName } from '../volume/naming.ts';
import type { GenerationEnv } from '../volume/env.ts';
import type { PVIndex } from '../volume/pv-index.ts';
import { discoveredIdentity } from '../identity/identity.ts';
import { ANN_PROVISIONED_BY, buildLocalPV, buildPVLabels, nodeHostnameTerm, nodeOwnerReference } from '../volume/pv-spec.ts';
import { describeFsError, errorMessage } from '../util/errors.ts';
import {
  REASON_BLOCK_IN_USE,
  REASON_DISCOVERY_FAILED,
  REASON_DISCOVERY_REFUSED,
  REASON_FAILED_DELETE,
  REASON_NOT_DISCOVERED,
  REASON_PV_NAME_TAKEN,
  REASON_STORAGE_CLASS,
} from '../kube/reasons.ts';

/** What discovery needs from the deleter's cleanup bookkeeping (proctable / job controller). */
export interface CleanupTracker {
  inProgress(pvName: string): boolean;
  removeStatus(pvName: string): void | Promise<void>;
}

/** The discoverer's own options; the rest (mountInfoPath: default /proc/self/mountinfo) comes from the GenerationEnv. */
export interface DiscovererOptions {
  /** The PVs this provisioner owns (PVCache in the daemon). */
  readonly pvCache: PVIndex;
  readonly storageClasses: Store<V1StorageClass>;
  readonly cleanupTracker: CleanupTracker;
  /** Aborting stops the pass at the next safe point (between volumes). */
  readonly signal?: AbortSignal | undefined;
  /** sysfs root for block device sizes (default /sys). */
  readonly sysRoot?: string | undefined;
  /** Backoff between create attempts for one PV name after a failure (default 10 s .. 5 min). */
  readonly createBackoff?: BackoffOptions | undefined;
  /** Labels every created PV gets on top of buildPVLabels (they win over labelsForPV): --pv-node-label. */
  readonly extraLabels?: Readonly<Record<string, string>> | undefined;
  /** Host facts of the block-device-in-use check (tests point them elsewhere; sysRoot above is shared). */
  readonly blockUsage?: (BlockHostFactsOptions & Pick<BlockUsageOptions, 'heldExclusively'>) | undefined;
  /** The mount table of the discovery period, shared with the health pass (default: read by each pass itself). */
  readonly mountTable?: MountTableReader | undefined;
}

export interface DiscoveryResult {
  /** True when no error happened in this pass (warnings do not count). */
  readonly ready: boolean;
  /** Names of the PVs created in this pass. */
  readonly created: string[];
  /** Problems that make the pass unsuccessful (readiness false). */
  readonly errors: string[];
  /** Entries skipped for a reason that does not affect readiness (stray files, unmounted dirs, missing dirs). */
  readonly warnings: string[];
}

const DEFAULT_CREATE_BACKOFF: BackoffOptions = { initialMs: 10_000, maxMs: 5 * 60_000, factor: 2, jitter: 0.1 };

/** Per-pass state. */
interface Pass {
  readonly created: string[];
  readonly errors: string[];
  readonly warnings: string[];
  /** Problem keys seen in this pass (for Event de-duplication): "<class>" or "<class>\0<path or what>". */
  readonly problems: Set<string>;
  /** PV names of the entries looked at in this pass. */
  readonly seen: Set<string>;
  mountPoints?: Promise<Set<string>>;
  /** The mount table with propagation tags (host-mount checks); undefined inside when it cannot be read. */
  mountTable?: Promise<MountPropagation[] | undefined>;
  /** The nesting facts (issue 17, 3b): read once per pass, only when a new entry needs them. */
  nesting?: Promise<Nesting>;
  /** The block-device-in-use facts (issue 17, 4): read once per pass, only when a new block entry needs them. */
  blockFacts?: Promise<BlockHostFacts>;
}

/** The mount table, the discovered volumes of every class, and why each class's discovery dir is not trusted. */
interface Nesting {
  readonly mounts: MountPropagation[];
  readonly volumes: MountPropagation[];
  /** class -> its mountDir with symlinks resolved. */
  readonly realDirs: ReadonlyMap<string, string>;
  /** class -> why its entries are refused (absent: trusted). */
  readonly untrusted: ReadonlyMap<string, string>;
}

/** Everything about one candidate entry. */
interface Entry {
  readonly className: string;
  readonly cls: ClassConfig;
  readonly name: string;
  readonly filePath: string;
  /** readdir's entry type says directory (never a symlink): stat would say so too, so it is skipped. */
  readonly isDirectory: boolean;
  readonly hostPath: string;
  readonly pvName: string;
  readonly reclaimPolicy: string;
  readonly mountOptions: readonly string[] | undefined;
  readonly start: number;
}

type Setup = {
  readonly labels: Record<string, string>;
  readonly hostnameTerm: V1NodeSelectorTerm;
  readonly ownerReference: V1OwnerReference;
};

export class Discoverer {
  readonly #env: GenerationEnv;
  readonly #o: DiscovererOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #nodeRef: ObjectRef;
  readonly #nodeName: string;
  readonly #setup: Setup | { readonly error: string };
  /** Last reported problem per key (class or class+path): its message. */
  readonly #reported = new Map<string, string>();
  readonly #createBackoff: KeyedBackoff;
  /** Last create error per PV name while it is backed off. */
  readonly #createErrors = new Map<string, string>();
  /** Per PV name whose create met a PV of that name that is not ours (or that could not be relabelled): its Warning. */
  readonly #createWarnings = new Map<string, { key: string; msg: string }>();
  /** Result of the host-mount check of each class whose mountDir exists (the mounts of a container do not change). */
  readonly #hostMountChecked = new Map<string, string | undefined>();
  #running: Promise<DiscoveryResult> | undefined;

  constructor(env: GenerationEnv, opts: DiscovererOptions) {
    this.#env = env;
    this.#o = opts;
    this.#log = env.logger.child({ component: 'discovery' });
    this.#now = env.now;
    this.#createBackoff = new KeyedBackoff(opts.createBackoff ?? DEFAULT_CREATE_BACKOFF, this.#now);
    const meta = env.node.metadata ?? {};
    this.#nodeName = meta.name ?? '';
    this.#nodeRef = { kind: 'Node', apiVersion: 'v1', name: this.#nodeName, uid: meta.uid };
    // The Go provisioner exits when this fails; we report it on every pass instead.
    try {
      this.#setup = {
        labels: { ...buildPVLabels(env.node, env.config), ...opts.extraLabels },
        hostnameTerm: nodeHostnameTerm(env.node),
        ownerReference: nodeOwnerReference(env.node),
      };
    } catch (err) {
      this.#setup = { error: `cannot discover volumes on node ${JSON.stringify(this.#nodeName)}: ${errorMessage(err)}` };
    }
  }

  /** Runs one pass; a call while a pass is running returns that pass's result. */
  discover(): Promise<DiscoveryResult> {
    this.#running ??= this.#discover().finally(() => {
      this.#running = undefined;
    });
    return this.#running;
  }

  async #discover(): Promise<DiscoveryResult> {
    const pass: Pass = {
      created: [],
      errors: [],
      warnings: [],
      problems: new Set(),
      seen: new Set(),
    };
    if ('error' in this.#setup) {
      this.#problem(pass, '', 'error', REASON_DISCOVERY_FAILED, this.#setup.error);
      this.#finish(pass, false);
      return result(pass);
    }
    const setup = this.#setup;
    let completed = true;
    for (const className of Object.keys(this.#env.config.storageClassMap).sort()) {
      const cls = this.#env.config.storageClassMap[className];
      if (!cls) continue;
      if (!(await this.#discoverClass(pass, setup, className, cls))) {
        completed = false;
        break;
      }
    }
    this.#finish(pass, completed);
    // Each problem was logged when it first appeared; the caller logs the pass summary
    // ("Failed to discover local volumes") from the result.
    return { ...result(pass), ready: completed && pass.errors.length === 0 };
  }

  /** Returns false when the pass was aborted. */
  async #discoverClass(pass: Pass, setup: Setup, className: string, cls: ClassConfig): Promise<boolean> {
    const sc = this.#o.storageClasses.get(className);
    if (!sc) {
      const msg = `failed to get ReclaimPolicy from storage class ${JSON.stringify(className)}: storageclass.storage.k8s.io ${JSON.stringify(className)} not found; volumes of this class are not discovered`;
      this.#problem(pass, className, 'error', REASON_STORAGE_CLASS, msg);
      return true;
    }
    const reclaimPolicy = sc.reclaimPolicy ?? 'Delete';
    if (reclaimPolicy !== 'Delete' && reclaimPolicy !== 'Retain') {
      const msg = `unsupported ReclaimPolicy ${JSON.stringify(reclaimPolicy)} from storage class ${JSON.stringify(className)}, supported policy are Retain and Delete`;
      this.#problem(pass, className, 'error', REASON_STORAGE_CLASS, msg);
      return true;
    }
    const bad = cls.namePattern
      .split(',')
      .filter((p) => p !== '')
      .map(globSyntaxError)
      .find((e) => e !== undefined);
    if (bad) {
      const msg = `storage class ${JSON.stringify(className)}: namePattern ${JSON.stringify(cls.namePattern)}: ${bad}`;
      this.#problem(pass, className, 'error', REASON_DISCOVERY_FAILED, msg);
      return true;
    }

    let names: Dirent[];
    try {
      names = (await readdir(cls.mountDir, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
        const msg = mountDirProblem(className, cls, false, this.#env.config, await this.#mountTable(pass));
        this.#problem(pass, className, 'warning', REASON_DISCOVERY_FAILED, msg ?? `mountDir ${JSON.stringify(cls.mountDir)} does not exist`);
        return true;
      }
      const msg = `storage class ${JSON.stringify(className)}: error reading directory ${JSON.stringify(cls.mountDir)}: ${describeFsError(err)}`;
      this.#problem(pass, className, 'error', REASON_DISCOVERY_FAILED, msg);
      return true;
    }
    if (!this.#hostMountChecked.has(className)) {
      const table = await this.#mountTable(pass);
      if (table) this.#hostMountChecked.set(className, mountDirProblem(className, cls, true, this.#env.config, table));
    }
    const notFromHost = this.#hostMountChecked.get(className);
    if (notFromHost !== undefined) this.#problem(pass, `${className}\0host-mount`, 'warning', REASON_DISCOVERY_FAILED, notFromHost);

    for (const dirent of names) {
      if (this.#o.signal?.aborted) return false;
      const name = dirent.name;
      if (!matchesNamePattern(cls.namePattern, name)) continue;
      await this.#discoverEntry(pass, setup, {
        className,
        cls,
        name,
        filePath: join(cls.mountDir, name),
        isDirectory: dirent.isDirectory(),
        hostPath: join(cls.hostDir, name),
        pvName: generatePVName(name, this.#nodeName, className),
        reclaimPolicy,
        mountOptions: sc.mountOptions,
        start: this.#now(),
      });
    }
    return !this.#o.signal?.aborted;
  }

  async #discoverEntry(pass: Pass, setup: Setup, e: Entry): Promise<void> {
    const key = `${e.className}\0${e.filePath}`;
    pass.seen.add(e.pvName);
    let mode: VolumeMode;
    try {
      // Only a directory can be mounted over a directory entry, so a directory entry needs no stat:
      // a steady pass over N mount points makes no system call per volume (issue 12). Symlinks
      // (block devices), device nodes and files are stat'ed as before (Node resolves a DT_UNKNOWN
      // entry type with lstat).
      mode = e.isDirectory ? 'Filesystem' : await detectVolumeMode(e.filePath);
    } catch (err) {
      this.#problem(pass, key, 'warning', REASON_NOT_DISCOVERED, errorMessage(err), undefined, e.pvName);
      return;
    }

    const cached = this.#o.pvCache.get(e.pvName);
    if (cached) {
      if (cached.spec?.volumeMode === 'Block' && mode === 'Filesystem') {
        const msg = `incorrect Volume Mode: PV ${JSON.stringify(e.pvName)} requires block mode but path ${JSON.stringify(e.filePath)} was in fs mode`;
        this.#problem(pass, key, 'error', REASON_FAILED_DELETE, msg, pvRef(cached), e.pvName);
      }
      return;
    }

    const users = this.#o.pvCache.lookupByPath(e.hostPath);
    if (users.length > 0) {
      const msg = `Volume path already in use: PV ${JSON.stringify(e.pvName)} wants path ${JSON.stringify(e.hostPath)} which was already found in ${users.map((p) => JSON.stringify(p.metadata?.name ?? '')).join(', ')}.`;
      this.#problem(pass, key, 'log', '', msg, undefined, e.pvName);
      return;
    }

    if (this.#o.cleanupTracker.inProgress(e.pvName)) {
      this.#log.info({ pv: e.pvName }, `PV ${e.pvName} is still being cleaned, not going to recreate it`);
      return;
    }
    try {
      await this.#o.cleanupTracker.removeStatus(e.pvName);
    } catch (err) {
      this.#log.error({ pv: e.pvName, err: err }, `expected status exists and fail to remove cleanup status for pv ${e.pvName}`);
      return;
    }

    // Only a NEW entry (no PV, path not in use) gets here: the checks below cost nothing for volumes that have a PV.
    if (!(await this.#placeAllowed(pass, key, e))) return;
    const capacity = await this.#capacity(pass, key, e, mode);
    if (capacity === undefined) return;
    if (mode === 'Block' && !(await this.#blockFree(pass, key, e, capacity))) return;
    await this.#create(pass, setup, key, e, mode, capacity);
  }

  /**
   * Issue 17, 3b: an entry is refused when the class's discovery dir is not trusted (it lies inside a
   * volume, another class's discovery dir, or on a mount inside one: a tenant could have written
   * every entry there), when the entry is a mount whose filesystem lies inside another discovered
   * volume, or when it is a symlink whose target lies inside a discovered volume.
   */
  async #placeAllowed(pass: Pass, key: string, e: Entry): Promise<boolean> {
    const refuse = (why: string, level: 'warning' | 'error' = 'warning'): false => {
      const msg = `not creating a PV for ${JSON.stringify(e.filePath)} (class ${JSON.stringify(e.className)}, host path ${JSON.stringify(e.hostPath)}): ${why}`;
      this.#problem(pass, `${key}\0place`, level, REASON_DISCOVERY_REFUSED, msg, undefined, e.pvName);
      return false;
    };
    let n: Nesting;
    try {
      n = await (pass.nesting ??= this.#readNesting(pass));
    } catch (err) {
      return refuse(`cannot check where it lies: ${describeFsError(err)}`, 'error');
    }
    const untrusted = n.untrusted.get(e.className);
    if (untrusted !== undefined) return refuse(`its discovery dir (mountDir ${JSON.stringify(e.cls.mountDir)}) is not trusted: ${untrusted}`);
    const realDir = n.realDirs.get(e.className) ?? e.cls.mountDir;
    try {
      if (!e.isDirectory && (await lstat(e.filePath)).isSymbolicLink()) {
        const target = await realpath(e.filePath);
        const v = volumeHolding(n.mounts, n.volumes, target);
        if (v) return refuse(`it is a symlink to ${JSON.stringify(target)}, which lies inside the volume mounted at ${JSON.stringify(v.mountPoint)}`);
        return true;
      }
    } catch (err) {
      // Gone or unreadable: the mode check reports it.
      this.#log.debug({ pv: e.pvName, err: errorMessage(err) }, `cannot lstat ${JSON.stringify(e.filePath)}`);
      return true;
    }
    const self = join(realDir, e.name);
    const mount = n.mounts.findLast((m) => m.mountPoint === self);
    if (mount) {
      const v = volumeHoldingMount(n.volumes, mount);
      if (v) {
        return refuse(
          `it is a mount of ${JSON.stringify(mount.root)} on ${mount.devno}, which lies inside the volume mounted at ${JSON.stringify(v.mountPoint)} (${v.devno}, root ${JSON.stringify(v.root)})`,
        );
      }
    }
    return true;
  }

  async #readNesting(pass: Pass): Promise<Nesting> {
    const mounts = await this.#mountTable(pass);
    if (!mounts) throw new Error(`cannot read the mount table ${this.#env.mountInfoPath ?? DEFAULT_MOUNTINFO_PATH}`);
    const realDirs = new Map<string, string>();
    for (const [name, c] of Object.entries(this.#env.config.storageClassMap)) {
      if (!c) continue;
      realDirs.set(name, await realpath(c.mountDir).catch(() => c.mountDir));
    }
    const volumes = discoveredVolumes(mounts, [...realDirs.values()]);
    const untrusted = new Map<string, string>();
    for (const [name, dir] of realDirs) {
      const others = [...realDirs].filter(([n]) => n !== name).map(([, d]) => d);
      const why = discoveryDirProblem(mounts, volumes, dir, others);
      if (why !== undefined) untrusted.set(name, why);
    }
    return { mounts, volumes, realDirs, untrusted };
  }

  /** Issue 17, 4: a block device in use (or of size 0) gets no PV; one Warning per device and reason. */
  async #blockFree(pass: Pass, key: string, e: Entry, size: bigint): Promise<boolean> {
    const what = `not creating a PV for block device ${JSON.stringify(e.filePath)} (class ${JSON.stringify(e.className)}, host path ${JSON.stringify(e.hostPath)})`;
    try {
      pass.blockFacts ??= this.#mountTable(pass).then((mounts) => {
        if (!mounts) throw new Error(`cannot read the mount table ${this.#env.mountInfoPath ?? DEFAULT_MOUNTINFO_PATH}`);
        return readBlockHostFacts(mounts, this.#o.blockUsage);
      });
      const busy = await blockDeviceUsage(e.filePath, size, await pass.blockFacts, {
        sysRoot: this.#o.sysRoot,
        heldExclusively: this.#o.blockUsage?.heldExclusively,
      });
      for (const b of busy) this.#problem(pass, `${key}\0busy\0${b.reason}`, 'warning', REASON_BLOCK_IN_USE, `${what}: it is in use (${b.reason}): ${b.detail}`, undefined, e.pvName);
      return busy.length === 0;
    } catch (err) {
      this.#problem(pass, `${key}\0busy`, 'error', REASON_BLOCK_IN_USE, `${what}: cannot tell whether it is in use: ${describeFsError(err)}`, undefined, e.pvName);
      return false;
    }
  }

  /** Checks the entry can back a PV of the class's mode and measures it; undefined when it cannot. */
  async #capacity(pass: Pass, key: string, e: Entry, mode: VolumeMode): Promise<bigint | undefined> {
    try {
      if (mode === 'Block') {
        if (e.cls.volumeMode === 'Block' && e.mountOptions && e.mountOptions.length > 0) {
          this.#log.warn(
            { pv: e.pvName, class: e.className },
            `Path ${JSON.stringify(e.filePath)} will be used to create block volume, mount options ${JSON.stringify(e.mountOptions)} will not take effect.`,
          );
        }
        return await blockDeviceCapacity(e.filePath, { sysRoot: this.#o.sysRoot });
      }
      if (e.cls.volumeMode === 'Block') {
        const msg = `path ${JSON.stringify(e.filePath)} of filesystem mode cannot be used to create block volume`;
        this.#problem(pass, key, 'error', REASON_NOT_DISCOVERED, msg, undefined, e.pvName);
        return undefined;
      }
      const mountInfoPath = this.#env.mountInfoPath ?? DEFAULT_MOUNTINFO_PATH;
      const onMalformed = (n: number): void => this.#log.warn({ path: mountInfoPath }, `skipped ${n} malformed line(s) in ${mountInfoPath}`);
      const shared = this.#o.mountTable;
      pass.mountPoints ??= shared
        ? shared.current().then((snap) => {
            const parsed = snap.view(parseMountInfo);
            if (parsed.malformed > 0) onMalformed(parsed.malformed);
            return parsed.mountPoints;
          })
        : readMountPoints(mountInfoPath, { onMalformed });
      let mountPoints: Set<string>;
      try {
        mountPoints = await pass.mountPoints;
      } catch (err) {
        this.#problem(pass, `${e.className}\0mountinfo`, 'error', REASON_DISCOVERY_FAILED, `error retrieving mountpoints: ${describeFsError(err)}`);
        return undefined;
      }
      if (!mountPoints.has(e.filePath)) {
        // The Go provisioner's words, byte for byte (its e2e suite and admins' searches grep them): it reads
        // /proc/mounts, we read the same namespace's mounts from /proc/self/mountinfo; a test's table is named.
        const table = mountInfoPath === DEFAULT_MOUNTINFO_PATH ? '/proc/mounts' : mountInfoPath;
        const msg = `path ${JSON.stringify(e.filePath)} is not a valid mount point: mountPath=${JSON.stringify(e.filePath)} wasn't found in the ${table} file`;
        this.#problem(pass, key, 'warning', REASON_NOT_DISCOVERED, msg, undefined, e.pvName);
        return undefined;
      }
      return await filesystemCapacity(e.filePath);
    } catch (err) {
      this.#problem(pass, key, 'error', REASON_NOT_DISCOVERED, errorMessage(err), undefined, e.pvName);
      return undefined;
    }
  }

  async #create(pass: Pass, setup: Setup, key: string, e: Entry, mode: VolumeMode, capacity: bigint): Promise<void> {
    if (!this.#createBackoff.ready(e.pvName)) {
      const last = this.#createErrors.get(e.pvName);
      // A previous AlreadyExists is not an error: the PV exists, the cache has not (or will not) pick it up.
      if (last !== undefined) this.#noteProblem(pass, key, 'error', last);
      const taken = this.#createWarnings.get(e.pvName);
      if (taken !== undefined) this.#noteProblem(pass, taken.key, 'warning', taken.msg);
      return;
    }
    let identity: string;
    try {
      identity = await discoveredIdentity(e.filePath, mode, { mounts: await this.#mountTable(pass) });
    } catch (err) {
      this.#problem(pass, key, 'error', REASON_NOT_DISCOVERED, errorMessage(err), undefined, e.pvName);
      return;
    }
    const pv = buildLocalPV({
      identity,
      name: e.pvName,
      provisionerName: this.#env.provisionerName,
      labels: setup.labels,
      hostnameTerm: setup.hostnameTerm,
      ownerReference: setup.ownerReference,
      config: this.#env.config,
      className: e.className,
      classConfig: e.cls,
      hostPath: e.hostPath,
      capacityBytes: capacity,
      reclaimPolicy: e.reclaimPolicy,
      mountOptions: e.mountOptions,
    });
    this.#log.info(
      { pv: e.pvName, class: e.className },
      `Found new volume at host path ${JSON.stringify(e.hostPath)} with capacity ${roundDownCapacityPretty(capacity)}, creating Local PV ${JSON.stringify(e.pvName)}, required volumeMode ${JSON.stringify(e.cls.volumeMode)}`,
    );
    let created: V1PersistentVolume;
    try {
      created = await this.#env.metrics.timePvRequest('create', () => this.#env.kube.createPersistentVolume(pv));
    } catch (err) {
      const delay = this.#createBackoff.failure(e.pvName);
      if (isAlreadyExists(err)) {
        this.#createErrors.delete(e.pvName);
        await this.#alreadyExists(pass, key, e, delay);
        return;
      }
      const msg = `error creating PV ${JSON.stringify(e.pvName)} for volume at ${JSON.stringify(e.hostPath)}: ${errorMessage(err)}`;
      this.#createErrors.set(e.pvName, msg);
      this.#problem(pass, key, 'error', REASON_DISCOVERY_FAILED, msg, undefined, e.pvName);
      return;
    }
    this.#createBackoff.forget(e.pvName);
    this.#createErrors.delete(e.pvName);
    this.#createWarnings.delete(e.pvName);
    this.#o.pvCache.noteCreated(created);
    this.#log.info({ pv: e.pvName }, `Created PV ${JSON.stringify(e.pvName)} for volume at ${JSON.stringify(e.hostPath)}`);
    pass.created.push(e.pvName);
    this.#env.metrics.discoveryTotal.inc({ mode: e.cls.volumeMode });
    this.#env.metrics.discoveryDuration.observe({ mode: e.cls.volumeMode }, Math.max(0, this.#now() - e.start) / 1000);
  }

  /**
   * Issue 17, 5: a create answered AlreadyExists for a PV the cache does not hold. Read it: if it is
   * ours (provisioned by this node, same path), it is only invisible (--pv-node-label: labelled for
   * another node) or not delivered yet: re-label it to this node if needed and note it, so no create
   * is sent again. Otherwise the name is taken: a Warning that names the conflict, and the create is
   * retried only after the backoff (10 s doubling to 5 min).
   */
  async #alreadyExists(pass: Pass, key: string, e: Entry, delay: number): Promise<void> {
    const name = JSON.stringify(e.pvName);
    let pv: V1PersistentVolume;
    try {
      pv = await this.#env.kube.getPersistentVolume(e.pvName);
    } catch (err) {
      const why = isNotFound(err) ? 'it was deleted meanwhile' : `reading it failed: ${errorMessage(err)}`;
      this.#log.info({ pv: e.pvName, retryInMs: delay }, `PV ${name} for volume at ${JSON.stringify(e.hostPath)} already exists; ${why}; retrying later`);
      return;
    }
    const want = this.#o.extraLabels?.[PV_NODE_LABEL];
    const have = pv.metadata?.labels?.[PV_NODE_LABEL];
    const labelText = have === undefined ? `no ${PV_NODE_LABEL} label` : `label ${PV_NODE_LABEL}=${have}`;
    const ours = pvOnThisNode(pv, this.#env.nodeId) && pv.spec?.local?.path === e.hostPath;
    if (!ours) {
      const msg = takenMessage(pv, e.pvName, e.hostPath, labelText);
      this.#createWarnings.set(e.pvName, { key: `${key}\0taken`, msg });
      this.#problem(pass, `${key}\0taken`, 'warning', REASON_PV_NAME_TAKEN, msg, undefined, e.pvName);
      return;
    }
    if (want !== undefined && have !== want) {
      try {
        pv = await this.#env.kube.patchPersistentVolume(e.pvName, { metadata: { labels: { [PV_NODE_LABEL]: want } } });
        this.#log.warn({ pv: e.pvName, label: PV_NODE_LABEL }, `PV ${name} of this node carried ${labelText}, which hid it from this node; labelled it ${PV_NODE_LABEL}=${want} again`);
      } catch (err) {
        const hint = isForbidden(err) ? ' (grant patch on persistentvolumes: deployment component pv-node-label)' : '';
        const msg =
          `PV ${name} of this node for volume at ${JSON.stringify(e.hostPath)} carries ${labelText}, so this node does not see it (a release is not cleaned); ` +
          `relabelling it ${PV_NODE_LABEL}=${want} failed: ${errorMessage(err)}${hint}`;
        this.#createWarnings.set(e.pvName, { key: `${key}\0taken`, msg });
        this.#problem(pass, `${key}\0taken`, 'warning', REASON_PV_NAME_TAKEN, msg, undefined, e.pvName);
        return;
      }
    }
    // Ours and visible (now): the informer delivers it; until then the note keeps the next passes from creating it.
    this.#createBackoff.forget(e.pvName);
    this.#createWarnings.delete(e.pvName);
    this.#o.pvCache.noteCreated(pv);
    this.#log.info({ pv: e.pvName }, `PV ${name} for volume at ${JSON.stringify(e.hostPath)} already exists and is this node's; not creating it again`);
  }

  /** The mount table with propagation tags, read at most once per pass; undefined when it cannot be read. */
  #mountTable(pass: Pass): Promise<MountPropagation[] | undefined> {
    const path = this.#env.mountInfoPath ?? DEFAULT_MOUNTINFO_PATH;
    const shared = this.#o.mountTable;
    pass.mountTable ??= (shared ? shared.current().then((snap) => snap.view(parseMountPropagation)) : readMountPropagation(path)).catch((err: unknown) => {
      this.#log.warn({ path, err: err }, `cannot read ${path} to check the classes' hostPath mounts`);
      return undefined;
    });
    return pass.mountTable;
  }

  /**
   * Records a problem: into the pass's errors or warnings (or only the log),
   * and as a Warning Event (on `ref`, default the Node) only when this key's
   * message is new or changed. `pv` (the PV an entry has or would get) names it in the log line.
   */
  #problem(pass: Pass, key: string, level: 'error' | 'warning' | 'log', reason: string, msg: string, ref?: ObjectRef, pv?: string): void {
    this.#noteProblem(pass, key, level, msg);
    if (this.#reported.get(key) === msg) return;
    this.#reported.set(key, msg);
    const fields = pv === undefined ? {} : { pv };
    if (level === 'log') {
      this.#log.error(fields, msg);
      return;
    }
    if (level === 'error') this.#log.error(fields, msg);
    else this.#log.warn(fields, msg);
    this.#env.recorder.event(ref ?? this.#nodeRef, 'Warning', reason, msg);
  }

  #noteProblem(pass: Pass, key: string, level: 'error' | 'warning' | 'log', msg: string): void {
    pass.problems.add(key);
    if (level === 'error') {
      pass.errors.push(msg);
      this.#env.metrics.discoveryErrors.inc({ class: key.split('\0')[0] ?? '' });
    } else if (level === 'warning') {
      pass.warnings.push(msg);
    }
  }

  #finish(pass: Pass, completed: boolean): void {
    // Forget problems that went away, so they are reported again if they come back.
    // After an aborted pass we cannot tell, so keep them.
    if (!completed) return;
    for (const key of [...this.#reported.keys()]) if (!pass.problems.has(key)) this.#reported.delete(key);
    this.#createBackoff.retain((name) => pass.seen.has(name) && !this.#o.pvCache.get(name));
    for (const name of [...this.#createErrors.keys()]) if (!pass.seen.has(name)) this.#createErrors.delete(name);
    for (const name of [...this.#createWarnings.keys()]) if (!pass.seen.has(name) || this.#o.pvCache.get(name)) this.#createWarnings.delete(name);
  }
}

function takenMessage(pv: V1PersistentVolume, pvName: string, hostPath: string, labelText: string): string {
  const by = pv.metadata?.annotations?.[ANN_PROVISIONED_BY] ?? '';
  return (
    `PV name ${JSON.stringify(pvName)} for volume at ${JSON.stringify(hostPath)} is taken by a PV this node did not make for that volume ` +
    `(provisioned-by ${JSON.stringify(by)}, path ${JSON.stringify(pv.spec?.local?.path ?? '')}, ${labelText}); no PV is created for the volume until that PV is deleted`
  );
}

function result(pass: Pass): DiscoveryResult {
  return { ready: pass.errors.length === 0, created: pass.created, errors: pass.errors, warnings: pass.warnings };
}

