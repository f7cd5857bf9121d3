// Operations end to end (issue 11): the real daemon (node src/main.ts) against the
// real control plane. /metrics compared with the Go provisioner's metric list;
// the capacity gauge in steady state and after deletes; --dry-run output that
// the API server accepts (dryRun=All); the Go DaemonSet's klog flags.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { adminClients, apiStatus, uniqueName, waitFor } from './harness/kube.ts';
import { createNode } from './harness/node-agent.ts';
import { createImmediateClass, startDaemon, writeScript } from './support/cleanup.ts';
import { GO_METRICS, parseExposition } from './support/go-metrics.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { configFiles, metric, pvsOfNode, releasePV, waitPV, waitPVGone } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const { core, storage } = adminClients();
const repo = join(import.meta.dirname, '..');
const MIB = 1024 * 1024;
const CAPACITY = 'local_volume_provisioner_persistentvolume_capacity_bytes';

describe.skipIf(!isRoot())('metrics: parity with the Go provisioner, capacity gauge', () => {
  // Made in beforeAll: a describe filtered out (-t) must leave no temp dir behind.
  let host: HostFixtures;
  const node = uniqueName('ops-node');
  const ns = uniqueName('ops-ns');
  const fsClass = uniqueName('ops-fs');
  const blkClass = uniqueName('ops-blk');
  let prov: ProvisionerProcess | undefined;
  const name = (entry: string, cls = fsClass): string => generatePVName(entry, node, cls);

  beforeAll(async () => {
    host = new HostFixtures('lsp-ops-');
    await createNode(core, node);
    await core.createNamespace({ body: { metadata: { name: ns } } });
    await createImmediateClass(storage, fsClass);
    await createImmediateClass(storage, blkClass);
    for (const v of ['a', 'b', 'c', 'clash']) host.tmpfs(8, 'fs', v);
    host.mkdir('blk');
    host.symlink(host.loopDevice(4, 'disk'), 'blk', 'disk');
    // A PV with the name discovery will want for fs/clash, not this provisioner's: its create fails (AlreadyExists).
    await core.createPersistentVolume({
      body: {
        metadata: { name: name('clash') },
        spec: {
          capacity: { storage: '1Mi' },
          accessModes: ['ReadWriteOnce'],
          storageClassName: fsClass,
          local: { path: '/elsewhere' },
          nodeAffinity: { required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: ['nowhere'] }] }] } },
        },
      },
    });
    const failing = writeScript(host.path('fail.sh'), ['echo "disk on fire" >&2', 'exit 3']);
    const files = configFiles({
      classes: {
        [fsClass]: { hostDir: '/mnt/host/fs', mountDir: host.path('fs') },
        [blkClass]: { hostDir: '/mnt/host/blk', mountDir: host.path('blk'), volumeMode: 'Block', blockCleanerCommand: [failing] },
      },
    });
    prov = await startDaemon(host, { nodeName: node, files });
  });

  afterAll(async () => {
    await prov?.stop();
    await core.deletePersistentVolume({ name: name('clash') }).catch(() => undefined);
    for (const pv of await pvsOfNode(core, node)) await core.deletePersistentVolume({ name: pv.metadata!.name! }).catch(() => undefined);
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    host?.cleanup();
  });

  it('every Go metric has its name, type, label names and buckets on /metrics of the running daemon', async () => {
    // Give every labelled metric samples: creates (one failing), a cleaned and deleted fs PV, a failing block cleanup.
    const a = await waitPV(core, name('a'));
    const blk = await waitPV(core, name('disk', blkClass));
    await releasePV(core, a, ns);
    await releasePV(core, blk, ns);
    await waitPVGone(core, name('a'), a.metadata!.uid!);
    await waitFor(async () => (await metric(prov!, 'local_volume_provisioner_persistentvolume_delete_failed_total', { mode: 'Block' })) > 0, {
      what: 'a failed block cleanup to be counted',
    });
    await waitFor(async () => (await metric(prov!, 'local_volume_provisioner_apiserver_requests_failed_total', { method: 'create' })) > 0, {
      what: 'the AlreadyExists create to be counted',
    });
    const scraped = parseExposition(await prov!.metrics());
    const mismatches: string[] = [];
    for (const g of GO_METRICS) {
      const s = scraped.get(g.name);
      if (!s) {
        mismatches.push(`${g.name}: missing`);
        continue;
      }
      if (s.type !== g.type) mismatches.push(`${g.name}: type ${s.type ?? '?'}, Go ${g.type}`);
      if (s.samples === 0) mismatches.push(`${g.name}: no samples`);
      const labels = [...s.labels].sort();
      if (JSON.stringify(labels) !== JSON.stringify([...g.labels].sort())) mismatches.push(`${g.name}: labels ${labels.join(',')}, Go ${g.labels.join(',')}`);
      if (g.buckets && JSON.stringify(s.buckets) !== JSON.stringify(g.buckets)) mismatches.push(`${g.name}: buckets ${s.buckets.join(',')}, Go ${g.buckets.join(',')}`);
    }
    expect(mismatches).toEqual([]);
    const info = scraped.get('local_volume_provisioner_build_info');
    expect(info?.type).toBe('gauge');
    expect([...(info?.labels ?? [])].sort()).toEqual(['node_version', 'version']);
  });

  it('capacity_bytes is the capacity of the PVs that exist: steady, after a delete, after rediscovery', async () => {
    const expected = async (): Promise<{ Block: number; Filesystem: number }> => {
      const pvs = (await pvsOfNode(core, node)).filter((p) => p.metadata?.deletionTimestamp === undefined);
      const sum = (mode: string): number =>
        pvs.filter((p) => (p.spec?.volumeMode ?? 'Filesystem') === mode).reduce((n, p) => n + Number(/^(\d+)Mi$/.exec(p.spec?.capacity?.['storage'] ?? '')?.[1]) * MIB, 0);
      return { Block: sum('Block'), Filesystem: sum('Filesystem') };
    };
    const gauge = async (): Promise<{ Block: number; Filesystem: number }> => ({
      Block: await metric(prov!, CAPACITY, { mode: 'Block' }),
      Filesystem: await metric(prov!, CAPACITY, { mode: 'Filesystem' }),
    });
    // Steady state: a, b, c (8 MiB each; the rediscovered a included) and the 4 MiB block disk.
    await waitPV(core, name('a'));
    const steady = { Block: 4 * MIB, Filesystem: 3 * 8 * MIB };
    await waitFor(async () => JSON.stringify(await gauge()) === JSON.stringify(steady), { what: `capacity ${JSON.stringify(steady)}` });
    expect(await expected()).toEqual(steady);
    await new Promise((r) => setTimeout(r, 2500)); // a few passes later: still the same, not 0
    expect(await gauge()).toEqual(steady);

    // The volume behind c goes away and its PV is deleted: the gauge drops by 8 MiB.
    const c = await waitPV(core, name('c'));
    host.unmount(host.path('fs', 'c'));
    await core.deletePersistentVolume({ name: name('c') });
    await waitPVGone(core, name('c'), c.metadata!.uid!);
    const after = { Block: 4 * MIB, Filesystem: 2 * 8 * MIB };
    await waitFor(async () => JSON.stringify(await gauge()) === JSON.stringify(after), { what: `capacity ${JSON.stringify(after)}` });
    expect(await expected()).toEqual(after);

    // b is deleted while its volume stays: rediscovered, the gauge comes back.
    const b = await waitPV(core, name('b'));
    await core.deletePersistentVolume({ name: name('b') });
    await waitPV(core, name('b'), { notUid: b.metadata!.uid! });
    await waitFor(async () => JSON.stringify(await gauge()) === JSON.stringify(after), { what: `capacity back to ${JSON.stringify(after)}` });
  });
});

