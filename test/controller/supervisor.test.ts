// Supervisor: fake generations that record start/stop order, the real Metrics
// registry, a recording event sink, and configs parsed by the real parser.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/parse.ts';
import type { ProvisionerConfig } from '../../src/config/types.ts';
import { Supervisor, type Generation, type GenerationContext, type SupervisorOptions } from '../../src/controller/supervisor.ts';
import type { EventRecorder, EventType, ObjectRef } from '../../src/kube/events.ts';
import { Metrics } from '../../src/metrics/metrics.ts';
import { silentLogger } from '../../src/util/log.ts';
import { ConfigWatcher, type WatchResult } from '../../src/watcher/config-watcher.ts';
import { rawFilesHash } from '../../src/watcher/hash.ts';
import { AtomicWriter } from '../support/atomic-writer.ts';
import { classYaml, sleep, waitFor } from '../watcher/helpers.ts';

let genCounter = 0;
function result(files: Record<string, string>): WatchResult {
  return { files: { files, generation: `..gen.${++genCounter}` }, rawHash: rawFilesHash(files), result: parseConfig(files) };
}

const A = { storageClassMap: classYaml({ fast: { hostDir: '/mnt/fast' }, slow: { hostDir: '/mnt/slow' } }) };
const B = { storageClassMap: classYaml({ fast: { hostDir: '/mnt/fast', namePattern: 'nvme*' } }) };
const C = { ...A, labelsForPV: 'team: storage\n' };
const BAD_YAML = { storageClassMap: 'fast: [unclosed\n' };
const BAD_TYPE = { ...A, useJobForCleaning: 'sometimes\n' };
const BAD_PATH = { storageClassMap: classYaml({ fast: { hostDir: 'relative/dir' } }) };

const hashOf = (files: Record<string, string>): string => {
  const r = parseConfig(files);
  if (!r.ok) throw new Error('test config is invalid');
  return r.hash;
};

interface RecordedEvent {
  ref: ObjectRef;
  type: EventType;
  reason: string;
  message: string;
}

class Recorder implements EventRecorder {
  events: RecordedEvent[] = [];
  event(ref: ObjectRef, type: EventType, reason: string, message: string): void {
    this.events.push({ ref, type, reason, message });
  }
  reasons(): string[] {
    return this.events.map((e) => e.reason);
  }
}

/** Fake generations: a log of start/stop, and a check that two never run at once. */
class Harness {
  log: string[] = [];
  active = 0;
  maxActive = 0;
  starts: { config: ProvisionerConfig; ctx: GenerationContext }[] = [];
  failStarts = 0;
  startDelay: Promise<void> | undefined;
  stopDelayMs = 0;

  start = async (config: ProvisionerConfig, ctx: GenerationContext): Promise<Generation> => {
    this.log.push(`start ${ctx.generation}`);
    if (this.startDelay) await this.startDelay;
    if (this.failStarts > 0) {
      this.failStarts--;
      this.log.push(`fail ${ctx.generation}`);
      throw new Error('apiserver unavailable');
    }
    this.starts.push({ config, ctx });
    this.active++;
    this.maxActive = Math.max(this.maxActive, this.active);
    this.log.push(`running ${ctx.generation}`);
    let stopped = false;
    return {
      stop: async () => {
        if (stopped) throw new Error('generation stopped twice');
        stopped = true;
        this.log.push(`stopping ${ctx.generation}`);
        await sleep(this.stopDelayMs);
        this.active--;
        this.log.push(`stopped ${ctx.generation}`);
      },
    };
  };
}

const POD: ObjectRef = { kind: 'Pod', name: 'lvp-abc', namespace: 'kube-system', apiVersion: 'v1' };
const NODE: ObjectRef = { kind: 'Node', name: 'node-1', apiVersion: 'v1' };

interface Setup {
  sup: Supervisor;
  h: Harness;
  rec: Recorder;
  metrics: Metrics;
  logs: Record<string, unknown>[];
}

const supervisors: Supervisor[] = [];

function setup(opts: Partial<SupervisorOptions> = {}): Setup {
  const h = new Harness();
  const rec = new Recorder();
  const metrics = new Metrics({ defaultMetrics: false });
  const logs: Record<string, unknown>[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => logs.push(JSON.parse(s) as Record<string, unknown>) });
  const sup = new Supervisor({
    start: h.start,
    hotReload: true,
    metrics,
    recorder: rec,
    refs: [POD, NODE],
    logger,
    now: () => 1_700_000_000_000,
    retry: { initialMs: 10, maxMs: 40, jitter: 0 },
    ...opts,
  });
  supervisors.push(sup);
  return { sup, h, rec, metrics, logs };
}

