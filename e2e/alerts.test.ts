// The shipped alert rules in a real Prometheus (issue 18, point 16): the kustomize base runs on a real
// node (e2e/harness/node.ts, the image built from the Dockerfile, the e2e overlay of
// e2e/support/real-node.ts); a Prometheus server (Debian package prometheus, a process of this test
// with a temp config and data dir) scrapes the daemon at the targets the shipped ServiceMonitor
// makes of the shipped Service: the ready endpoints of its EndpointSlices on the real kube-apiserver,
// port `metrics`, its path, its job label and `node` relabeling. (Debian's prometheus has no
// kubernetes_sd: the test serves those targets to it by http_sd, fresh on every 2 s refresh.) It
// evaluates deployment/monitoring/rules.yaml as shipped, except that every `for:` is cut to a few
// seconds (the only change, checked); scrape and evaluation run every 2 s. Then:
//  - a claimed volume whose filesystem is remounted read-only on the host makes LocalVolumeClaimUnhealthy
//    fire (the volume health gauge, with the claim's namespace and name); released, it cannot be cleaned
//    (unlink fails with EROFS) and LocalVolumeProvisionerCleanupFailing fires, with the labels of the series;
//  - a ConfigMap edited to bad YAML makes LocalVolumeProvisionerConfigRejected fire, and the fix
//    resolves it.
// Measurements go to the log as `[measure] …`.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, openSync, closeSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DiscoveryV1Api, PatchStrategy, setHeaderOptions, type V1ConfigMap, type V1PersistentVolume, type V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { freePort } from './harness/controlplane.ts';
import { waitFor, type Clients } from './harness/kube.ts';
import { deploymentDir } from './harness/manifests.ts';
import { onPath } from './harness/node.ts';
import { baseDaemonSet, realNodeUnsupportedReason } from './support/real-node.ts';
import { withRealNode } from './support/with-real-node.ts';

const reason = realNodeUnsupportedReason() ?? (onPath('prometheus') ? undefined : 'a real Prometheus needs the prometheus binary (Debian: apt-get install prometheus)');
const measure = (what: string, ms: number): void => console.log(`[measure] ${what}: ${(ms / 1000).toFixed(1)} s`);

const rulesFile = join(deploymentDir, '..', 'monitoring', 'rules.yaml');
const serviceMonitorFile = join(deploymentDir, 'components', 'monitoring', 'servicemonitor.yaml');
const configMapName = 'local-volume-provisioner-config';

interface Rule {
  alert: string;
  for?: string;
  [k: string]: unknown;
}
interface Alert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  state: string;
  activeAt: string;
}

/** The shipped rules with every `for:` set to `to`: nothing else changes. */
function shortenFor(text: string, to: string): string {
  const out = text.replace(/^(\s+)for: \S+$/gm, `$1for: ${to}`);
  const strip = (t: string): unknown => (parse(t) as { groups: { rules: Rule[] }[] }).groups.map((g) => ({ ...g, rules: g.rules.map(({ for: _for, ...r }) => r) }));
  if (JSON.stringify(strip(out)) !== JSON.stringify(strip(text))) throw new Error('shortenFor changed more than `for:`');
  return out;
}

/** The shipped ServiceMonitor (components/monitoring): what the Prometheus Operator turns into a scrape config. */
interface ServiceMonitor {
  metadata: { namespace: string };
  spec: {
    jobLabel: string;
    selector: { matchExpressions: { key: string; operator: string; values: string[] }[] };
    endpoints: { port: string; path: string; scheme: string; honorLabels?: boolean; relabelings?: { sourceLabels: string[]; targetLabel: string }[] }[];
  };
}
interface SdGroup {
  targets: string[];
  labels: Record<string, string>;
}

/**
 * The targets of the ServiceMonitor, as Prometheus' kubernetes_sd (role endpointslice) plus the
 * Operator's relabelings make them, read from the real apiserver: per ready endpoint of each
 * Service its selector picks, on the port it names, `podIP:port`; job = the Service's jobLabel
 * value; namespace, service, pod; and the ServiceMonitor's relabelings (node from the endpoint's
 * node). Debian's prometheus is built without kubernetes_sd, so Prometheus gets them by http_sd.
 */
