// The shipped alert rules (deployment/monitoring/rules.yaml, issue 18 point 16): `promtool check rules`
// and `promtool test rules` (Debian package prometheus; .ci/run installs it, so the promtool cases skip
// only on a machine without it, never in CI), the copies in the Helm chart, the kustomize monitoring
// component and the docs equal to it, and every metric and label name of the rules one that the daemon
// exports (src/metrics/metrics.ts).
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { Metrics } from '../../src/metrics/metrics.ts';

const root = join(import.meta.dirname, '..', '..');
const rulesFile = join(root, 'deployment', 'monitoring', 'rules.yaml');
const promtoolTests = join(import.meta.dirname, 'alert-rules.promtool.yaml');

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface Group {
  name: string;
  rules: Rule[];
}
const groupsOf = (text: string): Group[] => (parse(text) as { groups: Group[] }).groups;
const shipped = groupsOf(readFileSync(rulesFile, 'utf8'));

const onPath = (cmd: string): boolean => (process.env['PATH'] ?? '').split(delimiter).some((d) => d !== '' && existsSync(join(d, cmd)));

/** promtool is absent: skip with the reason, except in CI (.ci/run installs it), where that is a failure. */
const promtoolMissing = onPath('promtool') ? undefined : 'promtool is not installed (Debian: apt-get install prometheus)';
if (promtoolMissing !== undefined && process.env['CI'] === 'true') throw new Error(`${promtoolMissing}: .ci/run must install it`);

const run = async (args: string[]): Promise<{ code: number; out: string }> => {
  try {
    const r = await promisify(execFile)('promtool', args, { cwd: root, encoding: 'utf8' });
    return { code: 0, out: r.stdout + r.stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof err.code === 'number' ? err.code : -1, out: `${err.stdout ?? ''}${err.stderr ?? ''}` };
  }
};

describe.skipIf(promtoolMissing !== undefined)(`promtool on deployment/monitoring/rules.yaml${promtoolMissing ? ` (skipped: ${promtoolMissing})` : ''}`, () => {
  it('promtool check rules: valid, seven rules', async () => {
    const r = await run(['check', 'rules', rulesFile]);
    expect(r.out).toContain('SUCCESS: 7 rules found');
    expect(r.code).toBe(0);
  });

  it('promtool test rules: each alert fires on the series the daemon exports when it should, and only then', async () => {
    const r = await run(['test', 'rules', promtoolTests]);
    expect(r.out).toContain('SUCCESS');
    expect(r.code).toBe(0);
    // Every shipped alert is exercised by the promtool tests.
    const tested = new Set([...readFileSync(promtoolTests, 'utf8').matchAll(/alertname: (\w+)/g)].map((m) => m[1]));
    expect(shipped.flatMap((g) => g.rules.map((x) => x.alert)).filter((a) => !tested.has(a))).toEqual([]);
  }, 30_000); // promtool runs every rule test: seconds on a loaded machine

  it('promtool test rules fails when a rule is broken (the tests bite)', async () => {
    const { mkdtemp, writeFile, rm } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const dir = await mkdtemp(join(tmpdir(), 'lsp-rules-'));
    try {
      const broken = readFileSync(rulesFile, 'utf8').replace('persistentvolume_delete_failed_total[30m]) > 3', 'persistentvolume_delete_failed_total[30m]) > 30');
      await writeFile(join(dir, 'rules.yaml'), broken);
      await writeFile(join(dir, 'tests.yaml'), readFileSync(promtoolTests, 'utf8').replace('../../deployment/monitoring/rules.yaml', 'rules.yaml'));
      const r = await run(['test', 'rules', join(dir, 'tests.yaml')]);
      expect(r.code).not.toBe(0);
      expect(r.out).toContain('alertname: LocalVolumeProvisionerCleanupFailing');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 30_000); // promtool runs every rule test: seconds on a loaded machine
});

describe('the shipped copies of the rules', () => {
  it('the Helm chart ships the same file', () => {
    expect(readFileSync(join(root, 'helm', 'local-static-provisioner', 'files', 'alert-rules.yaml'), 'utf8')).toBe(readFileSync(rulesFile, 'utf8'));
  });

  it('the kustomize monitoring component: a PrometheusRule whose groups are the file, listed in the component', () => {
    const dir = join(root, 'deployment', 'kubernetes', 'components', 'monitoring');
    const pr = parse(readFileSync(join(dir, 'prometheusrule.yaml'), 'utf8')) as { apiVersion: string; kind: string; spec: { groups: Group[] } };
    expect(pr).toMatchObject({ apiVersion: 'monitoring.coreos.com/v1', kind: 'PrometheusRule' });
    expect(pr.spec.groups).toEqual(shipped);
    expect((parse(readFileSync(join(dir, 'kustomization.yaml'), 'utf8')) as { resources: string[] }).resources).toContain('prometheusrule.yaml');
  });

  it('the rules shown in docs/operations.md and docs/hot-reload.md are the shipped ones', () => {
    const blocks = ['operations.md', 'hot-reload.md'].flatMap((f) =>
      [...readFileSync(join(root, 'docs', f), 'utf8').matchAll(/^```yaml\n([\s\S]*?)^```/gm)].map((m) => m[1] ?? '').filter((t) => /^groups:/m.test(t)),
    );
    expect(blocks.flatMap((b) => groupsOf(b))).toEqual(shipped);
  });
});

describe('the rules name what the daemon exports', () => {
  const metrics = new Metrics({ defaultMetrics: false });
  metrics.registerProcTable(() => ({ running: 0, succeeded: 0, failed: 0 }));
  const exported = new Map(
    metrics.registry.getMetricsAsArray().map((m) => [m.name, (m as unknown as { labelNames?: readonly string[] }).labelNames ?? []] as const),
  );
  /** Labels Prometheus adds to every scraped series (the ServiceMonitor's relabelings add node). */
  const targetLabels = ['instance', 'job', 'node', 'namespace', 'pod', 'service', 'endpoint', 'container'];
  const rules = shipped.flatMap((g) => g.rules);

  it.each(rules.map((r) => [r.alert, r] as const))('%s: metric and label names exist', (_alert, rule) => {
    const names = [...rule.expr.matchAll(/\blocal_volume_provisioner_\w+/g)].map((m) => m[0]);
    expect(names.length).toBeGreaterThan(0);
    for (const n of names) expect([...exported.keys()], `metric ${n}`).toContain(n);
    const metricLabels = new Set(names.flatMap((n) => exported.get(n) ?? []));
    const byLabels = [...rule.expr.matchAll(/\bby \(([^)]*)\)/g)].flatMap((m) => (m[1] ?? '').split(',').map((s) => s.trim()));
    for (const l of byLabels) expect([...metricLabels, ...targetLabels], `by (${l}) in ${rule.alert}`).toContain(l);
    const used = Object.values(rule.annotations ?? {}).flatMap((a) => [...a.matchAll(/\$labels\.(\w+)/g)].map((m) => m[1] ?? ''));
    // An aggregated expression keeps only its by-labels (the outer one's).
    const outerBy = /^\s*(?:sum|count|max|min|avg) by \(([^)]*)\)/.exec(rule.expr)?.[1]?.split(',').map((s) => s.trim());
    const count = /^\s*count\(/.test(rule.expr) ? [] : undefined;
    const available = outerBy ?? count ?? [...metricLabels, ...targetLabels];
    for (const l of used) expect(available, `$labels.${l} in ${rule.alert}`).toContain(l);
  });
});
