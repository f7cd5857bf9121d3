// Command-line flags of `local-volume-node-cleanup`. The Go controller's flags
// (cmd/node-cleanup) keep their names and defaults; the client rate limit, log
// level and --version are ours. Like the provisioner, "-flag" works as well as "--flag".
import { parseArgs } from 'node:util';
import { DEFAULT_BURST, DEFAULT_QPS, goStyle, kubeEnvOf, logFormatOf, parseDur, rejectPositionals, parseLogLevel, parsePositiveInt, type KubeEnv } from '../flags.ts';
import { isDnsSubdomain } from '../config/names.ts';
import type { LogFormat } from '../util/log.ts';

export interface NodeCleanupOptions {
  /** StorageClasses whose local PVs (and the PVCs bound to them) may be deleted; empty: nothing is. */
  storageClassNames: string[];
  /** How long every Node a PV is pinned to must stay gone before its PVC and the PV are deleted. */
  deletionDelayMs: number;
  /** Period of the full pass over the cached PVs. */
  scanIntervalMs: number;
  resyncMs: number;
  workers: number;
  /** Empty: no HTTP server (as in the Go controller). */
  listenAddress: string;
  metricsPath: string;
  kubeconfig: string;
  /** The variables the kubeconfig is loaded from (KUBECONFIG, KUBERNETES_SERVICE_HOST/PORT): this binary's only env reader is this file. */
  kubeEnv: KubeEnv;
  kubeApiEndpoint: string;
  kubeApiQps: number;
  kubeApiBurst: number;
  logLevel: string;
  logFormat: LogFormat;
  help: boolean;
  version: boolean;
}

export const HELP = `Usage: local-volume-node-cleanup [flags]

Deletes what deleted Nodes leave behind: once every Node a local PersistentVolume
is pinned to (by a kubernetes.io/hostname node-affinity term) has been gone for
--pvc-deletion-delay, the PVC bound to that PV is deleted, then the PV itself
(when Available, or Released with reclaim policy Delete). Only PVs of the
StorageClasses in --storageclass-names are considered. A PV whose node affinity
is not pinned to hostnames in every term is never touched. No disk data is
touched either: only API objects are deleted.

Flags (Go-style "-flag" works as well as "--flag"):
  --storageclass-names NAMES         comma-separated StorageClass names to act on; repeatable
                                     (default none: nothing is ever cleaned up)
  --pvc-deletion-delay DUR           how long the Nodes must stay gone before their PVCs and
                                     PVs are deleted (default 60s)
  --stale-pv-discovery-interval DUR  how often every PV is checked again (default 10s)
  --resync DUR                       accepted for compatibility (default 10m); has no effect,
                                     as in the Go controller (see docs/node-cleanup.md)
  --worker-threads N                 PVs handled at once (default 10)
  --listen-address ADDR              address of the metrics server, /ready and /healthz
                                     (default ":8080"; empty: no server)
  --metrics-path PATH                path of the metrics endpoint (default "/metrics")
  --kubeconfig FILE                  kubeconfig file (default env KUBECONFIG; without either,
                                     the in-cluster configuration is used)
  --kube-api-endpoint URL            API server URL, overriding the kubeconfig's (only with a
                                     kubeconfig file)
  --kube-api-qps N                   API client rate limit, requests per second (default ${DEFAULT_QPS})
  --kube-api-burst N                 API client burst (default ${DEFAULT_BURST})
  --log-level LEVEL                  trace, debug, info, warn, error (default info, env LOG_LEVEL)
  --log-format FORMAT                text (default: klog's format, as Kubernetes components write
                                     it), json, or auto (the same as text); env LOG_FORMAT.
                                     Logs go to stderr.
  --logging-format FORMAT            text or json: the Kubernetes components' flag for the same choice
  -h, --help                         show this help
  --version                          print the version

Environment:
  KUBECONFIG  kubeconfig file (when --kubeconfig is not given)
  LOG_LEVEL   default for --log-level
  LOG_FORMAT  default for --log-format

Signals: SIGTERM/SIGINT stop gracefully.
`;

/** Names from repeated, comma-separated values; blanks dropped, each checked as an object name. */
function classNames(values: readonly string[]): string[] {
  const names = new Set<string>();
  for (const v of values) {
    for (const raw of v.split(',')) {
      const name = raw.trim();
      if (name === '') continue;
      if (!isDnsSubdomain(name)) {
        throw new Error(`invalid value ${JSON.stringify(name)} in --storageclass-names: not a valid StorageClass name`);
      }
      names.add(name);
    }
  }
  return [...names];
}

function endpoint(v: string): string {
  if (v === '') return v;
  let url: URL;
  try {
    url = new URL(v);
  } catch {
    throw new Error(`invalid value ${JSON.stringify(v)} for --kube-api-endpoint: not a URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new Error(`invalid value ${JSON.stringify(v)} for --kube-api-endpoint: want an http(s) URL`);
  }
  return v;
}

/** Parses argv (without node and script) and env; throws an Error with a one-line message on bad input. */
export function parseNodeCleanupOptions(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): NodeCleanupOptions {
  const args = goStyle(argv);
  const { values, positionals } = parseArgs({
    args,
    strict: true,
    allowPositionals: true,
    options: {
      'storageclass-names': { type: 'string', multiple: true, default: [] },
      'pvc-deletion-delay': { type: 'string', default: '60s' },
      'stale-pv-discovery-interval': { type: 'string', default: '10s' },
      resync: { type: 'string', default: '10m' },
      'worker-threads': { type: 'string', default: '10' },
      'listen-address': { type: 'string', default: ':8080' },
      'metrics-path': { type: 'string', default: '/metrics' },
      kubeconfig: { type: 'string', default: '' },
      'kube-api-endpoint': { type: 'string', default: '' },
      'kube-api-qps': { type: 'string', default: String(DEFAULT_QPS) },
      'kube-api-burst': { type: 'string', default: String(DEFAULT_BURST) },
      'log-level': { type: 'string', default: env['LOG_LEVEL'] || 'info' },
      'log-format': { type: 'string', default: env['LOG_FORMAT'] || 'text' },
      'logging-format': { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
      version: { type: 'boolean', default: false },
    },
  });
  rejectPositionals(positionals, args, new Set());
  const metricsPath = values['metrics-path'];
  if (!metricsPath.startsWith('/')) throw new Error(`invalid value ${JSON.stringify(metricsPath)} for --metrics-path: must start with "/"`);
  const workers = parsePositiveInt('worker-threads', values['worker-threads']);
  if (!Number.isInteger(workers)) throw new Error(`invalid value ${JSON.stringify(values['worker-threads'])} for --worker-threads: want a whole number`);
  return {
    storageClassNames: classNames(values['storageclass-names']),
    deletionDelayMs: parseDur('pvc-deletion-delay', values['pvc-deletion-delay']),
    scanIntervalMs: parseDur('stale-pv-discovery-interval', values['stale-pv-discovery-interval']),
    resyncMs: parseDur('resync', values.resync),
    workers,
    listenAddress: values['listen-address'],
    metricsPath,
    kubeconfig: values.kubeconfig || (env['KUBECONFIG'] ?? ''),
    kubeEnv: kubeEnvOf(env),
    kubeApiEndpoint: endpoint(values['kube-api-endpoint']),
    kubeApiQps: parsePositiveInt('kube-api-qps', values['kube-api-qps']),
    kubeApiBurst: parsePositiveInt('kube-api-burst', values['kube-api-burst']),
    logLevel: parseLogLevel(values['log-level']),
    logFormat: logFormatOf(values),
    help: values.help,
    version: values.version,
  };
}
