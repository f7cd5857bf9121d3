// The provisioner ConfigMap: one file per top-level key (the ConfigMap key),
// whose content is that key's YAML value. Loads every ConfigMap the Go
// provisioner loads (YAML 1.1 scalars, case-insensitive keys, unknown keys
// ignored, scalars stringified for string fields), but validates much more and
// reports every problem at once instead of exiting on the first one.
// Each call builds a fresh, deeply frozen config: nothing is merged into an
// earlier result (upstream's merge-into-existing-struct bugs, §8.2).
import { createHash } from 'node:crypto';
import { posix } from 'node:path';
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
import { readSelector, readTolerations } from './kube-fields.ts';
import { unknownKeyMessage } from './suggest.ts';
import { isDnsSubdomain, isQualifiedName } from './names.ts';
import {
  DEFAULT_BLOCK_CLEANER_COMMAND,
  DEFAULT_MIN_RESYNC_PERIOD_MS,
  DEFAULT_NAME_PATTERN,
} from './types.ts';
import type { ClassConfig, ConfigError, ParseResult, ProvisionerConfig, VolumeMode } from './types.ts';
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
] as const;
type TopKey = (typeof TOP_LEVEL_KEYS)[number];

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
] as const;

export const ACCESS_MODES: readonly string[] = ['ReadWriteOnce', 'ReadOnlyMany', 'ReadWriteMany', 'ReadWriteOncePod'];

interface TopValue {
  readonly file: string;
  readonly value: GoValue;
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

type Dirs = Record<'hostDir' | 'mountDir', string | undefined>;

/** hostDir and mountDir: set, absolute, and not the root directory. */
function readDirs(issues: Issues, name: string, path: string, fields: ReadonlyMap<string, MapEntry>, field: (k: string) => GoValue): Dirs {
  const dirs: Dirs = { hostDir: undefined, mountDir: undefined };
  for (const k of ['hostDir', 'mountDir'] as const) {
    const dir = readString(issues, field(k), joinPath(path, k));
    dirs[k] = dir;
    if (fields.has(k) && field(k).kind !== 'null' && dir === undefined) continue; // wrong type, reported
    if (dir === undefined || dir === '') {
      issues.error(
        joinPath(path, k),
        field(k).line,
        `Storage Class ${name} is misconfigured, missing HostDir or MountDir parameter (${k} is not set)`,
      );
    } else if (!dir.startsWith('/')) {
      issues.error(joinPath(path, k), field(k).line, `${k} ${JSON.stringify(dir)} must be an absolute path`);
    } else if (posix.normalize(dir) === '/') {
      // Every child of the directory is a volume, and a released one is wiped.
      issues.error(joinPath(path, k), field(k).line, `${k} ${JSON.stringify(dir)} is the root directory: every directory under / would become a volume and be wiped when released`);
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
  return cls;
}

/** Two classes sharing a hostDir or a mountDir would create two PVs per volume. */
function checkSharedDirs(issues: Issues, classes: readonly [string, ClassConfig, MapEntry][]): void {
  for (const k of ['hostDir', 'mountDir'] as const) {
    const owner = new Map<string, string>();
    for (const [name, cls, entry] of classes) {
      let dir = posix.normalize(cls[k]);
      if (dir.length > 1 && dir.endsWith('/')) dir = dir.slice(0, -1);
      const other = owner.get(dir);
      if (other !== undefined) {
        const line = entry.value.kind === 'map' ? entry.value.entries.find((e) => e.key.toLowerCase() === k.toLowerCase())?.value.line : undefined;
        issues.error(joinPath(joinPath('storageClassMap', name), k), line ?? entry.keyLine, `${k} ${JSON.stringify(cls[k])} is already used by storage class ${other}`);
      } else {
        owner.set(dir, name);
      }
    }
  }
}

function readStorageClassMap(issues: Issues, v: GoValue): Record<string, ClassConfig> {
  if (v.kind === 'null') return {};
  if (v.kind !== 'map') {
    issues.error('storageClassMap', v.line, `expected a map of storage class name to settings, got ${describe(v)}`);
    return {};
  }
  const good: [string, ClassConfig, MapEntry][] = [];
  for (const entry of exactEntries(issues, v, 'storageClassMap')) {
    const cls = readClass(issues, entry.key, entry);
    if (cls !== undefined) good.push([entry.key, cls, entry]);
  }
  checkSharedDirs(issues, good);
  good.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return Object.fromEntries(good.map(([name, cls]) => [name, cls]));
}

function readMinResync(issues: Issues, v: GoValue): number | undefined {
  if (v.kind === 'null') return undefined;
  if (v.kind !== 'string') {
    const hint = v.kind === 'int' || v.kind === 'float' ? ' (a bare number is not a duration: add a unit, e.g. 300s)' : '';
    issues.error('minResyncPeriod', v.line, `expected a Go duration string such as "5m0s" or "1h30m", got ${describe(v)}${hint}`);
    return undefined;
  }
  let ms: number;
  try {
    ms = parseDuration(v.value);
  } catch (err) {
    issues.error('minResyncPeriod', v.line, errorMessage(err));
    return undefined;
  }
  // 0 is Go's "no periodic resync"; anything meant for a timer must fit one.
  const problem = timerDurationProblem(ms, { allowZero: true });
  if (problem !== undefined) {
    issues.error('minResyncPeriod', v.line, `minResyncPeriod ${JSON.stringify(v.value)} is ${problem}`);
    return undefined;
  }
  return ms;
}

/** Matches ConfigMap keys to top-level fields (case-insensitively) and parses each file's YAML. */
function readFiles(issues: Issues, files: Readonly<Record<string, string>>): Map<TopKey, TopValue> {
  const byLower = new Map<string, TopKey>(TOP_LEVEL_KEYS.map((k) => [k.toLowerCase(), k]));
  const top = new Map<TopKey, TopValue>();
  for (const file of Object.keys(files).sort()) {
    issues.file = file;
    const field = byLower.get(file.toLowerCase());
    if (field === undefined) {
      issues.warn(file, undefined, unknownKeyMessage(file, TOP_LEVEL_KEYS));
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
    const parsed = parseGoYaml(content);
    for (const e of parsed.errors) issues.error(field, e.line, e.message);
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
  const labels = readStringMap(issues, at('labelsForPV'), 'labelsForPV') ?? {};
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
  issues.file = undefined;
  return {
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
  const top = readFiles(issues, files);
  const config = buildConfig(issues, top);
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
