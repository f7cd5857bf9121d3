#!/usr/bin/env node
// local-volume-provisioner: the DaemonSet entry point. Wires the process-scope
// parts (HTTP, metrics, API client, informers, event recorder, process table),
// then config watcher -> supervisor -> controller generations.
import type { V1Node } from '@kubernetes/client-node';
import { createNodePVInformer, pvNodeLabels, PVNodeLabeler } from './volume/pv-node-label.ts';
import { CreatedPVs } from './volume/pv-cache.ts';
import { startController, type ProcessContext } from './controller/controller.ts';
import { readConfigDir } from './config/load.ts';
import { NodeTaintRemover } from './controller/node-taint.ts';
import { Supervisor } from './controller/supervisor.ts';
import { DEFAULT_RETRY_BACKOFF } from './deleter/deleter.ts';
import { DEFAULT_JOB_FAILURE_BACKOFF, JobPresence } from './deleter/jobcontroller.ts';
import { ClassMemory } from './deleter/class-memory.ts';
import { DeviceLinkStore } from './devices/link-store.ts';
import { CleanerRegistry } from './deleter/orphans.ts';
import { ProcTable } from './deleter/proctable.ts';
import { runDryRun } from './dry-run.ts';
import { HealthLedger } from './health/monitor.ts';
import { HELP, parseOptions, type Options } from './flags.ts';
import { createKubeClient, loadKubeConfig } from './kube/client.ts';
import type { ObjectRef } from './kube/events.ts';
import type { KubePort } from './kube/port.ts';
import { stripManagedFields } from './kube/informer.ts';
import { createInformer } from './kube/reflector.ts';
import { createEventRecorder } from './kube/recorder.ts';
import { Metrics } from './metrics/metrics.ts';
import { startHttpServer } from './server/http.ts';
import { Readiness } from './util/readiness.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { backoffDelay, KeyedBackoff } from './util/backoff.ts';
import { parseCli, runCli, runDaemon } from './util/daemon.ts';
import { createLogger, type Logger } from './util/log.ts';
import { VERSION } from './util/version.ts';
import { ConfigWatcher } from './watcher/config-watcher.ts';

/** Fetches this node, retrying with backoff until it succeeds or the signal aborts (a dead API server is waited out). */
async function getNodeWithRetry(kube: KubePort, name: string, logger: Logger, signal: AbortSignal): Promise<V1Node> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await kube.getNode(name);
    } catch (err) {
      const delay = backoffDelay({ initialMs: 1000, maxMs: 30_000 }, attempt);
      logger.warn({ err, node: name, retryInMs: delay }, 'could not get node information; retrying');
      await sleep(delay, undefined, { signal }).catch(() => undefined);
      if (signal.aborted) throw new Error('stopped while waiting for the node', { cause: err });
    }
  }
}

