// The kustomize base, each component and the example overlay, rendered with the pinned kustomize binary
// (what `kubectl kustomize` does) and checked: an `images:` override reaches the containers AND
// JOB_CONTAINER_IMAGE, every object carries app.kubernetes.io/name, the ConfigMap is a valid config whose
// discovery dirs the DaemonSet mounts, the metrics Service and ServiceMonitor point at real ports, the
// PrometheusRule holds deployment/monitoring/rules.yaml's groups, and the
// API server accepts every object (server-side apply, dryRun=All).
import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ApiextensionsV1Api, type KubernetesObject, type V1Container, type V1PodSpec } from '@kubernetes/client-node';
import { parse, stringify } from 'yaml';
import { parseConfig } from '../src/config/parse.ts';
import type { ProvisionerConfig } from '../src/config/types.ts';
import { adminClients, apiStatus, waitFor } from './harness/kube.ts';
import { ensureKustomizeBinary, kustomizeBuild } from './harness/kustomize.ts';
import { applyObjects, deploymentDir, manifestObjects } from './harness/manifests.ts';

type Obj = KubernetesObject & { kind: string; metadata: { name: string; labels?: Record<string, string> }; [k: string]: unknown };

const IMAGE = 'registry.example.com/storage/lsp';
const TAG = 'v9.8.7';
const DEFAULT_IMAGE = 'local-static-provisioner:latest';
const NAME_LABEL = 'app.kubernetes.io/name';
const components = ['job-cleaning', 'taint-removal', 'node-cleanup', 'block-volumes', 'monitoring', 'pv-node-label'] as const;
type Component = (typeof components)[number];

let kustomize = '';
let scratch = '';

/** Renders an overlay of the base with `components` and an `images:` override (unless `image` is false). */
async function renderOverlay(name: string, comps: readonly Component[], image = true): Promise<Obj[]> {
  const dir = join(scratch, name);
  const rel = (p: string): string => relative(dir, p);
  const k = {
    apiVersion: 'kustomize.config.k8s.io/v1beta1',
    kind: 'Kustomization',
    resources: [rel(deploymentDir)],
    ...(comps.length ? { components: comps.map((c) => rel(join(deploymentDir, 'components', c))) } : {}),
    ...(image ? { images: [{ name: 'local-static-provisioner', newName: IMAGE, newTag: TAG }] } : {}),
  };
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'kustomization.yaml'), stringify(k));
  return manifestObjects(await kustomizeBuild(kustomize, dir)) as Obj[];
}

const find = (objs: Obj[], kind: string, name?: string): Obj[] => objs.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
const one = (objs: Obj[], kind: string, name?: string): Obj => {
  const f = find(objs, kind, name);
  if (f.length !== 1) throw new Error(`expected one ${kind}${name ? `/${name}` : ''}, found ${f.length}`);
  return f[0] as Obj;
};
const podSpec = (o: Obj): V1PodSpec => (o['spec'] as { template: { spec: V1PodSpec } }).template.spec;
const provisioner = (objs: Obj[]): V1Container => {
  const c = podSpec(one(objs, 'DaemonSet', 'local-volume-provisioner')).containers.find((x) => x.name === 'provisioner');
  if (!c) throw new Error('no provisioner container');
  return c;
};
const configData = (objs: Obj[]): Record<string, string> => one(objs, 'ConfigMap', 'local-volume-provisioner-config')['data'] as Record<string, string>;
const classes = (objs: Obj[]): ProvisionerConfig['storageClassMap'] => {
  const r = parseConfig(configData(objs));
  if (!r.ok) throw new Error(`rendered ConfigMap is not a valid config: ${r.errors.map((e) => `${e.path}: ${e.message}`).join('; ')}`);
  return r.config.storageClassMap;
};

