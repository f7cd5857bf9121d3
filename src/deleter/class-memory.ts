// The last-seen settings of every storage class, kept across restarts.
//
// A Released PV is cleaned with its class's settings (hostDir, mountDir,
// blockCleanerCommand, volumeMode, ...). When a class is removed from the
// config, those settings exist nowhere else: the daemon used to keep them in
// memory only, so after any restart the class's Released PVs were stuck for
// good ("Unknown storage class name"). ClassMemory writes them to
// `<stateDir>/classes.json` (atomically: temporary file, fsync, rename, fsync
// of the directory) each time a controller generation starts, and reads them
// back when the daemon starts.
//
// What is kept: every class of the running config, and each removed class
// while at least one PV of this node still names it (any phase). `configured`
// lists the classes of the last applied config, so a class removed while the
// daemon was down is seen as removed at the next start.
//
// Trust (docs/cleanup.md, "Settings of removed classes"): the daemon runs the
// block cleaner of a remembered class as root, so the file is treated as
// hostile input. The state dir must be ours and private (stateDirProblem); the
// file is read with O_NOFOLLOW, must be a regular file of ours, not writable by
// group or others, at most MAX_CLASS_STATE_BYTES; it must name this node; every
// class goes through the config parser (parseConfig), one class at a time,
// exactly as if it were in the ConfigMap: a record the parser refuses is
// dropped and its PVs are kept, never cleaned with guessed settings. Only a
// class that is NOT in the current config is ever looked up here, and the
// guard (guard.ts) still checks every PV before a clean.
import { closeSync, constants, fstatSync, fsyncSync, openSync, readSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { isDnsSubdomain } from '../config/names.ts';
import { parseConfig } from '../config/parse.ts';
import type { ClassConfig, ProvisionerConfig } from '../config/types.ts';
import { errorMessage } from '../util/errors.ts';
import { parseJsonObject } from '../util/json.ts';
import type { Logger } from '../util/log.ts';
import { stateDirProblem } from './orphans.ts';

export const CLASS_STATE_FILE = 'classes.json';
/** Largest state file read (bytes); a bigger one is ignored. */
export const MAX_CLASS_STATE_BYTES = 1024 * 1024;
/** Classes read from the file at most; the rest are ignored. */
export const MAX_REMEMBERED_CLASSES = 512;
export const CLASS_STATE_VERSION = 1;

/** The settings that are written (the selector is not: it plays no part in cleaning). */
const STORED_KEYS = ['hostDir', 'mountDir', 'blockCleanerCommand', 'volumeMode', 'accessMode', 'fsType', 'namePattern'] as const;

export interface ClassState {
  /** Classes of the last applied config. */
  readonly configured: readonly string[];
  /** Remembered settings per class. */
  readonly classes: ReadonlyMap<string, ClassConfig>;
}

export interface ParsedClassState extends ClassState {
  /** Classes dropped while parsing, with why. */
  readonly dropped: readonly { readonly name: string; readonly why: string }[];
}

/** The stored form of one class (ClassConfig without the selector). */
function storedClass(cls: ClassConfig): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of STORED_KEYS) if (cls[k] !== undefined) out[k] = k === 'blockCleanerCommand' ? [...cls[k]] : cls[k];
  return out;
}

/** The file's text for this state. */
export function serializeClassState(node: string, state: ClassState): string {
  const classes: Record<string, unknown> = {};
  for (const name of [...state.classes.keys()].sort()) classes[name] = storedClass(state.classes.get(name)!);
  return `${JSON.stringify({ version: CLASS_STATE_VERSION, node, configured: [...state.configured].sort(), classes }, null, 1)}\n`;
}

const q = (s: string): string => JSON.stringify(s); // a JSON string is a valid YAML double-quoted scalar

/**
 * One stored class checked by the config parser, as the ConfigMap entry `name: {...}` would be;
 * the ClassConfig, or why it is refused.
 */
