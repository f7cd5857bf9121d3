// Command-line flags and environment of `local-volume-provisioner`.
// The Go provisioner's flags (--listen-address, --metrics-path, --discovery-period,
// --config-sync-period) and env (MY_NODE_NAME, MY_NAMESPACE, JOB_CONTAINER_IMAGE,
// KUBECONFIG) keep their names and defaults. Go's flag package accepts "-flag" as
// well as "--flag", so both spellings work here too.
import { parseArgs } from 'node:util';
import { DEFAULT_MAX_CONFIG_FILE_BYTES } from './config/load.ts';
import { DEFAULT_CONFIG_DIR } from './config/types.ts';
import { extractKlogFlags, klogLevel } from './klog-flags.ts';
import { LOG_FORMATS, type LogFormat } from './util/log.ts';
import { parseDuration, timerDurationProblem } from './util/duration.ts';

export interface Options {
  listenAddress: string;
  metricsPath: string;
  discoveryPeriodMs: number;
  configSyncPeriodMs: number;
  configDir: string;
  /** Largest config file read, in bytes. */
  maxConfigFileBytes: number;
  stateDir: string;
  kubeApiQps: number;
  kubeApiBurst: number;
  hotReload: boolean;
  configWatch: boolean;
  cleanTimeoutMs: number;
  maxConcurrentCleans: number;
  /** --pv-node-label: label this node's PVs with the node name and list/watch PVs by that label. */
  pvNodeLabel: boolean;
  logLevel: string;
  logFormat: LogFormat;
  /** klog flags of the Go provisioner that were given and have no effect (main warns once). */
  ignoredKlogFlags: string[];
  dryRun: boolean;
  nodeName: string;
  namespace: string;
  /** MY_NAMESPACE was set (main warns when it was not). */
  namespaceSet: boolean;
  jobImage: string;
  kubeconfig: string;
  podName: string;
  /** The variables the kubeconfig is loaded from: KUBECONFIG, KUBERNETES_SERVICE_HOST/PORT. */
  kubeEnv: KubeEnv;
  help: boolean;
  version: boolean;
}

/** The environment variables loadKubeConfig reads. */
export type KubeEnv = Readonly<Record<'KUBECONFIG' | 'KUBERNETES_SERVICE_HOST' | 'KUBERNETES_SERVICE_PORT', string | undefined>>;

/** Our client defaults; the Go provisioner uses client-go's defaults of 5 QPS / burst 10. */
export const DEFAULT_QPS = 20;
export const DEFAULT_BURST = 40;

