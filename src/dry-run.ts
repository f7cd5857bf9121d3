// --dry-run: prints, as YAML, the PVs this node would get from a config dir,
// writing nothing to any cluster. It runs the real Discoverer against a
// KubePort that records creates instead of sending them. When a cluster is
// reachable (KUBECONFIG or in-cluster), the Node, StorageClasses and this
// node's existing PVs are read from it (read-only); otherwise it works offline
// and says which fields it had to assume.
import type { V1Node, V1PersistentVolume, V1StorageClass } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { PVCache, pvOnThisNode } from './volume/pv-cache.ts';
import { loadConfig } from './config/load.ts';
import { formatConfigError } from './controller/supervisor.ts';
import { Discoverer } from './discovery/discoverer.ts';
import { createHealthChecker } from './health/check.ts';
import { checkPVs, describeConditions, type CheckedPV } from './health/monitor.ts';
import type { HealthChecker } from './health/types.ts';
import { DEFAULT_VOLUME_HEALTH } from './config/types.ts';
import { DeviceLinker } from './devices/linker.ts';
import { DeviceLinkStore } from './devices/link-store.ts';
import { pvNodeLabels } from './volume/pv-node-label.ts';
import { provisionerName } from './volume/naming.ts';
import { LABEL_HOSTNAME } from './volume/pv-spec.ts';
import type { Options } from './flags.ts';
import { createKubeClient, loadKubeConfig } from './kube/client.ts';
import type { EventRecorder, ObjectRef } from './kube/events.ts';
import type { Informer, InformerHandlers } from './kube/informer.ts';
import { objectKey } from './kube/informer.ts';
import { KubeError, type KubePort } from './kube/port.ts';
import { Metrics } from './metrics/metrics.ts';
import { silentLogger, type Logger } from './util/log.ts';
import type { GenerationEnv } from './volume/env.ts';

/** A read-only, already-synced informer over a fixed list. */
export function staticInformer<T extends { metadata?: { name?: string; namespace?: string } }>(items: readonly T[]): Informer<T> {
  const map = new Map(items.map((o) => [objectKey(o), o]));
  return {
    get: (k) => map.get(k),
    list: () => [...map.values()],
    start: () => undefined,
    stop: () => Promise.resolve(),
    hasSynced: () => true,
    waitForSync: () => Promise.resolve(),
    on: (h: InformerHandlers<T>) => {
      for (const o of map.values()) h.add?.(o);
      return () => undefined;
    },
  };
}

/** A KubePort that refuses every write except PV creates, which it records. */
function recordingPort(created: V1PersistentVolume[]): KubePort {
  const refuse = (): Promise<never> => Promise.reject(new KubeError(0, 'DryRun', 'dry run: no writes'));
  return {
    list: refuse,
    watch: refuse,
    getNode: refuse,
    replaceNode: refuse,
    createPersistentVolume: (pv) => {
      created.push(pv);
      return Promise.resolve({ ...pv, metadata: { ...pv.metadata, uid: `dry-run-${created.length}` } });
    },
    getPersistentVolume: refuse,
    deletePersistentVolume: refuse,
    getPersistentVolumeClaim: refuse,
    deletePersistentVolumeClaim: refuse,
    createJob: refuse,
    deleteJob: refuse,
    createEvent: refuse,
    patchEvent: refuse,
    patchPersistentVolume: refuse,
  };
}

const UNKNOWN_UID = 'UNKNOWN-NODE-UID';

interface ClusterView {
  node: V1Node;
  storageClasses: V1StorageClass[];
  pvs: V1PersistentVolume[];
  assumptions: string[];
}

async function readCluster(opts: Options, classNames: string[], logger: Logger): Promise<ClusterView> {
  const offline = (why: string): ClusterView => ({
    node: {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: opts.nodeName, uid: UNKNOWN_UID, labels: { [LABEL_HOSTNAME]: opts.nodeName } },
    },
    storageClasses: classNames.map((name) => ({ apiVersion: 'storage.k8s.io/v1', kind: 'StorageClass', metadata: { name }, provisioner: 'kubernetes.io/no-provisioner', reclaimPolicy: 'Delete' })),
    pvs: [],
    assumptions: [
      `offline (${why}): nothing was read from a cluster`,
      `node labels unknown: ${LABEL_HOSTNAME} assumed to be ${JSON.stringify(opts.nodeName)}; nodeLabelsForPV labels are missing`,
      `node UID unknown: ${UNKNOWN_UID} stands for it in ownerReferences[].uid and, without useNodeNameOnly, in the provisioned-by annotation`,
      'StorageClasses unknown: reclaim policy assumed Delete, mount options assumed none',
      'existing PVs unknown: volumes that already have a PV are listed again',
    ],
  });
  if (!opts.kubeconfig && !opts.kubeEnv.KUBERNETES_SERVICE_HOST) return offline('no KUBECONFIG and not in a cluster');
  try {
    const kube = createKubeClient(loadKubeConfig(opts.kubeEnv), { qps: opts.kubeApiQps, burst: opts.kubeApiBurst });
    const timeout = <T>(p: Promise<T>): Promise<T> =>
      Promise.race([p, new Promise<T>((_, rej) => setTimeout(() => rej(new Error('timed out after 10s')), 10_000).unref())]);
    const node = await timeout(kube.getNode(opts.nodeName));
    const scs = await timeout(kube.list('storageclasses', {}));
    const pvs = await timeout(kube.list('persistentvolumes', {}));
    const nodeId = { name: opts.nodeName, uid: node.metadata?.uid ?? '' };
    return { node, storageClasses: scs.items, pvs: pvs.items.filter((pv) => pvOnThisNode(pv, nodeId)), assumptions: [] };
  } catch (err) {
    logger.warn({ err }, 'dry run: could not read the cluster; working offline');
    return offline(`cluster not readable: ${(err as Error).message}`);
  }
}