async function reloads(m: Metrics): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await m.configReloadTotal.get()).values) out[String(v.labels.result)] = v.value;
  return out;
}
const gauge = async (g: { get(): Promise<{ values: { value: number }[] }> }): Promise<number | undefined> =>
  (await g.get()).values[0]?.value;
async function infoHashes(m: Metrics): Promise<string[]> {
  return (await m.configInfo.get()).values.filter((v) => v.value === 1).map((v) => String(v.labels.hash));
}

afterEach(async () => {
  await Promise.all(supervisors.splice(0).map((s) => s.stop()));
});

describe('Supervisor: first start and unchanged', () => {
  it('starts the first valid config, with metrics and no restart counted', async () => {
    const { sup, h, rec, metrics } = setup();
    expect(sup.ready).toBe(false);
    await sup.handle(result(A));
    expect(sup.ready).toBe(true);
    expect(sup.current?.hash).toBe(hashOf(A));
    expect(sup.current?.generation).toBe(1);
    expect(h.starts).toHaveLength(1);
    expect(h.starts[0]!.ctx.hash).toBe(hashOf(A));
    expect([...h.starts[0]!.ctx.lastKnownClasses.keys()].sort()).toEqual(['fast', 'slow']);
    expect(await reloads(metrics)).toEqual({ applied: 1, invalid: 0, unchanged: 0 });
    expect(await gauge(metrics.configLastReloadSuccessful)).toBe(1);
    expect(await gauge(metrics.configLastReloadSuccessTimestamp)).toBe(1_700_000_000);
    expect(await gauge(metrics.controllerRestarts)).toBe(0);
    expect(await infoHashes(metrics)).toEqual([hashOf(A)]);
    expect(rec.events).toEqual([]); // a normal start-up is not a reload
  });

  it('counts the same hash as unchanged and does nothing else', async () => {
    const { sup, h, rec, metrics } = setup();
    await sup.handle(result(A));
    await sup.handle(result({ ...A })); // a new generation, same content
    expect(h.log).toEqual(['start 1', 'running 1']);
    expect(await reloads(metrics)).toEqual({ applied: 1, invalid: 0, unchanged: 1 });
    expect(rec.events).toEqual([]);
  });
});

