// ConfigWatcher against real temp dirs written the kubelet's way (AtomicWriter),
// with the real readConfigDir/parseConfig unless a test needs a fault injected.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { readConfigDir, type ConfigFiles } from '../../src/config/load.ts';
import { parseConfig } from '../../src/config/parse.ts';
import { ConfigWatcher, type ConfigWatcherOptions, type WatchResult } from '../../src/watcher/config-watcher.ts';
import { rawFilesHash } from '../../src/watcher/hash.ts';
import { silentLogger } from '../../src/util/log.ts';
import { AtomicWriter } from '../support/atomic-writer.ts';
import { classYaml, sleep, waitFor } from './helpers.ts';

const BASE = { storageClassMap: classYaml({ fast: { hostDir: '/mnt/fast' } }) };

const classesOf = (r: WatchResult): string[] =>
  r.result.ok ? Object.keys(r.result.config.storageClassMap).sort() : [];

let dir: string;
let writer: AtomicWriter;
let watcher: ConfigWatcher | undefined;
let results: WatchResult[];

function makeWatcher(opts: Partial<ConfigWatcherOptions> = {}): ConfigWatcher {
  watcher = new ConfigWatcher({
    dir,
    pollIntervalMs: 200,
    debounceMs: 50,
    logger: silentLogger,
    onResult: (r) => {
      results.push(r);
    },
    ...opts,
  });
  return watcher;
}

/** BASE written, then a watcher without fs.watch started on it (its first result delivered). */
async function startPolling(): Promise<ConfigWatcher> {
  await writer.write(BASE);
  const w = makeWatcher({ watch: false });
  await w.start();
  return w;
}

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'cw-'));
  writer = new AtomicWriter(dir);
  results = [];
  watcher = undefined;
});

afterEach(async () => {
  await watcher?.stop();
  vi.useRealTimers();
  await rm(dir, { recursive: true, force: true });
});