/** pino's levels, and "silent". */
export const LOG_LEVELS: readonly string[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

export const HELP = `Usage: local-volume-provisioner [flags]

Discovers local volumes (mount points and block devices) under the discovery
directories of each storage class in its ConfigMap, creates a PersistentVolume
for each, cleans and deletes Released ones, and reloads the ConfigMap in place.

Flags (Go-style "-flag" works as well as "--flag"; a boolean flag alone means true,
its value goes after "=": --hot-reload=false):
  --listen-address ADDR        address for /metrics, /ready and /healthz (default ":8080")
  --metrics-path PATH          path of the metrics endpoint (default "/metrics")
  --discovery-period DUR       time between discovery and cleanup passes (default 10s)
  --config-sync-period DUR     how often the config directory is checked (default 5s)
  --config-dir DIR             the mounted ConfigMap (default "${DEFAULT_CONFIG_DIR}")
  --max-config-file-size SIZE  largest config file (ConfigMap key) read, in bytes, or with a
                               Ki or Mi suffix (default 256Ki); a bigger one makes the config invalid
  --state-dir DIR              small state: the running block cleaners, so a restarted
                               daemon can stop those of one that was killed, and the last
                               settings of each storage class (classes.json), so Released PVs
                               of a class removed from the config are still cleaned after a
                               restart; put it on the host (hostPath) in a Pod (default
                               "/run/local-volume-provisioner")
  --kube-api-qps N             API client rate limit, requests per second (default ${DEFAULT_QPS})
  --kube-api-burst N           API client burst (default ${DEFAULT_BURST})
  --hot-reload=BOOL            apply config changes in place (default true); when false a
                               change is only logged and needs a pod restart
  --config-watch=BOOL          watch the config directory for an early signal (default true);
                               the --config-sync-period poll is the authority either way
  --clean-timeout DUR          kill an in-process block cleaner after this long; a cleanup
                               Job's activeDeadlineSeconds (default 1h)
  --max-concurrent-cleans N    in-process cleanups running at once (default 4)
  --pv-node-label=BOOL         label this node's PVs local-static-provisioner/node=<node name>
                               (new ones, and existing ones: needs RBAC patch on PVs) and list and
                               watch only those plus unlabelled PVs, instead of every PV of the
                               cluster (default false: PVs exactly as the Go provisioner makes them)
  --log-level LEVEL            trace, debug, info, warn, error, fatal or silent (default info,
                               env LOG_LEVEL)
  --log-format FORMAT          text (default: klog's format, as the Go provisioner and every
                               Kubernetes component write it), json (one object per line), or
                               auto (the same as text); env LOG_FORMAT. Logs go to stderr.
  --logging-format FORMAT      text or json: the Kubernetes components' flag for the same choice
  -v N                         the Go provisioner's klog verbosity: 0-1 info, 2-3 debug, 4+ trace
                               (--log-level and LOG_LEVEL win); its other klog flags
                               (-logtostderr, -stderrthreshold, ...) are accepted and ignored
  --dry-run                    print, as YAML, the PVs this node would get, then exit;
                               writes nothing to any cluster (reads Node and StorageClasses
                               when a cluster is reachable, otherwise says what it assumed)
  --node-name NAME             node name (default env MY_NODE_NAME)
  -h, --help                   show this help
  --version                    print the version

Environment:
  MY_NODE_NAME         name of this node (required)
  MY_NAMESPACE         namespace for cleanup Jobs and Events (default "default")
  MY_POD_NAME          this pod's name, for ConfigInvalid/ConfigReloaded Events (optional)
  JOB_CONTAINER_IMAGE  image of cleanup Jobs (needed with useJobForCleaning)
  KUBECONFIG           kubeconfig file; without it the in-cluster config is used
  LOG_LEVEL            default for --log-level
  LOG_FORMAT           default for --log-format

Signals: SIGHUP checks the config directory at once; SIGTERM/SIGINT stop gracefully.
`;

export function goStyle(argv: readonly string[]): string[] {
  // "-flag" / "-flag=value" -> "--flag..." (but keep "-h" and negative numbers).
  return argv.map((a) => (/^-[a-zA-Z][a-zA-Z-]+(=.*)?$/.test(a) ? `-${a}` : a));
}

/**
 * Go's flag package rules for boolean flags: a bare "--name" means true, a value goes with "=" ("--name=false").
 * Rewrites each bare boolean flag of `names` to "--name=true" (args already in "--" spelling, see goStyle).
 */
export function bareBoolsTrue(args: readonly string[], names: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--') {
      out.push(...args.slice(i));
      break;
    }
    out.push(a.startsWith('--') && names.has(a.slice(2)) ? `${a}=true` : a);
  }
  return out;
}

/**
 * These commands take flags only. As with Go's flag package, "--hot-reload false" is the flag (true) followed by
 * the argument "false", which no command of ours takes: an error that says how to write it.
 */
export function rejectPositionals(positionals: readonly string[], args: readonly string[], boolNames: ReadonlySet<string>): void {
  const first = positionals[0];
  if (first === undefined) return;
  const at = args.indexOf(first);
  const before = at > 0 ? args[at - 1]! : '';
  const m = /^--([a-z-]+)=true$/.exec(before);
  if (m !== null && boolNames.has(m[1]!) && /^(1|0|t|f|true|false|yes|no|on|off)$/i.test(first)) {
    throw new Error(`unexpected argument ${JSON.stringify(first)} after --${m[1]}: a boolean flag takes its value after "=" (--${m[1]}=${first}); alone it means true`);
  }
  throw new Error(`unexpected argument ${JSON.stringify(first)}: this command takes flags only`);
}

