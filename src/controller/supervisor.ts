// The supervisor owns the running local-controller generation and replaces it
// when the configuration really changes (hot reload). It is process-scoped: the
// metrics, the event recorder and whatever the caller keeps outside `start`
// (informers, HTTP server, process table) survive every reload.
//
// Rules (docs/hot-reload.md has the full story):
// - Valid, same hash as the running generation: `config_reload_total{result="unchanged"}`;
//   `config_last_reload_successful` goes back to 1 (so a reverted bad edit clears the alarm).
// - Invalid: the running generation is left alone. Every error is logged and a
//   Warning `ConfigInvalid` Event goes to each ref, once per distinct bad
//   content; `config_last_reload_successful` 0, `config_reload_total{result="invalid"}`.
//   With no valid config yet, nothing runs and `ready` stays false until one arrives.
// - Valid and new, hot reload off, a generation running: logged once per hash with
//   the changed keys ("restart the pod to apply") and counted as `unchanged`
//   (the running configuration did not change); nothing else happens.
// - Valid and new otherwise: the old generation is stopped completely (its
//   stop() awaited), then the new one started. A failed start is retried with
//   backoff (a Warning `ControllerStartFailed` Event once per config, a log line
//   per attempt, `config_last_reload_successful` 0) until it works or a newer
//   result arrives. On success: a Normal `ConfigReloaded` Event naming the
//   changed keys, a structured log line with the diff, `config_reload_total{result="applied"}`,
//   `config_last_reload_successful` 1, the success timestamp, `config_info{hash}` and,
//   except for the very first start, `controller_restarts_total`.
// - Results are handled one at a time; results arriving meanwhile coalesce, and
//   only the latest is handled next.
// - lastKnownClasses: every storage class ever applied, with its latest
//   settings, so Released PVs of a class removed from the config can still be
//   cleaned with the settings it last had.
import { diffConfigs } from '../config/diff.ts';
import type { ClassConfig, ConfigError, ProvisionerConfig } from '../config/types.ts';
import type { EventRecorder, EventType, ObjectRef } from '../kube/events.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { backoffDelay, type BackoffOptions } from '../util/backoff.ts';
import type { Logger } from '../util/log.ts';
import type { WatchResult } from '../watcher/config-watcher.ts';
import { isKnownTopLevelKey, TOP_LEVEL_KEYS } from '../config/parse.ts';
import { nearestKey } from '../config/suggest.ts';
import { rawFilesHash, warningsHash } from '../watcher/hash.ts';
import { createHash } from 'node:crypto';
import { errorMessage } from '../util/errors.ts';
import { REASON_CONFIG_INVALID, REASON_CONFIG_NO_KNOWN_KEY, REASON_CONFIG_RELOADED, REASON_CONTROLLER_START_FAILED } from '../kube/reasons.ts';

/** One running local controller; stop() resolves when nothing of it is left running. */
export interface Generation {
  stop(): Promise<void>;
}

export interface GenerationContext {
  /** Canonical hash of the config. */
  readonly hash: string;
  /** Every class ever applied (this config's included) with its latest settings. */
  readonly lastKnownClasses: ReadonlyMap<string, ClassConfig>;
  /** 1-based number of this config apply; retries of a failed start reuse it. */
  readonly generation: number;
  /** Aborted when the supervisor stops: a start() waiting on something (cache sync) should give up. */
  readonly signal: AbortSignal;
}

export interface SupervisorOptions {
  readonly start: (config: ProvisionerConfig, ctx: GenerationContext) => Promise<Generation>;
  /** When false, a new valid config is only logged while a generation runs. */
  readonly hotReload: boolean;
  readonly metrics: Metrics;
  readonly recorder: EventRecorder;
  /** Events go to each (the provisioner Pod and its Node). */
  readonly refs: readonly ObjectRef[];
  readonly logger: Logger;
  /** Wall clock in ms (default Date.now). */
  readonly now?: (() => number) | undefined;
  /** Backoff between failed starts (default 1 s doubling to 60 s). */
  readonly retry?: BackoffOptions | undefined;
  /** Seam for tests; defaults to src/config's diffConfigs. */
  readonly diff?: ((a: ProvisionerConfig | undefined, b: ProvisionerConfig) => string[]) | undefined;
}

export interface RunningConfig {
  readonly config: ProvisionerConfig;
  readonly hash: string;
  readonly generation: number;
}

interface Running extends RunningConfig {
  readonly gen: Generation;
}

interface Target {
  readonly config: ProvisionerConfig;
  readonly hash: string;
  readonly generation: number;
  attempts: number;
}

/** Events are capped well below the API's 1 KiB message limit. */
const MAX_EVENT_MESSAGE = 1000;
/** Errors spelled out in a ConfigInvalid Event before "and N more". */
const EVENT_ERRORS = 3;
const DEFAULT_RETRY: BackoffOptions = { initialMs: 1000, maxMs: 60_000 };