export function validateStoredClass(name: string, raw: unknown): ClassConfig | string {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return 'not a JSON object';
  const r = raw as Record<string, unknown>;
  for (const k of Object.keys(r)) if (!(STORED_KEYS as readonly string[]).includes(k)) return `unknown field ${q(k)}`;
  let yaml = `${q(name)}:\n`;
  for (const k of STORED_KEYS) {
    const v = r[k];
    if (v === undefined) continue;
    if (k === 'blockCleanerCommand') {
      if (!Array.isArray(v) || v.length === 0 || !v.every((s) => typeof s === 'string')) return 'blockCleanerCommand is not a non-empty list of strings';
      yaml += `  blockCleanerCommand:\n${v.map((s: string) => `    - ${q(s)}\n`).join('')}`;
    } else {
      if (typeof v !== 'string') return `${k} is not a string`;
      yaml += `  ${k}: ${q(v)}\n`;
    }
  }
  // Required: what locates and cleans a volume. The parser would default a missing one.
  for (const k of ['hostDir', 'mountDir', 'blockCleanerCommand', 'volumeMode'] as const) if (r[k] === undefined) return `${k} is missing`;
  const res = parseConfig({ storageClassMap: yaml });
  if (!res.ok) return res.errors.map((e) => e.message).join('; ');
  const cls = res.config.storageClassMap[name];
  if (cls === undefined) return 'the class did not survive parsing';
  // The parser fills defaults and drops empty values; what it returns must be what was stored.
  if (JSON.stringify(storedClass(cls)) !== JSON.stringify(storedClass(r as unknown as ClassConfig))) return 'settings changed when parsed (not in canonical form)';
  return cls;
}

/** The state in a file's text for `node`, or why the whole file is refused. Never throws. */
export function parseClassState(text: string, node: string): ParsedClassState | string {
  const o = parseJsonObject(text);
  if (typeof o === 'string') return o;
  if (o['version'] !== CLASS_STATE_VERSION) return `version ${JSON.stringify(o['version'])} is not ${CLASS_STATE_VERSION}`;
  if (o['node'] !== node) return `written for node ${JSON.stringify(o['node'])}, not ${JSON.stringify(node)}`;
  const configured = o['configured'];
  if (!Array.isArray(configured) || !configured.every((s) => typeof s === 'string' && isDnsSubdomain(s))) return 'configured is not a list of storage class names';
  if (configured.length > MAX_REMEMBERED_CLASSES) return `configured lists more than ${MAX_REMEMBERED_CLASSES} classes`;
  const rawClasses = o['classes'];
  if (typeof rawClasses !== 'object' || rawClasses === null || Array.isArray(rawClasses)) return 'classes is not a JSON object';
  const entries = Object.entries(rawClasses as Record<string, unknown>);
  if (entries.length > MAX_REMEMBERED_CLASSES) return `more than ${MAX_REMEMBERED_CLASSES} classes`;
  const classes = new Map<string, ClassConfig>();
  const dropped: { name: string; why: string }[] = [];
  for (const [name, raw] of entries) {
    const cls = validateStoredClass(name, raw);
    if (typeof cls === 'string') dropped.push({ name, why: cls });
    else classes.set(name, cls);
  }
  return { configured: [...new Set(configured as string[])], classes, dropped };
}

export interface ApplyResult {
  /** Classes of the previous config (this process's, or the file's at start) missing from this one. */
  readonly removed: readonly string[];
}

export interface ClassMemoryOptions {
  readonly logger?: Logger | undefined;
}

export class ClassMemory {
  /** Undefined when nothing is persisted (no usable state dir). */
  readonly #file: string | undefined;
  readonly #node: string;
  readonly #log: Logger | undefined;
  #classes = new Map<string, ClassConfig>();
  #configured = new Set<string>();

  private constructor(file: string | undefined, node: string, o: ClassMemoryOptions) {
    this.#file = file;
    this.#node = node;
    this.#log = o.logger;
  }

  /** In memory only (tests; or when the state dir cannot be used). */
  static inMemory(node: string, o: ClassMemoryOptions = {}): ClassMemory {
    return new ClassMemory(undefined, node, o);
  }

  /**
   * The memory in `<stateDir>/classes.json`, loaded (the state dir created with mode 0700 when
   * missing). When the dir cannot be trusted, one error is logged and the memory lives in memory
   * only: a removed class's Released PVs are then kept after a restart, never cleaned blind.
   */
  static open(stateDir: string, node: string, o: ClassMemoryOptions = {}): ClassMemory {
    const problem = stateDirProblem(stateDir);
    if (problem !== undefined) {
      o.logger?.error(
        { stateDir },
        `--state-dir ${JSON.stringify(stateDir)} is not used: ${problem}; the settings of storage classes removed from the configuration are not kept across restarts`,
      );
      return ClassMemory.inMemory(node, o);
    }
    const m = new ClassMemory(join(stateDir, CLASS_STATE_FILE), node, o);
    m.#load();
    return m;
  }

