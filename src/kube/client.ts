// KubePort on @kubernetes/client-node 2.0.1: typed API calls for single
// requests, the client's `Watch` for watch streams. Every request passes the
// QPS/burst rate limiter and is counted in kube_requests_total{verb,resource,code};
// every failure becomes a KubeError (code 0 for network errors).
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import {
  ApiException,
  BatchV1Api,
  CoreV1Api,
  KubeConfig,
  PatchStrategy,
  StorageV1Api,
  Watch,
  setHeaderOptions,
  type CoreV1Event,
  type HttpInfo,
  type V1DeleteOptions,
  type V1Job,
  type V1ListMeta,
  type V1Node,
  type V1PersistentVolume,
  type V1PersistentVolumeClaim,
} from '@kubernetes/client-node';
import type { KubeMetrics } from '../metrics/metrics.ts';
import { deserializeModel, reuseDispatchers, setWatchInactivityTimeout } from './client-node-patches.ts';
import { TokenBucket } from './ratelimit.ts';
import {
  KubeError,
  type DeleteOptions,
  type KubePort,
  type KubeStatus,
  type ListPageOptions,
  type ListResult,
  type ResourceKind,
  type ResourceTypes,
  type WatchEvent,
  type WatchEventType,
  type WatchOptions,
} from './port.ts';
import { errnoCode, errorMessage } from '../util/errors.ts';

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/**
 * The Go provisioner's SetupClient: the kubeconfig named by KUBECONFIG when set,
 * in-cluster configuration otherwise. Never falls back to localhost:8080; throws
 * an Error that says exactly what is missing.
 */
export function loadKubeConfig(
  env: Readonly<Record<string, string | undefined>>,
  opts: { serviceAccountDir?: string } = {},
): KubeConfig {
  const kc = new KubeConfig();
  const file = env['KUBECONFIG'];
  if (file) {
    try {
      fs.accessSync(file, fs.constants.R_OK);
    } catch (e) {
      throw new Error(`KUBECONFIG=${file}: cannot read the kubeconfig file (${errnoCode(e) ?? errorMessage(e)})`, { cause: e });
    }
    try {
      kc.loadFromFile(file);
    } catch (e) {
      throw new Error(`KUBECONFIG=${file}: invalid kubeconfig: ${errorMessage(e)}`, { cause: e });
    }
    const ctx = kc.getCurrentContext();
    if (!ctx) throw new Error(`KUBECONFIG=${file}: the kubeconfig has no current-context`);
    if (!kc.getContextObject(ctx)) throw new Error(`KUBECONFIG=${file}: current-context "${ctx}" is not defined in the file`);
    const cluster = kc.getCurrentCluster();
    if (!cluster?.server) throw new Error(`KUBECONFIG=${file}: context "${ctx}" names no cluster with a server URL`);
    return kc;
  }

  const dir = opts.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  const host = env['KUBERNETES_SERVICE_HOST'];
  const port = env['KUBERNETES_SERVICE_PORT'];
  const tokenFile = path.join(dir, 'token');
  const missing: string[] = [];
  if (!host) missing.push('environment variable KUBERNETES_SERVICE_HOST');
  if (!port) missing.push('environment variable KUBERNETES_SERVICE_PORT');
  try {
    fs.accessSync(tokenFile, fs.constants.R_OK);
  } catch (e) {
    missing.push(`service account token file ${tokenFile} (${errnoCode(e) ?? errorMessage(e)})`);
  }
  if (missing.length > 0 || !host || !port) {
    throw new Error(
      `KUBECONFIG is not set and this is not a usable in-cluster environment: missing ${missing.join(', ')}. ` +
        'Set KUBECONFIG to a kubeconfig file, or run the provisioner in a pod with a service account.',
    );
  }
  const caFile = path.join(dir, 'ca.crt');
  const nsFile = path.join(dir, 'namespace');
  const server = `https://${net.isIPv6(host) ? `[${host}]` : host}:${port}`;
  kc.loadFromOptions({
    clusters: [{ name: 'inCluster', server, skipTLSVerify: false, ...(fs.existsSync(caFile) ? { caFile } : {}) }],
    users: [{ name: 'inClusterUser', authProvider: { name: 'tokenFile', config: { tokenFile } } }],
    contexts: [
      {
        name: 'inClusterContext',
        cluster: 'inCluster',
        user: 'inClusterUser',
        ...(fs.existsSync(nsFile) ? { namespace: fs.readFileSync(nsFile, 'utf8').trim() } : {}),
      },
    ],
    currentContext: 'inClusterContext',
  });
  return kc;
}

