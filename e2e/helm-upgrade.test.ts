// The Helm chart for an admin coming from the Go chart (issue 18, points 1-5 and the Helm parts of 15), with
// the real helm CLI (e2e/harness/helm.ts). Renders need no control plane; one test installs a stand-in
// release of the Go chart on the e2e control plane and upgrades it with the flags docs/upgrading.md names.
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { KubernetesObject, V1ConfigMap, V1Container, V1DaemonSet, V1StorageClass } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse as parseYaml, parseAllDocuments, stringify } from 'yaml';
import { ensureHelmBinary, helm, type HelmResult } from './harness/helm.ts';
import { adminClients, uniqueName } from './harness/kube.ts';
import { helmInstall } from './support/doc-commands.ts';
import { GO_CHART_VERSION, goChartDefaultValues } from './support/go-chart-values.ts';
import { parseConfig } from '../src/config/parse.ts';
import { runDryRun } from '../src/dry-run.ts';
import { parseOptions } from '../src/flags.ts';
import { silentLogger } from '../src/util/log.ts';

const repo = resolve(import.meta.dirname, '..');
const chartDir = join(repo, 'helm', 'local-static-provisioner');
const examplesDir = join(repo, 'helm', 'examples');
const IMAGE = 'registry.example.com/storage/local-static-provisioner:0.1.0';
const GO_IMAGE_MESSAGE = /looks like the Go provisioner's image \(its repository ends in local-volume-provisioner\).*imageIsLocalStaticProvisioner=true/;

let helmBin = '';
let scratch = '';