describe('Supervisor: reload', () => {
  it('logs parse warnings once per config, and they do not block it', async () => {
    const { sup, logs } = setup();
    const base = result(A);
    if (!base.result.ok) throw new Error('A is valid');
    const warned: WatchResult = {
      files: base.files,
      rawHash: base.rawHash,
      result: { ...base.result, warnings: [{ path: 'storageClassMap.fast.hostdirr', message: 'unknown key', file: 'storageClassMap', line: 3 }] },
    };
    await sup.handle(warned);
    await sup.handle(warned);
    expect(sup.ready).toBe(true);
    const lines = logs.filter((l) => String(l['msg']).startsWith('configuration warning:'));
    expect(lines).toHaveLength(1);
    expect(lines[0]!['msg']).toBe('configuration warning: storageClassMap.fast.hostdirr: unknown key (file storageClassMap, line 3)');
  });


  it('warns about a misspelt key on every reload, also when it is added to an unchanged config', async () => {
    const { sup, h, logs } = setup();
    const warnings = (): string[] => logs.filter((l) => String(l['msg']).startsWith('configuration warning:')).map((l) => String(l['msg']));
    const typo = 'configuration warning: useNodeNameOnIy: unknown key "useNodeNameOnIy" ignored; did you mean "useNodeNameOnly"? (file useNodeNameOnIy)';
    await sup.handle(result(A));
    expect(warnings()).toEqual([]);
    // Same config (the unknown key changes nothing in it), but a new warning.
    await sup.handle(result({ ...A, useNodeNameOnIy: 'true' }));
    expect(warnings()).toEqual([typo]);
    expect(h.starts).toHaveLength(1);
    // A reload keeping the typo warns again; so does going back.
    await sup.handle(result({ ...C, useNodeNameOnIy: 'true' }));
    await sup.handle(result({ ...A, useNodeNameOnIy: 'true' }));
    expect(warnings()).toEqual([typo, typo, typo]);
    await sup.handle(result({ storageClasMap: A.storageClassMap }));
    expect(warnings()).toContain('configuration warning: storageClasMap: unknown key "storageClasMap" ignored; did you mean "storageClassMap"? (file storageClasMap)');
  });

  it('a config dir with no known key is a Warning Event on each ref, once per content', async () => {
    const { sup, rec, logs } = setup();
    // Its keys are also named by the ConfigWarning Events of the parse warnings (issue 18, point 12).
    const nk = (): RecordedEvent[] => rec.events.filter((e) => e.reason !== 'ConfigWarning');
    await sup.handle(result({ storageClasMap: A.storageClassMap, useNodeNameOnIy: 'true' }));
    expect(sup.ready).toBe(true); // valid: nothing to discover
    expect(nk().map((e) => [e.ref.kind, e.type, e.reason])).toEqual([
      ['Pod', 'Warning', 'ConfigNoKnownKey'],
      ['Node', 'Warning', 'ConfigNoKnownKey'],
    ]);
    expect(nk()[0]!.message).toBe(
      'No known key in the configuration (unknown keys: "storageClasMap" (did you mean "storageClassMap"?), "useNodeNameOnIy" (did you mean "useNodeNameOnly"?)); nothing will be discovered',
    );
    expect(logs.some((l) => l['level'] === 40 && String(l['msg']).startsWith('No known key in the configuration'))).toBe(true);
    await sup.handle(result({ storageClasMap: A.storageClassMap, useNodeNameOnIy: 'true' }));
    expect(nk()).toHaveLength(2);
    await sup.handle(result({}));
    expect(nk().at(-1)?.message).toBe('No known key in the configuration (the directory has no keys); nothing will be discovered');
    await sup.handle(result(A));
    const n = rec.events.filter((e) => e.reason === 'ConfigNoKnownKey').length;
    await sup.handle(result({ storageClasMap: A.storageClassMap, useNodeNameOnIy: 'true' }));
    expect(rec.events.filter((e) => e.reason === 'ConfigNoKnownKey').length).toBe(n + 2);
  });

  it('stops the old generation completely before starting the new one, then reports', async () => {
    const { sup, h, rec, metrics, logs } = setup();
    h.stopDelayMs = 30;
    await sup.handle(result(A));
    await sup.handle(result(B));
    expect(h.log).toEqual(['start 1', 'running 1', 'stopping 1', 'stopped 1', 'start 2', 'running 2']);
    expect(h.maxActive).toBe(1);
    expect(sup.current?.hash).toBe(hashOf(B));
    expect(sup.current?.generation).toBe(2);
    expect(await reloads(metrics)).toEqual({ applied: 2, invalid: 0, unchanged: 0 });
    expect(await gauge(metrics.controllerRestarts)).toBe(1);
    expect(await infoHashes(metrics)).toEqual([hashOf(B)]);
    // one Normal event per ref, naming what changed
    expect(rec.events.map((e) => [e.ref.kind, e.type, e.reason])).toEqual([
      ['Pod', 'Normal', 'ConfigReloaded'],
      ['Node', 'Normal', 'ConfigReloaded'],
    ]);
    expect(rec.events[0]!.message).toContain('storageClassMap');
    expect(rec.events[0]!.message).toContain(hashOf(B).slice(0, 12));
    const line = logs.find((l) => l['msg'] === 'configuration reloaded; local controller restarted');
    expect(line).toBeDefined();
    expect(line!['removedClasses']).toEqual(['slow']);
    expect((line!['changed'] as string[]).some((k) => k.includes('storageClassMap'))).toBe(true);
  });

  it('keeps every class ever applied, with its latest settings, in lastKnownClasses', async () => {
    const { sup, h } = setup();
    await sup.handle(result(A));
    await sup.handle(result(B));
    const known = h.starts[1]!.ctx.lastKnownClasses;
    expect([...known.keys()].sort()).toEqual(['fast', 'slow']);
    expect(known.get('fast')?.namePattern).toBe('nvme*'); // B's settings
    expect(known.get('slow')?.hostDir).toBe('/mnt/slow'); // A's, still known after its removal
    expect(Object.keys(h.starts[1]!.config.storageClassMap)).toEqual(['fast']);
    expect(sup.lastKnownClasses.get('slow')?.hostDir).toBe('/mnt/slow');
  });

  it('coalesces results that arrive during a restart: only the latest is applied next', async () => {
    const { sup, h } = setup();
    await sup.handle(result(A));
    let release!: () => void;
    h.startDelay = new Promise<void>((r) => (release = r));
    const pB = sup.handle(result(B));
    await waitFor(() => h.log.includes('start 2'));
    const pC = sup.handle(result(C));
    const pA = sup.handle(result(A)); // back to A while B is still starting
    const pC2 = sup.handle(result(C));
    release();
    h.startDelay = undefined;
    await Promise.all([pB, pC, pA, pC2]);
    expect(h.starts.map((s) => s.ctx.hash)).toEqual([hashOf(A), hashOf(B), hashOf(C)]);
    expect(h.maxActive).toBe(1);
    expect(sup.current?.hash).toBe(hashOf(C));
  });
});