export const shortHash = (hash: string): string => hash.slice(0, 12);

function truncate(s: string, max = MAX_EVENT_MESSAGE): string {
  return s.length <= max ? s : `${s.slice(0, max - 3)}...`;
}

/** "path: message (file storageClassMap, line 3)". */
export function formatConfigError(e: ConfigError): string {
  const where: string[] = [];
  if (e.file !== undefined) where.push(`file ${e.file}`);
  if (e.line !== undefined) where.push(`line ${e.line}`);
  const head = e.path ? `${e.path}: ` : '';
  return `${head}${e.message}${where.length ? ` (${where.join(', ')})` : ''}`;
}

function listKeys(keys: readonly string[], max = 20): string {
  if (keys.length === 0) return 'no key (equivalent content)';
  const shown = keys.slice(0, max).join(', ');
  return keys.length > max ? `${shown} and ${keys.length - max} more` : shown;
}


export class Supervisor {
  readonly #start: SupervisorOptions['start'];
  readonly #hotReload: boolean;
  readonly #metrics: Metrics;
  readonly #recorder: EventRecorder;
  readonly #refs: readonly ObjectRef[];
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #retry: BackoffOptions;
  readonly #diff: (a: ProvisionerConfig | undefined, b: ProvisionerConfig) => string[];

  #running: Running | undefined;
  /** The config of the last generation that started (kept while a replacement is failing to start). */
  #applied: RunningConfig | undefined;
  /** A valid config waiting to be started (after its predecessor was stopped). */
  #target: Target | undefined;
  #nextGeneration = 1;
  #known = new Map<string, ClassConfig>();

  #latest: WatchResult | undefined;
  #loop: Promise<void> | undefined;
  #waiters: (() => void)[] = [];
  #wake: (() => void) | undefined;
  #stopped = false;
  readonly #abort = new AbortController();
  #stopping: Promise<void> | undefined;

  /** Hash of the last bad content reported (not reported again). */
  #rejectedHash: string | undefined;
  /** Config hash + warnings hash of the last valid result whose parse warnings were logged. */
  #warnedKey: string | undefined;
  /** Raw files hash of the last config dir reported as having no known key. */
  #noKnownKeyHash: string | undefined;
  /** Hash of the last valid config ignored because hot reload is off. */
  #ignoredHash: string | undefined;

  constructor(opts: SupervisorOptions) {
    this.#start = opts.start;
    this.#hotReload = opts.hotReload;
    this.#metrics = opts.metrics;
    this.#recorder = opts.recorder;
    this.#refs = opts.refs;
    this.#log = opts.logger;
    this.#now = opts.now ?? Date.now;
    this.#retry = opts.retry ?? DEFAULT_RETRY;
    this.#diff = opts.diff ?? diffConfigs;
  }

  /** The running generation's config, or undefined when none runs. */
  get current(): RunningConfig | undefined {
    const r = this.#running;
    return r ? { config: r.config, hash: r.hash, generation: r.generation } : undefined;
  }

  /** True while a generation is running. */
  get ready(): boolean {
    return this.#running !== undefined;
  }

  /** Every class ever applied, with its latest settings. */
  get lastKnownClasses(): ReadonlyMap<string, ClassConfig> {
    return new Map(this.#known);
  }

  /**
   * Takes a watcher result (wire as ConfigWatcher's onResult). Resolves once this
   * result, or a newer one, has been handled and reported; if starting a
   * generation fails, it resolves after the first failure is reported and the
   * retries go on in the background. Never rejects.
   */
  handle(res: WatchResult): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    this.#latest = res;
    const done = new Promise<void>((resolve) => this.#waiters.push(resolve));
    this.#wake?.();
    this.#kick();
    return done;
  }

  #kick(): void {
    this.#loop ??= this.#drain()
      .catch((e: unknown) => this.#log.error({ err: e }, 'config supervisor loop failed'))
      .finally(() => {
        this.#loop = undefined;
        // A result that came in while the loop was finishing is handled by a new loop.
        if (this.#latest !== undefined && !this.#stopped) this.#kick();
        else this.#releaseWaiters();
      });
  }

  /** Stops handling results and stops the running generation; resolves when it has stopped. */
  stop(): Promise<void> {
    this.#stopping ??= (async () => {
      this.#stopped = true;
      this.#latest = undefined;
      this.#abort.abort();
      this.#wake?.();
      await this.#loop;
      const r = this.#running;
      this.#running = undefined;
      if (r) await this.#stopGeneration(r);
      this.#releaseWaiters();
    })();
    return this.#stopping;
  }

