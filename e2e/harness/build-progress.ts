// Progress of the control-plane `go build`: packages compiled out of the
// packages that need compiling, elapsed time and an estimate of what is left.
// The total comes from `go list -deps -f '{{if .Stale}}...'` (packages not in the
// Go build cache, the main package included); the count from the package paths
// `go build -v` prints as it compiles them.
// On a terminal one line is rewritten in place (\r); otherwise a line is logged
// every 30 s, so CI logs show the build is alive without a flood of lines.
/** `go list` template printing the import path of each package that has to be compiled. */
export const STALE_TEMPLATE = '{{if .Stale}}{{.ImportPath}}{{end}}';

/** True for a line of `go build -v` output that names a package (not an error, not a "# pkg" header). */
export function isPackageLine(line: string): boolean {
  return /^[A-Za-z0-9_][A-Za-z0-9_.~+\-/]*$/.test(line);
}

/** Number of packages in `go list` output (one import path a line). */
export function countPackages(listOutput: string): number {
  return listOutput.split('\n').filter((l) => isPackageLine(l.trim())).length;
}

/** "45s", "4m12s", "1h02m". */
export function formatElapsed(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

export class BuildProgress {
  readonly #start: number;
  #total: number | undefined;
  #done = 0;
  readonly #seen = new Set<string>();

  constructor(start: number, total?: number) {
    this.#start = start;
    this.#total = total;
  }

  get done(): number {
    return this.#done;
  }

  set total(n: number | undefined) {
    this.#total = n;
  }

  /** Feeds one output line; true when it counted a newly compiled package. */
  line(line: string): boolean {
    const l = line.trim();
    if (!isPackageLine(l) || this.#seen.has(l)) return false;
    this.#seen.add(l);
    this.#done++;
    return true;
  }

  /** "control plane: 523/1890 packages compiled (27%), 4m12s elapsed, about 11 min left". */
  format(now: number): string {
    const elapsed = now - this.#start;
    const t = this.#total;
    if (t === undefined || t === 0) return `control plane: ${this.#done} packages compiled, ${formatElapsed(elapsed)} elapsed`;
    const done = Math.min(this.#done, t);
    const pct = Math.floor((done / t) * 100);
    let left = '';
    // An estimate needs a few packages behind it; the link at the end is not counted.
    if (done >= Math.min(20, t) && done < t) left = `, about ${Math.ceil(((elapsed / done) * (t - done)) / 60_000)} min left`;
    else if (done >= t) left = ', linking';
    return `control plane: ${done}/${t} packages compiled (${pct}%), ${formatElapsed(elapsed)} elapsed${left}`;
  }
}

/** What a sink shows: one line for the current moment (BuildProgress, image.ts's StepProgress). */
export interface Progress {
  format(now: number): string;
}

export interface ProgressSink {
  /** Called on every counted package (or step), and when the total becomes known. */
  update(p: Progress): void;
  /** Called once at the end (success or failure). */
  end(): void;
}

/**
 * On a terminal: one line, rewritten on each package (at most every 200 ms) and
 * every second (the elapsed time moves during long compiles and the link).
 * Otherwise: `log` every `everyMs` (default 30 s).
 */
export function progressSink(opts: {
  tty: boolean;
  write: (s: string) => void;
  log: (msg: string) => void;
  now?: () => number;
  everyMs?: number;
}): ProgressSink {
  const now = opts.now ?? (() => performance.now());
  let last: Progress | undefined;
  let shownAt = -Infinity;
  const show = (force: boolean): void => {
    const t = now();
    if (!last || (!force && t - shownAt < 200)) return;
    shownAt = t;
    if (opts.tty) opts.write(`\r${last.format(t)}\x1b[K`);
    else opts.log(last.format(t));
  };
  const timer = setInterval(() => show(true), opts.tty ? 1000 : (opts.everyMs ?? 30_000));
  timer.unref();
  return {
    update: (p) => {
      last = p;
      if (opts.tty) show(false);
    },
    end: () => {
      clearInterval(timer);
      if (opts.tty && shownAt > -Infinity) opts.write('\n');
    },
  };
}