describe('Supervisor: invalid configs', () => {
  it.each([
    ['invalid YAML', BAD_YAML],
    ['a wrong type', BAD_TYPE],
    ['a relative path', BAD_PATH],
  ])('keeps the running generation on %s and reports it once', async (_name, bad) => {
    const { sup, h, rec, metrics, logs } = setup();
    await sup.handle(result(A));
    const res = result(bad);
    expect(res.result.ok).toBe(false);
    await sup.handle(res);
    expect(h.log).toEqual(['start 1', 'running 1']);
    expect(sup.ready).toBe(true);
    expect(sup.current?.hash).toBe(hashOf(A));
    expect(await reloads(metrics)).toEqual({ applied: 1, invalid: 1, unchanged: 0 });
    expect(await gauge(metrics.configLastReloadSuccessful)).toBe(0);
    expect(await gauge(metrics.configLastReloadSuccessTimestamp)).toBe(1_700_000_000);
    expect(await infoHashes(metrics)).toEqual([hashOf(A)]);
    expect(rec.events.map((e) => [e.ref.kind, e.type, e.reason])).toEqual([
      ['Pod', 'Warning', 'ConfigInvalid'],
      ['Node', 'Warning', 'ConfigInvalid'],
    ]);
    const errors = res.result.ok ? [] : res.result.errors;
    expect(rec.events[0]!.message).toContain(errors[0]!.message.split('\n')[0]!.slice(0, 30));
    expect(rec.events[0]!.message).toContain(`keeping configuration ${hashOf(A).slice(0, 12)}`);
    const errorLines = logs.filter((l) => String(l['msg']).startsWith('invalid configuration:'));
    expect(errorLines).toHaveLength(errors.length);
    expect(errorLines[0]!['path']).toBe(errors[0]!.path);

    // the same bad content again (a kubelet touch): counted, not re-reported
    await sup.handle(result({ ...bad }));
    expect(rec.events).toHaveLength(2);
    expect(logs.filter((l) => String(l['msg']).startsWith('invalid configuration:'))).toHaveLength(errors.length);
    expect((await reloads(metrics)).invalid).toBe(2);

    // a valid edit applies at once
    await sup.handle(result(C));
    expect(sup.current?.hash).toBe(hashOf(C));
    expect(await gauge(metrics.configLastReloadSuccessful)).toBe(1);
    expect(rec.reasons()).toEqual(['ConfigInvalid', 'ConfigInvalid', 'ConfigReloaded', 'ConfigReloaded']);
  });

  it('reports a different bad config again, and a reverted edit clears the alarm', async () => {
    const { sup, rec, metrics } = setup();
    await sup.handle(result(A));
    await sup.handle(result(BAD_YAML));
    await sup.handle(result(BAD_PATH));
    expect(rec.reasons()).toEqual(['ConfigInvalid', 'ConfigInvalid', 'ConfigInvalid', 'ConfigInvalid']);
    await sup.handle(result(A)); // reverted to the running config
    expect(await gauge(metrics.configLastReloadSuccessful)).toBe(1);
    expect(await reloads(metrics)).toEqual({ applied: 1, invalid: 2, unchanged: 1 });
    // the same bad content after a good one is news again
    await sup.handle(result(BAD_YAML));
    expect(rec.events.filter((e) => e.reason === 'ConfigInvalid')).toHaveLength(6);
  });

  it('summarises many errors in one event and caps its length', async () => {
    const { sup, rec } = setup();
    const many: Record<string, string> = {
      storageClassMap: Array.from({ length: 8 }, (_, i) => `c${i}:\n  hostDir: rel${i}\n  mountDir: rel${i}\n`).join(''),
    };
    const res = result(many);
    expect(res.result.ok).toBe(false);
    await sup.handle(res);
    const msg = rec.events[0]!.message;
    expect(msg.length).toBeLessThanOrEqual(1000);
    const n = res.result.ok ? 0 : res.result.errors.length;
    expect(msg).toContain(`${n} errors`);
    if (n > 3) expect(msg).toContain(`and ${n - 3} more`);
  });

  it('with a bad config at start-up runs nothing, stays up and not ready; the first valid config starts it', async () => {
    const { sup, h, rec, metrics } = setup();
    await sup.handle(result(BAD_YAML));
    expect(sup.ready).toBe(false);
    expect(sup.current).toBeUndefined();
    expect(h.log).toEqual([]);
    expect(rec.events[0]!.message).toContain('no valid configuration yet');
    expect(await gauge(metrics.configLastReloadSuccessful)).toBe(0);
    await sup.handle(result(A));
    expect(sup.ready).toBe(true);
    expect(h.log).toEqual(['start 1', 'running 1']);
    expect(await gauge(metrics.controllerRestarts)).toBe(0);
    expect(await gauge(metrics.configLastReloadSuccessful)).toBe(1);
    expect(rec.reasons()).toEqual(['ConfigInvalid', 'ConfigInvalid', 'ConfigReloaded', 'ConfigReloaded']);
    expect(rec.events[2]!.message).toContain('first valid configuration');
  });
});

