// What the supervisor's decisions look like from outside: Events, metrics and
// log lines. The supervisor (supervisor.ts) decides what runs; this reporter only
// tells, and remembers what it already told so that each problem is reported
// once per distinct content (docs/hot-reload.md has the full story):
// - Invalid: every error logged, a Warning `ConfigInvalid` Event on each ref once
//   per distinct bad content; `config_last_reload_successful` 0,
//   `config_reload_total{result="invalid"}`.
// - Parse warnings: logged once per (config hash, warnings), and a Warning `ConfigWarning` Event naming the keys;
//   when they are gone (the typo fixed), a Normal `ConfigRecovered` Event.
// - Valid again after a ConfigInvalid, with nothing new to apply (the bad edit reverted, or hot reload off):
//   a Normal `ConfigRecovered` Event, so the latest Event is not the stale ConfigInvalid.
// - No known key in the config dir: a Warning `ConfigNoKnownKey` Event once per content.
// - Unchanged (same hash): `config_reload_total{result="unchanged"}`;
//   `config_last_reload_successful` back to 1 unless a start is still failing.
// - New config with hot reload off: counted as unchanged, logged once per hash
//   with the changed keys ("restart the pod to apply").
// - Failed start: a log line per attempt, a Warning `ControllerStartFailed` Event
//   on the first, `config_last_reload_successful` 0.
// - Applied: a structured log line with the diff, `config_reload_total{result="applied"}`,
//   `config_last_reload_successful` 1, the success timestamp, `config_info{hash}`;
//   except for the very first start, `controller_restarts_total` and a Normal
//   `ConfigReloaded` Event naming the changed keys (also sent for a first start
//   that follows a rejected config).
import { createHash } from 'node:crypto';
import { diffConfigs } from '../config/diff.ts';
import { isKnownTopLevelKey, TOP_LEVEL_KEYS } from '../config/parse.ts';
import { nearestKey } from '../config/suggest.ts';
import type { ConfigError, ProvisionerConfig } from '../config/types.ts';
import type { EventRecorder, EventType, ObjectRef } from '../kube/events.ts';
import {
  REASON_CONFIG_INVALID,
  REASON_CONFIG_NO_KNOWN_KEY,
  REASON_CONFIG_RECOVERED,
  REASON_CONFIG_RELOADED,
  REASON_CONFIG_WARNING,
  REASON_CONTROLLER_START_FAILED,
} from '../kube/reasons.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { errorMessage } from '../util/errors.ts';
import type { Logger } from '../util/log.ts';
import type { WatchResult } from '../watcher/config-watcher.ts';
import { warningsHash } from '../watcher/hash.ts';

/** A config applied (or being applied) as one generation. */
export interface RunningConfig {
  readonly config: ProvisionerConfig;
  readonly hash: string;
  readonly generation: number;
}

/** What the supervisor is doing, for the "keeping ..." part of a rejection. */
export interface SupervisorState {
  /** Hash of the running generation's config. */
  readonly running: string | undefined;
  /** Hash of a config still waiting to be started. */
  readonly target: string | undefined;
}

export interface ReloadReporterOptions {
  readonly metrics: Metrics;
  readonly recorder: EventRecorder;
  /** Events go to each (the provisioner Pod and its Node). */
  readonly refs: readonly ObjectRef[];
  readonly logger: Logger;
  /** Wall clock in ms (default Date.now). */
  readonly now?: (() => number) | undefined;
  /** Seam for tests; defaults to src/config's diffConfigs. */
  readonly diff?: ((a: ProvisionerConfig | undefined, b: ProvisionerConfig) => string[]) | undefined;
}

/** Events are capped well below the API's 1 KiB message limit. */
const MAX_EVENT_MESSAGE = 1000;
/** Errors spelled out in a ConfigInvalid Event before "and N more". */
const EVENT_ERRORS = 3;

const shortHash = (hash: string): string => hash.slice(0, 12);

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

export class ReloadReporter {
  readonly #metrics: Metrics;
  readonly #recorder: EventRecorder;
  readonly #refs: readonly ObjectRef[];
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #diff: (a: ProvisionerConfig | undefined, b: ProvisionerConfig) => string[];

  /** Hash of the last bad content reported (not reported again). */
  #rejectedHash: string | undefined;
  /** Config hash + warnings hash of the last valid result whose parse warnings were logged. */
  #warnedKey: string | undefined;
  /** Raw files hash of the last config dir reported as having no known key. */
  #noKnownKeyHash: string | undefined;
  /** Hash of the last valid config ignored because hot reload is off. */
  #ignoredHash: string | undefined;
  /** A ConfigWarning Event is the last word on warnings (a ConfigRecovered follows when they are gone). */
  #warningsOut = false;

