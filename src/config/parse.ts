// The provisioner ConfigMap: one file per top-level key (the ConfigMap key),
// whose content is that key's YAML value. Loads every ConfigMap the Go
// provisioner loads (YAML 1.1 scalars, case-insensitive keys, unknown keys
// ignored, scalars stringified for string fields), but validates much more and
// reports every problem at once instead of exiting on the first one.
// Each call builds a fresh, deeply frozen config: nothing is merged into an
// earlier result (upstream's merge-into-existing-struct bugs, §8.2).
import { createHash } from 'node:crypto';
import type { V1NodeSelectorTerm, V1Toleration } from '@kubernetes/client-node';
import { globSyntaxError } from '../util/glob.ts';
import { parseDuration, timerDurationProblem } from '../util/duration.ts';
import {
  Issues,
  exactEntries,
  joinPath,
  readBool,
  readString,
  readStringList,
  readStringMap,
  readStruct,
} from './decode.ts';
import { describe, parseGoYaml } from './goyaml.ts';
import type { GoValue, MapEntry } from './goyaml.ts';
import { readDeviceSelector } from './device-selector.ts';
import { readSelector, readTolerations } from './kube-fields.ts';
import { isDnsSubdomain, isLabelValue, isQualifiedName } from './names.ts';
import { normalizeDir, quoteForDisplay, systemDirProblem, unprintableCharacter } from './paths.ts';
import {
  DEFAULT_BLOCK_CLEANER_COMMAND,
  DEFAULT_HEALTH_POLICY,
  DEFAULT_MIN_RESYNC_PERIOD_MS,
  DEFAULT_NAME_PATTERN,
  DEFAULT_VOLUME_HEALTH,
} from './types.ts';
import type { ClassConfig, ConfigError, HealthPolicy, ParseResult, ProvisionerConfig, VolumeHealthConfig, VolumeMode } from './types.ts';
import { errorMessage } from '../util/errors.ts';

export const TOP_LEVEL_KEYS = [
  'storageClassMap',
  'nodeLabelsForPV',
  'useAlphaAPI',
  'useJobForCleaning',
  'jobTolerations',
  'minResyncPeriod',
  'useNodeNameOnly',
  'labelsForPV',
  'setPVOwnerRef',
  'removeNodeNotReadyTaint',
  'provisionerNotReadyNodeTaintKey',
  'volumeHealth',
] as const;
type TopKey = (typeof TOP_LEVEL_KEYS)[number];

/**
 * Most keys a ConfigMap (files a config directory) may have; more make the
 * config invalid, unparsed. The provisioner knows 12 keys and ignores the
 * others with a warning each: 40,000 keys took 5.8 s and printed 40,000 warnings.
 */
export const MAX_CONFIG_KEYS = 128;

const TOP_LEVEL_LOWER: ReadonlySet<string> = new Set(TOP_LEVEL_KEYS.map((k) => k.toLowerCase()));

/** True when a ConfigMap key names a top-level setting (case-insensitively, as the Go provisioner matches them). */
export function isKnownTopLevelKey(name: string): boolean {
  return TOP_LEVEL_LOWER.has(name.toLowerCase());
}

export const CLASS_KEYS = [
  'hostDir',
  'mountDir',
  'blockCleanerCommand',
  'volumeMode',
  'accessMode',
  'fsType',
  'namePattern',
  'selector',
  'healthPolicy',
  'deviceSelector',
] as const;

export const VOLUME_HEALTH_KEYS = ['enabled', 'annotatePVs', 'fullThresholdPercent'] as const;
export const HEALTH_POLICY_KEYS = ['deleteMissingAvailable', 'gracePeriod'] as const;

export const ACCESS_MODES: readonly string[] = ['ReadWriteOnce', 'ReadOnlyMany', 'ReadWriteMany', 'ReadWriteOncePod'];