export interface KubeClientOptions {
  readonly qps: number;
  readonly burst: number;
  readonly metrics?: Pick<KubeMetrics, 'kubeRequests'> | undefined;
  readonly userAgent?: string | undefined;
  /**
   * client-node aborts a watch that receives no bytes for this long (its default is 30 s,
   * shorter than a quiet watch with bookmarks). Default: 5 minutes plus one minute of slack
   * over the watch's timeoutSeconds.
   */
  readonly watchInactivityTimeoutMs?: number | undefined;
}

export interface KubeClientStats {
  /** Requests sent (watches count once, when opened). */
  readonly requests: number;
  /** Requests by "verb resource", e.g. "list persistentvolumes". */
  readonly byRequest: Readonly<Record<string, number>>;
}

export interface KubeClient extends KubePort {
  stats(): KubeClientStats;
}

/** Model names of the watched kinds, to give watch objects the same shape (Dates etc.) as list results. */
const MODEL: Record<ResourceKind, string> = {
  persistentvolumes: 'V1PersistentVolume',
  persistentvolumeclaims: 'V1PersistentVolumeClaim',
  storageclasses: 'V1StorageClass',
  jobs: 'V1Job',
  nodes: 'V1Node',
  pods: 'V1Pod',
  events: 'CoreV1Event',
};

const NAMESPACED: Record<ResourceKind, boolean> = {
  persistentvolumes: false,
  persistentvolumeclaims: true,
  storageclasses: false,
  jobs: true,
  nodes: false,
  pods: true,
  events: true,
};

function resourcePath(kind: ResourceKind, namespace: string | undefined): string {
  const prefix = kind === 'jobs' ? '/apis/batch/v1' : kind === 'storageclasses' ? '/apis/storage.k8s.io/v1' : '/api/v1';
  const ns = namespace && NAMESPACED[kind] ? `/namespaces/${encodeURIComponent(namespace)}` : '';
  return `${prefix}${ns}/${kind}`;
}

const REASONS: Record<number, string> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'NotFound',
  405: 'MethodNotAllowed',
  409: 'Conflict',
  410: 'Expired',
  415: 'UnsupportedMediaType',
  422: 'Invalid',
  429: 'TooManyRequests',
  500: 'InternalError',
  503: 'ServiceUnavailable',
  504: 'Timeout',
};

/** Maps anything a client-node call can throw to a KubeError. */
export function toKubeError(e: unknown): KubeError {
  if (e instanceof KubeError) return e;
  if (e instanceof ApiException) {
    const code = (e as ApiException<unknown>).code;
    const status = parseStatus((e as ApiException<unknown>).body);
    return new KubeError(code, status?.reason ?? REASONS[code] ?? 'Unknown', status?.message ?? `HTTP ${code}`);
  }
  if (e instanceof Error) {
    const statusCode = (e as { statusCode?: unknown }).statusCode;
    if (typeof statusCode === 'number') {
      return new KubeError(statusCode, REASONS[statusCode] ?? 'Unknown', `HTTP ${statusCode} ${e.message}`);
    }
    if (e.name === 'TimeoutError') return new KubeError(0, 'Timeout', `request timed out: ${e.message}`);
    const cause = e.cause instanceof Error ? `: ${e.cause.message}` : '';
    return new KubeError(0, 'NetworkError', `${e.message}${cause}`);
  }
  return new KubeError(0, 'Unknown', String(e));
}

function parseStatus(body: unknown): KubeStatus | undefined {
  let b: unknown = body;
  if (typeof body === 'string') {
    try {
      b = JSON.parse(body);
    } catch {
      const text = body.trim();
      return text ? { message: text.slice(0, 500) } : undefined;
    }
  }
  if (b && typeof b === 'object') {
    const s = b as Record<string, unknown>;
    const out: { reason?: string; message?: string; code?: number } = {};
    if (typeof s['reason'] === 'string' && s['reason']) out.reason = s['reason'];
    if (typeof s['message'] === 'string' && s['message']) out.message = s['message'];
    return out;
  }
  return undefined;
}

function deleteBody(opts: DeleteOptions | undefined): V1DeleteOptions | undefined {
  if (!opts?.uid && !opts?.resourceVersion && !opts?.propagationPolicy) return undefined;
  const preconditions = {
    ...(opts.uid ? { uid: opts.uid } : {}),
    ...(opts.resourceVersion ? { resourceVersion: opts.resourceVersion } : {}),
  };
  return {
    ...(opts.uid || opts.resourceVersion ? { preconditions } : {}),
    ...(opts.propagationPolicy ? { propagationPolicy: opts.propagationPolicy } : {}),
  };
}

