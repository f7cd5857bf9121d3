// KubePort over the lean request path of src/kube/transport.ts: JSON over
// keep-alive HTTPS, no generated API classes of @kubernetes/client-node loaded
// (it still loads the kubeconfig and authenticates, and lends its model types).
// Every request passes the QPS/burst rate limiter and is counted in
// kube_requests_total{verb,resource,code}; every failure becomes a KubeError
// (code 0 for network errors).
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
// config.js, not the package index: the index would load every generated API class.
import { KubeConfig } from '@kubernetes/client-node/dist/config.js';
import type {
  CoreV1Event,
  V1DeleteOptions,
  V1Job,
  V1Node,
  V1PersistentVolume,
  V1PersistentVolumeClaim,
} from '@kubernetes/client-node';
import type { KubeMetrics } from '../metrics/metrics.ts';
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
import { createTransport, HTTP_REASONS, networkError, reviveDates, type Query, type Response } from './transport.ts';
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
   * A watch that receives no bytes for this long is cut with a Timeout KubeError. Default: one
   * minute of slack over the watch's timeoutSeconds (5 minutes when unset).
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

const NAMESPACED: Record<ResourceKind, boolean> = {
  persistentvolumes: false,
  persistentvolumeclaims: true,
  storageclasses: false,
  jobs: true,
  nodes: false,
  pods: true,
  events: true,
};

function resourcePath(kind: ResourceKind, namespace: string | undefined, name?: string): string {
  const prefix = kind === 'jobs' ? '/apis/batch/v1' : kind === 'storageclasses' ? '/apis/storage.k8s.io/v1' : '/api/v1';
  const ns = namespace && NAMESPACED[kind] ? `/namespaces/${encodeURIComponent(namespace)}` : '';
  return `${prefix}${ns}/${kind}${name === undefined ? '' : `/${encodeURIComponent(name)}`}`;
}

const MERGE_PATCH = 'application/merge-patch+json';

