// The Helm chart (helm/local-static-provisioner, issue 13) with the real helm CLI (built from
// e2e/helm/go.mod by e2e/harness/helm.ts) and the real control plane:
//  1. `helm lint` and `helm template` of the defaults, of every values file in helm/examples and of the
//     `helm install` of docs/getting-started.md as written (a PV for its volume, the StorageClass it claims)
//     succeed, and what they render is what the Go chart's users expect (same fullname and selector,
//     the ConfigMap our parser accepts, RBAC by feature); bad values fail with one clear message.
//  2. Each rendering is server-side applied to the control plane, then the daemon runs as a host
//     process with exactly the ServiceAccount and RBAC that rendering created and the rendered
//     ConfigMap's data as its config dir: discovery creates the PVs, a Released PV is cleaned
//     (in-process, or by a Job when the rendering says so), a config reload applies, and no API
//     request is denied except the one the daemon makes on purpose (see expectNoDenied).
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { AppsV1Api } from '@kubernetes/client-node';
import type { KubernetesObject, V1ClusterRole, V1Container, V1ConfigMap, V1DaemonSet, V1Deployment, V1PersistentVolume, V1Role, V1StorageClass, V1Taint, V1Toleration, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse as parseYaml, parseAllDocuments, stringify } from 'yaml';
import { ensureHelmBinary, helm } from './harness/helm.ts';
import { helmInstall } from './support/doc-commands.ts';
import { adminClients, apiStatus, serviceAccountKubeconfig, uniqueName, waitFor } from './harness/kube.ts';
import { freePort } from './harness/controlplane.ts';
import { applyManifests, deleteManifests } from './harness/manifests.ts';
import { createNode, startNodeAgent, type NodeAgent } from './harness/node-agent.ts';
import { onFailureRunner, reapPods, releaseAndRediscover, startDaemon } from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { allZero, applyConfig, bindPV, fillDevice, hostJobRunner } from './support/hot-reload.ts';
import { metricValue, startNodeCleanup, type ProvisionerProcess } from './support/provisioner.ts';
import { parseConfig } from '../src/config/parse.ts';

const repo = resolve(import.meta.dirname, '..');
const chartDir = join(repo, 'helm', 'local-static-provisioner');
const examplesDir = join(repo, 'helm', 'examples');
const admin = adminClients();
const { core, storage } = admin;

/** The `helm install` of docs/getting-started.md, as written (its namespace aside: each case has its own). */
const gettingStarted = ((): { args: string[]; docError?: string } => {
  try {
    return { args: helmInstall('getting-started.md').args.filter((a, i, all) => a !== '--namespace' && all[i - 1] !== '--namespace') };
  } catch (err) {
    return { args: [], docError: (err as Error).message }; // fails that case only
  }
})();

/** The defaults, every values file kept in helm/examples, and the getting-started command. */
const CASES: ReadonlyArray<{ name: string; values: string | undefined; args?: readonly string[]; docError?: string }> = [
  { name: 'defaults', values: undefined },
  { name: 'upstream-keys', values: 'upstream-keys.yaml' },
  { name: 'block-jobs', values: 'block-jobs.yaml' },
  { name: 'taint-removal', values: 'taint-removal.yaml' },
  { name: 'additions', values: 'additions.yaml' },
  { name: 'getting-started.md', values: undefined, ...gettingStarted },
];

let helmBin = '';
let scratch = '';
/** The image, which the chart requires (none is published): given first, so a values file's own image wins. */
let imageValues = '';