describe('ConfigWatcher: change detection', () => {
  it('delivers the initial config, then added, changed and removed classes and keys', async () => {
    const w = await startPolling();
    expect(results).toHaveLength(1);
    expect(results[0]!.result.ok).toBe(true);
    expect(results[0]!.files.generation).toBe(await writer.dataTarget());
    expect(classesOf(results[0]!)).toEqual(['fast']);

    // add a class
    await writer.write({ storageClassMap: classYaml({ fast: { hostDir: '/mnt/fast' }, slow: { hostDir: '/mnt/slow' } }) });
    await w.checkNow();
    expect(results).toHaveLength(2);
    expect(classesOf(results[1]!)).toEqual(['fast', 'slow']);

    // change a field of a class
    await writer.write({
      storageClassMap: classYaml({ fast: { hostDir: '/mnt/fast', namePattern: 'disk*' }, slow: { hostDir: '/mnt/slow' } }),
    });
    await w.checkNow();
    expect(results).toHaveLength(3);
    const r3 = results[2]!.result;
    expect(r3.ok && r3.config.storageClassMap['fast']?.namePattern).toBe('disk*');

    // remove a class (the Go provisioner never sees this one)
    await writer.write({ storageClassMap: classYaml({ fast: { hostDir: '/mnt/fast', namePattern: 'disk*' } }) });
    await w.checkNow();
    expect(results).toHaveLength(4);
    expect(classesOf(results[3]!)).toEqual(['fast']);

    // add a key, then remove it again
    const withLabels = { ...writer.current!, labelsForPV: 'team: storage\n' };
    await writer.write(withLabels);
    await w.checkNow();
    expect(results).toHaveLength(5);
    const r5 = results[4]!.result;
    expect(r5.ok && r5.config.labelsForPV).toEqual({ team: 'storage' });
    expect(results[4]!.files.files).toHaveProperty('labelsForPV');

    const { labelsForPV: _dropped, ...withoutLabels } = withLabels;
    await writer.write(withoutLabels);
    await w.checkNow();
    expect(results).toHaveLength(6);
    const r6 = results[5]!.result;
    expect(r6.ok && r6.config.labelsForPV).toEqual({});
    expect(results[5]!.files.files).not.toHaveProperty('labelsForPV');
    // every step changed the canonical hash; dropping the key again is the config of step 4
    const hashes = results.map((r) => (r.result.ok ? r.result.hash : ''));
    expect(new Set(hashes.slice(0, 5)).size).toBe(5);
    expect(hashes[5]).toBe(hashes[3]);
  });

  it('carries the raw hash of the files it delivers, valid, invalid or unreadable', async () => {
    const w = await startPolling();
    await writer.write({ storageClassMap: 'fast: [unclosed\n' });
    await w.checkNow();
    await rm(dir, { recursive: true, force: true });
    await w.checkNow();
    expect(results.map((r) => r.result.ok)).toEqual([true, false, false]);
    for (const r of results) expect(r.rawHash).toBe(rawFilesHash(r.files.files));
    expect(new Set(results.map((r) => r.rawHash)).size).toBe(3);
  });

  it('delivers nothing for kubelet touches and byte-identical rewrites', async () => {
    await writer.write(BASE);
    const w = makeWatcher({ pollIntervalMs: 50, debounceMs: 20 });
    await w.start();
    expect(results).toHaveLength(1);
    for (let i = 0; i < 10; i++) {
      await writer.touch(i % 2 === 0 ? 'generation' : 'mtime');
      await sleep(30);
    }
    await writer.write({ ...BASE });
    await sleep(150);
    await w.checkNow();
    expect(w.stats.checks).toBeGreaterThan(5);
    expect(results).toHaveLength(1);
  });

  it('delivers a misspelt key added to an unchanged config (new warnings), once', async () => {
    await writer.write(BASE);
    const w = makeWatcher({ watch: false, pollIntervalMs: 60_000 });
    await w.start();
    await writer.write({ ...BASE, useNodeNameOnIy: 'true' });
    await w.checkNow();
    await w.checkNow();
    expect(results).toHaveLength(2);
    const [first, second] = results;
    expect(first!.result.ok && second!.result.ok && first!.result.hash === second!.result.hash).toBe(true);
    expect(second!.result.warnings?.map((x) => x.message)).toEqual(['unknown key "useNodeNameOnIy" ignored; did you mean "useNodeNameOnly"?']);
    // Moving the key's line, or rewriting the same bytes, is no new warning.
    await writer.write({ ...BASE, useNodeNameOnIy: 'true' });
    await w.checkNow();
    expect(results).toHaveLength(2);
  });

  it('reports invalid content once per distinct content, then a fix at once', async () => {
    const w = await startPolling();
    await writer.write({ storageClassMap: 'fast: [unclosed\n' });
    await w.checkNow();
    await w.checkNow();
    await w.checkNow();
    expect(results).toHaveLength(2);
    expect(results[1]!.result.ok).toBe(false);
    // kubelet touch of the bad content: still nothing new
    await writer.touch();
    await w.checkNow();
    expect(results).toHaveLength(2);
    // another bad content is a new result
    await writer.write({ storageClassMap: classYaml({ fast: { hostDir: 'relative/dir' } }) });
    await w.checkNow();
    expect(results).toHaveLength(3);
    expect(results[2]!.result.ok).toBe(false);
    // back to the original valid content: delivered (the consumer decides it is unchanged)
    await writer.write(BASE);
    await w.checkNow();
    expect(results).toHaveLength(4);
    expect(results[3]!.result.ok && results[0]!.result.ok && results[3]!.result.hash === results[0]!.result.hash).toBe(
      true,
    );
  });

  it('reports a missing directory once, with a clear error, and picks it up when it appears', async () => {
    const missing = path.join(dir, 'not-there');
    const w = makeWatcher({ dir: missing, pollIntervalMs: 30 });
    await w.start();
    await sleep(200);
    expect(results).toHaveLength(1);
    const r = results[0]!.result;
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.errors[0]!.message).toContain(missing);
    expect(w.stats.checks).toBeGreaterThan(3);

    await new AtomicWriter(missing).write(BASE);
    // (a poll may catch the directory between its creation and the first swap: an empty config)
    await waitFor(() => classesOf(results.at(-1)!).includes('fast'));
    expect(results.filter((x) => !x.result.ok)).toHaveLength(1);
    // the fs watch was armed once the directory existed
    await waitFor(() => w.stats.watchArmed >= 1);
  });
});

