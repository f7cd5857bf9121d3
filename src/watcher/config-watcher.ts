// Watches the mounted ConfigMap directory and delivers every real change of its
// content, once.
//
// - The poll (every --config-sync-period) is the authority. fs.watch on the
//   DIRECTORY is only an early nudge: kubelet swaps `..data`, so events name
//   `..data`/`..data_tmp`/timestamped dirs rather than the keys, and a watch can
//   go deaf when the directory is replaced. Every nudge is debounced and then
//   runs the very same check as the poll.
// - Checks never overlap; a check asked for while one runs is run once after it
//   (any number of requests coalesce into that one).
// - A check reads every key from one `..data` generation (readConfigDir). A
//   transient read error (the swap race) is retried a few times and never
//   reported as invalid; if it persists, the next poll tries again.
// - Results are compared by hash: the parse hash for a valid config (canonical,
//   so a byte-different but equivalent rewrite is no change) and of its warnings
//   (a new unknown key is a change worth reporting), sha256 of the raw
//   files for an invalid one, and of the message for an unreadable directory.
//   onResult is called only when that hash differs from the last one delivered,
//   so kubelet's periodic touches and identical rewrites deliver nothing, and a
//   missing directory is reported once, not every poll.
// - Nothing throws out of a timer or a watch callback.
import { createHash } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import { stat } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { readConfigDir, type ConfigFiles } from '../config/load.ts';
import { parseConfig } from '../config/parse.ts';
import type { ParseResult } from '../config/types.ts';
import type { Logger } from '../util/log.ts';
import { rawFilesHash, warningsHash } from './hash.ts';
import { errorMessage } from '../util/errors.ts';

/** One delivered check: the files of one generation, their hash, and what they parse to. */
export interface WatchResult {
  readonly files: ConfigFiles;
  /** rawFilesHash of `files.files`, computed once by the watcher (consumers need not hash again). */
  readonly rawHash: string;
  readonly result: ParseResult;
}

/** The raw hash of an unreadable directory (no files). */
const EMPTY_RAW_HASH = rawFilesHash({});

export interface ConfigWatcherOptions {
  /** The mounted ConfigMap directory (e.g. /etc/provisioner/config). */
  readonly dir: string;
  /** Poll period in ms: --config-sync-period (default 5000). */
  readonly pollIntervalMs?: number | undefined;
  /** Quiet time after the last fs event before checking (default 300 ms). */
  readonly debounceMs?: number | undefined;
  /** Longest a burst of fs events may defer a check (default 2000 ms); polls wait for the burst too. */
  readonly maxDebounceMs?: number | undefined;
  /** Called with each new distinct result; awaited (checks stay serialised). Errors are logged. */
  readonly onResult: (res: WatchResult) => void | Promise<void>;
  readonly logger: Logger;
  /** fs.watch the directory as an early nudge (default true). */
  readonly watch?: boolean | undefined;
  /** Attempts on a transient read error within one check (default 5). */
  readonly transientRetries?: number | undefined;
  /** Delay between those attempts in ms (default 50). */
  readonly transientRetryDelayMs?: number | undefined;
  /** Seams for tests; default to src/config's readConfigDir and parseConfig. */
  readonly read?: ((dir: string) => Promise<ConfigFiles>) | undefined;
  readonly parse?: ((files: Readonly<Record<string, string>>) => ParseResult) | undefined;
}

export interface ConfigWatcherStats {
  /** Checks run (poll, nudge or checkNow). */
  checks: number;
  /** onResult calls. */
  delivered: number;
  /** fs events received. */
  fsEvents: number;
  /** Transient read errors met (each retried). */
  transientErrors: number;
  /** Times the fs watch was (re-)armed. */
  watchArmed: number;
}

const DEFAULT_POLL_MS = 5000;
const DEFAULT_DEBOUNCE_MS = 300;
const DEFAULT_MAX_DEBOUNCE_MS = 2000;

function isTransient(e: unknown): boolean {
  return typeof e === 'object' && e !== null && (e as { transient?: unknown }).transient === true;
}


export class ConfigWatcher {
  readonly #dir: string;
  readonly #pollMs: number;
  readonly #debounceMs: number;
  readonly #maxDebounceMs: number;
  /** When the current burst of fs events began (undefined: no burst). */
  #burstStart: number | undefined;
  readonly #onResult: (res: WatchResult) => void | Promise<void>;
  readonly #log: Logger;
  readonly #useWatch: boolean;
  readonly #retries: number;
  readonly #retryDelayMs: number;
  readonly #read: (dir: string) => Promise<ConfigFiles>;
  readonly #parse: (files: Readonly<Record<string, string>>) => ParseResult;