export function parseBool(name: string, v: string): boolean {
  if (/^(1|t|true|yes|on)$/i.test(v)) return true;
  if (/^(0|f|false|no|off)$/i.test(v)) return false;
  throw new Error(`invalid value ${JSON.stringify(v)} for --${name}: want true or false`);
}

export function parsePositiveInt(name: string, v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`invalid value ${JSON.stringify(v)} for --${name}: want a positive number`);
  return n;
}

export function parseDur(name: string, v: string): number {
  let ms: number;
  try {
    ms = parseDuration(v);
  } catch (e) {
    throw new Error(`invalid value for --${name}: ${(e as Error).message}`, { cause: e });
  }
  const problem = timerDurationProblem(ms);
  if (problem !== undefined) throw new Error(`invalid value ${JSON.stringify(v)} for --${name}: ${problem}`);
  // Whole milliseconds: execa's timeout (--clean-timeout) throws on a fraction, for every clean.
  return Math.ceil(ms);
}

function parseSize(name: string, v: string): number {
  const m = /^([0-9]+)(Ki|Mi)?$/.exec(v);
  const n = m === null ? 0 : Number(m[1]) * (m[2] === 'Mi' ? 2 ** 20 : m[2] === 'Ki' ? 2 ** 10 : 1);
  if (!Number.isSafeInteger(n) || n <= 0) {
    throw new Error(`invalid value ${JSON.stringify(v)} for --${name}: want a positive number of bytes, optionally with a Ki or Mi suffix`);
  }
  return n;
}

export function parseLogLevel(v: string): string {
  if (!LOG_LEVELS.includes(v)) throw new Error(`invalid value ${JSON.stringify(v)} for --log-level (or LOG_LEVEL): want one of ${LOG_LEVELS.join(', ')}`);
  return v;
}

export function parseLogFormat(v: string): LogFormat {
  const f = LOG_FORMATS.find((x) => x === v);
  if (f === undefined) throw new Error(`invalid value ${JSON.stringify(v)} for --log-format: want ${LOG_FORMATS.join(', ')}`);
  return f;
}

/**
 * --log-format (ours, env LOG_FORMAT) or --logging-format (the Kubernetes components' flag: json or text).
 * Given both, they must agree.
 */
export function logFormatOf(values: { 'log-format': string; 'logging-format'?: string | undefined }): LogFormat {
  const ours = parseLogFormat(values['log-format']);
  const k8s = values['logging-format'];
  if (k8s === undefined) return ours;
  if (k8s !== 'json' && k8s !== 'text') throw new Error(`invalid value ${JSON.stringify(k8s)} for --logging-format: want json or text`);
  return k8s;
}

/** The level -v asks for, unless --log-level or LOG_LEVEL set one. */
function levelFromKlog(verbosity: number | undefined, args: readonly string[], env: NodeJS.ProcessEnv): string | undefined {
  if (verbosity === undefined || env['LOG_LEVEL']) return undefined;
  if (args.some((a) => a === '--log-level' || a.startsWith('--log-level='))) return undefined;
  return klogLevel(verbosity);
}

/** The variables the API client (and the log format's "auto") read, taken once from env. */
export function kubeEnvOf(env: NodeJS.ProcessEnv): KubeEnv {
  return {
    KUBECONFIG: env['KUBECONFIG'],
    KUBERNETES_SERVICE_HOST: env['KUBERNETES_SERVICE_HOST'],
    KUBERNETES_SERVICE_PORT: env['KUBERNETES_SERVICE_PORT'],
  };
}

/** Our boolean flags: "--name" alone is true, "--name=false" turns it off (Go's flag package rules). */
const BOOL_FLAGS: ReadonlySet<string> = new Set(['hot-reload', 'config-watch', 'pv-node-label', 'dry-run']);

