import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { itemBackoff, WorkQueue } from '../../src/util/workqueue.ts';

describe('WorkQueue', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('hands out items in FIFO order and de-duplicates queued items', async () => {
    const q = new WorkQueue<string>();
    q.add('a');
    q.add('b');
    q.add('a');
    expect(q.length()).toBe(2);
    expect(await q.get()).toEqual({ item: 'a', shutdown: false });
    expect(await q.get()).toEqual({ item: 'b', shutdown: false });
    expect(q.length()).toBe(0);
  });

  it('get() waits for an add', async () => {
    const q = new WorkQueue<string>();
    const p = q.get();
    let got: unknown;
    void p.then((r) => (got = r));
    await Promise.resolve();
    expect(got).toBeUndefined();
    q.add('x');
    expect(await p).toEqual({ item: 'x', shutdown: false });
  });

  it('re-adding an item while it is processed requeues it on done(), never in parallel', async () => {
    const q = new WorkQueue<string>();
    q.add('a');
    const first = await q.get();
    expect(first.item).toBe('a');
    q.add('a'); // marked dirty, not queued while processing
    expect(q.length()).toBe(0);
    let second: unknown;
    void q.get().then((r) => (second = r));
    await Promise.resolve();
    expect(second).toBeUndefined();
    q.done('a');
    await Promise.resolve();
    expect(second).toEqual({ item: 'a', shutdown: false });
    q.done('a');
    expect(q.length()).toBe(0);
  });

  it('done() without a re-add does not requeue', async () => {
    const q = new WorkQueue<string>();
    q.add('a');
    await q.get();
    q.done('a');
    expect(q.length()).toBe(0);
  });

  it('addAfter delays the add and keeps the earliest of several delays', async () => {
    const q = new WorkQueue<string>();
    q.addAfter('a', 1000);
    q.addAfter('a', 5000); // later: ignored
    q.addAfter('a', 300); // earlier: wins
    expect(q.waitingCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(299);
    expect(q.length()).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(q.length()).toBe(1);
    expect(q.waitingCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(q.length()).toBe(1); // the superseded timers never fire a second add
    q.addAfter('b', 0);
    expect(q.length()).toBe(2);
  });

  it('forget() resets the backoff of an item', async () => {
    const q = new WorkQueue<string>({ baseDelayMs: 5 });
    q.addRateLimited('a');
    q.addRateLimited('b');
    await vi.advanceTimersByTimeAsync(5);
    expect(q.length()).toBe(2);
    expect(q.numRequeues('a')).toBe(1);
    q.forget('a');
    expect(q.numRequeues('a')).toBe(0);
    expect(q.numRequeues('b')).toBe(1);
  });

  it('addRateLimited waits exactly the backoff delay', async () => {
    const q = new WorkQueue<string>({ baseDelayMs: 5, maxDelayMs: 1_000_000 });
    for (const expected of [5, 10, 20, 40]) {
      q.addRateLimited('a');
      await vi.advanceTimersByTimeAsync(expected - 1);
      expect(q.length()).toBe(0);
      await vi.advanceTimersByTimeAsync(1);
      expect(q.length()).toBe(1);
      await q.get();
      q.done('a');
    }
  });

  it('shutDown wakes waiting getters and refuses new items', async () => {
    const q = new WorkQueue<string>();
    const p1 = q.get();
    const p2 = q.get();
    q.addAfter('later', 1000);
    q.shutDown();
    expect(await p1).toEqual({ item: undefined, shutdown: true });
    expect(await p2).toEqual({ item: undefined, shutdown: true });
    q.add('x');
    expect(q.length()).toBe(0);
    await vi.advanceTimersByTimeAsync(2000);
    expect(q.length()).toBe(0); // delayed adds are cancelled
    expect(await q.get()).toEqual({ item: undefined, shutdown: true });
  });

  it('after shutDown, get() still hands out queued items, then reports shutdown', async () => {
    const q = new WorkQueue<string>();
    q.add('a');
    q.shutDown();
    expect(await q.get()).toEqual({ item: 'a', shutdown: false });
    expect(await q.get()).toEqual({ item: undefined, shutdown: true });
  });

  it('shutDownWithDrain waits for items being processed', async () => {
    const q = new WorkQueue<string>();
    q.add('a');
    await q.get();
    let drained = false;
    const p = q.shutDownWithDrain().then(() => (drained = true));
    await Promise.resolve();
    expect(drained).toBe(false);
    q.done('a');
    await p;
    expect(drained).toBe(true);
    await expect(new WorkQueue<string>().shutDownWithDrain()).resolves.toBeUndefined();
  });
});

describe('itemBackoff', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('defaults to 5 ms doubling up to 1000 s, per item', () => {
    const rl = itemBackoff<string>();
    const seq = Array.from({ length: 30 }, () => rl.failure('a'));
    expect(seq.slice(0, 4)).toEqual([5, 10, 20, 40]);
    expect(seq.at(-1)).toBe(1_000_000);
    expect(rl.failure('b')).toBe(5);
    expect(rl.failures('a')).toBe(30);
    rl.forget('a');
    expect(rl.failure('a')).toBe(5);
  });
});
