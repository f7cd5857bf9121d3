// Issue 5 end to end: hot reload of the ConfigMap in the real daemon (node
// src/main.ts) against the real control plane, on real tmpfs mounts. The config
// dir is written ONLY through AtomicWriter, i.e. exactly the way the kubelet
// updates a ConfigMap volume (new ..<timestamp> dir, ..data symlink swap).
//
// This file: adding a class, changing class/top-level fields, removing a class
// (its Released PVs are still cleaned), and invalid configs (the old config
// keeps running). Cleanup-mode switches mid-clean: hot-reload-cleaning.test.ts;
// bursts and kubelet touches: hot-reload-burst.test.ts; 200 reloads:
// hot-reload-stress.test.ts.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { AtomicWriter } from '../test/support/atomic-writer.ts';
import { generatePVName } from '../src/volume/naming.ts';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { createNode } from './harness/node-agent.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import {
  applyConfig,
  configFiles,
  createLocalStorageClass,
  eventTexts,
  expectStillRunning,
  lastReloadOkMetric,
  logsWith,
  metric,
  readPV,
  bindPV,
  startTestProvisioner,
  reloadMetric,
  restartsMetric,
  waitMetric,
  waitPV,
  waitPVGone,
  type ClassSpec,
  type ConfigSpec,
} from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';

