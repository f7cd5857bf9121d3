// Go time.ParseDuration compatible parser ("300ms", "1h30m", "5m0s", "-1.5h").
const UNITS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  '\u00b5s': 1e-3, // µs (micro sign)
  '\u03bcs': 1e-3, // μs (Greek mu)
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/** Go's longest Duration, 2^63 - 1 ns, in ms: ParseDuration rejects anything longer. */
const GO_MAX_DURATION_MS = Number(2n ** 63n - 1n) / 1e6;

/**
 * Longest delay Node.js timers take: 2^31 - 1 ms (596h31m23.647s, about 24.8
 * days). A longer one prints a TimeoutOverflowWarning and fires after 1 ms,
 * so a period that long spins the CPU and a timeout that long fires at once.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Why `ms` cannot be the delay of a timer (period, timeout), or undefined when
 * it can: it must be finite, at least 1 ms (or exactly 0 when `allowZero`)
 * and at most MAX_TIMER_MS.
 */
export function timerDurationProblem(ms: number, opts: { allowZero?: boolean } = {}): string | undefined {
  const range = `${opts.allowZero === true ? '0 or ' : ''}from 1ms to ${formatDuration(MAX_TIMER_MS)}`;
  if (Number.isNaN(ms)) return `not a duration; want ${range}`;
  if (ms < 0) return `negative; want ${range}`;
  if (ms === 0 && opts.allowZero === true) return undefined;
  if (ms < 1) return `${ms === 0 ? 'zero' : 'shorter than 1ms'}; want ${range}`;
  if (ms > MAX_TIMER_MS) return `longer than ${formatDuration(MAX_TIMER_MS)}, the longest timer Node.js supports; want ${range}`;
  return undefined;
}

/** Parses a Go duration string into milliseconds; throws an Error naming the input when invalid. */
export function parseDuration(input: string): number {
  let s = input;
  let sign = 1;
  if (s.startsWith('-') || s.startsWith('+')) {
    if (s.startsWith('-')) sign = -1;
    s = s.slice(1);
  }
  if (s === '0') return 0;
  if (s === '') throw new Error(`invalid duration ${JSON.stringify(input)}`);
  let total = 0;
  // µ and μ escaped: one character outside Latin-1 in a file makes V8 keep the whole bundle chunk's source
  // two bytes per character (+0.75 MiB of heap; docs/performance.md §6, "The bundle's source in the heap").
  const re = /^(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)/;
  while (s.length > 0) {
    const m = re.exec(s);
    if (!m) {
      throw new Error(`invalid duration ${JSON.stringify(input)}: expected a number and a unit (ns, us, ms, s, m, h)`);
    }
    total += Number(m[1]) * (UNITS[m[2] as string] ?? 0);
    s = s.slice(m[0].length);
  }
  // Go's int64 nanoseconds: its ParseDuration fails the same way. Also catches Infinity from absurd digit strings.
  if (!(total <= GO_MAX_DURATION_MS)) throw new Error(`invalid duration ${JSON.stringify(input)}: out of range`);
  return sign * total;
}

/** Formats milliseconds the way Go's Duration.String does for whole values ("5m0s", "1h30m0s", "10s", "1.5s"). */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  const neg = ms < 0;
  let rest = Math.abs(ms);
  if (rest < 1000) return `${neg ? '-' : ''}${rest}ms`;
  const h = Math.floor(rest / 3_600_000);
  rest -= h * 3_600_000;
  const m = Math.floor(rest / 60_000);
  rest -= m * 60_000;
  const s = rest / 1000;
  let out = '';
  if (h > 0) out += `${h}h`;
  if (h > 0 || m > 0) out += `${m}m`;
  out += `${s}s`;
  return (neg ? '-' : '') + out;
}
