// Helpers for e2e test files: API clients built from the kubeconfigs the globalSetup provides,
// and a polling waitFor with a clear timeout error.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { inject } from 'vitest';
import { AuthorizationV1Api, BatchV1Api, CoreV1Api, KubeConfig, RbacAuthorizationV1Api, StorageV1Api } from '@kubernetes/client-node';

export interface Clients {
  readonly kc: KubeConfig;
  readonly core: CoreV1Api;
  readonly batch: BatchV1Api;
  readonly storage: StorageV1Api;
  readonly authz: AuthorizationV1Api;
}

/** Clients for a kubeconfig file. */
export function clientsFor(kubeconfigPath: string): Clients {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  return {
    kc,
    core: kc.makeApiClient(CoreV1Api),
    batch: kc.makeApiClient(BatchV1Api),
    storage: kc.makeApiClient(StorageV1Api),
    authz: kc.makeApiClient(AuthorizationV1Api),
  };
}

/**
 * Writes a kubeconfig for a ServiceAccount (a TokenRequest token, 1 h) against the
 * admin kubeconfig's cluster, so a daemon runs with exactly that account's RBAC.
 */
export async function serviceAccountKubeconfig(admin: Clients, namespace: string, name: string, file: string): Promise<string> {
  const req = await admin.core.createNamespacedServiceAccountToken({ namespace, name, body: { spec: { audiences: [], expirationSeconds: 3600 } } });
  const token = req.status?.token;
  if (!token) throw new Error(`no token for ServiceAccount ${namespace}/${name}`);
  const cluster = admin.kc.getCurrentCluster();
  if (!cluster) throw new Error('the admin kubeconfig has no current cluster');
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name, token }],
    contexts: [{ name, cluster: cluster.name, user: name }],
    currentContext: name,
  });
  await writeFile(file, kc.exportConfig(), { mode: 0o600 });
  return file;
}

/** Clients as the admin (system:masters). */
export function adminClients(): Clients {
  return clientsFor(inject('kubeconfig'));
}

/** Clients as the restricted provisioner identity (kube-system:local-volume-provisioner). */
export function provisionerClients(): Clients {
  return clientsFor(inject('provisionerKubeconfig'));
}

export interface ServiceAccountIdentity {
  /** system:serviceaccount:<namespace>:<name> */
  readonly user: string;
  readonly kubeconfig: string;
  /** Deletes the bindings and the ServiceAccount. */
  remove(): Promise<void>;
}

/**
 * A second, real ServiceAccount identity bound to `clusterRoles` only, with a kubeconfig that
 * carries a token from the TokenRequest API (written to `dir`). For tests that need less than
 * the provisioner identity (which global setup binds to the base RBAC and every component).
 */
export async function serviceAccountIdentity(
  admin: Clients,
  o: { readonly namespace: string; readonly name: string; readonly clusterRoles: readonly string[]; readonly dir: string },
): Promise<ServiceAccountIdentity> {
  const rbac = admin.kc.makeApiClient(RbacAuthorizationV1Api);
  const { namespace, name } = o;
  const bindings = o.clusterRoles.map((role) => `${name}-${role}`.slice(0, 253));
  await admin.core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });
  for (const [i, role] of o.clusterRoles.entries()) {
    await rbac.createClusterRoleBinding({
      body: {
        metadata: { name: bindings[i] },
        subjects: [{ kind: 'ServiceAccount', name, namespace }],
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
      },
    });
  }
  return {
    user: `system:serviceaccount:${namespace}:${name}`,
    kubeconfig: await serviceAccountKubeconfig(admin, namespace, name, join(o.dir, `${name}.kubeconfig`)),
    async remove() {
      for (const b of bindings) await rbac.deleteClusterRoleBinding({ name: b }).catch(() => undefined);
      await admin.core.deleteNamespacedServiceAccount({ namespace, name }).catch(() => undefined);
    },
  };
}

export interface WaitOptions {
  /** Give up after this long (default 60 s). */
  readonly timeoutMs?: number;
  /** Poll interval (default 250 ms). */
  readonly intervalMs?: number;
  /** What is awaited, for the error message ("PVC pvc-1 to be Bound"). */
  readonly what: string;
}

/**
 * Calls `fn` until it returns something other than undefined/false/null and returns that.
 * Errors thrown by `fn` count as "not yet"; the last one is quoted in the timeout error.
 */
export async function waitFor<T>(fn: () => Promise<T | undefined | null | false> | T | undefined | null | false, opts: WaitOptions): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const intervalMs = opts.intervalMs ?? 250;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  let polls = 0;
  for (;;) {
    polls++;
    try {
      const v = await fn();
      if (v !== undefined && v !== null && v !== false) return v;
      lastError = undefined;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const why = lastError === undefined ? '' : `; last error: ${errorText(lastError)}`;
      throw new Error(`timed out after ${(timeoutMs / 1000).toFixed(1)} s (${polls} polls) waiting for ${opts.what}${why}`);
    }
    await new Promise((res) => setTimeout(res, Math.min(intervalMs, Math.max(0, deadline - Date.now()))));
  }
}

/** A unique, DNS-1123 name for a test object. */
export function uniqueName(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
}

/** HTTP status of a client-node ApiException (undefined for other errors). */
export function apiStatus(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

function errorText(err: unknown): string {
  if (err instanceof Error) {
    const code = apiStatus(err);
    return code !== undefined ? `HTTP ${code}: ${err.message.split('\n')[0] ?? ''}` : err.message;
  }
  return typeof err === 'string' ? err : JSON.stringify(err);
}