describe('ConfigWatcher: reads', () => {
  it('reports a file over the size limit as an invalid config, once, naming the file and both sizes', async () => {
    await writer.write(BASE);
    const w = makeWatcher({ watch: false, read: (d) => readConfigDir(d, { maxFileBytes: 4096 }) });
    await w.start();
    expect(results[0]!.result.ok).toBe(true);
    await writer.write({ storageClassMap: `${BASE.storageClassMap}# ${'x'.repeat(5000)}\n` });
    await w.checkNow();
    await w.checkNow();
    expect(results).toHaveLength(2);
    const r = results[1]!.result;
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.errors[0]!.message).toMatch(/config file \S+\/storageClassMap is \d+ bytes, over the limit of 4096 bytes \(--max-config-file-size\)$/);
  });

  it('retries transient read errors and never reports them as invalid', async () => {
    await writer.write(BASE);
    let failures = 2;
    const read = (d: string): Promise<ConfigFiles> =>
      failures-- > 0
        ? Promise.reject(Object.assign(new Error('ENOENT during swap'), { transient: true }))
        : readConfigDir(d);
    const w = makeWatcher({ watch: false, read, transientRetryDelayMs: 5 });
    await w.start();
    expect(results).toHaveLength(1);
    expect(results[0]!.result.ok).toBe(true);
    expect(w.stats.transientErrors).toBe(2);
  });

  it('delivers nothing while reads keep failing transiently', async () => {
    await writer.write(BASE);
    const read = (): Promise<ConfigFiles> => Promise.reject(Object.assign(new Error('swap'), { transient: true }));
    const w = makeWatcher({ watch: false, read, transientRetries: 3, transientRetryDelayMs: 1 });
    await w.start();
    await w.checkNow();
    expect(results).toHaveLength(0);
    expect(w.stats.transientErrors).toBe(6);
  });

  it('stop() wakes a pending transient-retry sleep at once and leaves no timer (fake timers)', async () => {
    vi.useFakeTimers();
    let reads = 0;
    const read = (): Promise<ConfigFiles> => {
      reads++;
      return Promise.reject(Object.assign(new Error('swap'), { transient: true }));
    };
    const w = makeWatcher({ watch: false, read, transientRetries: 5, transientRetryDelayMs: 60_000 });
    void w.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(reads).toBe(1);
    expect(vi.getTimerCount()).toBe(2); // the poll interval and the retry sleep
    let stopped = false;
    const stopping = w.stop().then(() => {
      stopped = true;
    });
    await vi.advanceTimersByTimeAsync(0); // no fake time passes: only the stop signal can wake the sleep
    expect(stopped).toBe(true);
    await stopping;
    expect(vi.getTimerCount()).toBe(0);
    expect(results).toHaveLength(0);
  });

  it('survives many reads racing kubelet swaps without a false invalid result', async () => {
    const w = await startPolling();
    let stop = false;
    const swapper = (async () => {
      for (let i = 0; !stop; i++) await writer.write(i % 2 ? BASE : { ...BASE, useJobForCleaning: 'true' });
    })();
    for (let i = 0; i < 100; i++) await w.checkNow();
    stop = true;
    await swapper;
    expect(results.every((r) => r.result.ok)).toBe(true);
    expect(w.stats.checks).toBeGreaterThanOrEqual(101);
  });

  it('never runs two checks at once and coalesces requests made during one', async () => {
    await writer.write(BASE);
    let active = 0;
    let maxActive = 0;
    let reads = 0;
    const read = async (d: string): Promise<ConfigFiles> => {
      reads++;
      active++;
      maxActive = Math.max(maxActive, active);
      await sleep(40);
      active--;
      return readConfigDir(d);
    };
    const w = makeWatcher({ watch: false, read });
    const first = w.checkNow();
    const more = Array.from({ length: 10 }, () => w.checkNow());
    await Promise.all([first, ...more]);
    expect(maxActive).toBe(1);
    expect(reads).toBe(2);
    expect(results).toHaveLength(1);
  });

  it('redelivers a result whose onResult threw', async () => {
    await writer.write(BASE);
    let calls = 0;
    const w = makeWatcher({
      watch: false,
      onResult: () => {
        calls++;
        if (calls === 1) throw new Error('boom');
      },
    });
    await w.start();
    await w.checkNow();
    await w.checkNow();
    expect(calls).toBe(2);
  });

  it('parses into a fresh object each time the content changes', async () => {
    const w = await startPolling();
    await writer.write({ ...BASE, labelsForPV: 'a: b\n' });
    await w.checkNow();
    await writer.write(BASE);
    await w.checkNow();
    expect(results).toHaveLength(3);
    const a = results[0]!.result;
    const c = results[2]!.result;
    expect(a.ok && c.ok).toBe(true);
    if (a.ok && c.ok) {
      expect(c.hash).toBe(a.hash);
      expect(c.config).not.toBe(a.config);
      expect(c.config).toEqual(a.config);
    }
  });
});