const { core, storage } = adminClients();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe.skipIf(!isRoot())('hot reload: classes, fields, invalid configs', () => {
  const host = new HostFixtures('lsp-hr-');
  const node = uniqueName('hr-node');
  const clsA = uniqueName('hr-a');
  const clsB = uniqueName('hr-b');
  const clsC = uniqueName('hr-c');
  const podName = `local-volume-provisioner-${node}`;
  let prov: ProvisionerProcess | undefined;
  let writer: AtomicWriter;
  let pid = 0;
  const dirs: Record<string, string> = {};
  const cls = (name: string, extra: Partial<ClassSpec> = {}): ClassSpec => ({ hostDir: dirs[name]!, mountDir: dirs[name]!, ...extra });
  /** The config the daemon is expected to run; each test edits it. */
  let current: ConfigSpec;
  const write = (c: ConfigSpec): Promise<void> => writer.write(configFiles(c));
  const pvName = (cl: string, vol: string): string => generatePVName(vol, node, cl);
  const nodeEvents = (reason: string): Promise<string[]> => eventTexts(core, 'default', 'Node', node, reason);
  const podEvents = (reason: string): Promise<string[]> => eventTexts(core, 'kube-system', 'Pod', podName, reason);

  beforeAll(async () => {
    await createNode(core, node);
    for (const c of [clsA, clsB, clsC]) await createLocalStorageClass(storage, c);
    for (const c of [clsA, clsB, clsC]) dirs[c] = host.mkdir(c);
    host.tmpfs(4, clsA, 'vol1');
    host.tmpfs(4, clsA, 'vol2');
    host.tmpfs(4, clsB, 'vol1');
    host.tmpfs(4, clsC, 'vol1');
    host.tmpfs(4, clsC, 'vol2');
    writer = new AtomicWriter(host.mkdir('config'));
    current = { classes: { [clsA]: cls(clsA, { fsType: 'ext4' }), [clsC]: cls(clsC) }, labelsForPV: { team: 'one' } };
    await write(current);
    prov = await startTestProvisioner(host, writer.dir, node, inject('provisionerKubeconfig'), ['--discovery-period=1s', '--config-sync-period=500ms']);
    pid = prov.child.pid ?? 0;
  });

  afterAll(async () => {
    await prov?.stop();
    host.cleanup();
  });

  const expectSameProcess = (): void => {
    expectStillRunning(prov!, pid);
    expect(prov!.child.signalCode).toBeNull();
  };


  /** The latest reload log line, once it matches: the log reaches its file through a pipe, so wait for it. */
  const lastReloadLine = (match: (l: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> =>
    waitFor(
      () => {
        const l = logsWith(prov!, 'configuration reloaded; local controller restarted').at(-1);
        return l && match(l) ? l : undefined;
      },
      { what: 'the reload log line', timeoutMs: 10_000 },
    );
  it('starts with PVs for the configured classes only', async () => {
    const pvs = await Promise.all([pvName(clsA, 'vol1'), pvName(clsA, 'vol2'), pvName(clsC, 'vol1'), pvName(clsC, 'vol2')].map((n) => waitPV(core, n)));
    expect(pvs.map((p) => p.metadata?.labels?.['team'])).toEqual(['one', 'one', 'one', 'one']);
    expect(pvs[0]!.spec?.local).toEqual({ path: join(dirs[clsA]!, 'vol1'), fsType: 'ext4' });
    expect(await readPV(core, pvName(clsB, 'vol1'))).toBeUndefined();
    expect(await metric(prov!, reloadMetric, { result: 'applied' })).toBe(1);
    expect(await metric(prov!, restartsMetric)).toBe(0);
    expect(await metric(prov!, lastReloadOkMetric)).toBe(1);
  });

  it('adding a storage class: its volumes get PVs, same process, one restart, ConfigReloaded naming the class', async () => {
    current = { ...current, classes: { ...current.classes, [clsB]: cls(clsB) } };
    await applyConfig(prov!, () => write(current));
    const pv = await waitPV(core, pvName(clsB, 'vol1'), { timeoutMs: 15_000 });
    expect(pv.spec?.storageClassName).toBe(clsB);
    expect(pv.metadata?.labels).toEqual({ team: 'one' });
    expectSameProcess();
    expect(await metric(prov!, restartsMetric)).toBe(1);
    const reloaded = await waitFor(async () => (await nodeEvents('ConfigReloaded')).find((m) => m.includes(`storageClassMap.${clsB} (added)`)), {
      what: 'a ConfigReloaded event on the Node naming the added class',
    });
    expect(reloaded.startsWith('Normal:')).toBe(true);
    expect((await podEvents('ConfigReloaded')).some((m) => m.includes(`storageClassMap.${clsB} (added)`))).toBe(true);
    // The structured log line carries the diff of keys.
    const line = logsWith(prov!, 'configuration reloaded; local controller restarted').at(-1);
    expect(line?.['changed']).toEqual([`storageClassMap.${clsB} (added)`]);
  });

  it('changing namePattern, labelsForPV and fsType: new PVs follow, existing PVs stay as they were', async () => {
    const before = await Promise.all([pvName(clsA, 'vol1'), pvName(clsA, 'vol2')].map((n) => waitPV(core, n)));
    const restarts = await metric(prov!, restartsMetric);
    current = {
      ...current,
      classes: { ...current.classes, [clsA]: cls(clsA, { fsType: 'xfs', namePattern: 'new*' }) },
      labelsForPV: { team: 'two', tier: 'gold' },
    };
    await applyConfig(prov!, () => write(current));
    expect(await metric(prov!, restartsMetric)).toBe(restarts + 1);
    const line = await lastReloadLine((l) => Array.isArray(l['changed']) && l['changed'].includes('labelsForPV'));
    expect(line?.['changed']).toEqual(expect.arrayContaining([`storageClassMap.${clsA}.fsType`, `storageClassMap.${clsA}.namePattern`, 'labelsForPV']));

    host.tmpfs(4, clsA, 'new1');
    host.tmpfs(4, clsA, 'other1');
    const fresh = await waitPV(core, pvName(clsA, 'new1'), { timeoutMs: 15_000 });
    expect(fresh.metadata?.labels).toEqual({ team: 'two', tier: 'gold' });
    expect(fresh.spec?.local).toEqual({ path: join(dirs[clsA]!, 'new1'), fsType: 'xfs' });
    // "other1" does not match the new namePattern: no PV, however many passes run.
    await sleep(3000);
    expect(await readPV(core, pvName(clsA, 'other1'))).toBeUndefined();
    // Existing PVs were not touched: same object (uid), same resourceVersion, old labels and fsType.
    for (const old of before) {
      const now = await readPV(core, old.metadata!.name!);
      expect(now?.metadata?.uid).toBe(old.metadata?.uid);
      expect(now?.metadata?.resourceVersion).toBe(old.metadata?.resourceVersion);
      expect(now?.metadata?.labels).toEqual({ team: 'one' });
      expect(now?.spec?.local?.fsType).toBe('ext4');
    }
    expectSameProcess();
  });

  it('removing a class: no new PVs of it, its Available PVs deleted (volumes untouched), its Released PVs still cleaned (last known settings) and deleted', async () => {
    const doomed = await waitPV(core, pvName(clsC, 'vol1'));
    const avail = await waitPV(core, pvName(clsC, 'vol2'));
    // Bound before the removal: the removed class's Available PVs are deleted at once (issue 18, 13).
    const claim = await bindPV(core, doomed);
    writeFileSync(join(dirs[clsC]!, 'vol2', 'keep.txt'), 'left alone\n');
    const { [clsC]: _removed, ...rest } = current.classes;
    current = { ...current, classes: rest };
    await applyConfig(prov!, () => write(current));
    const line = await lastReloadLine((l) => Array.isArray(l['changed']) && l['changed'].includes(`storageClassMap.${clsC} (removed)`));
    expect(line?.['removedClasses']).toEqual([clsC]);
    expect(line?.['changed']).toEqual([`storageClassMap.${clsC} (removed)`]);

    // A volume mounted in the removed class's directory after the removal gets no PV.
    host.tmpfs(4, clsC, 'late');
    // Data on the volume whose PV is released next.
    const vol = join(dirs[clsC]!, 'vol1');
    writeFileSync(join(vol, 'secret.txt'), 'tenant data\n');
    host.mkdir(clsC, 'vol1', 'nested', 'dir');
    writeFileSync(join(vol, 'nested', 'dir', '.hidden'), 'x');
    expect(readdirSync(vol).sort()).toEqual(['nested', 'secret.txt']);

    const deletesBefore = await metric(prov!, 'local_volume_provisioner_persistentvolume_delete_total');
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: 'default', name: claim }); // the PV is Released
    await waitPVGone(core, doomed.metadata!.name!, doomed.metadata!.uid!, 30_000);
    expect(readdirSync(vol)).toEqual([]);
    expect(existsSync(vol)).toBe(true); // the volume root itself is kept
    expect(await metric(prov!, 'local_volume_provisioner_persistentvolume_delete_total')).toBe(deletesBefore + 1);
    expect(logsWith(prov!, `Completed cleanup of pv "${doomed.metadata!.name!}"`)).toHaveLength(1);

    // The class is gone from the config: the cleaned volume is not offered again, the late one never was.
    await sleep(3000);
    expect(await readPV(core, doomed.metadata!.name!)).toBeUndefined();
    expect(await readPV(core, pvName(clsC, 'late'))).toBeUndefined();
    // Its Available PV is no longer offered: deleted, and its volume is not touched (issue 18, 13).
    await waitPVGone(core, avail.metadata!.name!, avail.metadata!.uid!, 30_000);
    expect(await readPV(core, avail.metadata!.name!)).toBeUndefined(); // not offered again
    expect(readFileSync(join(dirs[clsC]!, 'vol2', 'keep.txt'), 'utf8')).toBe('left alone\n');
    expect(logsWith(prov!, `Deleted Available PV "${avail.metadata!.name!}"`)).toHaveLength(1);
    expectSameProcess();
  });

  it('invalid YAML, a wrong type, a relative path: the old config keeps running, Warning Events and metrics say so; a fix applies at once', async () => {
    const invalid0 = await metric(prov!, reloadMetric, { result: 'invalid' });
    const applied0 = await metric(prov!, reloadMetric, { result: 'applied' });
    const restarts0 = await metric(prov!, restartsMetric);
    const good = configFiles(current);
    const bad: Array<{ files: Record<string, string>; expect: string }> = [
      { files: { ...good, storageClassMap: `${clsA}:\n  hostDir: ${dirs[clsA]!}\n mountDir: [\n` }, expect: 'YAML syntax error' },
      { files: { ...good, useJobForCleaning: 'maybe' }, expect: 'expected a boolean' },
      {
        files: { ...good, storageClassMap: `${good['storageClassMap']!}${clsC}:\n  hostDir: relative/dir\n  mountDir: ${dirs[clsC]!}\n` },
        expect: 'hostDir "relative/dir" must be an absolute path',
      },
    ];
    for (const [i, b] of bad.entries()) {
      await writer.write(b.files);
      await waitMetric(prov!, reloadMetric, { result: 'invalid' }, (v) => v === invalid0 + i + 1, { what: `bad config ${i + 1} to be rejected` });
      expect(await metric(prov!, lastReloadOkMetric)).toBe(0);
      for (const events of [nodeEvents, podEvents]) {
        const ev = await waitFor(async () => (await events('ConfigInvalid')).find((m) => m.includes(b.expect)), {
          what: `a ConfigInvalid event saying ${JSON.stringify(b.expect)}`,
          timeoutMs: 15_000,
        });
        expect(ev).toMatch(/^Warning:Configuration rejected \(\d+ errors?\), keeping configuration [0-9a-f]{12} running: /);
      }
      // The same bad content again (a new generation with identical bytes) is not counted again.
      await writer.write(b.files);
      await sleep(1500); // > 2 polls at 500 ms and the 300 ms debounce
      expect(await metric(prov!, reloadMetric, { result: 'invalid' })).toBe(invalid0 + i + 1);
    }
    // Nothing was applied or restarted meanwhile; the process lives on.
    expect(await metric(prov!, reloadMetric, { result: 'applied' })).toBe(applied0);
    expect(await metric(prov!, restartsMetric)).toBe(restarts0);
    expectSameProcess();
    // The old config still runs: a new volume gets a PV with the old labels.
    host.tmpfs(4, clsA, 'new-during-bad');
    const during = await waitPV(core, pvName(clsA, 'new-during-bad'), { timeoutMs: 15_000 });
    expect(during.metadata?.labels).toEqual({ team: 'two', tier: 'gold' });
    expect(during.spec?.local?.fsType).toBe('xfs');
    expect(logsWith(prov!, 'invalid configuration: storageClassMap.').length).toBeGreaterThan(0);

    // A valid edit applies at once (no backoff because of the earlier rejections).
    current = { ...current, labelsForPV: { team: 'three' } };
    const t0 = Date.now();
    await applyConfig(prov!, () => write(current), { timeoutMs: 5000 });
    const ms = Date.now() - t0;
    console.log(`[hot-reload] fixed config applied ${ms} ms after the swap (watch nudge + 300 ms debounce)`);
    expect(await metric(prov!, lastReloadOkMetric)).toBe(1);
    expect(await metric(prov!, restartsMetric)).toBe(restarts0 + 1);
    await waitFor(async () => (await nodeEvents('ConfigReloaded')).some((m) => m.includes('changed: labelsForPV')), {
      what: 'a ConfigReloaded event naming labelsForPV',
    });
    host.tmpfs(4, clsA, 'new-after-fix');
    const after: V1PersistentVolume = await waitPV(core, pvName(clsA, 'new-after-fix'), { timeoutMs: 15_000 });
    expect(after.metadata?.labels).toEqual({ team: 'three' });
    expectSameProcess();
  });
});
