// Command-line flags and environment of `local-volume-provisioner`.
// The Go provisioner's flags (--listen-address, --metrics-path, --discovery-period,
// --config-sync-period) and env (MY_NODE_NAME, MY_NAMESPACE, JOB_CONTAINER_IMAGE,
// KUBECONFIG) keep their names and defaults. Go's flag package accepts "-flag" as
// well as "--flag", so both spellings work here too.
import { parseArgs } from 'node:util';
import { DEFAULT_CONFIG_DIR } from './config/types.ts';
import { parseDuration } from './util/duration.ts';

export interface Options {
  listenAddress: string;
  metricsPath: string;
  discoveryPeriodMs: number;
  configSyncPeriodMs: number;
  configDir: string;
  stateDir: string;
  kubeApiQps: number;
  kubeApiBurst: number;
  hotReload: boolean;
  configWatch: boolean;
  cleanTimeoutMs: number;
  maxConcurrentCleans: number;
  logLevel: string;
  dryRun: boolean;
  nodeName: string;
  namespace: string;
  jobImage: string;
  kubeconfig: string;
  podName: string;
  help: boolean;
  version: boolean;
}

/** Our client defaults; the Go provisioner uses client-go's defaults of 5 QPS / burst 10. */
export const DEFAULT_QPS = 20;
export const DEFAULT_BURST = 40;

export const HELP = `Usage: local-volume-provisioner [flags]

Discovers local volumes (mount points and block devices) under the discovery
directories of each storage class in its ConfigMap, creates a PersistentVolume
for each, cleans and deletes Released ones, and reloads the ConfigMap in place.

Flags (Go-style "-flag" works as well as "--flag"):
  --listen-address ADDR        address for /metrics, /ready and /healthz (default ":8080")
  --metrics-path PATH          path of the metrics endpoint (default "/metrics")
  --discovery-period DUR       time between discovery and cleanup passes (default 10s)
  --config-sync-period DUR     how often the config directory is checked (default 5s)
  --config-dir DIR             the mounted ConfigMap (default "${DEFAULT_CONFIG_DIR}")
  --state-dir DIR              small runtime state: the running block cleaners, so a restarted
                               daemon can stop those of one that was killed (default
                               "/run/local-volume-provisioner")
  --kube-api-qps N             API client rate limit, requests per second (default ${DEFAULT_QPS})
  --kube-api-burst N           API client burst (default ${DEFAULT_BURST})
  --hot-reload=BOOL            apply config changes in place (default true); when false a
                               change is only logged and needs a pod restart
  --config-watch=BOOL          watch the config directory for an early signal (default true);
                               the --config-sync-period poll is the authority either way
  --clean-timeout DUR          kill an in-process block cleaner after this long (default 1h)
  --max-concurrent-cleans N    in-process cleanups running at once (default 4)
  --log-level LEVEL            trace, debug, info, warn, error (default info, env LOG_LEVEL)
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

Signals: SIGHUP checks the config directory at once; SIGTERM/SIGINT stop gracefully.
`;

export function goStyle(argv: readonly string[]): string[] {
  // "-flag" / "-flag=value" -> "--flag..." (but keep "-h" and negative numbers).
  return argv.map((a) => (/^-[a-zA-Z][a-zA-Z-]+(=.*)?$/.test(a) ? `-${a}` : a));
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
  if (ms <= 0) throw new Error(`invalid value ${JSON.stringify(v)} for --${name}: want a positive duration`);
  return ms;
}

/** Parses argv (without node and script) and env; throws an Error with a one-line message on bad input. */
export function parseOptions(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): Options {
  const { values } = parseArgs({
    args: goStyle(argv),
    strict: true,
    allowPositionals: false,
    options: {
      'listen-address': { type: 'string', default: ':8080' },
      'metrics-path': { type: 'string', default: '/metrics' },
      'discovery-period': { type: 'string', default: '10s' },
      'config-sync-period': { type: 'string', default: '5s' },
      'config-dir': { type: 'string', default: DEFAULT_CONFIG_DIR },
      'state-dir': { type: 'string', default: '/run/local-volume-provisioner' },
      'kube-api-qps': { type: 'string', default: String(DEFAULT_QPS) },
      'kube-api-burst': { type: 'string', default: String(DEFAULT_BURST) },
      'hot-reload': { type: 'string', default: 'true' },
      'config-watch': { type: 'string', default: 'true' },
      'clean-timeout': { type: 'string', default: '1h' },
      'max-concurrent-cleans': { type: 'string', default: '4' },
      'log-level': { type: 'string', default: env['LOG_LEVEL'] ?? 'info' },
      'dry-run': { type: 'boolean', default: false },
      'node-name': { type: 'string', default: env['MY_NODE_NAME'] ?? '' },
      help: { type: 'boolean', short: 'h', default: false },
      version: { type: 'boolean', default: false },
    },
  });
  const metricsPath = values['metrics-path'];
  if (!metricsPath.startsWith('/')) throw new Error(`invalid value ${JSON.stringify(metricsPath)} for --metrics-path: must start with "/"`);
  return {
    listenAddress: values['listen-address'],
    metricsPath,
    discoveryPeriodMs: parseDur('discovery-period', values['discovery-period']),
    configSyncPeriodMs: parseDur('config-sync-period', values['config-sync-period']),
    configDir: values['config-dir'],
    stateDir: values['state-dir'],
    kubeApiQps: parsePositiveInt('kube-api-qps', values['kube-api-qps']),
    kubeApiBurst: parsePositiveInt('kube-api-burst', values['kube-api-burst']),
    hotReload: parseBool('hot-reload', values['hot-reload']),
    configWatch: parseBool('config-watch', values['config-watch']),
    cleanTimeoutMs: parseDur('clean-timeout', values['clean-timeout']),
    maxConcurrentCleans: parsePositiveInt('max-concurrent-cleans', values['max-concurrent-cleans']),
    logLevel: values['log-level'],
    dryRun: values['dry-run'],
    nodeName: values['node-name'],
    namespace: env['MY_NAMESPACE'] || 'default',
    jobImage: env['JOB_CONTAINER_IMAGE'] ?? '',
    kubeconfig: env['KUBECONFIG'] ?? '',
    podName: env['MY_POD_NAME'] ?? '',
    help: values.help,
    version: values.version,
  };
}