  async #drain(): Promise<void> {
    while (!this.#stopped) {
      const res = this.#latest;
      if (res !== undefined) {
        this.#latest = undefined;
        await this.#process(res);
        continue;
      }
      if (this.#target !== undefined && this.#running === undefined) {
        if (await this.#tryStart(this.#target)) continue;
        if (this.#stopped) break;
        // Failure reported: let callers go on while we back off.
        this.#releaseWaiters();
        await this.#backoff(this.#target.attempts - 1);
        continue;
      }
      break;
    }
  }

  async #process(res: WatchResult): Promise<void> {
    const { result } = res;
    if (!result.ok) {
      this.#rejected(res, result.errors);
      return;
    }
    const { config, hash } = result;
    this.#logWarnings(hash, result.warnings);
    this.#checkKnownKeys(res);
    if (this.#running?.hash === hash || (this.#running === undefined && this.#target?.hash === hash)) {
      this.#unchanged();
      return;
    }
    const running = this.#running;
    if (running && !this.#hotReload) {
      this.#metrics.configReloadTotal.inc({ result: 'unchanged' });
      this.#metrics.configLastReloadSuccessful.set(1);
      this.#rejectedHash = undefined;
      if (this.#ignoredHash !== hash) {
        this.#ignoredHash = hash;
        this.#log.warn(
          { hash, runningHash: running.hash, changed: this.#safeDiff(running.config, config) },
          'configuration changed but hot reload is disabled; restart the pod to apply it',
        );
      }
      return;
    }
    // A real change: stop the old generation completely before anything new runs.
    this.#target = { config, hash, generation: this.#nextGeneration++, attempts: 0 };
    if (running) {
      this.#running = undefined;
      this.#log.info({ hash: running.hash, generation: running.generation }, 'stopping the local controller for a new configuration');
      await this.#stopGeneration(running);
    }
  }

