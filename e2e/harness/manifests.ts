// Applies the project's Kubernetes manifests (deployment/kubernetes) to a control plane, as admin.
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  HttpMethod,
  KubeConfig,
  KubernetesObjectApi,
  PatchStrategy,
  ServerConfiguration,
  createConfiguration,
  type KubernetesObject,
  type RequestContext,
  type ResponseContext,
} from '@kubernetes/client-node';
import { parseAllDocuments, parse as parseYaml } from 'yaml';

export const deploymentDir = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'deployment', 'kubernetes');

/** The base RBAC: what the daemon needs without Jobs and without the node taint remover. */
export const baseRbacManifests = [join(deploymentDir, 'serviceaccount.yaml'), join(deploymentDir, 'rbac.yaml')];

/** The RBAC files (the `resources:` of its kustomization.yaml) of an opt-in kustomize component. */
export function componentManifests(name: 'job-cleaning' | 'taint-removal' | 'pv-node-label'): string[] {
  const dir = join(deploymentDir, 'components', name);
  const k = parseYaml(readFileSync(join(dir, 'kustomization.yaml'), 'utf8')) as { kind?: string; resources?: string[] };
  if (k.kind !== 'Component' || !k.resources?.length) throw new Error(`${dir}/kustomization.yaml is not a kustomize Component with resources`);
  return k.resources.map((r) => join(dir, r));
}

/**
 * The manifests every e2e run applies: the base RBAC plus both opt-in components, so the
 * provisioner identity may use Jobs and update nodes. e2e/rbac.test.ts checks the base alone
 * with an identity of its own.
 */
export const rbacManifests = [...baseRbacManifests, ...componentManifests('job-cleaning'), ...componentManifests('taint-removal')];

export interface ApplyOptions {
  /** `All`: the API server validates and admits each object but stores nothing. */
  readonly dryRun?: 'All';
  /** Field manager (default lsp-e2e-harness). */
  readonly fieldManager?: string;
}

/**
 * The objects (documents with a kind and a name) of a multi-document YAML text, as plain data: every field as
 * written, unknown ones included (client-node's loadAllYaml would drop fields its models do not know).
 */
export function manifestObjects(text: string): (KubernetesObject & { kind: string; metadata: { name: string } })[] {
  const docs = parseAllDocuments(text).map((d) => {
    if (d.errors.length) throw new Error(`invalid YAML: ${d.errors[0]?.message ?? ''}`);
    return d.toJS() as KubernetesObject | null;
  });
  return docs.filter((d): d is KubernetesObject & { kind: string; metadata: { name: string } } => d?.kind !== undefined && d.metadata?.name !== undefined);
}

const objectId = (o: KubernetesObject): string => `${o.kind ?? ''}/${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;

/**
 * Server-side applies objects exactly as given, with fieldValidation=Strict: an unknown or duplicate field is an
 * error, as with `kubectl apply`. (KubernetesObjectApi serialises built-in kinds through its models, which drops
 * unknown fields before the API server can see them; a middleware puts the object's own JSON back as the body.)
 */
class StrictApplier {
  #body = '';
  readonly #client: KubernetesObjectApi;

  constructor(kubeconfigPath: string) {
    const kc = new KubeConfig();
    kc.loadFromFile(kubeconfigPath);
    const server = kc.getCurrentCluster()?.server;
    if (server === undefined) throw new Error(`${kubeconfigPath} has no current cluster`);
    const pre = (ctx: RequestContext): Promise<RequestContext> => {
      if (ctx.getHttpMethod() === HttpMethod.PATCH) {
        ctx.setQueryParam('fieldValidation', 'Strict');
        ctx.setBody(this.#body);
      }
      return Promise.resolve(ctx);
    };
    const post = (rsp: ResponseContext): Promise<ResponseContext> => Promise.resolve(rsp);
    this.#client = new KubernetesObjectApi(
      createConfiguration({ baseServer: new ServerConfiguration(server, {}), authMethods: { default: kc }, promiseMiddleware: [{ pre, post }] }),
    );
  }

  async apply(spec: KubernetesObject, opts: ApplyOptions): Promise<void> {
    this.#body = JSON.stringify(spec);
    await this.#client.patch(spec, undefined, opts.dryRun, opts.fieldManager ?? 'lsp-e2e-harness', true, PatchStrategy.ServerSideApply);
  }
}

/**
 * Server-side-applies objects (creates or updates), in order, strictly (StrictApplier); `source` names where they
 * came from in errors. Returns "Kind/namespace/name" of what was applied.
 */
export async function applyObjects(kubeconfigPath: string, objects: readonly KubernetesObject[], source: string, opts: ApplyOptions = {}): Promise<string[]> {
  const applier = new StrictApplier(kubeconfigPath);
  const applied: string[] = [];
  for (const spec of objects) {
    const id = objectId(spec);
    try {
      await applier.apply(spec, opts);
    } catch (err) {
      throw new Error(`applying ${id} from ${source}${opts.dryRun ? ' (dry run)' : ''} failed: ${(err as Error).message}`, { cause: err });
    }
    applied.push(id);
  }
  return applied;
}

/**
 * Server-side-applies every document of every file (creates or updates), in file order.
 * Returns "Kind/namespace/name" of what was applied.
 */
export async function applyManifests(kubeconfigPath: string, files: readonly string[] = rbacManifests): Promise<string[]> {
  const applied: string[] = [];
  for (const file of files) applied.push(...(await applyObjects(kubeconfigPath, manifestObjects(await readFile(file, 'utf8')), file)));
  return applied;
}

/** Deletes every document of every file (reverse order); objects already gone are skipped. Returns what was deleted. */
export async function deleteManifests(kubeconfigPath: string, files: readonly string[]): Promise<string[]> {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const client = KubernetesObjectApi.makeApiClient(kc);
  const deleted: string[] = [];
  for (const file of [...files].reverse()) {
    for (const spec of manifestObjects(await readFile(file, 'utf8')).reverse()) {
      try {
        await client.delete(spec);
        deleted.push(objectId(spec));
      } catch (err) {
        if ((err as { code?: number }).code !== 404) throw err;
      }
    }
  }
  return deleted;
}
