// Every place this project reaches past the public API of @kubernetes/client-node
// (2.0.1), in one file, so an upgrade has one place to check:
// 1. dispatcher reuse: KubeConfig.createDispatcher (a method, not exported as API)
//    is wrapped to hand out one undici Agent per cluster, user and TLS material;
// 2. watch inactivity timeout: Watch#requestTimeoutMs (a private field) is raised;
// 3. the deep import of ObjectSerializer, to give watch objects the same typed shape
//    (Dates etc.) as list results.
// The daemon stays up when a patch no longer applies (the client still works,
// only worse); clientNodePatchProblems() names what broke, and
// test/kube/client-node-patches.test.ts fails on it.
import { createHash } from 'node:crypto';
import { KubeConfig, Watch } from '@kubernetes/client-node';
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';

type CreateDispatcher = (cluster: unknown, agentOptions: Record<string, unknown>) => unknown;

const tlsPart = (v: unknown): string => (Buffer.isBuffer(v) ? v.toString('base64') : typeof v === 'string' ? v : JSON.stringify(v ?? null));

/**
 * client-node 2.0.1 builds a new undici Agent (TLS context and connection pool)
 * for every request, so no connection is ever reused: a TLS handshake per
 * request, and native memory that grows with every request until GC finds the
 * agents (~60 KB per config reload was measured). Reuse one dispatcher per
 * cluster, user and TLS material instead. Returns false when the seam is gone.
 */
export function reuseDispatchers(kc: KubeConfig): boolean {
  const target = kc as unknown as { createDispatcher?: CreateDispatcher };
  const original = target.createDispatcher;
  if (typeof original !== 'function') return false;
  const cache = new Map<string, unknown>();
  target.createDispatcher = (cluster, agentOptions) => {
    const c = (cluster ?? {}) as { name?: string; server?: string; proxyUrl?: string };
    const key = createHash('sha256')
      .update(JSON.stringify([c.name, c.server, c.proxyUrl, kc.getCurrentUser()?.name]))
      .update(JSON.stringify(['ca', 'cert', 'key', 'pfx', 'passphrase', 'rejectUnauthorized', 'servername'].map((k) => tlsPart(agentOptions[k]))))
      .digest('hex');
    if (!cache.has(key)) cache.set(key, original.call(kc, cluster, agentOptions));
    return cache.get(key);
  };
  return true;
}

/**
 * client-node aborts a watch that receives no bytes for `requestTimeoutMs` (30 s,
 * private), shorter than a quiet watch with bookmarks. Returns false when the
 * field is gone (setting it would change nothing).
 */
export function setWatchInactivityTimeout(watcher: Watch, ms: number): boolean {
  const w = watcher as unknown as { requestTimeoutMs?: unknown };
  if (typeof w.requestTimeoutMs !== 'number') return false;
  w.requestTimeoutMs = ms;
  return true;
}

/** A watch object deserialized like list results of `model` (e.g. 'V1PersistentVolume'). */
export function deserializeModel(obj: unknown, model: string): unknown {
  return ObjectSerializer.deserialize(obj, model, '');
}

/** What no longer matches the client-node internals the patches rely on (empty: all apply). */
export function clientNodePatchProblems(): string[] {
  const problems: string[] = [];
  const createDispatcher = (KubeConfig.prototype as unknown as { createDispatcher?: unknown }).createDispatcher;
  if (typeof createDispatcher !== 'function' || createDispatcher.length !== 2) {
    problems.push('KubeConfig.prototype.createDispatcher(cluster, agentOptions) is gone: dispatchers are no longer reused');
  }
  if (!setWatchInactivityTimeout(new Watch(new KubeConfig()), 30_000)) {
    problems.push('Watch#requestTimeoutMs is gone: quiet watches are cut by the client default');
  }
  const typed = deserializeModel({ metadata: { creationTimestamp: '2024-01-02T03:04:05Z' } }, 'V1PersistentVolume') as {
    metadata?: { creationTimestamp?: unknown };
  };
  if (!(typed.metadata?.creationTimestamp instanceof Date)) {
    problems.push('ObjectSerializer.deserialize no longer types V1PersistentVolume: watch objects differ from list results');
  }
  return problems;
}