describe('ConfigWatcher: timing', () => {
  it('sees a change through the fs.watch nudge well before the poll', async () => {
    await writer.write(BASE);
    const w = makeWatcher({ pollIntervalMs: 10_000, debounceMs: 100 });
    await w.start();
    expect(results).toHaveLength(1);
    const t0 = Date.now();
    await writer.write({ ...BASE, useJobForCleaning: 'true' });
    await waitFor(() => results.length === 2, 2000);
    const latency = Date.now() - t0;
    expect(latency).toBeLessThan(1000);
    expect(w.stats.fsEvents).toBeGreaterThan(0);
  });

  /** Writes 20 swaps 100 ms apart, waits for the last content, returns the results after the first. */
  async function burstOf20(opts: Partial<ConfigWatcherOptions>): Promise<number> {
    await writer.write(BASE);
    const w = makeWatcher(opts);
    await w.start();
    expect(results).toHaveLength(1);
    for (let i = 1; i <= 20; i++) {
      await writer.write({ ...BASE, labelsForPV: `swap: "${i}"\n` });
      await sleep(100);
    }
    await waitFor(() => {
      const last = results.at(-1)!.result;
      return last.ok && last.config.labelsForPV['swap'] === '20';
    }, 4000);
    await sleep(600);
    return results.length - 1;
  }

  it('coalesces a burst of 20 swaps in 2 s into at most 2 results, ending on the last content', async () => {
    const n = await burstOf20({ pollIntervalMs: 2500, debounceMs: 300 });
    expect(n).toBeGreaterThanOrEqual(1);
    expect(n).toBeLessThanOrEqual(2);
  });

  it('keeps a burst to at most 2 results even when the poll is much shorter than the burst', async () => {
    // A 200 ms poll would see ~10 intermediate states of a 2 s burst; polls wait for the burst's
    // debounced check instead, which comes at most maxDebounceMs after the burst began.
    const n = await burstOf20({ pollIntervalMs: 200, debounceMs: 300, maxDebounceMs: 2000 });
    expect(n).toBeGreaterThanOrEqual(1);
    expect(n).toBeLessThanOrEqual(2);
  });

  it('polls on its own when fs.watch is off (fake timers) and stop() leaves no timer', async () => {
    vi.useFakeTimers();
    let content: Record<string, string> = BASE;
    const read = (): Promise<ConfigFiles> => Promise.resolve({ files: content, generation: 'g' });
    const w = makeWatcher({ watch: false, pollIntervalMs: 5000, read, parse: parseConfig });
    await w.start();
    expect(results).toHaveLength(1);
    content = { ...BASE, useJobForCleaning: 'true' };
    await vi.advanceTimersByTimeAsync(4999);
    expect(results).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(results).toHaveLength(2);
    expect(vi.getTimerCount()).toBe(1); // the poll interval
    await w.stop();
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(20_000);
    expect(w.stats.checks).toBe(2);
  });

  it('stop() closes the fs watch and every timer, and waits for a running check', async () => {
    await writer.write(BASE);
    const resources = (): Record<string, number> => {
      const counts: Record<string, number> = {};
      for (const r of process.getActiveResourcesInfo()) counts[r] = (counts[r] ?? 0) + 1;
      return counts;
    };
    const before = resources();
    let finished = false;
    const read = async (d: string): Promise<ConfigFiles> => {
      await sleep(50);
      const f = await readConfigDir(d);
      finished = true;
      return f;
    };
    const w = makeWatcher({ pollIntervalMs: 100, debounceMs: 50, read });
    void w.start();
    await sleep(20);
    await writer.write({ ...BASE, useJobForCleaning: 'true' }); // arms a debounce timer
    await w.stop();
    expect(finished).toBe(true);
    const after = resources();
    expect(after['FSEventWrap'] ?? 0).toBe(before['FSEventWrap'] ?? 0);
    expect(after['Timeout'] ?? 0).toBeLessThanOrEqual(before['Timeout'] ?? 0);
    const checks = w.stats.checks;
    await sleep(300);
    expect(w.stats.checks).toBe(checks);
  });
});
