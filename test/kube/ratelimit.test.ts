import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { TokenBucket } from '../../src/kube/ratelimit.ts';

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

/** Starts n acquires and records the fake time at which each one resolved. */
const startAll = (rl: TokenBucket, n: number): number[] => {
  const t0 = Date.now();
  const done: number[] = [];
  for (let i = 0; i < n; i++) void rl.acquire().then(() => done.push(Date.now() - t0));
  return done;
};

describe('TokenBucket', () => {
  it('lets a burst through at once, then one token per 1/qps seconds in arrival order', async () => {
    const rl = new TokenBucket({ qps: 5, burst: 3 });
    const done = startAll(rl, 6);
    await vi.advanceTimersByTimeAsync(0);
    expect(done).toEqual([0, 0, 0]);
    await vi.advanceTimersByTimeAsync(200);
    expect(done).toEqual([0, 0, 0, 200]);
    await vi.advanceTimersByTimeAsync(400);
    expect(done).toEqual([0, 0, 0, 200, 400, 600]);
  });

  it('refills up to burst while idle, never beyond', async () => {
    const rl = new TokenBucket({ qps: 10, burst: 2 });
    expect(rl.tryAcquire()).toBe(true);
    expect(rl.tryAcquire()).toBe(true);
    expect(rl.tryAcquire()).toBe(false);
    await vi.advanceTimersByTimeAsync(100);
    expect(rl.tryAcquire()).toBe(true);
    expect(rl.tryAcquire()).toBe(false);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(rl.available()).toBe(2);
  });

  it('is unlimited for qps <= 0, NaN or Infinity', async () => {
    for (const qps of [0, -1, Number.NaN, Infinity]) {
      const rl = new TokenBucket({ qps, burst: 1 });
      expect(rl.unlimited).toBe(true);
      const done = startAll(rl, 100);
      await vi.advanceTimersByTimeAsync(0);
      expect(done).toHaveLength(100);
    }
  });

  it('an aborted waiter rejects and gives its token back', async () => {
    const rl = new TokenBucket({ qps: 1, burst: 1 });
    await rl.acquire();
    const ac = new AbortController();
    const waiting = rl.acquire(ac.signal);
    const outcome = waiting.then(
      () => 'resolved',
      (e: unknown) => (e instanceof Error ? e.name : 'other'),
    );
    await vi.advanceTimersByTimeAsync(500);
    ac.abort();
    expect(await outcome).toBe('AbortError');
    // The next caller waits only for the token being refilled (500 ms left), not for the aborted one.
    const done = startAll(rl, 1);
    await vi.advanceTimersByTimeAsync(499);
    expect(done).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(done).toEqual([500]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('rejects at once for an already-aborted signal', async () => {
    const rl = new TokenBucket({ qps: 1, burst: 1 });
    await expect(rl.acquire(AbortSignal.abort())).rejects.toThrow();
    expect(rl.available()).toBe(1);
  });
});
