// Go time.ParseDuration compatible parser ("300ms", "1h30m", "5m0s", "-1.5h").
const UNITS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  'µs': 1e-3,
  'μs': 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

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
  const re = /^(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)/;
  while (s.length > 0) {
    const m = re.exec(s);
    if (!m) {
      throw new Error(`invalid duration ${JSON.stringify(input)}: expected a number and a unit (ns, us, ms, s, m, h)`);
    }
    total += Number(m[1]) * (UNITS[m[2] as string] ?? 0);
    s = s.slice(m[0].length);
  }
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
