// Reads the mounted ConfigMap directory.
//
// A kubelet ConfigMap volume looks like this:
//   dir/..2026_11_30_10_00_00.123456789/<key>   (one generation, real files)
//   dir/..data -> ..2026_11_30_10_00_00.123456789
//   dir/<key> -> ..data/<key>
// and an update writes a new generation, then renames ..data_tmp over ..data.
// Reading the visible symlinks one by one can mix two generations, so we
// resolve ..data once and read every key from that one generation directory.
// If that generation disappears while we read (the kubelet deletes the old one
// right after a swap), or ..data points elsewhere once we are done (the old
// generation, emptied file by file, can list as no keys at all), the read starts over; after a few tries it gives up
// with a transient ConfigReadError, which callers retry later.
//
// A plain directory without ..data (development, tests, the demo) is read as
// is: every regular file, or symlink to one, whose name does not start with ".".
//
// No file over maxFileBytes (default 256 KiB, flag --max-config-file-size) is
// read, and no directory with more than MAX_CONFIG_KEYS (128) entries: that is
// a non-transient ConfigReadError, which makes the config
// invalid (the supervisor keeps the last good one). Parsing cost grows with
// the text (see docs/configuration.md), and a ConfigMap holds 1 MiB at most.
import { open, readdir, readlink, stat } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { MAX_CONFIG_KEYS, parseConfig } from './parse.ts';
import type { ParseResult } from './types.ts';
import { describeFsError, errnoCode } from '../util/errors.ts';

/** Largest config file read by default: 256 KiB. */
export const DEFAULT_MAX_CONFIG_FILE_BYTES = 256 * 1024;

export interface ReadOptions {
  /** Largest file read, in bytes (default DEFAULT_MAX_CONFIG_FILE_BYTES). */
  readonly maxFileBytes?: number | undefined;
}

export interface ConfigFiles {
  /** ConfigMap key -> content. */
  files: Record<string, string>;
  /** The ..data target the files were read from; undefined for a plain directory. */
  generation: string | undefined;
}

export class ConfigReadError extends Error {
  /** True when retrying soon is expected to succeed (a kubelet swap raced the read). */
  readonly transient: boolean;
  readonly path: string;

  constructor(message: string, opts: { path: string; transient: boolean; cause?: unknown }) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'ConfigReadError';
    this.transient = opts.transient;
    this.path = opts.path;
  }
}

const DATA = '..data';
const MAX_ATTEMPTS = 5;
const RETRY_DELAY_MS = 20;

/** Thrown inside one attempt when the files changed under us. */
class Raced extends Error {}

/**
 * Reads one file of at most `max` bytes, never more than its size at open + 1.
 * ENOENT, or a file growing while read, means a swap or an edit raced us
 * (Raced); anything else is fatal.
 */
async function readOne(file: string, max: number): Promise<string> {
  let handle;
  try {
    handle = await open(file, 'r');
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') throw new Raced(file);
    throw new ConfigReadError(`cannot read config file ${file}: ${describeFsError(err, 'short')}`, { path: file, transient: false, cause: err });
  }
  try {
    const { size } = await handle.stat();
    if (size > max) {
      throw new ConfigReadError(`config file ${file} is ${size} bytes, over the limit of ${max} bytes (--max-config-file-size)`, {
        path: file,
        transient: false,
      });
    }
    const buf = Buffer.alloc(size + 1);
    let got = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buf, got, buf.length - got, got);
      if (bytesRead === 0) break;
      got += bytesRead;
      if (got > size) throw new Raced(file);
    }
    return buf.toString('utf8', 0, got);
  } catch (err) {
    if (err instanceof ConfigReadError || err instanceof Raced) throw err;
    throw new ConfigReadError(`cannot read config file ${file}: ${describeFsError(err, 'short')}`, { path: file, transient: false, cause: err });
  } finally {
    await handle.close();
  }
}

/**
 * More than MAX_CONFIG_KEYS entries (ConfigMap keys) make the config invalid
 * before any is read: each one costs a stat, a read and a warning.
 */
function tooManyKeys(dir: string, n: number): void {
  if (n <= MAX_CONFIG_KEYS) return;
  throw new ConfigReadError(
    `config directory ${dir} has ${n} entries (ConfigMap keys), over the limit of ${MAX_CONFIG_KEYS}; none was read`,
    { path: dir, transient: false },
  );
}