/** Each class's discovery dir is visible in the container, from its hostDir, with HostToContainer propagation. */
function checkMounts(objs: Obj[]): void {
  const ds = podSpec(one(objs, 'DaemonSet', 'local-volume-provisioner'));
  for (const [name, cls] of Object.entries(classes(objs))) {
    const mount = provisioner(objs).volumeMounts?.find((m) => cls.mountDir === m.mountPath || cls.mountDir.startsWith(`${m.mountPath}/`));
    expect(mount, `class ${name}: no volumeMount covers mountDir ${cls.mountDir}`).toBeDefined();
    expect(mount?.mountPropagation, `class ${name}`).toBe('HostToContainer');
    const hostPath = ds.volumes?.find((v) => v.name === mount?.name)?.hostPath?.path;
    expect(hostPath && join(hostPath, relative(mount?.mountPath ?? '', cls.mountDir)), `class ${name}: hostPath behind ${cls.mountDir}`).toBe(cls.hostDir);
  }
}

/** The checks every rendering must pass. */
function checkCommon(objs: Obj[], image: string): void {
  expect(objs.length).toBeGreaterThan(0);
  // Every object labelled.
  const unlabelled = objs.filter((o) => !o.metadata.labels?.[NAME_LABEL]).map((o) => `${o.kind}/${o.metadata.name}`);
  expect(unlabelled).toEqual([]);
  // The image everywhere: containers of every workload and the cleanup Jobs' image.
  for (const w of [...find(objs, 'DaemonSet'), ...find(objs, 'Deployment')]) {
    for (const c of podSpec(w).containers) expect(`${w.kind}/${w.metadata.name}/${c.name}: ${c.image ?? ''}`).toBe(`${w.kind}/${w.metadata.name}/${c.name}: ${image}`);
  }
  const env = provisioner(objs).env?.find((e) => e.name === 'JOB_CONTAINER_IMAGE');
  expect(env?.value).toBe(image);
  checkMounts(objs);
  for (const name of Object.keys(classes(objs))) expect(find(objs, 'StorageClass', name), `StorageClass ${name}`).toHaveLength(1);
  // The metrics Service selects the DaemonSet's pods on the port the daemon listens on.
  const svc = one(objs, 'Service', 'local-volume-provisioner')['spec'] as { selector: Record<string, string>; ports: { name: string; port: number; targetPort: string }[] };
  const podLabels = (one(objs, 'DaemonSet', 'local-volume-provisioner')['spec'] as { template: { metadata: { labels: Record<string, string> } } }).template.metadata.labels;
  for (const [k, v] of Object.entries(svc.selector)) expect(podLabels[k], `pod label ${k}`).toBe(v);
  const port = provisioner(objs).ports?.find((p) => p.name === svc.ports[0]?.targetPort);
  expect(port?.containerPort).toBe(8080);
  expect(provisioner(objs).args).toContain(`--listen-address=:${String(port?.containerPort)}`);
}