  constructor(opts: ReloadReporterOptions) {
    this.#metrics = opts.metrics;
    this.#recorder = opts.recorder;
    this.#refs = opts.refs;
    this.#log = opts.logger;
    this.#now = opts.now ?? Date.now;
    this.#diff = opts.diff ?? diffConfigs;
  }

  /** An invalid result: counted every time, logged and sent as an Event once per distinct bad content. */
  rejected(res: WatchResult, errors: readonly ConfigError[], state: SupervisorState): void {
    const m = this.#metrics;
    m.configReloadTotal.inc({ result: 'invalid' });
    m.configLastReloadSuccessful.set(0);
    const badHash = createHash('sha256').update(res.rawHash).update(JSON.stringify(errors)).digest('hex');
    if (badHash === this.#rejectedHash) return;
    this.#rejectedHash = badHash;
    const keeping = state.running !== undefined
      ? `keeping configuration ${shortHash(state.running)} running`
      : state.target !== undefined
        ? `still trying to start configuration ${shortHash(state.target)}`
        : 'no valid configuration yet, the local controller is not running';
    for (const e of errors) {
      this.#log.error(
        { path: e.path, file: e.file, line: e.line, configDir: res.files.generation },
        `invalid configuration: ${formatConfigError(e)}`,
      );
      // The YAML parser's cascade after the first syntax error: jargon, mostly consequences of that one.
      for (const d of e.detail ?? []) this.#log.debug({ file: e.file, configDir: res.files.generation }, `YAML parser: ${d}`);
    }
    this.#log.warn({ errors: errors.length, configDir: res.files.generation }, `configuration rejected; ${keeping}`);
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
  warnings(hash: string, warnings: readonly ConfigError[] | undefined): void {
    const key = `${hash}:${warningsHash(warnings)}`;
    if (key === this.#warnedKey) return;
    this.#warnedKey = key;
    const list = warnings ?? [];
    for (const w of list) {
      this.#log.warn({ path: w.path, file: w.file, line: w.line, configHash: hash }, `configuration warning: ${formatConfigError(w)}`);
    }
    if (list.length > 0) {
      this.#warningsOut = true;
      const keys = [...new Set(list.map((w) => w.path || w.file || '?'))];
      const shown = list.slice(0, EVENT_ERRORS).map(formatConfigError).join('; ');
      const more = list.length > EVENT_ERRORS ? `; and ${list.length - EVENT_ERRORS} more` : '';
      const n = list.length === 1 ? '1 warning' : `${list.length} warnings`;
      this.#emit('Warning', REASON_CONFIG_WARNING, `Configuration ${shortHash(hash)} has ${n} (keys ${keys.join(', ')}); the rest of it is valid: ${shown}${more}`);
    } else if (this.#warningsOut) {
      this.#warningsOut = false;
      this.#emit('Normal', REASON_CONFIG_RECOVERED, `Configuration ${shortHash(hash)} has no warnings any more`);
    }
  }

  /**
   * A config dir in which no file names a known setting (empty, a misspelt
   * storageClassMap, the wrong ConfigMap mounted) runs with nothing to discover:
   * a Warning `ConfigNoKnownKey` Event, once per distinct content.
   */
  checkKnownKeys(res: WatchResult): void {
    const names = Object.keys(res.files.files);
    if (names.some(isKnownTopLevelKey)) {
      this.#noKnownKeyHash = undefined;
      return;
    }
    if (res.rawHash === this.#noKnownKeyHash) return;
    this.#noKnownKeyHash = res.rawHash;
    const described = names.map((n) => {
      const near = nearestKey(n, TOP_LEVEL_KEYS);
      return `${JSON.stringify(n)}${near === undefined ? '' : ` (did you mean ${JSON.stringify(near)}?)`}`;
    });
    const found = names.length === 0 ? 'the directory has no keys' : `unknown keys: ${described.join(', ')}`;
    const msg = `No known key in the configuration (${found}); nothing will be discovered`;
    this.#log.warn({ keys: names, configDir: res.files.generation }, msg);
    this.#emit('Warning', REASON_CONFIG_NO_KNOWN_KEY, msg);
  }

  /**
   * The same config as the running (or pending) one; `healthy` is false while its start keeps failing. After a
   * ConfigInvalid (a bad edit reverted), a Normal ConfigRecovered Event naming the config `hash`.
   */
  unchanged(healthy: boolean, hash?: string): void {
    this.#metrics.configReloadTotal.inc({ result: 'unchanged' });
    // The content is valid again (e.g. a bad edit was reverted): clear the alarm.
    this.#metrics.configLastReloadSuccessful.set(healthy ? 1 : 0);
    if (this.#rejectedHash !== undefined && hash !== undefined) {
      this.#log.info({ configHash: hash }, 'configuration valid again; the running one is unchanged');
      this.#emit('Normal', REASON_CONFIG_RECOVERED, `Configuration valid again: ${shortHash(hash)}, the one running, is kept; the rejected content was replaced`);
    }
    this.#rejectedHash = undefined;
    this.#ignoredHash = undefined;
  }

  /** A new valid config left alone because hot reload is off: counted as unchanged, logged once per hash. */
  ignored(running: RunningConfig, config: ProvisionerConfig, hash: string): void {
    this.#metrics.configReloadTotal.inc({ result: 'unchanged' });
    this.#metrics.configLastReloadSuccessful.set(1);
    if (this.#rejectedHash !== undefined) {
      this.#emit(
        'Normal',
        REASON_CONFIG_RECOVERED,
        `Configuration ${shortHash(hash)} is valid; hot reload is off, so ${shortHash(running.hash)} keeps running until the pod restarts`,
      );
    }
    this.#rejectedHash = undefined;
    if (this.#ignoredHash === hash) return;
    this.#ignoredHash = hash;
    this.#log.warn(
      { configHash: hash, runningConfigHash: running.hash, changed: this.#safeDiff(running.config, config) },
      'configuration changed but hot reload is disabled; restart the pod to apply it',
    );
  }

  stopping(running: RunningConfig): void {
    this.#log.info({ configHash: running.hash, controllerGeneration: running.generation }, 'stopping the local controller for a new configuration');
  }

  stopFailed(running: RunningConfig, err: unknown): void {
    this.#log.error({ err, configHash: running.hash, controllerGeneration: running.generation }, 'stopping the local controller failed; continuing');
  }

  startAbandoned(t: RunningConfig): void {
    this.#log.info({ configHash: t.hash, controllerGeneration: t.generation }, 'local controller start abandoned: shutting down');
  }

  /** Attempt `attempt` (1-based) to start `t` failed: logged every time, an Event on the first. */
  startFailed(t: RunningConfig, attempt: number, err: unknown): void {
    this.#metrics.configLastReloadSuccessful.set(0);
    this.#log.error(
      { err, configHash: t.hash, controllerGeneration: t.generation, attempt },
      'starting the local controller failed; retrying with backoff',
    );
    if (attempt === 1) {
      this.#emit(
        'Warning',
        REASON_CONTROLLER_START_FAILED,
        `Starting the local controller with configuration ${shortHash(t.hash)} failed (will retry): ${errorMessage(err)}`,
      );
    }
  }

  /** `next` started after `attempts` tries, replacing `previous` (undefined for the first start). */
  applied(previous: RunningConfig | undefined, next: RunningConfig, attempts: number): void {
    const firstStart = previous === undefined;
    const wasRejected = this.#rejectedHash !== undefined;
    this.#rejectedHash = undefined;
    this.#ignoredHash = undefined;

    const m = this.#metrics;
    m.configReloadTotal.inc({ result: 'applied' });
    m.configLastReloadSuccessful.set(1);
    m.configLastReloadSuccessTimestamp.set(this.#now() / 1000);
    m.setConfigHash(next.hash);
    if (!firstStart) m.controllerRestarts.inc();

    const changed = this.#safeDiff(previous?.config, next.config);
    const removedClasses = previous
      ? Object.keys(previous.config.storageClassMap).filter((c) => !(c in next.config.storageClassMap))
      : [];
    this.#log.info(
      { configHash: next.hash, previousConfigHash: previous?.hash, controllerGeneration: next.generation, changed, removedClasses, attempts },
      firstStart ? 'configuration loaded; local controller started' : 'configuration reloaded; local controller restarted',
    );
    if (!firstStart || wasRejected) {
      const what = firstStart ? 'first valid configuration' : `changed: ${listKeys(changed)}`;
      // The config hash, not the controller generation: generation numbers start over in every pod.
      this.#emit('Normal', REASON_CONFIG_RELOADED, `Configuration ${shortHash(next.hash)} applied, local controller restarted; ${what}`);
    }
  }

  loopFailed(err: unknown): void {
    this.#log.error({ err }, 'config supervisor loop failed');
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
}