beforeAll(async () => {
  helmBin = await ensureHelmBinary({ log: (m) => console.log(`[helm] ${m}`) });
  scratch = mkdtempSync(join(tmpdir(), 'lsp-helm-upgrade-'));
}, 900_000);
afterAll(() => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

function valuesFile(values: Record<string, unknown>): string {
  const file = join(scratch, `${uniqueName('values')}.yaml`);
  writeFileSync(file, stringify(values));
  return file;
}

const docsOf = (out: string): KubernetesObject[] => parseAllDocuments(out).map((d) => d.toJS() as KubernetesObject | null).filter((d): d is KubernetesObject => d !== null);
const one = <T extends KubernetesObject>(docs: readonly KubernetesObject[], kind: string): T => {
  const found = docs.filter((d) => d.kind === kind);
  if (found.length !== 1) throw new Error(`want one ${kind}, found ${found.length}`);
  return found[0] as T;
};
const containerOf = (docs: readonly KubernetesObject[]): V1Container => one<V1DaemonSet>(docs, 'DaemonSet').spec!.template.spec!.containers[0]!;

/** `helm template rel <chart> <args>`, never throwing. */
const template = (args: readonly string[], chart = chartDir): Promise<HelmResult> => helm(helmBin, ['template', 'rel', chart, '--namespace', 'storage', ...args], scratch);

async function renders(args: readonly string[], chart = chartDir): Promise<KubernetesObject[]> {
  const r = await template(args, chart);
  expect(r.stderr, `helm template ${args.join(' ')}`).toBe('');
  expect(r.code).toBe(0);
  return docsOf(r.stdout);
}

async function fails(args: readonly string[], chart = chartDir): Promise<string> {
  const r = await template(args, chart);
  expect(r.code, `helm template ${args.join(' ')} should fail`).not.toBe(0);
  return r.stderr;
}

/** A copy of the chart whose values.yaml is the Go chart's: what `helm upgrade --reuse-values` from a Go chart release renders with. */
function chartWithGoValues(): string {
  const dir = join(scratch, uniqueName('go-values-chart'));
  cpSync(chartDir, dir, { recursive: true });
  writeFileSync(join(dir, 'values.yaml'), stringify(goChartDefaultValues()));
  return dir;
}

describe('point 1: every image named like the Go provisioner\'s is refused, unless a value says it is ours', () => {
  const goImages = [
    'registry.k8s.io/sig-storage/local-volume-provisioner:v2.9.0',
    'gcr.io/k8s-staging-sig-storage/local-volume-provisioner:canary',
    'my-mirror.example/team/storage/local-volume-provisioner:v2.9.0',
    'mirror.example:5000/local-volume-provisioner@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef',
    'local-volume-provisioner',
  ];

  it.each(goImages)('%s fails the render, naming the value and the opt-in', async (image) => {
    expect(await fails(['--set', `image=${image}`])).toMatch(GO_IMAGE_MESSAGE);
  });

  it('imageIsLocalStaticProvisioner=true lets such a name through (our image pushed under it); our own names are never refused', async () => {
    const mirror = 'my-mirror.example/team/storage/local-volume-provisioner:v0.1.0';
    const ok = await renders(['--set', `image=${mirror}`, '--set', 'imageIsLocalStaticProvisioner=true']);
    expect(containerOf(ok).image).toBe(mirror);
    expect(containerOf(ok).env?.find((e) => e.name === 'JOB_CONTAINER_IMAGE')?.value).toBe(mirror);
    for (const image of [IMAGE, 'mirror.example:5000/local-volume-provisioner-ts:1', 'local-static-provisioner@sha256:00']) {
      expect(containerOf(await renders(['--set', `image=${image}`])).image).toBe(image);
    }
    // node-cleanup: the Go node-cleanup image in nodeCleanup.image is refused the same way
    const nc = await fails(['--set', `image=${IMAGE}`, '--set', 'nodeCleanup.enabled=true', '--set', 'nodeCleanup.image=registry.k8s.io/sig-storage/local-volume-node-cleanup:v2.9.0']);
    expect(nc).toMatch(/nodeCleanup\.image "registry\.k8s\.io\/sig-storage\/local-volume-node-cleanup:v2\.9\.0" looks like the Go provisioner's image/);
  });
});

describe('point 2: helm upgrade --reuse-values from a Go chart release (the Go chart\'s values.yaml as the only values)', () => {
  it('every template renders with the Go chart\'s values only, plus --set image; the Go image itself is refused', async () => {
    const goChart = chartWithGoValues();
    const docs = await renders(['--set', `image=${IMAGE}`], goChart);
    expect(docs.map((d) => d.kind).sort()).toEqual(['ClusterRole', 'ClusterRoleBinding', 'ConfigMap', 'DaemonSet', 'ServiceAccount']);
    const c = containerOf(docs);
    // the Go chart's layout and probe, as that release had them
    expect(c.livenessProbe).toEqual({ tcpSocket: { port: 'metrics' }, initialDelaySeconds: 10, periodSeconds: 60, timeoutSeconds: 5, failureThreshold: 3 });
    expect(c.readinessProbe).toEqual({ httpGet: { path: '/ready', port: 'metrics' } });
    expect(c.volumeMounts?.map((m) => m.mountPath)).toEqual(['/etc/provisioner/config', '/dev', '/mnt/fast-disks']);
    expect(c.args).toEqual(['--listen-address=:8080', '--config-dir=/etc/provisioner/config', '--hot-reload=true', '--config-watch=true']);
    const parsed = parseConfig(one<V1ConfigMap>(docs, 'ConfigMap').data ?? {});
    expect(parsed).toMatchObject({ ok: true, config: { storageClassMap: { 'fast-disks': { hostDir: '/mnt/fast-disks' } } } });
    // helm lint --strict passes too (the schema accepts the Go chart's values)
    const lint = await helm(helmBin, ['lint', goChart, '--strict', '--set', `image=${IMAGE}`], scratch);
    expect(lint.stdout + lint.stderr).toMatch(/1 chart\(s\) linted, 0 chart\(s\) failed/);
    // without --set image: the Go chart's image is what the release holds, refused with the reason
    expect(await fails([], goChart)).toMatch(/image "registry\.k8s\.io\/sig-storage\/local-volume-provisioner:v0\.1\.0" looks like the Go provisioner's image/);
  });

  it('on the control plane: a Go chart release upgrades with --reuse-values and with --reset-then-reuse-values (docs/upgrading.md)', async () => {
    const kubeconfig = inject('kubeconfig');
    const ns = uniqueName('helm-up');
    const release = uniqueName('lvp');
    const { core } = adminClients();
    // A stand-in for a Go chart release: the same chart name, the Go chart's version and values.yaml, and one
    // harmless object, so that the release's stored chart values are exactly the Go chart's.
    const goChart = join(scratch, uniqueName('go-chart'), 'local-static-provisioner');
    mkdirSync(join(goChart, 'templates'), { recursive: true });
    writeFileSync(join(goChart, 'Chart.yaml'), stringify({ apiVersion: 'v2', name: 'local-static-provisioner', version: GO_CHART_VERSION, appVersion: GO_CHART_VERSION }));
    writeFileSync(join(goChart, 'values.yaml'), stringify(goChartDefaultValues()));
    writeFileSync(join(goChart, 'templates', 'marker.yaml'), 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-go-chart-stand-in\ndata:\n  chart: {{ .Chart.Version | quote }}\n');
    const run = (...args: string[]): Promise<HelmResult> => helm(helmBin, [...args, '--namespace', ns, '--kubeconfig', kubeconfig], scratch);
    await core.createNamespace({ body: { metadata: { name: ns } } });
    try {
      const installed = await run('install', release, goChart, '--set', 'useNodeNameOnly=true');
      expect(installed.stderr).toBe('');
      expect(installed.code).toBe(0);
      // what docs/upgrading.md has the admin save: user-supplied values only, as YAML
      const saved = await run('get', 'values', release, '-o', 'yaml');
      expect(parseYaml(saved.stdout)).toEqual({ useNodeNameOnly: true });
      // (without -o yaml: a header line that is no value, the reason docs/upgrading.md says -o yaml)
      expect((await run('get', 'values', release)).stdout).toMatch(/^USER-SUPPLIED VALUES:\n/);

      const upgrade = async (...flags: string[]): Promise<KubernetesObject[]> => {
        const r = await run('upgrade', release, chartDir, ...flags, '--set', `image=${IMAGE}`, '--dry-run=server');
        expect(r.stderr, `helm upgrade ${flags.join(' ')}`).toBe('');
        expect(r.code).toBe(0);
        return docsOf(r.stdout.slice(r.stdout.indexOf('---')));
      };
      const reused = await upgrade('--reuse-values');
      expect(one<V1ConfigMap>(reused, 'ConfigMap').data).toMatchObject({ useNodeNameOnly: 'true' });
      expect(containerOf(reused).image).toBe(IMAGE);
      // the recommended flag: this chart's defaults (the discovery root, our probes) plus the release's own values
      for (const docs of [await upgrade('--reset-then-reuse-values'), await upgrade('--reset-values', '-f', valuesFile(parseYaml(saved.stdout) as Record<string, unknown>))]) {
        expect(one<V1ConfigMap>(docs, 'ConfigMap').data).toMatchObject({ useNodeNameOnly: 'true' });
        expect(containerOf(docs).volumeMounts?.map((m) => m.mountPath)).toEqual(['/etc/provisioner/config', '/dev', '/mnt/disks', '/mnt/fast-disks', '/var/lib/local-volume-provisioner']);
        expect(containerOf(docs).livenessProbe?.httpGet).toEqual({ path: '/healthz', port: 'metrics' });
      }
    } finally {
      await run('uninstall', release);
      await core.deleteNamespace({ name: ns }).catch(() => undefined);
    }
  });
});

describe('point 3: no default image (none is published)', () => {
  it('a render without image fails, naming the value and how to build the image', async () => {
    for (const args of [[], ['--set', 'image='], ['--set', 'image=  ']]) {
      const err = await fails(args);
      expect(err).toMatch(/image is not set, and no image of local-static-provisioner is published/);
      expect(err).toMatch(/npm run build-image/);
      expect(err).toMatch(/Dockerfile/);
      expect(err).toMatch(/--set image=<registry>\/local-static-provisioner:0\.1\.0/);
    }
    expect(containerOf(await renders(['--set', `image=${IMAGE}`])).image).toBe(IMAGE);
  });
});

describe('point 4: probes and classes sharing a directory', () => {
  const withImage = (...more: string[]): string[] => ['--set', `image=${IMAGE}`, ...more];

  it('livenessProbe: null (and readinessProbe: null) turn the probe off, as in the Go chart', async () => {
    const off = containerOf(await renders(withImage('-f', valuesFile({ livenessProbe: null }))));
    expect(off.livenessProbe).toBeUndefined();
    expect(off.readinessProbe).toBeDefined();
    expect(containerOf(await renders(withImage('--set', 'livenessProbe=null'))).livenessProbe).toBeUndefined();
    expect(containerOf(await renders(withImage('-f', valuesFile({ readinessProbe: null })))).readinessProbe).toBeUndefined();
  });

  it('the default probe timings: liveness as the Go chart (period 60 s, timeout 5 s), readiness timeout 5 s (docs/helm.md)', async () => {
    const c = containerOf(await renders(withImage()));
    expect(c.livenessProbe).toEqual({ httpGet: { path: '/healthz', port: 'metrics' }, initialDelaySeconds: 10, periodSeconds: 60, timeoutSeconds: 5, failureThreshold: 3 });
    expect(c.readinessProbe).toEqual({ httpGet: { path: '/ready', port: 'metrics' }, periodSeconds: 10, timeoutSeconds: 5 });
    // and docs/helm.md says so
    const doc = readFileSync(join(repo, 'docs', 'helm.md'), 'utf8');
    expect(doc).toMatch(/periodSeconds: 60, timeoutSeconds: 5, failureThreshold: 3/);
  });

  it('two classes sharing or nesting a directory fail the render (the daemon would refuse the config, pods never Ready)', async () => {
    const cases: Array<[unknown[], RegExp]> = [
      [[{ name: 'a', hostDir: '/mnt/shared' }, { name: 'b', hostDir: '/mnt/shared/' }], /classes\[1\] \(b\): hostDir \/mnt\/shared is the same directory as hostDir \/mnt\/shared of classes\[0\] \(a\)/],
      [[{ name: 'a', hostDir: '/mnt/shared' }, { name: 'c', hostDir: '/mnt/shared', mountDir: '/mnt/shared-c' }], /classes\[1\] \(c\): hostDir \/mnt\/shared is the same directory as hostDir \/mnt\/shared of classes\[0\] \(a\)/],
      [[{ name: 'outer', hostDir: '/mnt/disks' }, { name: 'inner', hostDir: '/mnt/disks/inner' }], /classes\[1\] \(inner\): hostDir \/mnt\/disks\/inner lies inside hostDir \/mnt\/disks of classes\[0\] \(outer\)/],
      [[{ name: 'inner', hostDir: '/mnt/disks/inner' }, { name: 'outer', hostDir: '/mnt/disks' }], /classes\[1\] \(outer\): hostDir \/mnt\/disks contains hostDir \/mnt\/disks\/inner of classes\[0\] \(inner\)/],
      [[{ name: 'a', hostDir: '/mnt/a', mountDir: '/mnt/x' }, { name: 'b', hostDir: '/mnt/x' }], /classes\[1\] \(b\): hostDir \/mnt\/x is the same directory as mountDir \/mnt\/x of classes\[0\] \(a\)/],
    ];
    for (const [classes, message] of cases) {
      const err = await fails(withImage('-f', valuesFile({ classes })));
      expect(err).toMatch(message);
      expect(err).toMatch(/the daemon refuses two classes whose directories overlap/);
    }
    // siblings and a name that only starts like another class's directory are fine
    await renders(withImage('-f', valuesFile({ classes: [{ name: 'a', hostDir: '/mnt/disks/a' }, { name: 'b', hostDir: '/mnt/disks/ab' }, { name: 'c', hostDir: '/mnt/fast-disks' }] })));
  });
});

describe('point 5: values.schema.json types every known key, accepts unknown ones', () => {
  type Schema = { additionalProperties?: unknown; properties: Record<string, { properties?: Record<string, unknown>; items?: { properties?: Record<string, unknown> } }> };
  const readSchema = (): Schema => JSON.parse(readFileSync(join(chartDir, 'values.schema.json'), 'utf8')) as Schema;

  it('a wrong type fails helm lint --strict (exit code) and helm template, naming the key', async () => {
    const bad: Array<[Record<string, unknown>, RegExp]> = [
      [{ classes: [{ name: 'a', hostDir: 5 }] }, /at '\/classes\/0\/hostDir': got number, want string/],
      [{ classes: 'x' }, /at '\/classes': got string, want null or array/],
      [{ useJobForCleaning: 'sometimes' }, /at '\/useJobForCleaning': got string, want/],
      [{ daemon: { extraArgs: '--x' } }, /at '\/daemon\/extraArgs': got string/],
      [{ livenessProbe: 'disabled' }, /at '\/livenessProbe': got string/],
    ];
    for (const [values, message] of bad) {
      const file = valuesFile({ image: IMAGE, ...values });
      const lint = await helm(helmBin, ['lint', chartDir, '--strict', '-f', file], scratch);
      expect(lint.code, `helm lint --strict ${JSON.stringify(values)}`).not.toBe(0);
      expect(lint.stdout + lint.stderr).toMatch(message);
      expect(await fails(['-f', file])).toMatch(message);
    }
  });

  it('unknown keys are accepted (no additionalProperties: false at the top), and every key of values.yaml and of the Go chart is typed', async () => {
    const schema = readSchema();
    expect(schema.additionalProperties).toBeUndefined();
    await renders(['-f', valuesFile({ image: IMAGE, someFutureKey: { x: 1 }, daemon: { someFutureFlag: true } })]);
    const ours = parseYaml(readFileSync(join(chartDir, 'values.yaml'), 'utf8')) as Record<string, unknown>;
    const missing: string[] = [];
    for (const values of [ours, goChartDefaultValues()]) {
      for (const [key, v] of Object.entries(values)) {
        const s = schema.properties[key];
        if (s === undefined) {
          missing.push(key);
          continue;
        }
        const sub = Array.isArray(v) ? (v[0] as Record<string, unknown> | undefined) : v;
        if (sub === null || typeof sub !== 'object' || key === 'nodeCleanupController') continue;
        const props = Array.isArray(v) ? s.items?.properties : s.properties;
        for (const k of Object.keys(sub)) if (props?.[k] === undefined && !['resources', 'rollingUpdate', 'tcpSocket', 'type', 'requests', 'limits', 'initialDelaySeconds', 'periodSeconds', 'timeoutSeconds', 'failureThreshold', 'httpGet'].includes(k)) missing.push(`${key}.${k}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('accepts the defaults with an image, every helm/examples file, the Go chart\'s values (lint --strict)', async () => {
    for (const args of [['--set', `image=${IMAGE}`], ...['upstream-keys.yaml', 'block-jobs.yaml', 'taint-removal.yaml', 'additions.yaml'].map((f) => ['--set', `image=${IMAGE}`, '-f', join(examplesDir, f)]), ['-f', valuesFile({ ...goChartDefaultValues(), image: IMAGE })]]) {
      const lint = await helm(helmBin, ['lint', chartDir, '--strict', ...args], scratch);
      expect(lint.stdout + lint.stderr, args.join(' ')).toMatch(/1 chart\(s\) linted, 0 chart\(s\) failed/);
      expect(lint.code).toBe(0);
    }
  });
});

describe('docs (point 15, the Helm parts)', () => {
  const read = (f: string): string => readFileSync(join(repo, 'docs', f), 'utf8');
  it('getting-started: the Helm step, as written, gives a PV for step 2\'s volume and the StorageClass examples/pvc-and-pod.yaml claims', async () => {
    const md = read('getting-started.md');
    const dir = /^DIR=(\S+)/m.exec(md)?.[1];
    expect(dir).toBe('/mnt/disks/fast-disks');
    const { release, chart, args } = helmInstall('getting-started.md');
    expect(chart).toBe('./helm/local-static-provisioner');
    const r = await helm(helmBin, ['template', release, join(repo, chart), ...args], scratch);
    expect(r.stderr).toBe('');
    const docs = docsOf(r.stdout);
    const parsed = parseConfig(one<V1ConfigMap>(docs, 'ConfigMap').data ?? {});
    if (!parsed.ok) throw new Error(JSON.stringify(parsed.errors));
    const claim = manifestClass(readFileSync(join(repo, 'examples', 'pvc-and-pod.yaml'), 'utf8'));
    expect(parsed.config.storageClassMap[claim]).toMatchObject({ hostDir: dir, mountDir: dir });
    expect(docs.filter((d) => d.kind === 'StorageClass').map((s) => [s.metadata?.name, (s as V1StorageClass).volumeBindingMode])).toEqual([[claim, 'WaitForFirstConsumer']]);
    // the pod sees the volume: dir is under the mounted discovery root
    expect(containerOf(docs).volumeMounts?.some((m) => dir!.startsWith(`${m.mountPath}/`) && m.mountPropagation === 'HostToContainer')).toBe(true);
  });

  it('upgrading.md: helm get values -o yaml, the flag for --reuse-values, the ClusterRoles to delete; the refusal rule as the chart applies it', () => {
    const md = read('upgrading.md');
    for (const line of md.split('\n').filter((l) => /helm .*get values/.test(l))) expect(line).toMatch(/get values <release> -o yaml/);
    expect(md).toMatch(/--reset-then-reuse-values/);
    expect(md).toMatch(/not `--reuse-values`/);
    expect(md).toMatch(/kubectl delete clusterrole/);
    for (const f of ['upgrading.md', 'helm.md']) {
      expect(read(f), f).not.toMatch(/the Go provisioner's image \(`…\/sig-storage\/local-volume-provisioner`/);
      expect(read(f), f).toMatch(/ends in\s+`local-volume-provisioner`/);
    }
  });
});

describe('docs (point 15): upgrading.md\'s --dry-run check says what its output is', () => {
  it('the `# skipped: mountDir … does not exist in the container` line the doc tells the admin to ignore is the one the dry run prints', async () => {
    const md = readFileSync(join(repo, 'docs', 'upgrading.md'), 'utf8');
    const quoted = /`(# skipped: mountDir "\/mnt\/fast-disks" of class "fast-disks" does not exist in the container; add a hostPath volume) …`/.exec(md)?.[1];
    expect(quoted, 'docs/upgrading.md quotes the skipped line').toBeDefined();
    expect(md).toMatch(/exit code 1 and `invalid configuration in \/cfg:`/);
    // the documented command's config (the Go chart's default class), run as the container would: no class directory
    const cfg = join(scratch, uniqueName('cfg'));
    mkdirSync(cfg);
    writeFileSync(join(cfg, 'storageClassMap'), 'fast-disks:\n  hostDir: /mnt/fast-disks\n  mountDir: /mnt/fast-disks\n  blockCleanerCommand: ["/scripts/shred.sh", "2"]\n');
    let out = '';
    const code = await runDryRun(parseOptions(['--dry-run', '--node-name=node-1', `--config-dir=${cfg}`], {}), silentLogger, (x) => (out += x));
    expect(code).toBe(0);
    if (existsSync('/mnt/fast-disks')) return; // (a machine that has the directory prints no such line)
    expect(out).toContain(quoted!);
  });
});

function manifestClass(yaml: string): string {
  for (const d of parseAllDocuments(yaml)) {
    const o = d.toJS() as { kind?: string; spec?: { storageClassName?: string } } | null;
    if (o?.kind === 'PersistentVolumeClaim' && o.spec?.storageClassName) return o.spec.storageClassName;
  }
  throw new Error('no PVC with a storageClassName');
}