describe('Supervisor: hot reload off, start failures, stop', () => {
  it('with hot reload off only logs a new config (once) and keeps the running one', async () => {
    const { sup, h, rec, metrics, logs } = setup({ hotReload: false });
    await sup.handle(result(A));
    await sup.handle(result(B));
    await sup.handle(result({ ...B }));
    expect(h.log).toEqual(['start 1', 'running 1']);
    expect(sup.current?.hash).toBe(hashOf(A));
    expect(rec.events).toEqual([]);
    expect(await reloads(metrics)).toEqual({ applied: 1, invalid: 0, unchanged: 2 });
    const warn = logs.filter((l) => String(l['msg']).includes('restart the pod to apply'));
    expect(warn).toHaveLength(1);
    expect(warn[0]!['configHash']).toBe(hashOf(B));
    expect(warn[0]!['changed']).toBeInstanceOf(Array);
  });

  it('with hot reload off still starts the first valid config after a bad start-up', async () => {
    const { sup, h } = setup({ hotReload: false });
    await sup.handle(result(BAD_PATH));
    await sup.handle(result(A));
    expect(h.log).toEqual(['start 1', 'running 1']);
    expect(sup.ready).toBe(true);
  });

  it('retries a failed start with backoff, reporting the failure once', async () => {
    const { sup, h, rec, metrics } = setup();
    await sup.handle(result(A));
    h.failStarts = 3;
    await sup.handle(result(B)); // resolves once the first failure is reported
    expect(sup.ready).toBe(false);
    expect(rec.reasons()).toEqual(['ControllerStartFailed', 'ControllerStartFailed']);
    expect(await gauge(metrics.configLastReloadSuccessful)).toBe(0);
    await waitFor(() => sup.ready);
    expect(h.log).toEqual([
      'start 1', 'running 1', 'stopping 1', 'stopped 1',
      'start 2', 'fail 2', 'start 2', 'fail 2', 'start 2', 'fail 2', 'start 2', 'running 2',
    ]);
    expect(sup.current?.hash).toBe(hashOf(B));
    expect(await gauge(metrics.configLastReloadSuccessful)).toBe(1);
    expect(await gauge(metrics.controllerRestarts)).toBe(1);
    expect(rec.reasons()).toEqual(['ControllerStartFailed', 'ControllerStartFailed', 'ConfigReloaded', 'ConfigReloaded']);
  });

  it('a bad config while a new one keeps failing to start names the pending one, and the gauge stays 0', async () => {
    const { sup, h, rec, metrics } = setup({ retry: { initialMs: 10_000, maxMs: 10_000, jitter: 0 } });
    await sup.handle(result(A));
    h.failStarts = 100;
    await sup.handle(result(B));
    await sup.handle(result(BAD_TYPE)); // each result also wakes the backoff: B is tried (and fails) again
    expect(rec.reasons()).toEqual(['ControllerStartFailed', 'ControllerStartFailed', 'ConfigInvalid', 'ConfigInvalid']);
    expect(rec.events[2]!.message).toContain(`still trying to start configuration ${hashOf(B).slice(0, 12)}`);
    expect(await gauge(metrics.configLastReloadSuccessful)).toBe(0);
    await sup.handle(result(B)); // the pending config again: unchanged, its start is still failing
    expect(await gauge(metrics.configLastReloadSuccessful)).toBe(0);
    expect(await reloads(metrics)).toEqual({ applied: 1, invalid: 1, unchanged: 1 });
  });

  it('a newer config replaces one that keeps failing to start', async () => {
    const { sup, h } = setup({ retry: { initialMs: 10_000, maxMs: 10_000, jitter: 0 } });
    await sup.handle(result(A));
    h.failStarts = 1;
    await sup.handle(result(B));
    expect(sup.ready).toBe(false);
    await sup.handle(result(C)); // wakes the 10 s backoff at once
    expect(sup.ready).toBe(true);
    expect(sup.current?.hash).toBe(hashOf(C));
    expect(sup.current?.generation).toBe(3);
  });

  it('stop() stops the running generation, ends a retry backoff, and ignores later results', async () => {
    const { sup, h } = setup({ retry: { initialMs: 60_000, maxMs: 60_000, jitter: 0 } });
    await sup.handle(result(A));
    await sup.stop();
    expect(h.log).toEqual(['start 1', 'running 1', 'stopping 1', 'stopped 1']);
    expect(sup.ready).toBe(false);
    await sup.handle(result(B));
    expect(h.log).toHaveLength(4);

    const s2 = setup({ retry: { initialMs: 60_000, maxMs: 60_000, jitter: 0 } });
    s2.h.failStarts = 1;
    await s2.sup.handle(result(A));
    const t0 = Date.now();
    await s2.sup.stop();
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(s2.h.log).toEqual(['start 1', 'fail 1']);
  });

  it('stop() aborts a start() that is still waiting (ctx.signal)', async () => {
    let sawAbort = false;
    const { sup, logs } = setup({
      start: (_config, ctx) =>
        new Promise<Generation>((_resolve, reject) => {
          ctx.signal.addEventListener('abort', () => {
            sawAbort = true;
            reject(new Error('aborted'));
          });
        }),
    });
    const handled = sup.handle(result(A));
    await sleep(20);
    const t0 = Date.now();
    await sup.stop();
    await handled;
    expect(Date.now() - t0).toBeLessThan(500);
    expect(sawAbort).toBe(true);
    expect(sup.ready).toBe(false);
    expect(logs.some((l) => String(l['msg']).includes('start abandoned'))).toBe(true);
  });

  it('a failing stop() of the old generation is logged and the new one still starts', async () => {
    const { sup, logs } = setup({
      start: () => Promise.resolve({ stop: () => Promise.reject(new Error('stuck')) }),
    });
    await sup.handle(result(A));
    await sup.handle(result(B));
    expect(sup.current?.hash).toBe(hashOf(B));
    expect(logs.some((l) => String(l['msg']).includes('stopping the local controller failed'))).toBe(true);
  });
});