/** The `# health:` lines of --dry-run: a count, then one line per PV with an abnormal condition. */
export function healthLines(checked: readonly CheckedPV[]): string[] {
  const abnormal = checked.filter((c) => c.health.conditions.size > 0);
  const lines = [`# volume health: ${abnormal.length} of ${checked.length} checked PV(s) of this node abnormal`];
  for (const { pv, health } of abnormal) {
    const claim = pv.status?.phase === 'Bound' && pv.spec?.claimRef ? ` ${pv.spec.claimRef.namespace ?? ''}/${pv.spec.claimRef.name ?? ''}` : '';
    lines.push(`# health: ${pv.metadata?.name ?? ''} (${pv.status?.phase ?? ''}${claim}): ${describeConditions(health.conditions)}`);
  }
  return lines;
}

export async function runDryRun(
  opts: Options,
  logger: Logger,
  out: (s: string) => void = (s) => process.stdout.write(s),
  checker: HealthChecker = createHealthChecker(),
): Promise<number> {
  if (!opts.nodeName) {
    process.stderr.write('local-volume-provisioner: --dry-run needs a node name (--node-name or MY_NODE_NAME)\n');
    return 2;
  }
  let loaded;
  try {
    loaded = await loadConfig(opts.configDir, { maxFileBytes: opts.maxConfigFileBytes });
  } catch (err) {
    process.stderr.write(`local-volume-provisioner: ${(err as Error).message}\n`);
    return 1;
  }
  for (const w of loaded.result.warnings ?? []) process.stderr.write(`local-volume-provisioner: configuration warning: ${formatConfigError(w)}\n`);
  if (!loaded.result.ok) {
    process.stderr.write(`local-volume-provisioner: invalid configuration in ${opts.configDir}:\n`);
    for (const e of loaded.result.errors) {
      process.stderr.write(`  ${e.path}${e.file ? ` (${e.file}${e.line ? `:${e.line}` : ''})` : ''}: ${e.message}\n`);
    }
    return 1;
  }
  const config = loaded.result.config;
  const view = await readCluster(opts, Object.keys(config.storageClassMap), logger);
  const created: V1PersistentVolume[] = [];
  const problems: string[] = [];
  const recorder: EventRecorder = { event: (_ref: ObjectRef, type, reason, message) => problems.push(`${type} ${reason}: ${message}`) };
  const name = provisionerName({ name: opts.nodeName, uid: view.node.metadata?.uid ?? '' }, config.useNodeNameOnly);
  const env: GenerationEnv = {
    config,
    lookupClass: (className) => config.storageClassMap[className],
    node: view.node,
    nodeId: { name: opts.nodeName, uid: view.node.metadata?.uid ?? '' },
    provisionerName: name,
    namespace: opts.namespace,
    jobImage: '',
    kube: recordingPort(created),
    recorder,
    metrics: new Metrics({ defaultMetrics: false }),
    // The discoverer believes it creates PVs: its info lines ("Created PV ...") would be false here.
    logger: logger.child({}, { level: logger.levelVal >= logger.levels.values['warn']! ? logger.level : 'warn' }),
    now: Date.now,
  };
  const pvCache = new PVCache({ ...env, logger: silentLogger }, { informer: staticInformer(view.pvs) });
  const discoverer = new Discoverer(env, {
    pvCache,
    storageClasses: staticInformer(view.storageClasses),
    cleanupTracker: { inProgress: () => false, removeStatus: () => undefined },
    extraLabels: pvNodeLabels(opts.pvNodeLabel, opts.nodeName),
  });
  // deviceSelector classes: what the linker would do with every block device (it links nothing here).
  const devices = await new DeviceLinker(env, { pvs: pvCache, store: DeviceLinkStore.inMemory(opts.nodeName), dryRun: true }).sync();
  const result = await discoverer.discover();
  pvCache.close();
  const health = config.volumeHealth ?? DEFAULT_VOLUME_HEALTH;
  const healthReport = health.enabled
    ? healthLines(await checkPVs(checker, view.pvs, env.lookupClass, health))
    : ['# volume health: not checked (volumeHealth.enabled is false)'];

  const header = [
    `# local-volume-provisioner --dry-run: node ${opts.nodeName}, config ${opts.configDir} (hash ${loaded.result.hash.slice(0, 12)})`,
    `# ${created.length} PersistentVolume(s) would be created; nothing was written to any cluster.`,
    ...view.assumptions.map((a) => `# assumed: ${a}`),
    ...[...result.errors, ...result.warnings].map((p) => `# skipped: ${p}`),
    ...healthReport,
    ...devices.flatMap((c) => [
      `# raw disks for storage class ${c.className || '(all)'} (deviceSelector): ${c.lines.length} block device(s) seen`,
      ...c.lines.map((l) => `#   ${l.device}: ${l.action === 'link' ? 'would link' : l.action === 'unlink' ? 'would unlink' : l.action}: ${l.detail}`),
    ]),
  ];
  out(`${header.join('\n')}\n`);
  for (const pv of created) out(`---\n${stringify({ apiVersion: 'v1', kind: 'PersistentVolume', ...pv })}`);
  return 0;
}