/** Parses argv (without node and script) and env; throws an Error with a one-line message on bad input. */
export function parseOptions(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): Options {
  const klog = extractKlogFlags(argv);
  const args = bareBoolsTrue(goStyle(klog.rest), BOOL_FLAGS);
  const { values, positionals } = parseArgs({
    args,
    strict: true,
    allowPositionals: true,
    options: {
      'listen-address': { type: 'string', default: ':8080' },
      'metrics-path': { type: 'string', default: '/metrics' },
      'discovery-period': { type: 'string', default: '10s' },
      'config-sync-period': { type: 'string', default: '5s' },
      'config-dir': { type: 'string', default: DEFAULT_CONFIG_DIR },
      'max-config-file-size': { type: 'string', default: `${DEFAULT_MAX_CONFIG_FILE_BYTES / 1024}Ki` },
      'state-dir': { type: 'string', default: '/run/local-volume-provisioner' },
      'kube-api-qps': { type: 'string', default: String(DEFAULT_QPS) },
      'kube-api-burst': { type: 'string', default: String(DEFAULT_BURST) },
      'hot-reload': { type: 'string', default: 'true' },
      'config-watch': { type: 'string', default: 'true' },
      'clean-timeout': { type: 'string', default: '1h' },
      'max-concurrent-cleans': { type: 'string', default: '4' },
      'pv-node-label': { type: 'string', default: 'false' },
      'log-level': { type: 'string', default: env['LOG_LEVEL'] || 'info' },
      'log-format': { type: 'string', default: env['LOG_FORMAT'] || 'text' },
      'logging-format': { type: 'string' },
      'dry-run': { type: 'string', default: 'false' },
      'node-name': { type: 'string', default: env['MY_NODE_NAME'] ?? '' },
      help: { type: 'boolean', short: 'h', default: false },
      version: { type: 'boolean', default: false },
    },
  });
  rejectPositionals(positionals, args, BOOL_FLAGS);
  const metricsPath = values['metrics-path'];
  if (!metricsPath.startsWith('/')) throw new Error(`invalid value ${JSON.stringify(metricsPath)} for --metrics-path: must start with "/"`);
  return {
    listenAddress: values['listen-address'],
    metricsPath,
    discoveryPeriodMs: parseDur('discovery-period', values['discovery-period']),
    configSyncPeriodMs: parseDur('config-sync-period', values['config-sync-period']),
    configDir: values['config-dir'],
    maxConfigFileBytes: parseSize('max-config-file-size', values['max-config-file-size']),
    stateDir: values['state-dir'],
    kubeApiQps: parsePositiveInt('kube-api-qps', values['kube-api-qps']),
    kubeApiBurst: parsePositiveInt('kube-api-burst', values['kube-api-burst']),
    hotReload: parseBool('hot-reload', values['hot-reload']),
    configWatch: parseBool('config-watch', values['config-watch']),
    cleanTimeoutMs: parseDur('clean-timeout', values['clean-timeout']),
    maxConcurrentCleans: parsePositiveInt('max-concurrent-cleans', values['max-concurrent-cleans']),
    pvNodeLabel: parseBool('pv-node-label', values['pv-node-label']),
    logLevel: levelFromKlog(klog.verbosity, args, env) ?? parseLogLevel(values['log-level']),
    logFormat: logFormatOf(values),
    ignoredKlogFlags: klog.ignored,
    dryRun: parseBool('dry-run', values['dry-run']),
    nodeName: values['node-name'],
    namespace: env['MY_NAMESPACE'] || 'default',
    namespaceSet: Boolean(env['MY_NAMESPACE']),
    jobImage: env['JOB_CONTAINER_IMAGE'] ?? '',
    kubeconfig: env['KUBECONFIG'] ?? '',
    podName: env['MY_POD_NAME'] ?? '',
    kubeEnv: kubeEnvOf(env),
    help: values.help,
    version: values.version,
  };
}