interface TopValue {
  readonly file: string;
  readonly value: GoValue;
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

type Dirs = Record<'hostDir' | 'mountDir', string | undefined>;

/**
 * hostDir and mountDir: set, absolute, printable (no control, bidi or format
 * characters), not the root directory, and not a system directory (paths.ts).
 */
function readDirs(issues: Issues, name: string, path: string, fields: ReadonlyMap<string, MapEntry>, field: (k: string) => GoValue): Dirs {
  const dirs: Dirs = { hostDir: undefined, mountDir: undefined };
  for (const k of ['hostDir', 'mountDir'] as const) {
    const dir = readString(issues, field(k), joinPath(path, k));
    dirs[k] = dir;
    if (fields.has(k) && field(k).kind !== 'null' && dir === undefined) continue; // wrong type, reported
    const at = joinPath(path, k);
    const line = field(k).line;
    if (dir === undefined || dir === '') {
      issues.error(at, line, `Storage Class ${name} is misconfigured, missing HostDir or MountDir parameter (${k} is not set)`);
      continue;
    }
    const bad = unprintableCharacter(dir);
    if (bad !== undefined) {
      // Checked first: no other message may print such a path raw.
      issues.error(
        at,
        line,
        `${k} ${quoteForDisplay(dir)} of storage class ${name} contains ${bad.code} at index ${bad.index}: control, bidi and format characters are refused in a path (they hide what the path really is in logs and Events)`,
      );
      continue;
    }
    if (!dir.startsWith('/')) {
      issues.error(at, line, `${k} ${JSON.stringify(dir)} must be an absolute path`);
      continue;
    }
    const n = normalizeDir(dir);
    if (n === '/') {
      // Every child of the directory is a volume, and a released one is wiped.
      issues.error(at, line, `${k} ${JSON.stringify(dir)} is the root directory: every directory under / would become a volume and be wiped when released`);
    } else {
      const sys = systemDirProblem(n);
      if (sys !== undefined) {
        const normalised = n === dir ? '' : ` (${JSON.stringify(n)} once normalised)`;
        const where = n === sys.root ? `is ${sys.root}` : `lies under ${sys.root}`;
        issues.error(
          at,
          line,
          `${k} ${JSON.stringify(dir)}${normalised} of storage class ${name} ${where}, ${sys.what}: discovery there would make PVs of what it holds and wipe them when released; use a directory of your own, e.g. /mnt/disks/${name}`,
        );
      }
    }
  }
  return dirs;
}

function readClass(issues: Issues, name: string, entry: MapEntry): ClassConfig | undefined {
  const path = joinPath('storageClassMap', name);
  const errorsBefore = issues.errors.length;
  if (!isDnsSubdomain(name)) {
    issues.error(
      path,
      entry.keyLine,
      `storage class name ${JSON.stringify(name)} is not a valid Kubernetes object name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters)`,
    );
  }
  const fields = readStruct(issues, entry.value, path, CLASS_KEYS, 'a storage class entry (map)') ?? new Map<string, MapEntry>();
  if (entry.value.kind !== 'null' && entry.value.kind !== 'map') return undefined;
  const field = (k: string): GoValue => fields.get(k)?.value ?? { kind: 'null', line: entry.keyLine };
  const str = (k: string): string | undefined => readString(issues, field(k), joinPath(path, k));

  const dirs = readDirs(issues, name, path, fields, field);
  let blockCleanerCommand: string[] = [...DEFAULT_BLOCK_CLEANER_COMMAND];
  const cleaner = readStringList(issues, field('blockCleanerCommand'), joinPath(path, 'blockCleanerCommand'));
  if (cleaner !== undefined) {
    if (cleaner.length === 0) {
      issues.error(
        joinPath(path, 'blockCleanerCommand'),
        field('blockCleanerCommand').line,
        `Invalid empty block cleaner command for class ${name}`,
      );
    } else if (cleaner[0] === '') {
      issues.error(joinPath(path, 'blockCleanerCommand'), field('blockCleanerCommand').line, 'the block cleaner program is empty');
    }
    blockCleanerCommand = cleaner;
  }

  let volumeMode: VolumeMode = 'Filesystem';
  const mode = str('volumeMode');
  if (mode === 'Block' || mode === 'Filesystem') volumeMode = mode;
  else if (mode !== undefined && mode !== '') {
    issues.error(joinPath(path, 'volumeMode'), field('volumeMode').line, `unsupported volume mode ${mode}`);
  }

  let accessMode = str('accessMode');
  if (accessMode === '') accessMode = undefined;
  if (accessMode !== undefined && !ACCESS_MODES.includes(accessMode)) {
    issues.error(
      joinPath(path, 'accessMode'),
      field('accessMode').line,
      `unsupported access mode ${JSON.stringify(accessMode)}: use one of ${ACCESS_MODES.join(', ')}`,
    );
  }

  let fsType = str('fsType');
  if (fsType === '') fsType = undefined;

  let namePattern = str('namePattern');
  if (namePattern === undefined || namePattern === '') namePattern = DEFAULT_NAME_PATTERN;
  const pieces = namePattern.split(',').filter((p) => p !== '');
  for (const piece of pieces) {
    const bad = globSyntaxError(piece);
    if (bad !== undefined) {
      issues.error(joinPath(path, 'namePattern'), field('namePattern').line, `namePattern piece ${JSON.stringify(piece)}: ${bad}`);
    }
  }
  if (pieces.length === 0) {
    issues.warn(joinPath(path, 'namePattern'), field('namePattern').line, `namePattern ${JSON.stringify(namePattern)} has no patterns: nothing will be discovered`);
  }

  let selector: V1NodeSelectorTerm[] | undefined;
  if (fields.has('selector')) selector = readSelector(issues, field('selector'), joinPath(path, 'selector'));
  const healthPolicy = fields.has('healthPolicy') ? readHealthPolicy(issues, field('healthPolicy'), joinPath(path, 'healthPolicy')) : undefined;
  const dsEntry = fields.get('deviceSelector');
  const deviceSelector = dsEntry && readDeviceSelector(issues, dsEntry, joinPath(path, 'deviceSelector'), { volumeMode, fsType });

  if (issues.errors.length > errorsBefore) return undefined;
  const cls: Mutable<ClassConfig> = {
    hostDir: dirs.hostDir!,
    mountDir: dirs.mountDir!,
    blockCleanerCommand,
    volumeMode,
    namePattern,
  };
  if (accessMode !== undefined) cls.accessMode = accessMode;
  if (fsType !== undefined) cls.fsType = fsType;
  if (selector !== undefined && selector.length > 0) cls.selector = selector;
  if (healthPolicy !== undefined) cls.healthPolicy = healthPolicy;
  if (deviceSelector !== undefined) cls.deviceSelector = deviceSelector;
  return cls;
}

type ClassEntry = readonly [string, ClassConfig, MapEntry];
type DirKey = 'hostDir' | 'mountDir';
const DIR_KEYS: readonly DirKey[] = ['hostDir', 'mountDir'];

/** Line of a class's key, or of the class name when the key's line is unknown. */
function keyLine(entry: MapEntry, k: DirKey): number | undefined {
  const line = entry.value.kind === 'map' ? entry.value.entries.find((e) => e.key.toLowerCase() === k.toLowerCase())?.value.line : undefined;
  return line ?? entry.keyLine;
}

/**
 * The discovery directories of two classes may not overlap:
 * - the same hostDir (or the same mountDir) in two classes would make two PVs
 *   of each volume;
 * - one class's hostDir or mountDir inside (or equal to the other kind of
 *   directory of) another class's: each volume of the outer class is a
 *   directory a tenant writes to, so its entries (a symlink to /dev/sda...)
 *   would become volumes of the inner class, cleaned as root when released.
 * hostDir and mountDir are also compared with each other: the shipped
 * DaemonSet and chart mount host directories at the same path.
 * One error per pair of classes, on the inner (or later) class's key.
 */
function checkOverlappingDirs(issues: Issues, classes: readonly ClassEntry[]): void {
  const reported = new Set<string>();
  const pairKey = (a: string, b: string): string => JSON.stringify(a < b ? [a, b] : [b, a]);
  // Normalised once (posix.normalize of a long path is the costly part).
  const norm = new Map(classes.map(([name, cls]) => [name, { hostDir: normalizeDir(cls.hostDir), mountDir: normalizeDir(cls.mountDir) }]));
  for (const k of DIR_KEYS) {
    const owner = new Map<string, string>();
    for (const [name, cls, entry] of classes) {
      const dir = norm.get(name)![k];
      const other = owner.get(dir);
      if (other !== undefined) {
        reported.add(pairKey(name, other));
        issues.error(joinPath(joinPath('storageClassMap', name), k), keyLine(entry, k), `${k} ${JSON.stringify(cls[k])} is already used by storage class ${other}`);
      } else {
        owner.set(dir, name);
      }
    }
  }
  // Every directory, normalised -> the classes and keys that use it, in config order.
  const byDir = new Map<string, { name: string; k: DirKey; dir: string }[]>();
  for (const [name, cls] of classes) {
    for (const k of DIR_KEYS) {
      const n = norm.get(name)![k];
      const list = byDir.get(n) ?? [];
      list.push({ name, k, dir: cls[k] });
      byDir.set(n, list);
    }
  }
  const order = new Map(classes.map(([name], i) => [name, i]));
  // An ancestor can only matter if it is some class's directory: only prefixes of those lengths are looked up
  // (a path of 60,000 components costs no more than a short one).
  const lengths = new Set([...byDir.keys()].map((d) => d.length));
  for (const [name, cls, entry] of classes) {
    for (const k of DIR_KEYS) {
      const n = norm.get(name)![k];
      const report = (outer: string, how: 'is' | 'lies inside'): void => {
        for (const o of byDir.get(outer) ?? []) {
          if (o.name === name) continue;
          // Equal directories: the same kind is reported above; the other kind on the later class.
          if (how === 'is' && (o.k === k || order.get(o.name)! > order.get(name)!)) continue;
          const pk = pairKey(name, o.name);
          if (reported.has(pk)) continue;
          reported.add(pk);
          issues.error(
            joinPath(joinPath('storageClassMap', name), k),
            keyLine(entry, k),
            `${k} ${JSON.stringify(cls[k])} of storage class ${name} ${how} ${o.k} ${JSON.stringify(o.dir)} of storage class ${o.name}: the directories of two classes may not overlap (one inside the other): entries inside one class's volumes, such as a tenant's symlink to a disk, would become volumes of the other and be wiped when released`,
          );
        }
      };
      report(n, 'is');
      for (let i = n.indexOf('/', 1); i !== -1; i = n.indexOf('/', i + 1)) if (lengths.has(i)) report(n.slice(0, i), 'lies inside');
    }
  }
}

function readStorageClassMap(issues: Issues, v: GoValue): Record<string, ClassConfig> {
  if (v.kind === 'null') return {};
  if (v.kind !== 'map') {
    issues.error('storageClassMap', v.line, `expected a map of storage class name to settings, got ${describe(v)}`);
    return {};
  }
  const good: ClassEntry[] = [];
  for (const entry of exactEntries(issues, v, 'storageClassMap')) {
    const cls = readClass(issues, entry.key, entry);
    if (cls !== undefined) good.push([entry.key, cls, entry]);
  }
  checkOverlappingDirs(issues, good);
  const sorted = [...good].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return Object.fromEntries(sorted.map(([name, cls]) => [name, cls]));
}

/**
 * labelsForPV: every key a label key ([DNS subdomain prefix/]name), every value
 * a label value. The Go provisioner passes them on unchecked, and the API
 * server then refuses every PV create, volume by volume.
 */
function readLabels(issues: Issues, v: GoValue): Record<string, string> {
  const labels = readStringMap(issues, v, 'labelsForPV');
  if (labels === undefined || v.kind !== 'map') return {};
  const lines = new Map(v.entries.map((e) => [e.key, { key: e.keyLine, value: e.value.line ?? e.keyLine }]));
  let ok = true;
  for (const [key, value] of Object.entries(labels)) {
    const p = joinPath('labelsForPV', key);
    if (!isQualifiedName(key)) {
      ok = false;
      issues.error(
        p,
        lines.get(key)?.key,
        `${quoteForDisplay(key)} is not a valid label key: an optional DNS subdomain prefix (at most 253 characters) and "/", then a name of at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit`,
      );
    }
    if (!isLabelValue(value)) {
      ok = false;
      issues.error(
        p,
        lines.get(key)?.value,
        `value ${quoteForDisplay(value)} is not a valid label value: empty, or at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit`,
      );
    }
  }
  return ok ? labels : {};
}

/** A Go duration string (e.g. "5m0s") that fits a timer; 0 only with allowZero. Undefined when null or wrong (wrong is reported). */
function readDuration(issues: Issues, v: GoValue, path: string, opts: { allowZero: boolean }): number | undefined {
  if (v.kind === 'null') return undefined;
  if (v.kind !== 'string') {
    const hint = v.kind === 'int' || v.kind === 'float' ? ' (a bare number is not a duration: add a unit, e.g. 300s)' : '';
    issues.error(path, v.line, `expected a Go duration string such as "5m0s" or "1h30m", got ${describe(v)}${hint}`);
    return undefined;
  }
  let ms: number;
  try {
    ms = parseDuration(v.value);
  } catch (err) {
    issues.error(path, v.line, errorMessage(err));
    return undefined;
  }
  // 0 is Go's "no periodic resync"; anything meant for a timer must fit one.
  const problem = timerDurationProblem(ms, opts);
  if (problem !== undefined) {
    issues.error(path, v.line, `${path.split('.').pop() ?? path} ${JSON.stringify(v.value)} is ${problem}`);
    return undefined;
  }
  return ms;
}

const readMinResync = (issues: Issues, v: GoValue): number | undefined => readDuration(issues, v, 'minResyncPeriod', { allowZero: true });

/** A class's `healthPolicy` map: deleteMissingAvailable (bool, default false), gracePeriod (duration > 0, default 10m). */
function readHealthPolicy(issues: Issues, v: GoValue, path: string): HealthPolicy | undefined {
  const fields = readStruct(issues, v, path, HEALTH_POLICY_KEYS, 'a health policy (map with deleteMissingAvailable, gracePeriod)');
  if (fields === undefined) return undefined;
  const field = (k: string): GoValue => fields.get(k)?.value ?? { kind: 'null', line: v.line };
  return {
    deleteMissingAvailable: readBool(issues, field('deleteMissingAvailable'), joinPath(path, 'deleteMissingAvailable')) ?? DEFAULT_HEALTH_POLICY.deleteMissingAvailable,
    gracePeriodMs: readDuration(issues, field('gracePeriod'), joinPath(path, 'gracePeriod'), { allowZero: false }) ?? DEFAULT_HEALTH_POLICY.gracePeriodMs,
  };
}

/** Top-level `volumeHealth`: enabled (default true), annotatePVs (default false), fullThresholdPercent (1-100, default off). */
function readVolumeHealth(issues: Issues, v: GoValue): VolumeHealthConfig | undefined {
  const fields = readStruct(issues, v, 'volumeHealth', VOLUME_HEALTH_KEYS, 'a map with enabled, annotatePVs, fullThresholdPercent');
  if (fields === undefined) return undefined;
  const field = (k: string): GoValue => fields.get(k)?.value ?? { kind: 'null', line: v.line };
  const out: { -readonly [K in keyof VolumeHealthConfig]: VolumeHealthConfig[K] } = {
    enabled: readBool(issues, field('enabled'), 'volumeHealth.enabled') ?? DEFAULT_VOLUME_HEALTH.enabled,
    annotatePVs: readBool(issues, field('annotatePVs'), 'volumeHealth.annotatePVs') ?? DEFAULT_VOLUME_HEALTH.annotatePVs,
  };
  const t = field('fullThresholdPercent');
  if (t.kind === 'int' || t.kind === 'float') {
    const n = Number(t.value);
    if (n > 0 && n <= 100) out.fullThresholdPercent = n;
    else issues.error('volumeHealth.fullThresholdPercent', t.line, `fullThresholdPercent ${String(t.value)} is out of range: want a percentage above 0 and at most 100 (leave it out to turn the full condition off)`);
  } else if (t.kind !== 'null') {
    issues.error('volumeHealth.fullThresholdPercent', t.line, `expected a number (percentage of used capacity, e.g. 90), got ${describe(t)}`);
  }
  return out;
}

/** Matches ConfigMap keys to top-level fields (case-insensitively) and parses each file's YAML. */
function readFiles(issues: Issues, files: Readonly<Record<string, string>>): Map<TopKey, TopValue> {
  const byLower = new Map<string, TopKey>(TOP_LEVEL_KEYS.map((k) => [k.toLowerCase(), k]));
  const top = new Map<TopKey, TopValue>();
  for (const file of Object.keys(files).sort()) {
    issues.file = file;
    const field = byLower.get(file.toLowerCase());
    if (field === undefined) {
      issues.unknownKey(file, undefined, file, TOP_LEVEL_KEYS);
      continue;
    }
    const prev = top.get(field);
    if (prev !== undefined) {
      issues.error(field, undefined, `${field} is set by two ConfigMap keys, ${JSON.stringify(prev.file)} and ${JSON.stringify(file)}`);
      continue;
    }
    const content = files[file];
    if (typeof content !== 'string') {
      issues.error(field, undefined, `content of ${JSON.stringify(file)} is not text`);
      continue;
    }
    const parsed = parseGoYaml(content, field);
    for (const e of parsed.errors) {
      issues.error(field, e.line, e.message);
      if (e.detail !== undefined) {
        const last = issues.errors.pop()!;
        issues.errors.push({ ...last, detail: e.detail });
      }
    }
    if (parsed.value !== undefined && parsed.errors.length === 0) top.set(field, { file, value: parsed.value });
  }
  issues.file = undefined;
  return top;
}

function buildConfig(issues: Issues, top: Map<TopKey, TopValue>): ProvisionerConfig {
  const nullValue: GoValue = { kind: 'null', line: undefined };
  const at = (k: TopKey): GoValue => {
    const t = top.get(k);
    issues.file = t?.file;
    return t?.value ?? nullValue;
  };
  const bool = (k: TopKey): boolean => readBool(issues, at(k), k) ?? false;

  const storageClassMap = readStorageClassMap(issues, at('storageClassMap'));
  if (Object.keys(storageClassMap).length === 0 && issues.errors.length === 0) {
    issues.warn('storageClassMap', at('storageClassMap').line, 'no storage classes configured: nothing will be discovered');
  }
  const nodeLabelsForPV = readStringList(issues, at('nodeLabelsForPV'), 'nodeLabelsForPV') ?? [];
  const useAlphaAPI = bool('useAlphaAPI');
  if (useAlphaAPI) {
    issues.warn('useAlphaAPI', at('useAlphaAPI').line, 'useAlphaAPI puts node affinity in an alpha annotation that current API servers reject for local PVs');
  }
  const useJobForCleaning = bool('useJobForCleaning');
  const jobTolerations: V1Toleration[] = readTolerations(issues, at('jobTolerations'), 'jobTolerations') ?? [];
  const minResyncPeriodMs = readMinResync(issues, at('minResyncPeriod')) ?? DEFAULT_MIN_RESYNC_PERIOD_MS;
  const useNodeNameOnly = bool('useNodeNameOnly');
  const labels = readLabels(issues, at('labelsForPV'));
  const labelsForPV = Object.fromEntries(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  const setPVOwnerRef = bool('setPVOwnerRef');
  const removeNodeNotReadyTaint = bool('removeNodeNotReadyTaint');
  const provisionerNotReadyNodeTaintKey =
    readString(issues, at('provisionerNotReadyNodeTaintKey'), 'provisionerNotReadyNodeTaintKey') ?? '';
  if (removeNodeNotReadyTaint) {
    const keyLine = at('provisionerNotReadyNodeTaintKey').line;
    if (provisionerNotReadyNodeTaintKey === '') {
      const line = top.has('provisionerNotReadyNodeTaintKey') ? keyLine : at('removeNodeNotReadyTaint').line;
      issues.error('provisionerNotReadyNodeTaintKey', line, 'removeNodeNotReadyTaint is true but provisionerNotReadyNodeTaintKey is empty');
    } else if (!isQualifiedName(provisionerNotReadyNodeTaintKey)) {
      at('provisionerNotReadyNodeTaintKey');
      issues.warn('provisionerNotReadyNodeTaintKey', keyLine, `${JSON.stringify(provisionerNotReadyNodeTaintKey)} is not a valid taint key, so no taint can match it`);
    }
  }
  const volumeHealth = readVolumeHealth(issues, at('volumeHealth'));
  issues.file = undefined;
  return {
    ...(volumeHealth !== undefined ? { volumeHealth } : {}),
    storageClassMap,
    nodeLabelsForPV,
    useAlphaAPI,
    useJobForCleaning,
    jobTolerations,
    minResyncPeriodMs,
    useNodeNameOnly,
    labelsForPV,
    setPVOwnerRef,
    removeNodeNotReadyTaint,
    provisionerNotReadyNodeTaintKey,
  };
}

function deepFreeze<T>(v: T): T {
  if (v !== null && typeof v === 'object' && !Object.isFrozen(v)) {
    for (const child of Object.values(v)) deepFreeze(child);
    Object.freeze(v);
  }
  return v;
}

function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? 'null' : canonical(x))).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const obj = v as Record<string, unknown>;
    const keys = Object.keys(obj)
      .filter((k) => obj[k] !== undefined)
      .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(obj[k])}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