async function serviceMonitorTargets(api: Clients, sm: ServiceMonitor): Promise<SdGroup[]> {
  const ns = sm.metadata.namespace;
  const selector = sm.spec.selector.matchExpressions.map((e) => {
    expect(e.operator).toBe('In');
    return `${e.key} in (${e.values.join(',')})`;
  });
  const ep = sm.spec.endpoints[0]!;
  const groups: SdGroup[] = [];
  for (const svc of (await api.core.listNamespacedService({ namespace: ns, labelSelector: selector.join(',') })).items) {
    const svcName = svc.metadata?.name ?? '';
    /** One target, labelled as the Operator's config labels it. */
    const target = (address: string, nodeName: string | undefined, pod: string | undefined): SdGroup => {
      const meta: Record<string, string> = { __meta_kubernetes_pod_node_name: nodeName ?? '' };
      const relabeled = Object.fromEntries((ep.relabelings ?? []).map((r) => [r.targetLabel, r.sourceLabels.map((l) => meta[l] ?? '').join(';')]));
      const job = svc.metadata?.labels?.[sm.spec.jobLabel] ?? svcName;
      return { targets: [address], labels: { job, namespace: ns, service: svcName, pod: pod ?? '', __metrics_path__: ep.path, __scheme__: ep.scheme, ...relabeled } };
    };
    const slices = (await api.kc.makeApiClient(DiscoveryV1Api).listNamespacedEndpointSlice({ namespace: ns, labelSelector: `kubernetes.io/service-name=${svcName}` })).items;
    for (const slice of slices) {
      const port = slice.ports?.find((p) => p.name === ep.port)?.port;
      if (port === undefined) continue;
      for (const e of (slice.endpoints ?? []).filter((x) => x.conditions?.ready === true)) {
        groups.push(...e.addresses.map((addr) => target(`${addr}:${String(port)}`, e.nodeName, e.targetRef?.name)));
      }
    }
  }
  return groups;
}

