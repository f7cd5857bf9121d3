// The Go provisioner's logging flags (klog), so that a DaemonSet written for it
// starts after an image swap instead of exiting 2 on an unknown flag.
// `-v` maps to a log level (0-1 info, 2-3 debug, 4+ trace) unless --log-level or
// LOG_LEVEL says otherwise; the other klog flags are accepted and ignored (our
// logs always go to stderr), and main warns once naming them.
// Go's flag package rules apply: "-name" or "--name"; "=value" or, for a flag
// that is not boolean, the next argument; the last occurrence wins.

/** klog's boolean flags: "-name" or "-name=<bool>", never a separate value. */
const BOOL_FLAGS = new Set(['logtostderr', 'alsologtostderr', 'add_dir_header', 'skip_headers', 'skip_log_headers', 'one_output']);
/** klog's flags that take a value ("-name=value" or "-name value"). */
const VALUE_FLAGS = new Set(['v', 'vmodule', 'log_dir', 'log_file', 'log_file_max_size', 'stderrthreshold', 'log_backtrace_at']);

export interface KlogFlags {
  /** argv without the klog flags (and their values). */
  readonly rest: string[];
  /** The last -v given, if any. */
  readonly verbosity: number | undefined;
  /** The other klog flags given (as "-name", in order, each once): accepted, no effect. */
  readonly ignored: string[];
}

const GO_BOOL = /^(1|0|t|f|true|false)$/i;

/** Takes the klog flags out of argv; throws a one-line Error for a bad value. */
export function extractKlogFlags(argv: readonly string[]): KlogFlags {
  const rest: string[] = [];
  const ignored: string[] = [];
  let verbosity: number | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      rest.push(...argv.slice(i));
      break;
    }
    const m = /^--?([a-z_]+)(?:=(.*))?$/s.exec(arg);
    const name = m?.[1];
    if (name === undefined || (!BOOL_FLAGS.has(name) && !VALUE_FLAGS.has(name))) {
      rest.push(arg);
      continue;
    }
    let value = m?.[2];
    if (BOOL_FLAGS.has(name)) {
      if (value !== undefined && !GO_BOOL.test(value)) throw new Error(`invalid value ${JSON.stringify(value)} for -${name}: want true or false`);
    } else if (value === undefined) {
      value = argv[++i];
      if (value === undefined) throw new Error(`flag needs an argument: -${name}`);
    }
    if (name === 'v') {
      if (!/^\d+$/.test(value!)) throw new Error(`invalid value ${JSON.stringify(value)} for -v: want a verbosity level, a whole number >= 0`);
      verbosity = Number(value);
    } else if (!ignored.includes(`-${name}`)) {
      ignored.push(`-${name}`);
    }
  }
  return { rest, verbosity, ignored };
}

/** klog verbosity -> our level: 0-1 info, 2-3 debug, 4 and more trace. */
export function klogLevel(v: number): 'info' | 'debug' | 'trace' {
  if (v <= 1) return 'info';
  if (v <= 3) return 'debug';
  return 'trace';
}