beforeAll(async () => {
  helmBin = await ensureHelmBinary({ log: (m) => console.log(`[helm] ${m}`) });
  scratch = mkdtempSync(join(tmpdir(), 'lsp-helm-'));
  imageValues = join(scratch, 'image.yaml');
  writeFileSync(imageValues, 'image: registry.example.com/storage/local-static-provisioner:0.1.0\n');
}, 900_000);
afterAll(() => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

const valuesArgs = (values: string | undefined): string[] => ['-f', imageValues, ...(values === undefined ? [] : ['-f', join(examplesDir, values)])];

class Rendering {
  readonly docs: readonly KubernetesObject[];
  constructor(docs: readonly KubernetesObject[]) {
    this.docs = docs;
  }

  all<T extends KubernetesObject>(kind: string): T[] {
    return this.docs.filter((d) => d.kind === kind) as T[];
  }
  one<T extends KubernetesObject>(kind: string): T {
    const found = this.all<T>(kind);
    if (found.length !== 1) throw new Error(`want one ${kind} in the rendering, found ${found.length}`);
    return found[0]!;
  }
  get configData(): Record<string, string> {
    return this.one<V1ConfigMap>('ConfigMap').data ?? {};
  }
  get daemonSet(): V1DaemonSet {
    return this.one<V1DaemonSet>('DaemonSet');
  }
  get container(): V1Container {
    return this.daemonSet.spec!.template.spec!.containers[0]!;
  }
  get nodeVerbs(): string[] {
    const role = this.all<V1ClusterRole>('ClusterRole').find((r) => r.metadata?.name?.endsWith('-node-clusterrole'));
    return role?.rules?.find((r) => r.resources?.includes('nodes'))?.verbs ?? [];
  }
  /** The hostPath volumes for volume discovery (all but /dev), and where the container mounts them. */
  get diskVolumes(): { volumes: V1Volume[]; mounts: V1VolumeMount[] } {
    const volumes = (this.daemonSet.spec!.template.spec!.volumes ?? []).filter(
      (v) => v.hostPath !== undefined && v.hostPath.path !== '/dev' && v.name !== 'provisioner-state',
    );
    const names = new Set(volumes.map((v) => v.name));
    return { volumes, mounts: (this.container.volumeMounts ?? []).filter((m) => names.has(m.name)) };
  }
  get hasJobsRole(): boolean {
    return this.all<V1Role>('Role').some((r) => r.rules?.some((rule) => rule.resources?.includes('jobs')));
  }
}

/** `helm template`; a failed render fails the test with helm's message. */
async function render(release: string, namespace: string, values: string | undefined, extra: readonly string[] = []): Promise<Rendering> {
  const r = await helm(helmBin, ['template', release, chartDir, '--namespace', namespace, ...valuesArgs(values), ...extra], scratch);
  expect(r.stderr, `helm template ${values ?? '(defaults)'}`).toBe('');
  expect(r.code).toBe(0);
  const docs = parseAllDocuments(r.stdout).map((d) => d.toJS() as KubernetesObject | null);
  return new Rendering(docs.filter((d): d is KubernetesObject => d !== null));
}

/** A values file in the scratch dir. */
function valuesFile(values: Record<string, unknown>): string {
  const file = join(scratch, `${uniqueName('values')}.yaml`);
  writeFileSync(file, stringify(values));
  return file;
}

/** `helm template` of the defaults plus these values. */
const renderWith = (values: Record<string, unknown>): Promise<Rendering> => render('rel', 'storage', undefined, ['-f', valuesFile(values)]);

/** helm template that must fail; returns its message. */
async function renderFails(values: Record<string, unknown>): Promise<string> {
  const r = await helm(helmBin, ['template', 'rel', chartDir, '-f', imageValues, '-f', valuesFile(values)], scratch);
  expect(r.code, `helm template should fail for ${JSON.stringify(values)}`).not.toBe(0);
  return r.stderr;
}

describe('helm lint and helm template', () => {
  it.each(CASES)('$name: lints clean, renders, and the ConfigMap is one the daemon accepts without a warning', async ({ values, args = [], docError }) => {
    if (docError !== undefined) throw new Error(docError);
    const lint = await helm(helmBin, ['lint', chartDir, '--strict', ...valuesArgs(values), ...args], scratch);
    expect(lint.stdout + lint.stderr, 'helm lint').toMatch(/1 chart\(s\) linted, 0 chart\(s\) failed/);
    expect(lint.code).toBe(0);
    const r = await render('rel', 'storage', values, args);
    const parsed = parseConfig(r.configData);
    expect(parsed).toMatchObject({ ok: true });
    expect(parsed.warnings ?? []).toEqual([]);
  });

  it('the same fullname and DaemonSet selector as the Go chart (the rule of its _helpers.tpl), so a release switches in place', async () => {
    const names = async (release: string, extra: string[] = []): Promise<[string, unknown, string]> => {
      const r = await render(release, 'storage', undefined, extra);
      return [r.daemonSet.metadata!.name!, r.daemonSet.spec!.selector.matchLabels, r.one<V1ConfigMap>('ConfigMap').metadata!.name!];
    };
    expect(await names('rel')).toEqual([
      'rel-local-static-provisioner',
      { 'app.kubernetes.io/name': 'local-static-provisioner', 'app.kubernetes.io/instance': 'rel' },
      'rel-local-static-provisioner-config',
    ]);
    // a release name containing the chart name is the fullname
    expect((await names('my-local-static-provisioner'))[0]).toBe('my-local-static-provisioner');
    expect((await names('rel', ['--set', 'nameOverride=lvp']))[1]).toEqual({ 'app.kubernetes.io/name': 'lvp', 'app.kubernetes.io/instance': 'rel' });
    expect((await names('rel', ['--set', 'fullnameOverride=lvp']))[0]).toBe('lvp');
  });

  it('the Go chart\'s keys map to the same configuration and pod spec (helm/examples/upstream-keys.yaml)', async () => {
    const r = await render('rel', 'storage', 'upstream-keys.yaml');
    const parsed = parseConfig(r.configData);
    if (!parsed.ok) throw new Error(JSON.stringify(parsed.errors));
    const tolerations: V1Toleration[] = [{ key: 'node-role.kubernetes.io/control-plane', operator: 'Exists', effect: 'NoSchedule' }];
    expect(parsed.config).toMatchObject({
      nodeLabelsForPV: ['topology.kubernetes.io/zone', 'topology.kubernetes.io/region'],
      labelsForPV: { 'pv-labels': 'can-be-selected' },
      setPVOwnerRef: true,
      useNodeNameOnly: true,
      useJobForCleaning: false,
      jobTolerations: tolerations,
      minResyncPeriodMs: 300_000,
      storageClassMap: {
        'fast-disks': {
          hostDir: '/mnt/fast-disks',
          mountDir: '/mnt/fast-disks',
          volumeMode: 'Filesystem',
          accessMode: 'ReadWriteOnce',
          fsType: 'ext4',
          namePattern: '*',
          blockCleanerCommand: ['/scripts/shred.sh', '2'],
        },
        'retained-disks': {
          hostDir: '/mnt/retained-disks',
          mountDir: '/mnt/retained-disks',
          namePattern: 'vol-*',
          selector: [{ matchExpressions: [{ key: 'example.com/disk-tier', operator: 'In', values: ['hot'] }] }],
        },
      },
    });
    const image = 'example.registry/local-static-provisioner:v0.1.0';
    expect(r.container.image).toBe(image);
    expect(r.container.env?.find((e) => e.name === 'JOB_CONTAINER_IMAGE')?.value).toBe(image);
    expect(r.container.imagePullPolicy).toBe('IfNotPresent');
    expect(r.container.securityContext).toEqual({ privileged: true, allowPrivilegeEscalation: true });
    expect(r.container.resources).toEqual({ limits: { memory: '512Mi', cpu: '1000m' }, requests: { memory: '32Mi', cpu: '10m' } });
    // (timeoutSeconds and failureThreshold: this chart's defaults, the Go chart's values, merged in by helm)
    expect(r.container.livenessProbe).toEqual({ tcpSocket: { port: 'metrics' }, initialDelaySeconds: 10, periodSeconds: 60, timeoutSeconds: 5, failureThreshold: 3 });
    // the discovery root is mounted too (ours); the Go chart's class dirs outside it keep their volumes
    expect(r.container.volumeMounts?.map((m) => m.mountPath)).toEqual([
      '/etc/provisioner/config',
      '/dev',
      '/mnt/disks',
      '/mnt/fast-disks',
      '/mnt/retained-disks',
      '/var/lib/local-volume-provisioner', // daemon.stateDir (ours)
      '/etc/signal',
    ]);
    const pod = r.daemonSet.spec!.template;
    expect(pod.metadata?.labels).toEqual({ 'app.kubernetes.io/name': 'local-static-provisioner', 'app.kubernetes.io/instance': 'rel', 'example.com/tier': 'node' });
    expect(pod.metadata?.annotations).toEqual({ 'example.com/team': 'storage' }); // no checksum/config: hot reload
    expect(pod.spec).toMatchObject({
      priorityClassName: 'system-node-critical',
      imagePullSecrets: [{ name: 'regcred' }],
      nodeSelector: { 'kubernetes.io/os': 'linux', 'example.com/local-disks': 'true' },
      tolerations,
      initContainers: [{ name: 'init' }],
    });
    expect(pod.spec?.affinity?.nodeAffinity).toBeDefined();
    expect(pod.spec?.volumes?.map((v) => v.name)).toEqual(['provisioner-config', 'provisioner-dev', 'discovery-root', 'fast-disks', 'retained-disks', 'provisioner-state', 'signal']);
    expect(r.daemonSet.spec?.updateStrategy).toEqual({ type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 2 } });
    // (provisioner, reclaimPolicy, volumeBindingMode are immutable: the Go chart's values, so an upgrade keeps them)
    const classes = r.all<V1StorageClass>('StorageClass').map((c) => [c.metadata?.name, c.provisioner, c.reclaimPolicy, c.volumeBindingMode, c.metadata?.annotations?.['storageclass.kubernetes.io/is-default-class']]);
    expect(classes).toEqual([
      ['fast-disks', 'kubernetes.io/no-provisioner', 'Delete', 'WaitForFirstConsumer', 'true'],
      ['retained-disks', 'kubernetes.io/no-provisioner', 'Retain', 'WaitForFirstConsumer', undefined],
    ]);
    expect(r.all('StorageClass')[0]).toMatchObject({ allowedTopologies: [{ matchLabelExpressions: [{ key: 'topology.kubernetes.io/zone', values: ['zone-a'] }] }] });
    expect(r.one('ServiceMonitor')).toMatchObject({ metadata: { labels: { release: 'prometheus' } }, spec: { endpoints: [{ port: 'metrics', interval: '30s' }] } });
    expect(r.one('Service')).toMatchObject({ spec: { ports: [{ name: 'metrics', port: 8080 }] } });
    // least privilege: no Jobs, no node writes; the extra rule is appended
    expect(r.hasJobsRole).toBe(false);
    expect(r.nodeVerbs).toEqual(['get']);
    expect(r.all<V1ClusterRole>('ClusterRole')[0]?.rules?.at(-1)).toEqual({ apiGroups: [''], resources: ['configmaps'], verbs: ['get'] });
  });

  it('strings YAML 1.1 reads as something else ("yes", "on", "010") stay strings in the ConfigMap', async () => {
    const r = await render('rel', 'storage', undefined, ['--set-string', 'labelsForPV.a=yes,labelsForPV.b=010', '--set-string', 'nodeLabels[0]=on']);
    const parsed = parseConfig(r.configData);
    if (!parsed.ok) throw new Error(JSON.stringify(parsed.errors));
    expect([parsed.config.labelsForPV, parsed.config.nodeLabelsForPV]).toEqual([{ a: 'yes', b: '010' }, ['on']]);
  });

  it('RBAC by feature: the Jobs Role only with useJobForCleaning, nodes update only with removeNodeNotReadyTaint (and the toleration)', async () => {
    const defaults = await render('rel', 'storage', undefined);
    expect([defaults.hasJobsRole, defaults.nodeVerbs, defaults.daemonSet.spec?.template.spec?.tolerations]).toEqual([false, ['get'], undefined]);

    const jobs = await render('rel', 'storage', 'block-jobs.yaml');
    expect([jobs.hasJobsRole, jobs.nodeVerbs]).toEqual([true, ['get']]);
    expect(jobs.one<V1Role>('Role')).toMatchObject({ metadata: { name: 'rel-local-static-provisioner-jobs-role', namespace: 'storage' }, rules: [{ apiGroups: ['batch'], resources: ['jobs'], verbs: ['get', 'list', 'watch', 'create', 'delete'] }] });
    expect(jobs.configData).toMatchObject({ useJobForCleaning: 'true' });
    expect(parseYaml(jobs.configData['jobTolerations'] ?? '')).toEqual(jobs.daemonSet.spec?.template.spec?.tolerations);

    const taint = await render('rel', 'storage', 'taint-removal.yaml');
    expect([taint.hasJobsRole, taint.nodeVerbs]).toEqual([false, ['get', 'update']]);
    expect(taint.daemonSet.spec?.template.spec?.tolerations).toEqual([{ key: 'example.com/local-disks-not-ready', operator: 'Exists' }]);
    expect(taint.configData).toMatchObject({ removeNodeNotReadyTaint: 'true', provisionerNotReadyNodeTaintKey: 'example.com/local-disks-not-ready' });

    // --pv-node-label: the flag, and PV patch (labelling this node's existing PVs) only with it
    const pvVerbs = (x: typeof defaults): string[] | undefined =>
      x.all<V1ClusterRole>('ClusterRole').flatMap((role) => role.rules ?? []).find((rule) => rule.resources?.includes('persistentvolumes') && !rule.resources.includes('persistentvolumeclaims'))?.verbs;
    const labelled = await render('rel', 'storage', undefined, ['--set', 'daemon.pvNodeLabel=true']);
    expect(labelled.container.args).toContain('--pv-node-label=true');
    expect([pvVerbs(defaults), pvVerbs(labelled)]).toEqual([['get', 'list', 'watch', 'create', 'delete'], ['get', 'list', 'watch', 'create', 'delete', 'patch']]);
    // The claim check before a clean and a PV delete (issue 17): PVC get and list, in every rendering.
    const pvcVerbs = (x: typeof defaults): Array<string[] | undefined> =>
      x.all<V1ClusterRole>('ClusterRole').filter((role) => role.metadata?.name?.endsWith('-node-clusterrole')).map((role) => role.rules?.find((rule) => rule.resources?.includes('persistentvolumeclaims'))?.verbs);
    expect([pvcVerbs(defaults), pvcVerbs(labelled), pvcVerbs(jobs), pvcVerbs(taint)]).toEqual(Array(4).fill([['get', 'list']]));

    // --state-dir on the host (settings of removed classes, cleaner records): by default, off with an empty value.
    const state = (x: typeof defaults): unknown[] => [
      x.container.args?.filter((a) => a.startsWith('--state-dir')),
      x.container.volumeMounts?.find((m) => m.name === 'provisioner-state')?.mountPath,
      x.daemonSet.spec?.template.spec?.volumes?.find((v) => v.name === 'provisioner-state')?.hostPath,
    ];
    expect(state(defaults)).toEqual([
      ['--state-dir=/var/lib/local-volume-provisioner'],
      '/var/lib/local-volume-provisioner',
      { path: '/var/lib/local-volume-provisioner', type: 'DirectoryOrCreate' },
    ]);
    expect(state(await render('rel', 'storage', undefined, ['--set', 'daemon.stateDir=']))).toEqual([[], undefined, undefined]);

    const off = await render('rel', 'storage', 'block-jobs.yaml', ['--set', 'rbac.create=false']);
    expect(off.all('Role').length + off.all('ClusterRole').length + off.all('RoleBinding').length + off.all('ClusterRoleBinding').length).toBe(0);
  });

  it('prometheusRule.enabled: the shipped alert rules as a PrometheusRule, with the labels kube-prometheus-stack selects by', async () => {
    const shipped = (parseYaml(readFileSync(join(repo, 'deployment', 'monitoring', 'rules.yaml'), 'utf8')) as { groups: { rules: { labels?: Record<string, string> }[] }[] }).groups;
    expect((await renderWith({})).all('PrometheusRule')).toEqual([]);
    // Values without the key at all (a Go chart release's values with --reuse-values) render too.
    expect((await renderWith({ prometheusRule: null })).all('PrometheusRule')).toEqual([]);
    const r = await renderWith({ prometheusRule: { enabled: true, additionalLabels: { release: 'kube-prometheus-stack' } } });
    const pr = r.one<KubernetesObject & { spec: { groups: unknown } }>('PrometheusRule');
    expect(pr).toMatchObject({ apiVersion: 'monitoring.coreos.com/v1', metadata: { name: 'rel-local-static-provisioner', namespace: 'storage', labels: { release: 'kube-prometheus-stack', 'app.kubernetes.io/instance': 'rel' } } });
    expect(pr.spec.groups).toEqual(shipped);
    // Another namespace, and labels on every alert (a rule's own label wins over them).
    const r2 = await renderWith({ prometheusRule: { enabled: true, namespace: 'monitoring', additionalRuleLabels: { team: 'storage', severity: 'page' } } });
    const pr2 = r2.one<KubernetesObject & { spec: { groups: typeof shipped } }>('PrometheusRule');
    expect(pr2.metadata?.namespace).toBe('monitoring');
    const want = structuredClone(shipped);
    for (const rule of want.flatMap((g) => g.rules)) rule.labels = { team: 'storage', severity: 'page', ...rule.labels };
    expect(pr2.spec.groups).toEqual(want);
    const lint = await helm(helmBin, ['lint', chartDir, '--strict', '--set', 'prometheusRule.enabled=true', '--set', 'image=registry.example.com/storage/lsp:1.0.0'], scratch);
    expect(lint.stdout + lint.stderr, 'helm lint').toMatch(/1 chart\(s\) linted, 0 chart\(s\) failed/);
  });

  it('our additions: daemon flags, a metrics Service, the node-cleanup Deployment with its own least-privilege identity', async () => {
    const r = await render('rel', 'storage', 'additions.yaml');
    expect(r.container.args).toEqual(expect.arrayContaining(['--hot-reload=true', '--config-watch=true', '--kube-api-qps=10', '--kube-api-burst=20', '--log-level=debug', '--log-format=json']));
    expect(r.one('Service')).toMatchObject({ metadata: { name: 'rel-local-static-provisioner' }, spec: { selector: r.daemonSet.spec?.selector.matchLabels } });
    expect(r.all('ServiceMonitor')).toEqual([]);
    const dep = r.one<V1Deployment & { spec: NonNullable<V1Deployment['spec']> }>('Deployment');
    expect(dep.metadata?.name).toBe('rel-local-static-provisioner-node-cleanup');
    expect([dep.spec.replicas, dep.spec.strategy]).toEqual([1, { type: 'Recreate' }]);
    // neither the DaemonSet's selector nor the metrics Service's picks the node-cleanup pod
    expect(dep.spec.selector.matchLabels?.['app.kubernetes.io/name']).toBe('local-static-provisioner-node-cleanup');
    const c = dep.spec.template.spec!.containers[0]!;
    expect(c.args).toEqual(['--storageclass-names=fast-disks', '--pvc-deletion-delay=2m', '--stale-pv-discovery-interval=10s', '--listen-address=:8080']);
    expect(dep.spec.template.spec?.serviceAccountName).toBe('rel-local-static-provisioner-node-cleanup');
    const role = r.all<V1ClusterRole>('ClusterRole').find((x) => x.metadata?.name === 'rel-local-static-provisioner-node-cleanup');
    expect(role?.rules).toEqual([
      { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch'] },
      { apiGroups: [''], resources: ['persistentvolumes', 'persistentvolumeclaims'], verbs: ['get', 'list', 'watch', 'delete'] },
      { apiGroups: [''], resources: ['events'], verbs: ['create', 'patch'] },
    ]);
    // off by default, and the defaults pass no flag the daemon does not already default to, except
    // --state-dir on the host (daemon.stateDir: the daemon's own default is inside the container)
    const defaults = await render('rel', 'storage', undefined);
    expect(defaults.all('Deployment')).toEqual([]);
    expect(defaults.all('Service')).toEqual([]);
    expect(defaults.container.args).toEqual([
      '--listen-address=:8080',
      '--config-dir=/etc/provisioner/config',
      '--hot-reload=true',
      '--config-watch=true',
      '--config-sync-period=5s',
      '--discovery-period=10s',
      '--state-dir=/var/lib/local-volume-provisioner',
    ]);
  });

  describe('one discovery root (docs/helm.md): mounted once, classes under it need no volume of their own', () => {
    const rootVolume = { name: 'discovery-root', hostPath: { path: '/mnt/disks', type: 'DirectoryOrCreate' } };
    const rootMount = { name: 'discovery-root', mountPath: '/mnt/disks', mountPropagation: 'HostToContainer' };
    const classVolume = (name: string, path: string) => ({ name, hostPath: { path } });
    const classMount = (name: string, mountPath: string) => ({ name, mountPath, mountPropagation: 'HostToContainer' });
    const storageClassMap = (r: Rendering): unknown => parseYaml(r.configData['storageClassMap'] ?? '');
    /** The API server accepts the rendered DaemonSet as is (dryRun=All: volumes, mounts, propagation). */
    const expectApiAccepts = async (r: Rendering): Promise<void> => {
      const body = { ...r.daemonSet, metadata: { ...r.daemonSet.metadata, namespace: 'default' } };
      await admin.kc.makeApiClient(AppsV1Api).createNamespacedDaemonSet({ namespace: 'default', body, dryRun: 'All' });
    };

    it('the defaults: the discovery root, plus the Go chart default class where the Go chart put it (an upgrade with default values keeps its PVs)', async () => {
      const r = await render('rel', 'storage', undefined);
      expect(r.diskVolumes).toEqual({ volumes: [rootVolume, classVolume('fast-disks', '/mnt/fast-disks')], mounts: [rootMount, classMount('fast-disks', '/mnt/fast-disks')] });
      expect(storageClassMap(r)).toEqual({ 'fast-disks': expect.objectContaining({ hostDir: '/mnt/fast-disks', mountDir: '/mnt/fast-disks' }) });
    });

    it('an upstream values file with hostDirs outside the root keeps a volume per class, mounted at its mountDir', async () => {
      const r = await render('rel', 'storage', 'upstream-keys.yaml');
      expect(r.diskVolumes).toEqual({
        volumes: [rootVolume, classVolume('fast-disks', '/mnt/fast-disks'), classVolume('retained-disks', '/mnt/retained-disks')],
        mounts: [rootMount, classMount('fast-disks', '/mnt/fast-disks'), classMount('retained-disks', '/mnt/retained-disks')],
      });
      // the Go chart's own default class (its values.yaml: fast-disks on /mnt/fast-disks), and no root at all
      const goDefault = await renderWith({ discoveryRoot: '', classes: [{ name: 'fast-disks', hostDir: '/mnt/fast-disks' }] });
      expect(goDefault.diskVolumes).toEqual({ volumes: [classVolume('fast-disks', '/mnt/fast-disks')], mounts: [classMount('fast-disks', '/mnt/fast-disks')] });
      expect((await renderWith({ discoveryRoot: null })).diskVolumes).toEqual({ volumes: [classVolume('fast-disks', '/mnt/fast-disks')], mounts: [classMount('fast-disks', '/mnt/fast-disks')] });
    });

    it('a class added under the root renders no volume: the pod template stays the same (no restart, the ConfigMap is hot-reloaded)', async () => {
      const before = await render('rel', 'storage', undefined);
      const after = await renderWith({
        classes: [
          { name: 'fast-disks', hostDir: '/mnt/fast-disks' },
          { name: 'slow-disks', hostDir: '/mnt/disks/slow-disks/', mountDir: '/mnt/disks/slow-disks' },
          { name: 'local-block', hostDir: '/mnt/disks/local-block', volumeMode: 'Block' },
        ],
      });
      expect(Object.keys(storageClassMap(after) as object)).toEqual(['fast-disks', 'local-block', 'slow-disks']);
      expect(after.daemonSet.spec?.template).toEqual(before.daemonSet.spec?.template);
      // under the root but seen elsewhere in the container: the root's mount does not show it there
      const moved = await renderWith({ classes: [{ name: 'moved', hostDir: '/mnt/disks/moved', mountDir: '/data/moved' }] });
      expect(moved.diskVolumes).toEqual({ volumes: [rootVolume, classVolume('moved', '/mnt/disks/moved')], mounts: [rootMount, classMount('moved', '/data/moved')] });
      await expectApiAccepts(moved);
      // a sibling whose name only starts like the root is outside it
      const sibling = await renderWith({ classes: [{ name: 'other', hostDir: '/mnt/disks-other' }] });
      expect(sibling.diskVolumes.volumes).toEqual([rootVolume, classVolume('other', '/mnt/disks-other')]);
    });

    it('no two classes on one directory (the daemon refuses them), no two mounts at one container path', async () => {
      const separate = await renderWith({
        classes: [
          { name: 'a', hostDir: '/mnt/shared-a' },
          { name: 'c', hostDir: '/mnt/shared-c', mountDir: '/data/c' },
          { name: 'root-itself', hostDir: '/mnt/disks' },
        ],
      });
      expect(separate.diskVolumes).toEqual({
        volumes: [rootVolume, classVolume('a', '/mnt/shared-a'), classVolume('c', '/mnt/shared-c')],
        mounts: [rootMount, classMount('a', '/mnt/shared-a'), classMount('c', '/data/c')],
      });
      await expectApiAccepts(separate);
      // two classes sharing a hostDir render nothing: the daemon would reject the config (e2e/helm-upgrade.test.ts)
      expect(await renderFails({ classes: [{ name: 'a', hostDir: '/mnt/shared' }, { name: 'b', hostDir: '/mnt/shared/' }] })).toMatch(
        /classes\[1\] \(b\): hostDir \/mnt\/shared is the same directory as hostDir \/mnt\/shared of classes\[0\] \(a\)/,
      );
      expect(await renderFails({ classes: [{ name: 'a', hostDir: '/mnt/a', mountDir: '/mnt/x' }, { name: 'b', hostDir: '/mnt/b', mountDir: '/mnt/x' }] })).toMatch(
        /classes\[1\] \(b\): mountDir \/mnt\/x is the same directory as mountDir \/mnt\/x of classes\[0\] \(a\)/,
      );
      expect(await renderFails({ classes: [{ name: 'a', hostDir: '/mnt/a', mountDir: '/mnt/disks' }] })).toMatch(/classes\[0\] \(a\): mountDir \/mnt\/disks is already where \/mnt\/disks is mounted/);
      expect(await renderFails({ discoveryRoot: 'mnt/disks' })).toMatch(/discoveryRoot "mnt\/disks" must be an absolute directory other than \//);
      expect(await renderFails({ discoveryRoot: '/' })).toMatch(/discoveryRoot "\/" must be an absolute directory/);
    });
  });

  it('values the daemon cannot run with fail the render with one line naming the value', async () => {
    expect(await renderFails({ enableWindows: true })).toMatch(/enableWindows: local-static-provisioner runs on Linux nodes only/);
    expect(await renderFails({ image: 'registry.k8s.io/sig-storage/local-volume-provisioner:v2.9.0' })).toMatch(/looks like the Go provisioner's image/);
    expect(await renderFails({ classes: [{ name: 'a', hostDir: '/mnt/a' }, { name: 'a', hostDir: '/mnt/b' }] })).toMatch(/classes\[1\]\.name "a" is used twice/);
    expect(await renderFails({ classes: [{ name: 'a' }] })).toMatch(/classes\[0\] \(a\): hostDir is required/);
  });
});

/**
 * The daemon's denied requests (kube_requests_total{code="403"}), as "verb resource" lines. Without a
 * Jobs Role the only one allowed is the single Jobs list the daemon makes at start to find Jobs of an
 * earlier configuration (useJobForCleaning off: it then follows none; e2e/rbac.test.ts).
 */
function deniedRequests(metrics: string, prefix = 'local_volume_provisioner_'): string[] {
  const out: string[] = [];
  const name = `${prefix}kube_requests_total`;
  for (const line of metrics.split('\n')) {
    if (!line.startsWith(`${name}{`) || !line.includes('code="403"')) continue;
    const label = (k: string): string => new RegExp(`${k}="([^"]*)"`).exec(line)?.[1] ?? '';
    const n = metricValue(line, name);
    if (n > 0) out.push(`${n} ${label('verb')} ${label('resource')}`);
  }
  return out;
}

describe.skipIf(!isRoot())('each rendering applied to the control plane, the daemon run with its identity and ConfigMap', () => {
  const provisionedBy = (node: string) => (pv: V1PersistentVolume): boolean => pv.metadata?.annotations?.['pv.kubernetes.io/provisioned-by']?.startsWith(`local-volume-provisioner-${node}`) === true;

  it.each(CASES)('$name', async ({ name, values, args = [], docError }) => {
    if (docError !== undefined) throw new Error(docError);
    const host = new HostFixtures(`lsp-helm-${name}-`);
    const ns = uniqueName('helm');
    const release = uniqueName('h');
    const node = uniqueName('helm-node');
    const manifest = host.path('rendered.yaml');
    const createdClasses: string[] = [];
    let prov: ProvisionerProcess | undefined;
    let agent: NodeAgent | undefined;
    let cleaner: ProvisionerProcess | undefined;
    try {
      await core.createNamespace({ body: { metadata: { name: ns } } });
      const r = await render(release, ns, values, args);
      // No CRD for ServiceMonitor on this control plane: every other object is applied.
      const applicable = r.docs.filter((d) => d.kind !== 'ServiceMonitor');
      writeFileSync(manifest, applicable.map((d) => stringify(d)).join('---\n'));
      const applied = await applyManifests(inject('kubeconfig'), [manifest]);
      expect(applied).toHaveLength(applicable.length);

      await createNode(core, node);
      const data = r.configData;
      const taintKey = data['removeNodeNotReadyTaint'] === 'true' ? data['provisionerNotReadyNodeTaintKey'] : undefined;
      if (taintKey !== undefined) await setTaints(node, [{ key: taintKey, effect: 'NoSchedule' }]);

      const { files, classNames, devices, entries } = await hostVolumes(host, r, createdClasses);

      agent = r.hasJobsRole ? jobAgent(node, ns) : undefined;

      prov = await startRenderedDaemon(r, { node, ns, host, files });

      // discovery: one PV per class
      const pvs = await waitFor(
        async () => {
          const mine = (await core.listPersistentVolume()).items.filter(provisionedBy(node));
          return mine.length === classNames.length ? mine : undefined;
        },
        { what: `a PV for each of ${classNames.join(', ')}` },
      );
      await waitFor(() => prov!.ready(), { what: 'the daemon to be ready' });
      const pvLabels = (parseYaml(data['labelsForPV'] ?? '{}') ?? {}) as Record<string, string>;
      for (const pv of pvs) expect(pv.metadata?.labels).toMatchObject(pvLabels);

      // a config reload applies: a new PV label, seen on the PV rediscovered below
      await applyConfig(prov, async () => {
        const labels = { ...pvLabels, 'example.com/reloaded': 'v2' };
        await writeFile(join(host.path('config'), 'labelsForPV'), stringify(labels));
      });

      // a Released PV of a Delete class is cleaned, and its volume rediscovered
      const fresh = await releaseAndExpectClean(r, pvs, ns, { createdClasses, devices, entries });
      expect(fresh.metadata?.labels?.['example.com/reloaded']).toBe('v2');
      const cleanedBy = r.hasJobsRole ? 'job' : 'process';
      expect(metricValue(await prov.metrics(), 'local_volume_provisioner_persistentvolume_delete_total', { type: cleanedBy })).toBe(1);

      if (taintKey !== undefined) {
        await waitFor(async () => ((await core.readNode({ name: node })).spec?.taints ?? []).length === 0, { what: `the taint ${taintKey} to be removed` });
      }
      expect(deniedRequests(await prov.metrics())).toEqual(r.hasJobsRole ? [] : ['1 list jobs']);

      // the node-cleanup controller, when rendered: its own identity is enough to sync its caches
      const dep = r.all<V1Deployment>('Deployment')[0];
      if (dep !== undefined) {
        cleaner = await startRenderedNodeCleanup(dep, ns, host);
        await waitFor(() => cleaner!.ready(), { what: 'node-cleanup to be ready (caches synced)' });
        expect(deniedRequests(await cleaner.metrics(), 'local_volume_node_cleanup_')).toEqual([]);
      }
    } finally {
      await cleaner?.stop();
      await agent?.stop();
      await prov?.stop();
      await cleanupCase(ns, node, manifest, createdClasses, provisionedBy(node));
      host.cleanup();
    }
  }, 240_000);
});

/** Runs the daemon as the ServiceAccount the rendering created (so with its RBAC), with its DaemonSet's flags and env. */
async function startRenderedDaemon(r: Rendering, o: { node: string; ns: string; host: HostFixtures; files: Record<string, string> }): Promise<ProvisionerProcess> {
  const sa = r.daemonSet.spec!.template.spec!.serviceAccountName!;
  expect(r.all('ServiceAccount').map((a) => a.metadata?.name)).toContain(sa);
  const kubeconfig = await serviceAccountKubeconfig(admin, o.ns, sa, o.host.path('sa.kubeconfig'));
  // (the test's own listen address, config dir and short periods)
  const ownFlags = /^--(listen-address|config-dir|discovery-period|config-sync-period)=/;
  const args = (r.container.args ?? []).filter((a) => !ownFlags.test(a));
  const jobImage = r.container.env?.find((e) => e.name === 'JOB_CONTAINER_IMAGE')?.value;
  expect(jobImage).toBe(r.container.image);
  return startDaemon(o.host, { nodeName: o.node, files: o.files, kubeconfig, namespace: o.ns, args, env: { JOB_CONTAINER_IMAGE: jobImage ?? '' } });
}

/** The kubelet's part for the cleanup Jobs: runs each Job pod's command on this host. */
function jobAgent(node: string, ns: string): NodeAgent {
  const runner = onFailureRunner({ core, exec: hostJobRunner([]) });
  return startNodeAgent({ core, nodeName: node, namespace: ns, run: runner, onError: (err) => void err });
}

/** Runs local-volume-node-cleanup as the rendered Deployment's ServiceAccount, with its flags. */
async function startRenderedNodeCleanup(dep: V1Deployment, ns: string, host: HostFixtures): Promise<ProvisionerProcess> {
  const pod = dep.spec!.template.spec!;
  const kubeconfig = await serviceAccountKubeconfig(admin, ns, pod.serviceAccountName!, host.path('node-cleanup.kubeconfig'));
  const args = (pod.containers[0]?.args ?? []).filter((a) => !a.startsWith('--listen-address='));
  return startNodeCleanup({ kubeconfig, port: await freePort(), logFile: host.path('node-cleanup.log'), args });
}

/** Fills the volume of a PV of a Delete class, releases it, and checks it comes back empty; returns the rediscovered PV. */
async function releaseAndExpectClean(
  r: Rendering,
  pvs: readonly V1PersistentVolume[],
  ns: string,
  v: { createdClasses: readonly string[]; devices: Record<string, string>; entries: Record<string, string> },
): Promise<V1PersistentVolume> {
  const deleteClasses = new Set([...v.createdClasses, ...r.all<V1StorageClass>('StorageClass').filter((s) => s.reclaimPolicy === 'Delete').map((s) => s.metadata!.name!)]);
  const pv = pvs.find((p) => deleteClasses.has(p.spec?.storageClassName ?? ''))!;
  const cls = pv.spec!.storageClassName!;
  const device = v.devices[cls];
  if (device === undefined) writeFileSync(join(v.entries[cls]!, 'data'), 'user data');
  else fillDevice(device, 16);
  const claim = await bindPV(core, pv, ns);
  const fresh = await releaseAndRediscover(core, ns, pv, claim, 90_000);
  if (device === undefined) expect(readdirSync(v.entries[cls]!)).toEqual([]);
  else expect(allZero(device, 16 * 1024 * 1024)).toBe(true);
  return fresh;
}

async function setTaints(node: string, taints: V1Taint[]): Promise<void> {
  const n = await core.readNode({ name: node });
  await core.replaceNode({ name: node, body: { ...n, spec: { ...n.spec, taints } } });
}

/**
 * The rendered ConfigMap as the config dir, and a volume for each class. The one change to the
 * ConfigMap: each class's mountDir (where the DaemonSet mounts hostDir in the container) is a
 * fixture dir, as this daemon runs on the host. A class the rendering has no StorageClass for gets
 * one (Delete), named in `created`.
 */
async function hostVolumes(
  host: HostFixtures,
  r: Rendering,
  created: string[],
): Promise<{ files: Record<string, string>; classNames: string[]; devices: Record<string, string>; entries: Record<string, string> }> {
  const data = r.configData;
  const scm = parseYaml(data['storageClassMap'] ?? '') as Record<string, { mountDir: string; volumeMode?: string; namePattern?: string }>;
  const devices: Record<string, string> = {};
  const entries: Record<string, string> = {};
  for (const [cls, c] of Object.entries(scm)) {
    c.mountDir = host.mkdir('disks', cls);
    const entry = c.namePattern === 'vol-*' ? 'vol-1' : 'vol';
    if (c.volumeMode === 'Block') {
      const dev = host.loopDevice(16, cls);
      devices[cls] = dev;
      host.symlink(dev, 'disks', cls, entry);
    } else {
      host.tmpfs(8, 'disks', cls, entry);
    }
    entries[cls] = join(c.mountDir, entry);
    if (!r.all<V1StorageClass>('StorageClass').some((sc) => sc.metadata?.name === cls)) {
      await storage.createStorageClass({ body: { metadata: { name: cls }, provisioner: 'kubernetes.io/no-provisioner', volumeBindingMode: 'WaitForFirstConsumer', reclaimPolicy: 'Delete' } });
      created.push(cls);
    }
  }
  return { files: { ...data, storageClassMap: stringify(scm) }, classNames: Object.keys(scm), devices, entries };
}

async function cleanupCase(ns: string, node: string, manifest: string, classes: readonly string[], mine: (pv: V1PersistentVolume) => boolean): Promise<void> {
  const ignore404 = (err: unknown): void => {
    if (apiStatus(err) !== 404) throw err;
  };
  await reapPods(core, ns, node).catch(() => undefined);
  for (const pv of (await core.listPersistentVolume()).items.filter(mine)) await core.deletePersistentVolume({ name: pv.metadata!.name! }).catch(ignore404);
  if (existsSync(manifest)) await deleteManifests(inject('kubeconfig'), [manifest]);
  for (const c of classes) await storage.deleteStorageClass({ name: c }).catch(ignore404);
  await core.deleteNamespace({ name: ns }).catch(ignore404);
  await core.deleteNode({ name: node }).catch(ignore404);
}