/** A minimal monitoring.coreos.com/v1 CRD of `kind` whose spec has the structural schema `spec` (the fields the component uses), for a real API check. */
function monitoringCrd(kind: string, spec: Record<string, unknown>) {
  const plural = `${kind.toLowerCase()}s`;
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.monitoring.coreos.com` },
    spec: {
      group: 'monitoring.coreos.com',
      scope: 'Namespaced',
      names: { plural, singular: kind.toLowerCase(), kind, listKind: `${kind}List` },
      versions: [{ name: 'v1', served: true, storage: true, schema: { openAPIV3Schema: { type: 'object', properties: { spec } } } }],
    },
  };
}

/** The ServiceMonitor CRD. */
const serviceMonitorCrd = monitoringCrd('ServiceMonitor', {
  type: 'object',
  required: ['selector'],
  properties: {
    jobLabel: { type: 'string' },
    selector: {
      type: 'object',
      properties: {
        matchLabels: { type: 'object', additionalProperties: { type: 'string' } },
        matchExpressions: {
          type: 'array',
          items: { type: 'object', required: ['key', 'operator'], properties: { key: { type: 'string' }, operator: { type: 'string' }, values: { type: 'array', items: { type: 'string' } } } },
        },
      },
    },
    namespaceSelector: { type: 'object', properties: { any: { type: 'boolean' }, matchNames: { type: 'array', items: { type: 'string' } } } },
    endpoints: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          port: { type: 'string' },
          path: { type: 'string' },
          scheme: { type: 'string', enum: ['http', 'https'] },
          honorLabels: { type: 'boolean' },
          interval: { type: 'string', pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$' },
          relabelings: {
            type: 'array',
            items: {
              type: 'object',
              properties: {
                sourceLabels: { type: 'array', items: { type: 'string' } },
                targetLabel: { type: 'string' },
                action: { type: 'string' },
                regex: { type: 'string' },
                replacement: { type: 'string' },
              },
            },
          },
        },
      },
    },
  },
});

/** The PrometheusRule CRD. */
const prometheusRuleCrd = monitoringCrd('PrometheusRule', {
  type: 'object',
  properties: {
    groups: {
      type: 'array',
      items: {
        type: 'object',
        required: ['name'],
        properties: {
          name: { type: 'string' },
          interval: { type: 'string' },
          rules: {
            type: 'array',
            items: {
              type: 'object',
              required: ['expr'],
              properties: {
                alert: { type: 'string' },
                record: { type: 'string' },
                expr: { 'x-kubernetes-int-or-string': true },
                for: { type: 'string' },
                labels: { type: 'object', additionalProperties: { type: 'string' } },
                annotations: { type: 'object', additionalProperties: { type: 'string' } },
              },
            },
          },
        },
      },
    },
  },
});

/** The groups of deployment/monitoring/rules.yaml, the one source of the shipped alert rules. */
const shippedRuleGroups = (): unknown => (parse(readFileSync(resolve(deploymentDir, '..', 'monitoring', 'rules.yaml'), 'utf8')) as { groups: unknown }).groups;

const kubeconfig = (): string => inject('kubeconfig');

/** The kustomization.yaml texts of a Markdown page: its ```yaml blocks of kind Kustomization, dedented. */
function docOverlays(md: string): string[] {
  return [...md.matchAll(/^( *)```yaml\n([\s\S]*?)^ *```/gm)]
    .map((m) => (m[2] ?? '').split('\n').map((l) => l.slice((m[1] ?? '').length)).join('\n'))
    .filter((t) => /^kind: Kustomization$/m.test(t));
}

describe('kustomize: base, components and the example overlay', () => {
  const rendered = new Map<string, Obj[]>();
  const crdsCreated: string[] = [];

  beforeAll(async () => {
    kustomize = await ensureKustomizeBinary({ log: (m) => console.log(`[kustomize] ${m}`) });
    scratch = await mkdtemp(join(tmpdir(), 'lsp-kustomize-'));
    const ext = adminClients().kc.makeApiClient(ApiextensionsV1Api);
    for (const crd of [serviceMonitorCrd, prometheusRuleCrd]) {
      try {
        await ext.createCustomResourceDefinition({ body: crd });
        crdsCreated.push(crd.metadata.name);
      } catch (err) {
        if (apiStatus(err) !== 409) throw err;
      }
      await waitFor(
        async () => (await ext.readCustomResourceDefinition({ name: crd.metadata.name })).status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True'),
        { what: `the ${crd.spec.names.kind} CRD to be Established` },
      );
    }
  }, 600_000);

  afterAll(async () => {
    if (scratch) await rm(scratch, { recursive: true, force: true });
    for (const name of crdsCreated) await adminClients().kc.makeApiClient(ApiextensionsV1Api).deleteCustomResourceDefinition({ name }).catch(() => undefined);
  });

  const variants: [string, Component[]][] = [['base', []], ...components.map((c): [string, Component[]] => [c, [c]]), ['all-components', [...components]]];

  it.each(variants)('%s: images override reaches JOB_CONTAINER_IMAGE, labels, config, mounts, metrics Service', async (name, comps) => {
    const objs = await renderOverlay(name, comps);
    rendered.set(name, objs);
    checkCommon(objs, `${IMAGE}:${TAG}`);
  });

  it('base without an override: JOB_CONTAINER_IMAGE is the container image', async () => {
    const objs = await renderOverlay('no-override', [], false);
    checkCommon(objs, DEFAULT_IMAGE);
    expect(find(objs, 'Role')).toEqual([]); // no Jobs without job-cleaning
    expect(find(objs, 'ServiceMonitor')).toEqual([]);
    const cfg = parseConfig(configData(objs));
    expect(cfg.ok && cfg.config.useJobForCleaning).toBe(false);
  });

  it('each component adds what it says and keeps the rest', () => {
    const get = (n: string): Obj[] => rendered.get(n) ?? [];
    const jobCfg = parseConfig(configData(get('job-cleaning')));
    expect(jobCfg.ok && jobCfg.config.useJobForCleaning).toBe(true);
    expect(find(get('job-cleaning'), 'Role', 'local-volume-provisioner-jobs-role')).toHaveLength(1);

    const taint = configData(get('taint-removal'))['provisionerNotReadyNodeTaintKey'];
    expect(podSpec(one(get('taint-removal'), 'DaemonSet')).tolerations?.map((t) => t.key)).toContain(taint);

    const cleanup = get('node-cleanup');
    expect(one(cleanup, 'Deployment', 'local-volume-node-cleanup')).toBeDefined();
    const cleanupSvc = one(cleanup, 'Service', 'local-volume-node-cleanup')['spec'] as { ports: { targetPort: string }[] };
    expect(podSpec(one(cleanup, 'Deployment')).containers[0]?.ports?.map((p) => p.name)).toContain(cleanupSvc.ports[0]?.targetPort);

    // block-volumes: the base's classes unchanged, plus a Block class with its own StorageClass.
    const base = classes(get('base'));
    const block = classes(get('block-volumes'));
    for (const [n, c] of Object.entries(base)) expect(block[n], `base class ${n} kept by block-volumes`).toEqual(c);
    const added = Object.keys(block).filter((n) => !(n in base));
    expect(added).toEqual(['block-disks']);
    expect(block['block-disks']?.volumeMode).toBe('Block');
    expect(provisioner(get('block-volumes')).volumeMounts?.map((m) => m.mountPath)).toContain('/dev');

    // pv-node-label: the flag on, and PV patch granted (nothing else).
    expect(provisioner(get('pv-node-label')).args).toContain('--pv-node-label=true');
    expect(provisioner(get('base')).args).not.toContain('--pv-node-label=true');
    expect(one(get('pv-node-label'), 'ClusterRole', 'local-volume-provisioner-pv-node-label-clusterrole')['rules']).toEqual([
      { apiGroups: [''], resources: ['persistentvolumes'], verbs: ['patch'] },
    ]);

    // monitoring: the ServiceMonitor selects both metrics Services, by a port name they have.
    const all = get('all-components');
    const sm = one(all, 'ServiceMonitor')['spec'] as { selector: { matchExpressions: { key: string; operator: string; values: string[] }[] }; endpoints: { port: string; path: string }[] };
    for (const svcName of ['local-volume-provisioner', 'local-volume-node-cleanup']) {
      const svc = one(all, 'Service', svcName);
      for (const e of sm.selector.matchExpressions) expect(e.values, `${svcName} selected`).toContain(svc.metadata.labels?.[e.key]);
      expect((svc['spec'] as { ports: { name: string }[] }).ports.map((p) => p.name)).toContain(sm.endpoints[0]?.port);
    }
    expect(sm.endpoints[0]?.path).toBe('/metrics');

    // monitoring: the alert rules of deployment/monitoring/rules.yaml as a PrometheusRule, in the base's namespace.
    for (const n of ['monitoring', 'all-components']) {
      const pr = one(get(n), 'PrometheusRule', 'local-volume-provisioner') as Obj & { metadata: { namespace?: string }; spec: { groups: unknown } };
      expect(pr.metadata.namespace, n).toBe('kube-system');
      expect(pr.spec.groups, `${n}: the PrometheusRule's groups`).toEqual(shippedRuleGroups());
    }
    expect(find(get('base'), 'PrometheusRule')).toEqual([]);
  });

  it('deployment/overlays/example renders with its image everywhere', async () => {
    const dir = resolve(deploymentDir, '..', 'overlays', 'example');
    const objs = manifestObjects(await kustomizeBuild(kustomize, dir)) as Obj[];
    rendered.set('overlays/example', objs);
    checkCommon(objs, 'registry.example.com/storage/local-static-provisioner:0.1.0');
    expect(find(objs, 'ServiceMonitor')).toHaveLength(1);
    expect(find(objs, 'PrometheusRule')).toHaveLength(1);
    expect(classes(objs)['block-disks']?.volumeMode).toBe('Block');
  });

  it('the API server accepts every rendering (server-side apply, dryRun=All)', async () => {
    expect([...rendered.keys()].sort()).toEqual([...variants.map((v) => v[0]), 'overlays/example'].sort());
    for (const [name, objs] of rendered) {
      const applied = await applyObjects(kubeconfig(), objs, `kustomize build of ${name}`, { dryRun: 'All', fieldManager: 'lsp-e2e-kustomize' });
      expect(applied).toHaveLength(objs.length);
    }
  });

  it('the overlays shown in docs/*.md render and are accepted (dryRun=All)', async () => {
    const docsDir = resolve(deploymentDir, '..', '..', 'docs');
    const overlays = readdirSync(docsDir)
      .filter((f) => f.endsWith('.md'))
      .flatMap((f) => docOverlays(readFileSync(join(docsDir, f), 'utf8')).map((text, i) => ({ name: `${f}#${String(i + 1)}`, text })));
    expect(overlays.map((o) => o.name)).toEqual(expect.arrayContaining(['deployment.md#1', 'getting-started.md#1', 'upgrading.md#1']));
    for (const o of overlays) {
      const dir = join(scratch, 'docs', o.name.replace('#', '-'));
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, 'kustomization.yaml'), o.text.replaceAll('../local-static-provisioner/deployment/kubernetes', relative(dir, deploymentDir)));
      const objs = manifestObjects(await kustomizeBuild(kustomize, dir)) as Obj[];
      const image = provisioner(objs).image ?? '';
      expect(provisioner(objs).env?.find((e) => e.name === 'JOB_CONTAINER_IMAGE')?.value, o.name).toBe(image);
      expect(objs.filter((x) => !x.metadata.labels?.[NAME_LABEL]).map((x) => `${o.name}: ${x.kind}/${x.metadata.name}`)).toEqual([]);
      checkMounts(objs);
      await applyObjects(kubeconfig(), objs, `the overlay in docs/${o.name}`, { dryRun: 'All', fieldManager: 'lsp-e2e-kustomize' });
    }
  });

  it('a misspelt PrometheusRule field is rejected (the dry run checks the schema)', async () => {
    const pr = structuredClone(one(rendered.get('monitoring') ?? [], 'PrometheusRule'));
    (pr['spec'] as { groups: { rules: Record<string, unknown>[] }[] }).groups[0]!.rules[0] = { alert: 'X', expr: 'up', forr: '1m' };
    await expect(applyObjects(kubeconfig(), [pr], 'a misspelt PrometheusRule', { dryRun: 'All' })).rejects.toThrow(/forr/);
  });

  it('a misspelt ServiceMonitor field is rejected (the dry run checks the schema)', async () => {
    const sm = structuredClone(one(rendered.get('monitoring') ?? [], 'ServiceMonitor'));
    (sm['spec'] as { endpoints: Record<string, unknown>[] }).endpoints[0] = { port: 'metrics', intervall: '30s' };
    await expect(applyObjects(kubeconfig(), [sm], 'a misspelt ServiceMonitor', { dryRun: 'All' })).rejects.toThrow(/intervall/);
  });
});