/** An HTTP service discovery endpoint for Prometheus serving serviceMonitorTargets (fresh on every poll). */
async function startSdServer(api: Clients, sm: ServiceMonitor): Promise<{ url: string; close: () => Promise<void> }> {
  const server = createServer((req, res) => {
    serviceMonitorTargets(api, sm).then(
      (groups) => {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(groups));
      },
      (e: unknown) => {
        res.writeHead(500);
        res.end(String(e));
      },
    );
  });
  await new Promise<void>((res) => server.listen(0, '127.0.0.1', res));
  const addr = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${String(addr.port)}/targets`, close: () => new Promise((res) => server.close(() => res())) };
}

describe.skipIf(reason !== undefined)(`the shipped alert rules in a real Prometheus scraping the daemon on a real node${reason ? ` (skipped: ${reason})` : ''}`, { timeout: 400_000 }, () => {
  const nodeName = 'lsp-alerts-node';
  const cls = 'fast-disks';
  let api: Clients;
  let promDir: string | undefined;
  let prom: ChildProcess | undefined;
  let promUrl = '';
  let readOnly: string | undefined;
  let sd: { url: string; close: () => Promise<void> } | undefined;

  const alerts = async (): Promise<Alert[]> => {
    const r = (await (await fetch(`${promUrl}/api/v1/alerts`)).json()) as { status: string; data: { alerts: Alert[] } };
    return r.data.alerts;
  };
  const firing = (name: string) => async (): Promise<Alert | undefined> => (await alerts()).find((a) => a.labels['alertname'] === name && a.state === 'firing');
  const query = async (q: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]> => {
    const r = (await (await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(q)}`)).json()) as { data: { result: { metric: Record<string, string>; value: [number, string] }[] } };
    return r.data.result;
  };

  withRealNode({
    nodeName,
    disks: (disks) => {
      disks.volume(cls, 'vol1');
      disks.volume(cls, 'vol2');
    },
    setup: startPrometheus,
    teardown: stopPrometheus,
  });

  /** Prometheus: the shipped rules with short `for:`, a 2 s scrape and evaluation, the ServiceMonitor's scrape config. */
  async function startPrometheus(run: { readonly api: Clients }): Promise<void> {
    api = run.api;
    promDir = mkdtempSync(join(tmpdir(), 'lsp-prometheus-'));
    const sm = parse(readFileSync(serviceMonitorFile, 'utf8')) as ServiceMonitor;
    sd = await startSdServer(api, sm);
    writeFileSync(join(promDir, 'rules.yaml'), shortenFor(readFileSync(rulesFile, 'utf8'), '4s'));
    writeFileSync(
      join(promDir, 'prometheus.yml'),
      stringify({
        global: { scrape_interval: '2s', scrape_timeout: '2s', evaluation_interval: '2s' },
        rule_files: [join(promDir, 'rules.yaml')],
        scrape_configs: [
          { job_name: 'local-volume-provisioner', honor_labels: sm.spec.endpoints[0]?.honorLabels === true, http_sd_configs: [{ url: sd.url, refresh_interval: '2s' }] },
        ],
      }),
    );
    const port = await freePort();
    promUrl = `http://127.0.0.1:${String(port)}`;
    const log = openSync(join(promDir, 'prometheus.log'), 'a');
    prom = spawn(
      'prometheus',
      [`--config.file=${join(promDir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(promDir, 'data')}`, `--web.listen-address=127.0.0.1:${String(port)}`, '--web.enable-lifecycle'],
      { stdio: ['ignore', log, log] },
    );
    closeSync(log);
    await waitFor(
      async () => {
        if (prom?.exitCode !== null) throw new Error(`prometheus exited (${String(prom?.exitCode)}): ${readFileSync(join(promDir ?? '', 'prometheus.log'), 'utf8').slice(-2000)}`);
        return (await fetch(`${promUrl}/-/ready`)).ok;
      },
      { what: 'Prometheus ready', timeoutMs: 60_000 },
    );
  }

  /** Stops Prometheus and makes the read-only volume writable again, before the node stops. */
  async function stopPrometheus(errors: unknown[]): Promise<void> {
    if (readOnly) {
      try {
        execFileSync('mount', ['-o', 'remount,rw', readOnly]);
      } catch (e) {
        errors.push(e);
      }
    }
    if (prom?.pid !== undefined && prom.exitCode === null) {
      const exited = new Promise((res) => prom?.once('exit', res));
      process.kill(prom.pid, 'SIGTERM');
      await Promise.race([exited, new Promise((res) => setTimeout(res, 20_000))]);
      if (prom.exitCode === null && prom.signalCode === null) process.kill(prom.pid, 'SIGKILL');
    }
    await sd?.close().catch((e: unknown) => errors.push(e));
    if (promDir) {
      try {
        console.log(`--- prometheus.log (last lines) ---\n${readFileSync(join(promDir, 'prometheus.log'), 'utf8').split('\n').slice(-15).join('\n')}`);
      } catch {
        // no log
      }
      rmSync(promDir, { recursive: true, force: true });
    }
  }

  let pod: V1Pod;

  it('Prometheus finds the daemon through the Service the ServiceMonitor selects, scrapes it and loads the nine rules', async () => {
    pod = await waitFor(
      async () =>
        (await api.core.listNamespacedPod({ namespace: 'kube-system', labelSelector: `app.kubernetes.io/name=${baseDaemonSet}` })).items.find((p) =>
          p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
        ),
      { what: 'the provisioner pod Ready', timeoutMs: 180_000, intervalMs: 500 },
    );
    const t0 = performance.now();
    const up = await waitFor(async () => (await query('up{job="local-volume-provisioner"} == 1'))[0], { what: 'the daemon a target that is up', timeoutMs: 120_000, intervalMs: 500 });
    measure('pod Ready to target up', performance.now() - t0);
    expect(up.metric).toMatchObject({ job: 'local-volume-provisioner', node: nodeName, pod: pod.metadata?.name });
    // The node has an address (e2e/harness/node.ts), so the hostNetwork pod has an IP and the Service an endpoint.
    expect(pod.status?.podIP).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    expect(up.metric['instance']).toBe(`${pod.status?.podIP ?? ''}:8080`);
    const rules = (await (await fetch(`${promUrl}/api/v1/rules`)).json()) as { data: { groups: { rules: { name: string; health: string }[] }[] } };
    const loaded = rules.data.groups.flatMap((g) => g.rules);
    expect(loaded).toHaveLength(9);
    expect(loaded.filter((r) => r.health === 'err')).toEqual([]);
    // Healthy: none of them fires.
    await waitFor(async () => (await query('local_volume_provisioner_config_last_reload_successful'))[0], { what: 'the config metric scraped', timeoutMs: 60_000 });
    expect((await alerts()).filter((a) => a.state === 'firing')).toEqual([]);
  });

  it('a volume that cannot be cleaned: LocalVolumeProvisionerCleanupFailing fires', async () => {
    const pv = await waitFor(
      async () => (await api.core.listPersistentVolume()).items.find((p: V1PersistentVolume) => p.spec?.local?.path === `/mnt/disks/${cls}/vol1` && p.status?.phase === 'Available'),
      { what: 'the PV of vol1 Available', timeoutMs: 120_000 },
    );
    const pvName = pv.metadata?.name ?? '';
    await api.core.createNamespacedPersistentVolumeClaim({
      namespace: 'default',
      body: { metadata: { name: 'doomed' }, spec: { storageClassName: cls, volumeName: pvName, accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Mi' } } } },
    });
    await waitFor(async () => (await api.core.readPersistentVolume({ name: pvName })).status?.phase === 'Bound', { what: `PV ${pvName} Bound`, timeoutMs: 60_000 });
    // Data the cleaner must remove, on a filesystem that has gone read-only (as a failing disk does).
    writeFileSync(`/mnt/disks/${cls}/vol1/data`, 'written before the release\n');
    execFileSync('mount', ['-o', 'remount,ro', `/mnt/disks/${cls}/vol1`]);
    readOnly = `/mnt/disks/${cls}/vol1`;
    // The volume health check sees it (issue 19): LocalVolumeClaimUnhealthy, with the claim's namespace
    // (the ServiceMonitor honors the gauge's labels) and name.
    const tr = performance.now();
    const unhealthy = await waitFor(firing('LocalVolumeClaimUnhealthy'), { what: 'LocalVolumeClaimUnhealthy firing', timeoutMs: 120_000, intervalMs: 1000 });
    measure('remount,ro of a claimed volume to LocalVolumeClaimUnhealthy firing', performance.now() - tr);
    expect(unhealthy.labels).toMatchObject({ severity: 'critical', node: nodeName, persistentvolume: pvName, condition: 'read-only', namespace: 'default', persistentvolumeclaim: 'doomed', storageclass: cls });
    expect(unhealthy.annotations['summary']).toBe(`PVC default/doomed: local volume ${pvName} is read-only`);
    const t0 = performance.now();
    await api.core.deleteNamespacedPersistentVolumeClaim({ name: 'doomed', namespace: 'default' });
    const alert = await waitFor(firing('LocalVolumeProvisionerCleanupFailing'), { what: 'LocalVolumeProvisionerCleanupFailing firing', timeoutMs: 300_000, intervalMs: 1000 });
    measure('PVC delete (clean fails, retried 10 s, 20 s, 40 s, ...) to CleanupFailing firing', performance.now() - t0);
    expect(alert.labels).toMatchObject({ severity: 'warning', job: 'local-volume-provisioner', node: nodeName, mode: 'Filesystem', type: 'process' });
    expect(alert.annotations['summary']).toBe(`local-volume-provisioner on ${alert.labels['instance'] ?? ''}: Filesystem cleanups failing (process)`);
    // The PV was kept, with the data.
    expect((await api.core.readPersistentVolume({ name: pvName })).status?.phase).toBe('Released');
    expect(readFileSync(`/mnt/disks/${cls}/vol1/data`, 'utf8')).toBe('written before the release\n');
    // The disk writable again: the next retry cleans it and the PV comes back.
    execFileSync('mount', ['-o', 'remount,rw', readOnly]);
    readOnly = undefined;
    await waitFor(
      async () => {
        const p = await api.core.readPersistentVolume({ name: pvName }).catch(() => undefined);
        return p === undefined || p.metadata?.uid !== pv.metadata?.uid || undefined;
      },
      { what: `PV ${pvName} cleaned and deleted once the volume is writable`, timeoutMs: 300_000, intervalMs: 1000 },
    );
  });

  it('a ConfigMap edited to bad YAML: LocalVolumeProvisionerConfigRejected fires; the fix resolves it', async () => {
    const cm: V1ConfigMap = await api.core.readNamespacedConfigMap({ name: configMapName, namespace: 'kube-system' });
    const good = cm.data?.['storageClassMap'] ?? '';
    const patch = (storageClassMap: string): Promise<V1ConfigMap> =>
      api.core.patchNamespacedConfigMap({ name: configMapName, namespace: 'kube-system', body: { data: { storageClassMap } } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    const t0 = performance.now();
    await patch(`${good}  mountDir: [unclosed\n`);
    const alert = await waitFor(firing('LocalVolumeProvisionerConfigRejected'), { what: 'LocalVolumeProvisionerConfigRejected firing', timeoutMs: 300_000, intervalMs: 1000 });
    measure('ConfigMap patch (kubelet sync included) to ConfigRejected firing', performance.now() - t0);
    expect(alert.labels).toMatchObject({ severity: 'warning', job: 'local-volume-provisioner', node: nodeName, pod: pod.metadata?.name });
    expect(alert.annotations['summary']).toBe(`local-volume-provisioner on ${alert.labels['instance'] ?? ''} rejects its ConfigMap`);
    const t1 = performance.now();
    await patch(good);
    await waitFor(async () => !(await alerts()).some((a) => a.labels['alertname'] === 'LocalVolumeProvisionerConfigRejected') || undefined, {
      what: 'LocalVolumeProvisionerConfigRejected resolved after the fix',
      timeoutMs: 300_000,
      intervalMs: 1000,
    });
    measure('ConfigMap fix to ConfigRejected resolved', performance.now() - t1);
  });
});