  /** The remembered settings of a class (undefined when unknown). */
  get(name: string): ClassConfig | undefined {
    return this.#classes.get(name);
  }

  /** Every remembered class name. */
  names(): string[] {
    return [...this.#classes.keys()].sort();
  }

  /**
   * A generation starts with `config`: its classes are remembered (with these settings), a removed
   * class is kept while `inUse(name)` (a PV of this node names it), and the result is persisted.
   * Returns the classes removed since the previous config.
   */
  apply(config: ProvisionerConfig, inUse: (className: string) => boolean): ApplyResult {
    const now = Object.keys(config.storageClassMap);
    const removed = [...this.#configured].filter((c) => !(c in config.storageClassMap)).sort();
    const next = new Map<string, ClassConfig>();
    for (const [name, cls] of this.#classes) if (!(name in config.storageClassMap) && inUse(name)) next.set(name, cls);
    for (const name of now) next.set(name, config.storageClassMap[name]!);
    this.#classes = next;
    this.#configured = new Set(now);
    this.#save();
    return { removed };
  }

  #load(): void {
    const file = this.#file!;
    let text: string;
    try {
      text = readPrivateFile(file, MAX_CLASS_STATE_BYTES);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      this.#log?.warn({ file, reason: errorMessage(err) }, `ignoring ${JSON.stringify(file)}: ${errorMessage(err)}; Released PVs of classes no longer in the configuration are kept, not cleaned`);
      return;
    }
    const s = parseClassState(text, this.#node);
    if (typeof s === 'string') {
      this.#log?.warn({ file, reason: s }, `ignoring ${JSON.stringify(file)}: ${s}; Released PVs of classes no longer in the configuration are kept, not cleaned`);
      return;
    }
    for (const d of s.dropped) {
      this.#log?.warn({ file, class: d.name, reason: d.why }, `ignoring the remembered settings of storage class ${JSON.stringify(d.name)}: ${d.why}; its Released PVs are kept, not cleaned, unless it is in the configuration`);
    }
    this.#classes = new Map(s.classes);
    this.#configured = new Set(s.configured);
    this.#log?.info({ file, classes: this.names(), configured: [...this.#configured] }, 'loaded the settings of known storage classes');
  }

  #save(): void {
    const file = this.#file;
    if (file === undefined) return;
    try {
      writePrivateFileAtomic(file, serializeClassState(this.#node, { configured: [...this.#configured], classes: this.#classes }));
    } catch (err) {
      this.#log?.warn({ err, file }, `cannot write ${JSON.stringify(file)}; the settings of removed storage classes may be lost at the next restart`);
    }
  }
}

/**
 * Writes a state-dir file atomically (temporary file of this process, mode 0600, fsync, rename, fsync of the
 * directory). Also the device links' record (src/devices/link-store.ts).
 */
export function writePrivateFileAtomic(file: string, text: string): void {
  const tmp = `${file}.${process.pid}.tmp`; // per process: two daemons sharing a state dir never write one temporary file
  rmSync(tmp, { force: true });
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  const dfd = openSync(join(file, '..'), constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    fsyncSync(dfd);
  } finally {
    closeSync(dfd);
  }
}

/** A regular file of ours, not writable by group/others, no symlink, never a fifo or device, at most `max` bytes. */
export function readPrivateFile(file: string, max: number): string {
  const fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error('not a regular file');
    if (st.uid !== (process.getuid?.() ?? 0)) throw new Error(`owned by uid ${st.uid}`);
    if ((st.mode & 0o022) !== 0) throw new Error(`writable by group or others (mode ${(st.mode & 0o777).toString(8).padStart(4, '0')})`);
    if (st.size > max) throw new Error(`larger than ${max} bytes`);
    const buf = Buffer.alloc(max + 1);
    let n = 0;
    for (let r; n < buf.length && (r = readSync(fd, buf, n, buf.length - n, n)) > 0; ) n += r;
    if (n > max) throw new Error(`larger than ${max} bytes`);
    return buf.toString('utf8', 0, n);
  } finally {
    closeSync(fd);
  }
}