async function readGeneration(dir: string, target: string, max: number): Promise<ConfigFiles> {
  const genDir = path.resolve(dir, target);
  let names: string[];
  try {
    names = await readdir(genDir);
  } catch (err) {
    if (errnoCode(err) === 'ENOENT' || errnoCode(err) === 'ENOTDIR') throw new Raced(genDir);
    throw new ConfigReadError(`cannot read config generation ${genDir}: ${describeFsError(err, 'short')}`, {
      path: genDir,
      transient: false,
      cause: err,
    });
  }
  const keys = names.filter((n) => !n.startsWith('..'));
  tooManyKeys(genDir, keys.length);
  const files: Record<string, string> = {};
  for (const name of keys.sort()) {
    const file = path.join(genDir, name);
    let st;
    try {
      st = await stat(file);
    } catch (err) {
      if (errnoCode(err) === 'ENOENT') throw new Raced(file);
      throw new ConfigReadError(`cannot read config file ${file}: ${describeFsError(err, 'short')}`, { path: file, transient: false, cause: err });
    }
    if (!st.isFile()) continue;
    files[name] = await readOne(file, max);
  }
  return { files, generation: target };
}

async function readPlainDir(dir: string, max: number): Promise<ConfigFiles> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    throw new ConfigReadError(`cannot read config directory ${dir}: ${describeFsError(err, 'short')}`, { path: dir, transient: false, cause: err });
  }
  // "..<timestamp>" or "..data_tmp" without "..data": the kubelet is writing its first generation.
  if (names.some((n) => n.startsWith('..'))) throw new Raced(path.join(dir, DATA));
  const keys = names.filter((n) => !n.startsWith('.'));
  tooManyKeys(dir, keys.length);
  const files: Record<string, string> = {};
  for (const name of keys.sort()) {
    const file = path.join(dir, name);
    let st;
    try {
      st = await stat(file); // follows symlinks
    } catch (err) {
      if (errnoCode(err) === 'ENOENT') continue; // broken symlink, or removed since readdir
      throw new ConfigReadError(`cannot read config file ${file}: ${describeFsError(err, 'short')}`, { path: file, transient: false, cause: err });
    }
    if (!st.isFile()) continue;
    files[name] = await readOne(file, max);
  }
  return { files, generation: undefined };
}

async function readAttempt(dir: string, max: number): Promise<ConfigFiles> {
  let target: string;
  try {
    target = await readlink(path.join(dir, DATA));
  } catch (err) {
    const c = errnoCode(err);
    if (c === 'ENOENT' || c === 'ENOTDIR') return readPlainDir(dir, max);
    if (c === 'EINVAL') return readGeneration(dir, DATA, max); // ..data is a real directory
    throw new ConfigReadError(`cannot read ${path.join(dir, DATA)}: ${describeFsError(err, 'short')}`, {
      path: dir,
      transient: false,
      cause: err,
    });
  }
  const files = await readGeneration(dir, target, max);
  // ..data moved on while we read: the generation we listed may be the old one being removed file by
  // file (its listing then is empty or partial, not a config). Read again.
  const now = await readlink(path.join(dir, DATA)).catch(() => undefined);
  if (now !== target) throw new Raced(path.join(dir, DATA));
  return files;
}

/** Reads every ConfigMap key of one generation of `dir`. Throws ConfigReadError. */
export async function readConfigDir(dir: string, opts: ReadOptions = {}): Promise<ConfigFiles> {
  const max = opts.maxFileBytes ?? DEFAULT_MAX_CONFIG_FILE_BYTES;
  let last: unknown;
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    try {
      return await readAttempt(dir, max);
    } catch (err) {
      if (!(err instanceof Raced)) throw err;
      last = err;
      if (attempt < MAX_ATTEMPTS) await sleep(RETRY_DELAY_MS * attempt);
    }
  }
  throw new ConfigReadError(
    `config directory ${dir} kept changing while being read (${MAX_ATTEMPTS} attempts); ${last instanceof Error ? last.message : ''} vanished`,
    { path: dir, transient: true, cause: last },
  );
}

/** Reads `dir` (one generation) and parses it. Read problems throw ConfigReadError; config problems are in result. */
export async function loadConfig(dir: string, opts: ReadOptions = {}): Promise<{ files: ConfigFiles; result: ParseResult }> {
  const files = await readConfigDir(dir, opts);
  return { files, result: parseConfig(files.files) };
}
