#!/usr/bin/env node
// local-volume-node-cleanup: the second entry point (a one-replica Deployment).
// Wires the HTTP server, the API client, the event recorder and the node-cleanup
// controller. Same image as the provisioner: node dist/node-cleanup/main.js.
import type { KubeConfig } from '@kubernetes/client-node';
import { createKubeClient, loadKubeConfig } from '../kube/client.ts';
import { createEventRecorder } from '../kube/recorder.ts';
import { startHttpServer } from '../server/http.ts';
import { Readiness } from '../util/readiness.ts';
import { parseCli, runCli, runDaemon, type StopFn } from '../util/daemon.ts';
import { formatDuration } from '../util/duration.ts';
import { createLogger, type Logger } from '../util/log.ts';
import { VERSION } from '../util/version.ts';
import { NodeCleanupController } from './controller.ts';
import type { KubeEnv } from '../flags.ts';
import { HELP, parseNodeCleanupOptions, type NodeCleanupOptions } from './flags.ts';
import { NodeCleanupMetrics } from './metrics.ts';

const NAME = 'local-volume-node-cleanup';

/** The kubeconfig (--kubeconfig, else KUBECONFIG, else in-cluster), with --kube-api-endpoint as the server URL when given. */
export function nodeCleanupKubeConfig(opts: Pick<NodeCleanupOptions, 'kubeconfig' | 'kubeApiEndpoint'>, logger: Logger, env: Partial<KubeEnv>): KubeConfig {
  const { KUBECONFIG: _ignored, ...rest } = env;
  const kc = loadKubeConfig(opts.kubeconfig ? { ...rest, KUBECONFIG: opts.kubeconfig } : rest);
  if (!opts.kubeApiEndpoint) return kc;
  if (!opts.kubeconfig) {
    logger.warn('--kube-api-endpoint is ignored without --kubeconfig (as in the Go controller): using the in-cluster configuration');
    return kc;
  }
  const current = kc.getCurrentCluster()?.name;
  kc.loadFromOptions({
    clusters: kc.clusters.map((c) => (c.name === current ? { ...c, server: opts.kubeApiEndpoint } : c)),
    users: kc.users,
    contexts: kc.contexts,
    currentContext: kc.currentContext,
  });
  return kc;
}

export async function run(opts: NodeCleanupOptions, logger: Logger): Promise<StopFn> {
  const metrics = new NodeCleanupMetrics();
  const kube = createKubeClient(nodeCleanupKubeConfig(opts, logger, opts.kubeEnv), {
    qps: opts.kubeApiQps,
    burst: opts.kubeApiBurst,
    metrics,
    userAgent: `${NAME}/${VERSION}`,
  });
  const readiness = new Readiness();
  readiness.set(false, 'the Node, PV and PVC caches have not synced yet');
  const http = opts.listenAddress
    ? await startHttpServer({ listenAddress: opts.listenAddress, metricsPath: opts.metricsPath, metrics, readiness, logger })
    : undefined;
  if (http) logger.info({ address: opts.listenAddress, port: http.port }, `Starting metrics server at ${opts.listenAddress}`);

  if (opts.storageClassNames.length === 0) {
    logger.warn('--storageclass-names is empty: no PersistentVolume or PersistentVolumeClaim will ever be cleaned up');
  }
  const recorder = createEventRecorder(kube, { component: 'cleanup-controller', logger });
  const controller = new NodeCleanupController({
    kube,
    storageClassNames: opts.storageClassNames,
    deletionDelayMs: opts.deletionDelayMs,
    scanIntervalMs: opts.scanIntervalMs,
    workers: opts.workers,
    recorder,
    metrics,
    logger,
  });
  logger.info(
    {
      storageClassNames: opts.storageClassNames,
      pvcDeletionDelay: formatDuration(opts.deletionDelayMs),
      stalePvDiscoveryInterval: formatDuration(opts.scanIntervalMs),
      workers: opts.workers,
    },
    'Starting to Run CleanupController',
  );
  controller.start();
  controller.waitForSync().then(
    () => {
      readiness.set(true);
      logger.info('caches synced');
    },
    () => undefined, // only when stopped first
  );
  return async () => {
    await controller.stop();
    await recorder.stop();
    await http?.close();
  };
}

async function main(argv: readonly string[]): Promise<number> {
  const opts = parseCli(NAME, argv, (a) => parseNodeCleanupOptions(a), HELP);
  if (typeof opts === 'number') return opts;
  const logger = createLogger({ level: opts.logLevel, format: opts.logFormat, name: NAME });
  return runDaemon(NAME, logger, () => run(opts, logger));
}

/** Runs the command line (dist/…/main.js, the Node.js version check, calls this once it has loaded the bundle). */
export function cli(): void {
  runCli(NAME, main);
}

if (import.meta.main) cli();