/** Maps anything a request can throw to a KubeError. */
export function toKubeError(e: unknown): KubeError {
  if (e instanceof KubeError) return e;
  if (e instanceof Error) {
    const statusCode = (e as { statusCode?: unknown }).statusCode;
    if (typeof statusCode === 'number') {
      return new KubeError(statusCode, HTTP_REASONS[statusCode] ?? 'Unknown', `HTTP ${statusCode} ${e.message}`);
    }
    if (e.name === 'TimeoutError') return new KubeError(0, 'Timeout', `request timed out: ${e.message}`);
  }
  return networkError(e);
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

interface AnyList {
  items?: unknown[] | null;
  metadata?: { resourceVersion?: string; continue?: string };
}

export function createKubeClient(kc: KubeConfig, opts: KubeClientOptions): KubeClient {
  const transport = createTransport(kc, { userAgent: opts.userAgent });
  const limiter = new TokenBucket({ qps: opts.qps, burst: opts.burst });
  let requests = 0;
  const byRequest: Record<string, number> = {};

  const count = (verb: string, resource: string, code: number): void => {
    requests++;
    const k = `${verb} ${resource}`;
    byRequest[k] = (byRequest[k] ?? 0) + 1;
    opts.metrics?.kubeRequests.inc({ verb, resource, code: String(code) });
  };

  async function call<T>(verb: string, resource: string, fn: () => Promise<Response<T>>): Promise<T> {
    await limiter.acquire();
    try {
      const res = await fn();
      count(verb, resource, res.status);
      return res.body;
    } catch (e) {
      const ke = toKubeError(e);
      count(verb, resource, ke.code);
      throw ke;
    }
  }

  const get = <T>(kind: ResourceKind, namespace: string | undefined, name: string): Promise<T> =>
    call('get', kind, () => transport.request<T>('GET', resourcePath(kind, namespace, name)));
  const create = <T>(kind: ResourceKind, namespace: string | undefined, body: T): Promise<T> =>
    call('create', kind, () => transport.request<T>('POST', resourcePath(kind, namespace), undefined, body));
  const patch = <T>(kind: ResourceKind, namespace: string | undefined, name: string, body: unknown): Promise<T> =>
    call('patch', kind, () => transport.request<T>('PATCH', resourcePath(kind, namespace, name), undefined, body, MERGE_PATCH));
  const del = async (kind: ResourceKind, namespace: string | undefined, name: string, d: DeleteOptions | undefined): Promise<void> => {
    await call('delete', kind, () => transport.request<unknown>('DELETE', resourcePath(kind, namespace, name), undefined, deleteBody(d)));
  };

  const client: KubeClient = {
    stats: () => ({ requests, byRequest: { ...byRequest } }),

    async list<K extends ResourceKind>(kind: K, o: ListPageOptions): Promise<ListResult<ResourceTypes[K]>> {
      const q: Query = { labelSelector: o.labelSelector, fieldSelector: o.fieldSelector, limit: o.limit, continue: o.continue };
      const res = await call('list', kind, () => transport.request<AnyList>('GET', resourcePath(kind, o.namespace), q));
      const next = res.metadata?.continue;
      return {
        items: (res.items ?? []) as Array<ResourceTypes[K]>,
        resourceVersion: res.metadata?.resourceVersion ?? '',
        ...(next ? { continue: next } : {}),
      };
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
      const query: Query = {
        watch: true,
        resourceVersion: o.resourceVersion,
        timeoutSeconds: o.timeoutSeconds,
        allowWatchBookmarks: o.allowWatchBookmarks,
        labelSelector: o.labelSelector,
        fieldSelector: o.fieldSelector,
      };
      let counted = false;
      const countOnce = (code: number): void => {
        if (!counted) {
          counted = true;
          count('watch', kind, code);
        }
      };
      try {
        await transport.stream(
          resourcePath(kind, o.namespace),
          query,
          (line) => {
            const ev = line as { type?: string; object?: unknown };
            const type = ev.type as WatchEventType;
            // Objects get the same shape (Dates) as list results; ERROR (a Status) and BOOKMARK stay as they are.
            const object = type === 'ERROR' || type === 'BOOKMARK' ? ev.object : reviveDates(ev.object);
            onEvent({ type, object: object as ResourceTypes[K] | KubeStatus });
          },
          signal,
          {
            // A quiet watch with bookmarks must not be cut: the server's timeout plus a minute of slack.
            inactivityMs: opts.watchInactivityTimeoutMs ?? ((o.timeoutSeconds ?? 300) + 60) * 1000,
            onStatus: countOnce,
          },
        );
      } catch (e) {
        const ke = toKubeError(e);
        countOnce(ke.code);
        throw ke;
      }
    },

    getNode: (name: string): Promise<V1Node> => get('nodes', undefined, name),

    replaceNode: (node: V1Node): Promise<V1Node> =>
      call('update', 'nodes', () => transport.request<V1Node>('PUT', resourcePath('nodes', undefined, node.metadata?.name ?? ''), undefined, node)),

    createPersistentVolume: (pv: V1PersistentVolume): Promise<V1PersistentVolume> => create('persistentvolumes', undefined, pv),

    getPersistentVolume: (name: string): Promise<V1PersistentVolume> => get('persistentvolumes', undefined, name),

    deletePersistentVolume: (name: string, d?: DeleteOptions): Promise<void> => del('persistentvolumes', undefined, name, d),

    patchPersistentVolume: (name: string, p: Partial<V1PersistentVolume>): Promise<V1PersistentVolume> => patch('persistentvolumes', undefined, name, p),

    getPersistentVolumeClaim: (namespace: string, name: string): Promise<V1PersistentVolumeClaim> => get('persistentvolumeclaims', namespace, name),

    deletePersistentVolumeClaim: (namespace: string, name: string, d?: DeleteOptions): Promise<void> =>
      del('persistentvolumeclaims', namespace, name, d),

    createJob: (namespace: string, job: V1Job): Promise<V1Job> => create('jobs', namespace, job),

    deleteJob: (namespace: string, name: string, d?: DeleteOptions): Promise<void> => del('jobs', namespace, name, d),

    createEvent: (namespace: string, ev: CoreV1Event): Promise<CoreV1Event> => create('events', namespace, ev),

    // Merge patch: without an explicit content type the server would read a JSON patch.
    patchEvent: (namespace: string, name: string, p: Partial<CoreV1Event>): Promise<CoreV1Event> => patch('events', namespace, name, p),
  };
  return client;
}