describe('ConfigWatcher + Supervisor with the kubelet writer', () => {
  let dir: string | undefined;
  let watcher: ConfigWatcher | undefined;
  afterEach(async () => {
    await watcher?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('a misspelt key added to the running config is warned (with the nearest key), and no restart', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sup-'));
    const writer = new AtomicWriter(dir);
    await writer.write(A);
    const { sup, h, logs } = setup();
    watcher = new ConfigWatcher({ dir, pollIntervalMs: 60_000, watch: false, logger: silentLogger, onResult: (r) => sup.handle(r) });
    await watcher.start();
    await writer.write({ ...A, useNodeNameOnIy: 'true' });
    await watcher.checkNow();
    await writer.write({ ...C, useNodeNameOnIy: 'true' }); // a reload that keeps the typo
    await watcher.checkNow();
    const warned = logs.filter((l) => String(l['msg']).includes('did you mean "useNodeNameOnly"?'));
    expect(warned).toHaveLength(2);
    expect(h.starts).toHaveLength(2); // A, then C: the typo alone restarted nothing
  });

  // Issue 17 (3a, 4, 8): the new config rules reach the daemon through the same reader and parser as every other
  // rule, at start-up and on reload.
  const NESTED = { storageClassMap: classYaml({ a: { hostDir: '/mnt/d' }, b: { hostDir: '/mnt/d/vol1' } }) };
  const SYSTEM_ROOT = { storageClassMap: classYaml({ fast: { hostDir: '/mnt/../etc' } }) };

  it('nested classes at start-up: nothing runs, not ready, a ConfigInvalid Event naming both classes; a fix starts it', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sup-'));
    const writer = new AtomicWriter(dir);
    await writer.write(NESTED);
    const { sup, h, rec } = setup();
    watcher = new ConfigWatcher({ dir, pollIntervalMs: 60_000, watch: false, logger: silentLogger, onResult: (r) => sup.handle(r) });
    await watcher.start();
    expect(sup.ready).toBe(false);
    expect(h.log).toEqual([]);
    expect(rec.reasons()).toEqual(['ConfigInvalid', 'ConfigInvalid']);
    expect(rec.events[0]!.message).toContain('no valid configuration yet');
    expect(rec.events[0]!.message).toContain('hostDir "/mnt/d/vol1" of storage class b lies inside hostDir "/mnt/d" of storage class a');
    await writer.write(A);
    await watcher.checkNow();
    expect(sup.ready).toBe(true);
  });

  it('a reload with nested classes, then one with /mnt/../etc, is refused each time and the last good config keeps running', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sup-'));
    const writer = new AtomicWriter(dir);
    await writer.write(A);
    const { sup, h, rec, metrics } = setup();
    watcher = new ConfigWatcher({ dir, pollIntervalMs: 60_000, watch: false, logger: silentLogger, onResult: (r) => sup.handle(r) });
    await watcher.start();
    expect(sup.current?.hash).toBe(hashOf(A));
    await writer.write(NESTED);
    await watcher.checkNow();
    await writer.write(SYSTEM_ROOT);
    await watcher.checkNow();
    expect(sup.current?.hash).toBe(hashOf(A));
    expect(h.log).toEqual(['start 1', 'running 1']);
    const invalid = rec.events.filter((e) => e.reason === 'ConfigInvalid' && e.ref.kind === 'Pod').map((e) => e.message);
    expect(invalid).toHaveLength(2);
    expect(invalid[0]).toContain(`keeping configuration ${hashOf(A).slice(0, 12)} running`);
    expect(invalid[0]).toContain('of storage class b lies inside hostDir "/mnt/d" of storage class a');
    expect(invalid[1]).toContain('hostDir "/mnt/../etc" ("/etc" once normalised) of storage class fast is /etc');
    expect(await gauge(metrics.configLastReloadSuccessful)).toBe(0);
  });

  it('bad config at start-up, a fix, a burst of 20 swaps (at most 2 restarts), touches (none)', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sup-'));
    const writer = new AtomicWriter(dir);
    await writer.write(BAD_PATH);
    const { sup, h, rec } = setup();
    watcher = new ConfigWatcher({
      dir,
      pollIntervalMs: 2500,
      debounceMs: 300,
      logger: silentLogger,
      onResult: (r) => sup.handle(r),
    });
    await watcher.start();
    expect(sup.ready).toBe(false);
    expect(rec.reasons()).toEqual(['ConfigInvalid', 'ConfigInvalid']);

    await writer.write(A);
    await watcher.checkNow();
    expect(sup.ready).toBe(true);
    const startsBefore = h.starts.length;

    for (let i = 1; i <= 20; i++) {
      await writer.write({ ...A, labelsForPV: `swap: "${i}"\n` });
      await sleep(100);
    }
    await waitFor(() => sup.current?.config.labelsForPV['swap'] === '20', 4000);
    const restarts = h.starts.length - startsBefore;
    expect(restarts).toBeGreaterThanOrEqual(1);
    expect(restarts).toBeLessThanOrEqual(2);

    const afterBurst = h.starts.length;
    for (let i = 0; i < 5; i++) {
      await writer.touch();
      await sleep(50);
    }
    await watcher.checkNow();
    expect(h.starts.length).toBe(afterBurst);
    expect(h.maxActive).toBe(1);
  });
});