describe.skipIf(!isRoot())('--dry-run against the real control plane', () => {
  // Made in beforeAll: a describe filtered out (-t) must leave no temp dir behind.
  let host: HostFixtures;
  const node = uniqueName('dry-node');
  const fsClass = uniqueName('dry-fs');
  const blkClass = uniqueName('dry-blk');

  beforeAll(async () => {
    host = new HostFixtures('lsp-dry-');
    await createNode(core, node, { 'topology.kubernetes.io/zone': 'z1' });
    await createImmediateClass(storage, fsClass);
    await createImmediateClass(storage, blkClass);
    for (const v of ['v1', 'v2']) host.tmpfs(8, 'fs', v);
    host.mkdir('blk');
    host.symlink(host.loopDevice(4, 'disk'), 'blk', 'disk');
    const cfg = host.mkdir('config');
    const files = configFiles({
      classes: {
        [fsClass]: { hostDir: '/mnt/host/fs', mountDir: host.path('fs'), fsType: 'ext4' },
        [blkClass]: { hostDir: '/mnt/host/blk', mountDir: host.path('blk'), volumeMode: 'Block' },
      },
      labelsForPV: { team: 'storage' },
      useNodeNameOnly: false,
    });
    files['nodeLabelsForPV'] = '- topology.kubernetes.io/zone\n';
    files['setPVOwnerRef'] = 'true';
    files['useNodeNameOnIy'] = 'true'; // a typo: stated on stderr
    for (const [k, v] of Object.entries(files)) writeFileSync(join(cfg, k), v);
  });

  afterAll(() => host?.cleanup());

  it('prints only YAML on stdout, which the API server accepts as is (dryRun=All), and writes nothing', async () => {
    const child = spawn(process.execPath, [join(repo, 'src', 'main.ts'), '--dry-run', `--node-name=${node}`, `--config-dir=${host.path('config')}`, '--log-level=debug'], {
      env: { PATH: process.env['PATH'] ?? '', KUBECONFIG: inject('provisionerKubeconfig') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
    const code = await new Promise<number | null>((res) => child.once('exit', (c) => res(c)));
    expect(code, stderr).toBe(0);
    expect(stdout).not.toContain('{"level"');
    expect(stderr).not.toContain('Created PV');
    expect(stderr).toContain('configuration warning: useNodeNameOnIy: unknown key "useNodeNameOnIy" ignored; did you mean "useNodeNameOnly"?');

    const docs = parseAllDocuments(stdout);
    const pvs = docs.map((d) => d.toJS() as V1PersistentVolume | null).filter((d): d is V1PersistentVolume => d !== null);
    expect(docs.every((d) => d.errors.length === 0)).toBe(true);
    expect(pvs.map((p) => p.metadata?.name).sort()).toEqual([generatePVName('v1', node, fsClass), generatePVName('v2', node, fsClass), generatePVName('disk', node, blkClass)].sort());
    for (const pv of pvs) {
      expect(pv.kind).toBe('PersistentVolume');
      // `kubectl apply --dry-run=server`: admission and validation run, nothing is stored.
      const r = await core.createPersistentVolume({ body: pv, dryRun: 'All' });
      expect(r.metadata?.name).toBe(pv.metadata?.name);
      expect(r.metadata?.labels).toMatchObject({ team: 'storage', 'topology.kubernetes.io/zone': 'z1' });
    }
    for (const pv of pvs) {
      const err = await core.readPersistentVolume({ name: pv.metadata!.name! }).then(() => undefined, (e: unknown) => e);
      expect(apiStatus(err)).toBe(404);
    }
  });
});

describe('the Go DaemonSet args (klog flags)', () => {
  // Made in beforeAll: a describe filtered out (-t) must leave no temp dir behind.
  let host: HostFixtures;
  const node = uniqueName('klog-node');
  let prov: ProvisionerProcess | undefined;
  const GO_ARGS = ['-v=2', '--v=4', '-v', '3', '-logtostderr', '--alsologtostderr', '-stderrthreshold=INFO', '--logtostderr=true'];

  beforeAll(async () => {
    host = new HostFixtures('lsp-klog-');
    await createNode(core, node);
    const cls = uniqueName('klog-sc');
    await createImmediateClass(storage, cls);
    const files = configFiles({ classes: { [cls]: { hostDir: '/mnt/host/disc', mountDir: host.mkdir('disc') } } });
    prov = await startDaemon(host, { nodeName: node, files, args: GO_ARGS, logLevel: null });
  });

  afterAll(async () => {
    await prov?.stop();
    host?.cleanup();
  });

  it('starts and gets ready with -v=2 --v=4 -v 3 -logtostderr ...; one warning; -v 3 means debug; nothing on stdout', async () => {
    const exited = prov!.exited.then((c) => `exited with ${String(c)}`);
    const ready = waitFor(() => prov!.ready(), { what: 'the daemon to be ready', timeoutMs: 60_000 }).then(() => 'ready');
    expect(await Promise.race([ready, exited])).toBe('ready');
    const lines = prov!.logLines();
    const klog = lines.filter((l) => String(l['msg']).includes('klog flags'));
    expect(klog).toHaveLength(1);
    expect(klog[0]).toMatchObject({ level: 'warn', flags: ['-logtostderr', '-alsologtostderr', '-stderrthreshold'] });
    expect(lines.some((l) => l['level'] === 'debug')).toBe(true);
    expect(lines.some((l) => l['level'] === 'trace')).toBe(false);
    expect(lines.every((l) => typeof l['level'] === 'string')).toBe(true);
    expect(prov!.stdout()).toBe('');
  });
});