/** A delete request: the object's name (and namespace), with a body only when options ask for one. */
function deleteRequest<T extends { name: string; namespace?: string }>(target: T, opts: DeleteOptions | undefined): T & { body?: V1DeleteOptions } {
  const body = deleteBody(opts);
  return body ? { ...target, body } : target;
}

interface AnyList {
  items: unknown[];
  metadata?: V1ListMeta;
}

export function createKubeClient(kc: KubeConfig, opts: KubeClientOptions): KubeClient {
  reuseDispatchers(kc);
  const core = kc.makeApiClient(CoreV1Api);
  const batch = kc.makeApiClient(BatchV1Api);
  const storage = kc.makeApiClient(StorageV1Api);
  const limiter = new TokenBucket({ qps: opts.qps, burst: opts.burst });
  const ua = opts.userAgent;
  const callOpts = () => (ua ? setHeaderOptions('User-Agent', ua) : undefined);
  let requests = 0;
  const byRequest: Record<string, number> = {};

  const count = (verb: string, resource: string, code: number): void => {
    requests++;
    const k = `${verb} ${resource}`;
    byRequest[k] = (byRequest[k] ?? 0) + 1;
    opts.metrics?.kubeRequests.inc({ verb, resource, code: String(code) });
  };

  async function call<T>(verb: string, resource: string, fn: () => Promise<HttpInfo<T>>): Promise<T> {
    await limiter.acquire();
    try {
      const res = await fn();
      count(verb, resource, res.httpStatusCode);
      return res.data;
    } catch (e) {
      const ke = toKubeError(e);
      count(verb, resource, ke.code);
      throw ke;
    }
  }

  function listCall(kind: ResourceKind, o: ListPageOptions): Promise<HttpInfo<AnyList>> {
    const q = { labelSelector: o.labelSelector, fieldSelector: o.fieldSelector, limit: o.limit, _continue: o.continue };
    const ns = o.namespace;
    const c = callOpts();
    switch (kind) {
      case 'persistentvolumes':
        return core.listPersistentVolumeWithHttpInfo(q, c);
      case 'persistentvolumeclaims':
        return ns
          ? core.listNamespacedPersistentVolumeClaimWithHttpInfo({ ...q, namespace: ns }, c)
          : core.listPersistentVolumeClaimForAllNamespacesWithHttpInfo(q, c);
      case 'nodes':
        return core.listNodeWithHttpInfo(q, c);
      case 'storageclasses':
        return storage.listStorageClassWithHttpInfo(q, c);
      case 'jobs':
        return ns ? batch.listNamespacedJobWithHttpInfo({ ...q, namespace: ns }, c) : batch.listJobForAllNamespacesWithHttpInfo(q, c);
      case 'pods':
        return ns ? core.listNamespacedPodWithHttpInfo({ ...q, namespace: ns }, c) : core.listPodForAllNamespacesWithHttpInfo(q, c);
      case 'events':
        return ns ? core.listNamespacedEventWithHttpInfo({ ...q, namespace: ns }, c) : core.listEventForAllNamespacesWithHttpInfo(q, c);
    }
  }

  const client: KubeClient = {
    stats: () => ({ requests, byRequest: { ...byRequest } }),

    async list<K extends ResourceKind>(kind: K, o: ListPageOptions): Promise<ListResult<ResourceTypes[K]>> {
      const res = await call('list', kind, () => listCall(kind, o));
      const next = res.metadata?._continue;
      return { items: res.items as Array<ResourceTypes[K]>, resourceVersion: res.metadata?.resourceVersion ?? '', ...(next ? { continue: next } : {}) };
    },

    async watch<K extends ResourceKind>(
      kind: K,
      o: WatchOptions,
      onEvent: (ev: WatchEvent<ResourceTypes[K]>) => void,
      signal: AbortSignal,
    ): Promise<void> {
      try {
        await limiter.acquire(signal);
      } catch {
        return; // aborted while waiting for a token
      }
      if (signal.aborted) return;
      const watcher = new Watch(kc);
      // Without raising it a quiet watch is cut every 30 s.
      setWatchInactivityTimeout(watcher, opts.watchInactivityTimeoutMs ?? ((o.timeoutSeconds ?? 300) + 60) * 1000);
      const query: Record<string, string | number | boolean | undefined> = {
        resourceVersion: o.resourceVersion,
        timeoutSeconds: o.timeoutSeconds,
        allowWatchBookmarks: o.allowWatchBookmarks,
        labelSelector: o.labelSelector,
        fieldSelector: o.fieldSelector,
      };
      const model = MODEL[kind];
      await new Promise<void>((resolve, reject) => {
        let settled = false;
        let controller: AbortController | undefined;
        let counted = false;
        const countOnce = (code: number): void => {
          if (!counted) {
            counted = true;
            count('watch', kind, code);
          }
        };
        const settle = (err?: unknown): void => {
          if (settled) return;
          settled = true;
          signal.removeEventListener('abort', onAbort);
          if (err && !signal.aborted) reject(toKubeError(err));
          else resolve();
        };
        const onAbort = (): void => {
          controller?.abort();
          settle();
        };
        signal.addEventListener('abort', onAbort, { once: true });
        watcher
          .watch(
            resourcePath(kind, o.namespace),
            query,
            (type: string, obj: unknown) => {
              if (settled) return;
              const object =
                type === 'ERROR' || type === 'BOOKMARK' ? obj : (deserializeModel(obj, model) as ResourceTypes[K]);
              onEvent({ type: type as WatchEventType, object: object as ResourceTypes[K] | KubeStatus });
            },
            (err: unknown) => {
              countOnce(err ? toKubeError(err).code : 200);
              settle(err);
            },
          )
          .then(
            (c) => {
              controller = c;
              countOnce(200);
              if (settled) c.abort();
            },
            (e: unknown) => {
              countOnce(toKubeError(e).code);
              settle(e);
            },
          );
      });
    },

    getNode: (name: string): Promise<V1Node> => call('get', 'nodes', () => core.readNodeWithHttpInfo({ name }, callOpts())),

    replaceNode: (node: V1Node): Promise<V1Node> =>
      call('update', 'nodes', () => core.replaceNodeWithHttpInfo({ name: node.metadata?.name ?? '', body: node }, callOpts())),

    createPersistentVolume: (pv: V1PersistentVolume): Promise<V1PersistentVolume> =>
      call('create', 'persistentvolumes', () => core.createPersistentVolumeWithHttpInfo({ body: pv }, callOpts())),

    getPersistentVolume: (name: string): Promise<V1PersistentVolume> =>
      call('get', 'persistentvolumes', () => core.readPersistentVolumeWithHttpInfo({ name }, callOpts())),

    async deletePersistentVolume(name: string, d?: DeleteOptions): Promise<void> {
      await call('delete', 'persistentvolumes', () => core.deletePersistentVolumeWithHttpInfo(deleteRequest({ name }, d), callOpts()));
    },

    patchPersistentVolume: (name: string, patch: Partial<V1PersistentVolume>): Promise<V1PersistentVolume> =>
      call('patch', 'persistentvolumes', () =>
        core.patchPersistentVolumeWithHttpInfo({ name, body: patch }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch, callOpts())),
      ),

    getPersistentVolumeClaim: (namespace: string, name: string): Promise<V1PersistentVolumeClaim> =>
      call('get', 'persistentvolumeclaims', () => core.readNamespacedPersistentVolumeClaimWithHttpInfo({ namespace, name }, callOpts())),

    async deletePersistentVolumeClaim(namespace: string, name: string, d?: DeleteOptions): Promise<void> {
      await call('delete', 'persistentvolumeclaims', () =>
        core.deleteNamespacedPersistentVolumeClaimWithHttpInfo(deleteRequest({ name, namespace }, d), callOpts()),
      );
    },

    createJob: (namespace: string, job: V1Job): Promise<V1Job> =>
      call('create', 'jobs', () => batch.createNamespacedJobWithHttpInfo({ namespace, body: job }, callOpts())),

    async deleteJob(namespace: string, name: string, d?: DeleteOptions): Promise<void> {
      await call('delete', 'jobs', () => batch.deleteNamespacedJobWithHttpInfo(deleteRequest({ name, namespace }, d), callOpts()));
    },

    createEvent: (namespace: string, ev: CoreV1Event): Promise<CoreV1Event> =>
      call('create', 'events', () => core.createNamespacedEventWithHttpInfo({ namespace, body: ev }, callOpts())),

    patchEvent: (namespace: string, name: string, patch: Partial<CoreV1Event>): Promise<CoreV1Event> =>
      call('patch', 'events', () =>
        core.patchNamespacedEventWithHttpInfo(
          { namespace, name, body: patch },
          // Without an explicit content type the client sends json-patch+json and the server answers 415.
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch, callOpts()),
        ),
      ),
  };
  return client;
}