  #started = false;
  #stopped = false;
  #pollTimer: NodeJS.Timeout | undefined;
  #debounceTimer: NodeJS.Timeout | undefined;
  #fsWatcher: FSWatcher | undefined;
  #watchedIno: number | undefined;
  /** Aborted by stop(): wakes pending short sleeps (transient retries). */
  readonly #stopSleeps = new AbortController();

  #inflight: Promise<void> | undefined;
  #queued: Promise<void> | undefined;

  /** Key of the last result handed to onResult. */
  #deliveredKey: string | undefined;
  /** Raw hash and key of the last check, to skip re-parsing identical bytes. */
  #lastRaw: { raw: string; key: string; result: ParseResult } | undefined;

  readonly #stats: ConfigWatcherStats = { checks: 0, delivered: 0, fsEvents: 0, transientErrors: 0, watchArmed: 0 };

  constructor(opts: ConfigWatcherOptions) {
    this.#dir = opts.dir;
    this.#pollMs = opts.pollIntervalMs ?? DEFAULT_POLL_MS;
    this.#debounceMs = opts.debounceMs ?? DEFAULT_DEBOUNCE_MS;
    this.#maxDebounceMs = Math.max(this.#debounceMs, opts.maxDebounceMs ?? DEFAULT_MAX_DEBOUNCE_MS);
    this.#onResult = opts.onResult;
    this.#log = opts.logger;
    this.#useWatch = opts.watch ?? true;
    this.#retries = Math.max(1, opts.transientRetries ?? 5);
    this.#retryDelayMs = opts.transientRetryDelayMs ?? 50;
    this.#read = opts.read ?? readConfigDir;
    this.#parse = opts.parse ?? parseConfig;
    if (!(this.#pollMs > 0)) throw new Error(`config watcher: poll interval must be > 0, got ${this.#pollMs}`);
  }

  get stats(): Readonly<ConfigWatcherStats> {
    return { ...this.#stats };
  }

  /**
   * Starts polling (and watching); runs a first check at once. The returned
   * promise resolves when that first check has been delivered; callers may ignore it.
   */
  start(): Promise<void> {
    if (this.#started || this.#stopped) return Promise.resolve();
    this.#started = true;
    this.#pollTimer = setInterval(() => this.#poll(), this.#pollMs);
    return this.#armWatch().then(() => this.checkNow());
  }

  /** Stops watching and polling, clears every timer, and waits for a running check. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#pollTimer) clearInterval(this.#pollTimer);
    this.#pollTimer = undefined;
    if (this.#debounceTimer) clearTimeout(this.#debounceTimer);
    this.#debounceTimer = undefined;
    const closed = this.#closeWatch();
    this.#stopSleeps.abort();
    await this.#queued;
    await this.#inflight;
    await closed;
  }

  /**
   * Runs a check now (SIGHUP, tests). If one is running, one more check runs
   * after it; concurrent requests share that one. Never rejects.
   */
  checkNow(): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    if (this.#inflight === undefined) return this.#runCheck();
    this.#queued ??= this.#inflight.then(() => {
      this.#queued = undefined;
      return this.#runCheck();
    });
    return this.#queued;
  }

  #runCheck(): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    const p = this.#check()
      .catch((e: unknown) => this.#log.error({ err: e, dir: this.#dir }, 'config check failed'))
      .finally(() => {
        if (this.#inflight === p) this.#inflight = undefined;
      });
    this.#inflight = p;
    return p;
  }

  #poll(): void {
    if (this.#stopped) return;
    // A burst of fs events is in progress: its debounced check comes within maxDebounceMs,
    // so a poll in the middle of the burst would only add a restart for a half-written state.
    if (this.#debounceTimer) return;
    // Re-arm the watch if the directory was missing or replaced; then check.
    this.#armWatch()
      .then(() => this.checkNow())
      .catch((e: unknown) => this.#log.error({ err: e }, 'config poll failed'));
  }

  #nudge(): void {
    if (this.#stopped) return;
    this.#stats.fsEvents++;
    if (this.#debounceTimer) clearTimeout(this.#debounceTimer);
    const now = Date.now();
    this.#burstStart ??= now;
    const delay = Math.max(0, Math.min(this.#debounceMs, this.#burstStart + this.#maxDebounceMs - now));
    this.#debounceTimer = setTimeout(() => {
      this.#debounceTimer = undefined;
      this.#burstStart = undefined;
      void this.checkNow();
    }, delay);
  }

  async #check(): Promise<void> {
    this.#stats.checks++;
    const got = await this.#readOnce();
    if (got === undefined || this.#stopped) return;
    const { key, res } = got;
    if (key === this.#deliveredKey) return;
    this.#log.debug({ dir: this.#dir, configDir: res.files.generation, ok: res.result.ok }, 'config content changed');
    await this.#onResult(res);
    // Only a delivery that went through counts; a throwing onResult gets the result again next poll.
    this.#deliveredKey = key;
    this.#stats.delivered++;
  }

  /** Reads and parses one generation; undefined when only transient errors were met. */
  async #readOnce(): Promise<{ key: string; res: WatchResult } | undefined> {
    for (let attempt = 1; ; attempt++) {
      let files: ConfigFiles;
      try {
        files = await this.#read(this.#dir);
      } catch (e) {
        if (isTransient(e)) {
          this.#stats.transientErrors++;
          if (attempt >= this.#retries || this.#stopped) {
            this.#log.warn({ err: e, dir: this.#dir, attempts: attempt }, 'config directory keeps changing while read; will retry at the next poll');
            return undefined;
          }
          this.#log.debug({ err: e, dir: this.#dir, attempt }, 'transient config read error (swap in progress), retrying');
          await this.#sleep(this.#retryDelayMs);
          continue;
        }
        return this.#readError(e);
      }
      const raw = rawFilesHash(files.files);
      const last = this.#lastRaw;
      if (last && last.raw === raw) return { key: last.key, res: { files, rawHash: raw, result: last.result } };
      // A fresh parse (src/config returns a new, frozen object each time).
      const result = this.#parse(files.files);
      // A valid config's key includes its warnings: adding a misspelt key (which changes
      // nothing in the config) is still delivered, so it is reported.
      const key = result.ok ? `ok:${result.hash}:${warningsHash(result.warnings)}` : `invalid:${raw}`;
      this.#lastRaw = { raw, key, result };
      return { key, res: { files, rawHash: raw, result } };
    }
  }

  #readError(e: unknown): { key: string; res: WatchResult } {
    const message = `cannot read config directory ${this.#dir}: ${errorMessage(e)}`;
    this.#lastRaw = undefined;
    const key = `error:${createHash('sha256').update(message).digest('hex')}`;
    const result: ParseResult = { ok: false, errors: [{ path: '', message }] };
    return { key, res: { files: { files: {}, generation: undefined }, rawHash: EMPTY_RAW_HASH, result } };
  }

  /** Sleeps, waking early (and clearing the timer) when the watcher stops. */
  async #sleep(ms: number): Promise<void> {
    await sleep(ms, undefined, { signal: this.#stopSleeps.signal }).catch(() => undefined);
  }

  /** Arms fs.watch on the directory when enabled and not armed, or re-arms it if the directory was replaced. */
  async #armWatch(): Promise<void> {
    if (!this.#useWatch || this.#stopped) return;
    let ino: number | undefined;
    try {
      ino = (await stat(this.#dir)).ino;
    } catch {
      ino = undefined;
    }
    if (this.#stopped) return;
    if (ino === undefined) {
      // Directory gone: the inotify watch is dead; arm again when it is back.
      void this.#closeWatch();
      return;
    }
    if (this.#fsWatcher && this.#watchedIno === ino) return;
    void this.#closeWatch();
    try {
      const w = watch(this.#dir, { persistent: true }, () => this.#nudge());
      w.on('error', (err) => {
        this.#log.warn({ err, dir: this.#dir }, 'config directory watch failed; polling only until re-armed');
        if (this.#fsWatcher === w) void this.#closeWatch();
      });
      this.#fsWatcher = w;
      this.#watchedIno = ino;
      this.#stats.watchArmed++;
    } catch (err) {
      this.#log.warn({ err, dir: this.#dir }, 'cannot watch config directory; polling only');
    }
  }

  /**
   * Closes the fs watch. The returned promise resolves once libuv has released
   * the handle: 'close' comes on nextTick, the handle goes in the close phase
   * of the loop turn after a setImmediate, hence two of them.
   */
  #closeWatch(): Promise<void> {
    const w = this.#fsWatcher;
    this.#fsWatcher = undefined;
    this.#watchedIno = undefined;
    if (!w) return Promise.resolve();
    const closed = new Promise<void>((resolve) => w.once('close', () => resolve()));
    try {
      w.close();
    } catch {
      return Promise.resolve();
    }
    return closed
      .then(() => new Promise<void>((r) => setImmediate(r)))
      .then(() => new Promise<void>((r) => setImmediate(r)));
  }
}