/** JSON of the config with keys sorted at every level and undefined fields left out. */
export function canonicalJson(config: ProvisionerConfig): string {
  return canonical(config);
}

/** sha256 (hex) of canonicalJson(config): equal exactly when the configs mean the same. */
export function configHash(config: ProvisionerConfig): string {
  return createHash('sha256').update(canonicalJson(config)).digest('hex');
}

function parseUnsafe(files: Readonly<Record<string, string>>): ParseResult {
  const issues = new Issues();
  const keys = Object.keys(files).length;
  if (keys > MAX_CONFIG_KEYS) {
    // Not parsed at all: each key costs a parse and a warning.
    const message = `the configuration has ${keys} keys (ConfigMap keys, files of the config directory), over the limit of ${MAX_CONFIG_KEYS}; this provisioner knows ${TOP_LEVEL_KEYS.length}`;
    return Object.freeze({ ok: false as const, errors: Object.freeze([Object.freeze({ path: '', message })]), warnings: Object.freeze([]) });
  }
  const top = readFiles(issues, files);
  const config = buildConfig(issues, top);
  issues.finish();
  const warnings = Object.freeze(issues.warnings.map((w) => Object.freeze(w)));
  if (issues.errors.length > 0) {
    return Object.freeze({ ok: false as const, errors: Object.freeze(issues.errors.map((e) => Object.freeze(e))), warnings });
  }
  const frozen = deepFreeze(config);
  return Object.freeze({ ok: true as const, config: frozen, hash: configHash(frozen), warnings });
}

/**
 * Parses and validates the ConfigMap. `files` maps each ConfigMap key (file
 * name) to its content. Never throws: every problem is in `errors`.
 */
export function parseConfig(files: Readonly<Record<string, string>>): ParseResult {
  try {
    return parseUnsafe(files);
  } catch (err) {
    const message = `internal error while parsing the configuration: ${errorMessage(err)}`;
    const error: ConfigError = { path: '', message };
    return { ok: false, errors: [error] };
  }
}