describe('Supervisor: Events for warnings and recovery, log field names (issue 18, points 10-12)', () => {
  const TYPO = { ...A, useNodeNameOnIy: 'true' };

  it('a misspelt key: a Warning ConfigWarning naming it; fixing it: a Normal ConfigRecovered', async () => {
    const { sup, rec } = setup();
    await sup.handle(result(A));
    await sup.handle(result(TYPO));
    expect(rec.events.map((e) => [e.ref.kind, e.type, e.reason])).toEqual([
      ['Pod', 'Warning', 'ConfigWarning'],
      ['Node', 'Warning', 'ConfigWarning'],
    ]);
    expect(rec.events[0]!.message).toBe(
      `Configuration ${hashOf(A).slice(0, 12)} has 1 warning (keys useNodeNameOnIy); the rest of it is valid: ` +
        'useNodeNameOnIy: unknown key "useNodeNameOnIy" ignored; did you mean "useNodeNameOnly"? (file useNodeNameOnIy)',
    );
    await sup.handle(result({ ...TYPO })); // the kubelet's touch: nothing new
    expect(rec.events).toHaveLength(2);
    await sup.handle(result(A)); // the typo fixed: the config hash is the same, the warning is gone
    expect(rec.events.slice(2).map((e) => [e.ref.kind, e.type, e.reason, e.message])).toEqual([
      ['Pod', 'Normal', 'ConfigRecovered', `Configuration ${hashOf(A).slice(0, 12)} has no warnings any more`],
      ['Node', 'Normal', 'ConfigRecovered', `Configuration ${hashOf(A).slice(0, 12)} has no warnings any more`],
    ]);
  });

  it('invalid, then the edit reverted: a Normal ConfigRecovered follows the ConfigInvalid', async () => {
    const { sup, rec } = setup();
    await sup.handle(result(A));
    await sup.handle(result(BAD_PATH));
    await sup.handle(result(A));
    expect(rec.events.map((e) => `${e.type} ${e.reason}`)).toEqual(['Warning ConfigInvalid', 'Warning ConfigInvalid', 'Normal ConfigRecovered', 'Normal ConfigRecovered']);
    expect(rec.events.at(-1)!.message).toBe(`Configuration valid again: ${hashOf(A).slice(0, 12)}, the one running, is kept; the rejected content was replaced`);
    await sup.handle(result(A)); // nothing more to say
    expect(rec.events).toHaveLength(4);
  });

  it('invalid, then valid with hot reload off: a Normal ConfigRecovered saying the pod must restart', async () => {
    const { sup, rec } = setup({ hotReload: false });
    await sup.handle(result(A));
    await sup.handle(result(BAD_PATH));
    await sup.handle(result(B));
    expect(rec.reasons()).toEqual(['ConfigInvalid', 'ConfigInvalid', 'ConfigRecovered', 'ConfigRecovered']);
    expect(rec.events.at(-1)!.message).toBe(
      `Configuration ${hashOf(B).slice(0, 12)} is valid; hot reload is off, so ${hashOf(A).slice(0, 12)} keeps running until the pod restarts`,
    );
  });

  it('ConfigReloaded names the config hash, not a controller generation number (they start over in every pod)', async () => {
    const { sup, rec } = setup();
    await sup.handle(result(A));
    await sup.handle(result(B));
    expect(rec.events[0]!.message).toMatch(new RegExp(`^Configuration ${hashOf(B).slice(0, 12)} applied, local controller restarted; changed: `));
    expect(rec.events[0]!.message).not.toMatch(/generation/);
  });

  it('log fields: configHash and controllerGeneration for a generation, configDir for the kubelet directory', async () => {
    const { sup, logs } = setup();
    await sup.handle(result(A));
    const bad = result(BAD_PATH);
    await sup.handle(bad);
    await sup.handle(result(B));
    const loaded = logs.find((l) => l['msg'] === 'configuration loaded; local controller started')!;
    expect(loaded).toMatchObject({ configHash: hashOf(A), controllerGeneration: 1 });
    const reloaded = logs.find((l) => l['msg'] === 'configuration reloaded; local controller restarted')!;
    expect(reloaded).toMatchObject({ configHash: hashOf(B), previousConfigHash: hashOf(A), controllerGeneration: 2 });
    const rejected = logs.find((l) => String(l['msg']).startsWith('invalid configuration:'))!;
    expect(rejected['configDir']).toBe(bad.files.generation);
    for (const l of logs) expect(Object.keys(l)).not.toContain('generation');
  });

  it('a YAML syntax error: one ConfigInvalid error with line and hint; the parser cascade only at debug', async () => {
    const { sup, rec, logs } = setup();
    await sup.handle(result(A));
    await sup.handle(result({ storageClassMap: 'fast:\n  hostDir: /mnt/fast\n mountDir: /mnt/fast\n  volumeMode: Filesystem\n' }));
    expect(rec.events[0]!.message).toBe(
      `Configuration rejected (1 error), keeping configuration ${hashOf(A).slice(0, 12)} running: storageClassMap: YAML syntax error: ` +
        'bad indentation of a mapping entry; check that keys at the same level under storageClassMap are indented the same (file storageClassMap, line 3)',
    );
    expect(logs.filter((l) => l['level'] === 50 && String(l['msg']).startsWith('invalid configuration:'))).toHaveLength(1);
    const cascade = logs.filter((l) => String(l['msg']).startsWith('YAML parser: '));
    expect(cascade.length).toBeGreaterThan(1);
    expect(cascade.every((l) => l['level'] === 20)).toBe(true);
  });
});