export async function run(opts: Options, logger: Logger): Promise<() => Promise<void>> {
  if (!opts.nodeName) throw new Error('MY_NODE_NAME environment variable not set (or pass --node-name)');
  if (!opts.namespaceSet) logger.warn('MY_NAMESPACE environment variable not set, will be set to default');
  if (!opts.jobImage) logger.warn('JOB_CONTAINER_IMAGE environment variable not set; cleanup Jobs (useJobForCleaning) cannot run');

  const stopping = new AbortController();
  const metrics = new Metrics();
  const readiness = new Readiness();
  const http = await startHttpServer({
    listenAddress: opts.listenAddress,
    metricsPath: opts.metricsPath,
    metrics,
    readiness,
    logger,
  });
  logger.info({ address: opts.listenAddress, port: http.port }, `Starting metrics server at ${opts.listenAddress}`);

  const kube = createKubeClient(loadKubeConfig(opts.kubeEnv), {
    qps: opts.kubeApiQps,
    burst: opts.kubeApiBurst,
    metrics,
    userAgent: `local-volume-provisioner/${VERSION}`,
  });
  const node = await getNodeWithRetry(kube, opts.nodeName, logger, stopping.signal);
  const nodeUid = node.metadata?.uid ?? '';
  const recorder = createEventRecorder(kube, { component: 'local-volume-provisioner', host: opts.nodeName, logger });
  const cleanerRegistry = CleanerRegistry.open(opts.stateDir, { logger });
  const reaped = cleanerRegistry?.reapOrphans() ?? 0;
  if (reaped > 0) logger.warn({ reaped }, 'stopped block cleaners left running by a previous daemon');
  const classMemory = ClassMemory.open(opts.stateDir, opts.nodeName, { logger });
  const deviceLinks = DeviceLinkStore.open(opts.stateDir, opts.nodeName, logger);
  const procTable = new ProcTable();
  metrics.registerProcTable(() => procTable.stats());

  // Process-scope caches: their filters do not depend on the config, so they survive reloads.
  // This node's PVs, plus stubs of other local PVs on this node (the deleter's path-in-use check);
  // with --pv-node-label only labelled-for-this-node and unlabelled PVs are listed and watched.
  const pvInformer = createNodePVInformer(kube, node, {
    nodeLabel: opts.pvNodeLabel,
    logger: logger.child({ informer: 'persistentvolumes' }),
    metrics,
  });
  const labeler = opts.pvNodeLabel ? new PVNodeLabeler(kube, node, pvInformer, logger.child({ component: 'pv-node-label' })) : undefined;
  const scInformer = createInformer(kube, 'storageclasses', {
    transform: stripManagedFields,
    logger: logger.child({ informer: 'storageclasses' }),
    metrics,
  });
  // Outlives the generations like the informer it follows (see ProcessContext.createdPVs).
  const createdPVs = new CreatedPVs(pvInformer);
  pvInformer.start();
  scInformer.start();
  metrics.registerCapacitySource(() => pvInformer.list());

  const nodeRef: ObjectRef = { kind: 'Node', apiVersion: 'v1', name: opts.nodeName, uid: nodeUid };
  const refs: ObjectRef[] = [nodeRef];
  if (opts.podName) refs.unshift({ kind: 'Pod', apiVersion: 'v1', name: opts.podName, namespace: opts.namespace });

  const pc: ProcessContext = {
    kube,
    node,
    namespace: opts.namespace,
    jobImage: opts.jobImage,
    pvInformer,
    createdPVs,
    scInformer,
    makeJobInformer: (labelSelector: string, onList: (err: unknown) => void) =>
      createInformer(kube, 'jobs', {
        namespace: opts.namespace,
        labelSelector,
        onList,
        transform: stripManagedFields,
        logger: logger.child({ informer: 'jobs' }),
        metrics,
      }),
    jobPresence: new JobPresence(),
    eventRefs: refs,
    procTable,
    recorder,
    metrics,
    logger,
    readiness,
    taintRemover: new NodeTaintRemover({ kube, nodeName: opts.nodeName, logger }),
    discoveryPeriodMs: opts.discoveryPeriodMs,
    cleanTimeoutMs: opts.cleanTimeoutMs,
    maxConcurrentCleans: opts.maxConcurrentCleans,
    extraPVLabels: pvNodeLabels(opts.pvNodeLabel, opts.nodeName),
    cleanRetryBackoff: new KeyedBackoff(DEFAULT_RETRY_BACKOFF),
    jobFailureBackoff: new KeyedBackoff(DEFAULT_JOB_FAILURE_BACKOFF),
    shutdown: stopping.signal,
    cleanerRegistry,
    classMemory,
    healthLedger: new HealthLedger(),
    deviceLinks,
  };
  const supervisor = new Supervisor({
    start: (config, ctx) => startController(pc, config, ctx),
    hotReload: opts.hotReload,
    metrics,
    recorder,
    refs,
    logger,
  });
  const watcher = new ConfigWatcher({
    dir: opts.configDir,
    read: (dir) => readConfigDir(dir, { maxFileBytes: opts.maxConfigFileBytes }),
    pollIntervalMs: opts.configSyncPeriodMs,
    watch: opts.configWatch,
    onResult: (res) => supervisor.handle(res),
    logger: logger.child({ component: 'config-watcher' }),
  });
  logger.info({ dir: opts.configDir }, 'Starting config watcher');
  await watcher.start(); // the first check is delivered before this resolves
  logger.info('Ready to run...');

  const onHup = (): void => {
    logger.info('SIGHUP: checking the config directory now');
    watcher.checkNow().catch((err: unknown) => logger.error({ err }, 'config check failed'));
  };
  process.on('SIGHUP', onHup);

  return async () => {
    stopping.abort();
    process.off('SIGHUP', onHup);
    await watcher.stop();
    await supervisor.stop();
    await labeler?.stop();
    await Promise.all([pvInformer.stop(), scInformer.stop()]);
    await recorder.stop();
    await http.close();
  };
}

async function main(argv: readonly string[]): Promise<number> {
  const opts = parseCli('local-volume-provisioner', argv, (a) => parseOptions(a), HELP);
  if (typeof opts === 'number') return opts;
  const logger = createLogger({ level: opts.logLevel, format: opts.logFormat });
  if (opts.ignoredKlogFlags.length > 0) {
    logger.warn(
      { flags: opts.ignoredKlogFlags },
      `ignoring the Go provisioner's klog flags ${opts.ignoredKlogFlags.join(', ')}: logs always go to stderr (-v sets the level when --log-level and LOG_LEVEL do not)`,
    );
  }
  if (opts.dryRun) return runDryRun(opts, logger);

  return runDaemon('local-volume-provisioner', logger, () => run(opts, logger));
}

/** Runs the command line (dist/…/main.js, the Node.js version check, calls this once it has loaded the bundle). */
export function cli(): void {
  runCli('local-volume-provisioner', main);
}

if (import.meta.main) cli();
