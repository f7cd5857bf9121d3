// The supervisor owns the running local-controller generation and replaces it
// when the configuration really changes (hot reload). It is process-scoped: the
// metrics, the event recorder and whatever the caller keeps outside `start`
// (informers, HTTP server, process table) survive every reload. It decides what
// runs; everything it tells (Events, metrics, log lines) goes through the
// ReloadReporter (reload-reporter.ts).
//
// Rules (docs/hot-reload.md has the full story):
// - Valid, same hash as the running generation: unchanged, nothing happens.
// - Invalid: the running generation is left alone. With no valid config yet,
//   nothing runs and `ready` stays false until one arrives.
// - Valid and new, hot reload off, a generation running: only reported (the
//   running configuration did not change); nothing else happens.
// - Valid and new otherwise: the old generation is stopped completely (its
//   stop() awaited), then the new one started. A failed start is retried with
//   backoff until it works or a newer result arrives; the last good config stays
//   the one reported as applied meanwhile.
// - Results are handled one at a time; results arriving meanwhile coalesce, and
//   only the latest is handled next.
// - lastKnownClasses: every storage class ever applied, with its latest
//   settings, so Released PVs of a class removed from the config can still be
//   cleaned with the settings it last had.
import { setTimeout as sleep } from 'node:timers/promises';
import type { ClassConfig, ProvisionerConfig } from '../config/types.ts';
import { backoffDelay, type BackoffOptions } from '../util/backoff.ts';
import type { WatchResult } from '../watcher/config-watcher.ts';
import { ReloadReporter, type ReloadReporterOptions, type RunningConfig } from './reload-reporter.ts';

export { formatConfigError, type RunningConfig } from './reload-reporter.ts';

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

/** The reporter's options (metrics, recorder, refs, logger, now, diff) and the state machine's own. */
export interface SupervisorOptions extends ReloadReporterOptions {
  readonly start: (config: ProvisionerConfig, ctx: GenerationContext) => Promise<Generation>;
  /** When false, a new valid config is only logged while a generation runs. */
  readonly hotReload: boolean;
  /** Backoff between failed starts (default 1 s doubling to 60 s). */
  readonly retry?: BackoffOptions | undefined;
}

interface Running extends RunningConfig {
  readonly gen: Generation;
}

interface Target extends RunningConfig {
  attempts: number;
}

const DEFAULT_RETRY: BackoffOptions = { initialMs: 1000, maxMs: 60_000 };

export class Supervisor {
  readonly #start: SupervisorOptions['start'];
  readonly #hotReload: boolean;
  readonly #report: ReloadReporter;
  readonly #retry: BackoffOptions;

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
  /** Aborted to wake the retry backoff early (a new result, or stop()). */
  #wake: AbortController | undefined;
  #stopped = false;
  readonly #abort = new AbortController();
  #stopping: Promise<void> | undefined;

  constructor(opts: SupervisorOptions) {
    this.#start = opts.start;
    this.#hotReload = opts.hotReload;
    this.#report = new ReloadReporter(opts);
    this.#retry = opts.retry ?? DEFAULT_RETRY;
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
    this.#wake?.abort();
    this.#kick();
    return done;
  }

  #kick(): void {
    this.#loop ??= this.#drain()
      .catch((e: unknown) => this.#report.loopFailed(e))
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
      this.#wake?.abort();
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
      this.#report.rejected(res, result.errors, { running: this.#running?.hash, target: this.#target?.hash });
      return;
    }
    const { config, hash } = result;
    this.#report.warnings(hash, result.warnings);
    this.#report.checkKnownKeys(res);
    if (this.#running?.hash === hash || (this.#running === undefined && this.#target?.hash === hash)) {
      this.#report.unchanged(this.#running !== undefined || this.#target === undefined, hash);
      return;
    }
    const running = this.#running;
    if (running && !this.#hotReload) {
      this.#report.ignored(running, config, hash);
      return;
    }
    // A real change: stop the old generation completely before anything new runs.
    this.#target = { config, hash, generation: this.#nextGeneration++, attempts: 0 };
    if (running) {
      this.#running = undefined;
      this.#report.stopping(running);
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
        this.#report.startAbandoned(t);
        return false;
      }
      t.attempts++;
      this.#report.startFailed(t, t.attempts, e);
      return false;
    }
    const previous = this.#applied;
    const next: RunningConfig = { config: t.config, hash: t.hash, generation: t.generation };
    this.#running = { ...next, gen };
    this.#applied = next;
    this.#known = classes;
    if (this.#target === t) this.#target = undefined;
    this.#report.applied(previous, next, t.attempts + 1);
    return true;
  }

  async #stopGeneration(r: Running): Promise<void> {
    try {
      await r.gen.stop();
    } catch (e) {
      this.#report.stopFailed(r, e);
    }
  }

  async #backoff(attempt: number): Promise<void> {
    const wake = (this.#wake = new AbortController());
    try {
      await sleep(backoffDelay(this.#retry, attempt), undefined, { signal: wake.signal }).catch(() => undefined);
    } finally {
      if (this.#wake === wake) this.#wake = undefined;
    }
  }

  #releaseWaiters(): void {
    const w = this.#waiters;
    this.#waiters = [];
    for (const resolve of w) resolve();
  }
}
