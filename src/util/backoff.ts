// Exponential backoff with jitter, used wherever something is retried: watch
// reconnects, cleanup retries, missing-volume warnings, Event re-sends.
export interface BackoffOptions {
  /** First delay in ms. */
  readonly initialMs: number;
  /** Upper bound in ms. */
  readonly maxMs: number;
  /** Multiplier per failure (default 2). */
  readonly factor?: number;
  /** Fraction of random spread added on top, 0..1 (default 0.2). */
  readonly jitter?: number;
}

/** Delay before retry number `attempt` (0-based): min(max, initial * factor^attempt) plus jitter. */
export function backoffDelay(opts: BackoffOptions, attempt: number, random: () => number = Math.random): number {
  const base = Math.min(opts.maxMs, opts.initialMs * (opts.factor ?? 2) ** Math.max(0, attempt));
  return Math.round(base * (1 + (opts.jitter ?? 0.2) * random()));
}

/** Per-key failure counter with exponential backoff (client-go's ItemExponentialFailureRateLimiter). */
export class KeyedBackoff<K = string> {
  readonly #opts: BackoffOptions;
  readonly #failures = new Map<K, { attempts: number; notBefore: number }>();
  readonly #now: () => number;
  readonly #random: () => number;

  constructor(opts: BackoffOptions, now: () => number = Date.now, random: () => number = Math.random) {
    this.#opts = opts;
    this.#now = now;
    this.#random = random;
  }

  /** Records a failure; returns the delay in ms before the key may be tried again. */
  failure(key: K): number {
    const prev = this.#failures.get(key);
    const attempts = prev ? prev.attempts : 0;
    const delay = backoffDelay(this.#opts, attempts, this.#random);
    this.#failures.set(key, { attempts: attempts + 1, notBefore: this.#now() + delay });
    return delay;
  }

  /** Failures recorded for the key since it was last forgotten. */
  failures(key: K): number {
    return this.#failures.get(key)?.attempts ?? 0;
  }

  /** True when the key has no pending backoff. */
  ready(key: K): boolean {
    const f = this.#failures.get(key);
    return !f || this.#now() >= f.notBefore;
  }

  /** Milliseconds until the key is ready (0 when ready). */
  remaining(key: K): number {
    const f = this.#failures.get(key);
    return f ? Math.max(0, f.notBefore - this.#now()) : 0;
  }

  /** Forgets the key (after a success). */
  forget(key: K): void {
    this.#failures.delete(key);
  }

  /** Drops keys not in `live` (keeps the map bounded). */
  retain(live: (key: K) => boolean): void {
    for (const k of this.#failures.keys()) if (!live(k)) this.#failures.delete(k);
  }
}
