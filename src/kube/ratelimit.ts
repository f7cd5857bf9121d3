// Client-side request throttling: a token bucket like client-go's
// flowcontrol.NewTokenBucketRateLimiter(qps, burst). The bucket starts full
// (`burst` tokens) and refills at `qps` tokens per second. Waiters reserve a
// token in arrival order (the bucket may go negative), so they are served
// first-come first-served without a queue.
import { setTimeout as sleep } from 'node:timers/promises';

export interface TokenBucketOptions {
  /** Tokens per second; <= 0, NaN or Infinity means unlimited. */
  readonly qps: number;
  /** Bucket size (at least 1 when limited). */
  readonly burst: number;
  /** Clock in ms (default Date.now; vitest fake timers mock it). */
  readonly now?: () => number;
}

export class TokenBucket {
  readonly #qps: number;
  readonly #burst: number;
  readonly #now: () => number;
  #tokens: number;
  #last: number;

  constructor(opts: TokenBucketOptions) {
    this.#qps = Number.isFinite(opts.qps) && opts.qps > 0 ? opts.qps : Infinity;
    this.#burst = Math.max(1, Math.floor(opts.burst) || 1);
    this.#now = opts.now ?? Date.now;
    this.#tokens = this.#burst;
    this.#last = this.#now();
  }

  get unlimited(): boolean {
    return this.#qps === Infinity;
  }

  /** Tokens available now (negative when waiters have reserved future tokens). */
  available(): number {
    this.#refill();
    return this.#tokens;
  }

  /** Takes a token if one is available now. */
  tryAcquire(): boolean {
    if (this.unlimited) return true;
    this.#refill();
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  /**
   * Waits for a token. Rejects with the signal's reason if it aborts first;
   * the reserved token is then given back.
   */
  async acquire(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (this.unlimited) return;
    this.#refill();
    this.#tokens -= 1;
    if (this.#tokens >= 0) return;
    const waitMs = Math.ceil((-this.#tokens / this.#qps) * 1000);
    try {
      await sleep(waitMs, undefined, { signal });
    } catch (e) {
      this.#tokens += 1;
      if (signal?.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('aborted');
      throw e;
    }
  }

  #refill(): void {
    const now = this.#now();
    const elapsed = Math.max(0, now - this.#last);
    this.#last = now;
    this.#tokens = Math.min(this.#burst, this.#tokens + (elapsed / 1000) * this.#qps);
  }
}