  /** Starts the target; true on success (or when superseded while starting). */
  async #tryStart(t: Target): Promise<boolean> {
    const classes = new Map(this.#known);
    for (const [name, cls] of Object.entries(t.config.storageClassMap)) classes.set(name, cls);
    let gen: Generation;
    try {
      gen = await this.#start(t.config, {
        hash: t.hash,
        lastKnownClasses: classes,
        generation: t.generation,
        signal: this.#abort.signal,
      });
    } catch (e) {
      if (this.#stopped) {
        this.#log.info({ hash: t.hash, generation: t.generation }, 'local controller start abandoned: shutting down');
        return false;
      }
      t.attempts++;
      this.#metrics.configLastReloadSuccessful.set(0);
      this.#log.error(
        { err: e, hash: t.hash, generation: t.generation, attempt: t.attempts },
        'starting the local controller failed; retrying with backoff',
      );
      if (t.attempts === 1) {
        this.#emit(
          'Warning',
          REASON_CONTROLLER_START_FAILED,
          `Starting the local controller with configuration ${shortHash(t.hash)} failed (will retry): ${errorMessage(e)}`,
        );
      }
      return false;
    }
    const previous = this.#applied;
    const firstStart = previous === undefined;
    this.#running = { config: t.config, hash: t.hash, generation: t.generation, gen };
    this.#applied = { config: t.config, hash: t.hash, generation: t.generation };
    this.#known = classes;
    if (this.#target === t) this.#target = undefined;
    const wasRejected = this.#rejectedHash !== undefined;
    this.#rejectedHash = undefined;
    this.#ignoredHash = undefined;

    const m = this.#metrics;
    m.configReloadTotal.inc({ result: 'applied' });
    m.configLastReloadSuccessful.set(1);
    m.configLastReloadSuccessTimestamp.set(this.#now() / 1000);
    m.setConfigHash(t.hash);
    if (!firstStart) m.controllerRestarts.inc();

    const changed = this.#safeDiff(previous?.config, t.config);
    const removedClasses = previous
      ? Object.keys(previous.config.storageClassMap).filter((c) => !(c in t.config.storageClassMap))
      : [];
    this.#log.info(
      {
        hash: t.hash,
        previousHash: previous?.hash,
        generation: t.generation,
        changed,
        removedClasses,
        attempts: t.attempts + 1,
      },
      firstStart ? 'configuration loaded; local controller started' : 'configuration reloaded; local controller restarted',
    );
    if (!firstStart || wasRejected) {
      const what = firstStart ? 'first valid configuration' : `changed: ${listKeys(changed)}`;
      this.#emit(
        'Normal',
        REASON_CONFIG_RELOADED,
        `Configuration ${shortHash(t.hash)} applied, local controller generation ${t.generation} started; ${what}`,
      );
    }
    return true;
  }

  #rejected(res: WatchResult, errors: readonly ConfigError[]): void {
    const m = this.#metrics;
    m.configReloadTotal.inc({ result: 'invalid' });
    m.configLastReloadSuccessful.set(0);
    const badHash = createHash('sha256')
      .update(rawFilesHash(res.files.files))
      .update(JSON.stringify(errors))
      .digest('hex');
    if (badHash === this.#rejectedHash) return;
    this.#rejectedHash = badHash;
    const keeping = this.#running
      ? `keeping configuration ${shortHash(this.#running.hash)} running`
      : this.#target
        ? `still trying to start configuration ${shortHash(this.#target.hash)}`
        : 'no valid configuration yet, the local controller is not running';
    for (const e of errors) {
      this.#log.error(
        { path: e.path, file: e.file, line: e.line, generation: res.files.generation },
        `invalid configuration: ${formatConfigError(e)}`,
      );
    }
    this.#log.warn({ errors: errors.length, generation: res.files.generation }, `configuration rejected; ${keeping}`);
    const shown = errors.slice(0, EVENT_ERRORS).map(formatConfigError).join('; ');
    const more = errors.length > EVENT_ERRORS ? `; and ${errors.length - EVENT_ERRORS} more` : '';
    const n = errors.length === 1 ? '1 error' : `${errors.length} errors`;
    this.#emit('Warning', REASON_CONFIG_INVALID, `Configuration rejected (${n}), ${keeping}: ${shown}${more}`);
  }

  /**
   * Parse warnings (unknown keys, ...) never block a config. They are logged for
   * every delivered result whose config or warnings differ from the last one
   * logged: at start and on every reload, and when a misspelt key is added to a
   * config that is otherwise unchanged.
   */
  #logWarnings(hash: string, warnings: readonly ConfigError[] | undefined): void {
    const key = `${hash}:${warningsHash(warnings)}`;
    if (key === this.#warnedKey) return;
    this.#warnedKey = key;
    for (const w of warnings ?? []) {
      this.#log.warn({ path: w.path, file: w.file, line: w.line, hash }, `configuration warning: ${formatConfigError(w)}`);
    }
  }

  /**
   * A config dir in which no file names a known setting (empty, a misspelt
   * storageClassMap, the wrong ConfigMap mounted) runs with nothing to discover:
   * a Warning `ConfigNoKnownKey` Event, once per distinct content.
   */
  #checkKnownKeys(res: WatchResult): void {
    const names = Object.keys(res.files.files);
    if (names.some(isKnownTopLevelKey)) {
      this.#noKnownKeyHash = undefined;
      return;
    }
    const raw = rawFilesHash(res.files.files);
    if (raw === this.#noKnownKeyHash) return;
    this.#noKnownKeyHash = raw;
    const described = names.map((n) => {
      const near = nearestKey(n, TOP_LEVEL_KEYS);
      return `${JSON.stringify(n)}${near === undefined ? '' : ` (did you mean ${JSON.stringify(near)}?)`}`;
    });
    const found = names.length === 0 ? 'the directory has no keys' : `unknown keys: ${described.join(', ')}`;
    const msg = `No known key in the configuration (${found}); nothing will be discovered`;
    this.#log.warn({ keys: names, generation: res.files.generation }, msg);
    this.#emit('Warning', REASON_CONFIG_NO_KNOWN_KEY, msg);
  }

  #unchanged(): void {
    this.#metrics.configReloadTotal.inc({ result: 'unchanged' });
    // The content is valid again (e.g. a bad edit was reverted): clear the alarm.
    this.#metrics.configLastReloadSuccessful.set(this.#running || this.#target === undefined ? 1 : 0);
    this.#rejectedHash = undefined;
    this.#ignoredHash = undefined;
  }

  async #stopGeneration(r: Running): Promise<void> {
    try {
      await r.gen.stop();
    } catch (e) {
      this.#log.error({ err: e, hash: r.hash, generation: r.generation }, 'stopping the local controller failed; continuing');
    }
  }

  #backoff(attempt: number): Promise<void> {
    const ms = backoffDelay(this.#retry, attempt);
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.#wake = () => {
        this.#wake = undefined;
        done();
      };
    }).finally(() => {
      this.#wake = undefined;
    });
  }

  #safeDiff(a: ProvisionerConfig | undefined, b: ProvisionerConfig): string[] {
    try {
      return this.#diff(a, b);
    } catch (e) {
      this.#log.error({ err: e }, 'computing the configuration diff failed');
      return [];
    }
  }

  #emit(type: EventType, reason: string, message: string): void {
    const msg = truncate(message);
    for (const ref of this.#refs) {
      try {
        this.#recorder.event(ref, type, reason, msg);
      } catch (e) {
        this.#log.warn({ err: e, reason }, 'recording an event failed');
      }
    }
  }

  #releaseWaiters(): void {
    const w = this.#waiters;
    this.#waiters = [];
    for (const resolve of w) resolve();
  }
}
