// Issue 5 end to end: a reload while a cleanup is in flight, for every pair of
// cleanup methods (old x new): process -> Job, Job -> process, process ->
// process, Job -> Job. The block cleaner is a script of ours that logs each run,
// sleeps, then zeroes the device with dd; in-process cleans run it as a child
// of the daemon, cleanup Jobs run it through the node agent (a kubelet
// stand-in that executes the pod's command on this host). Each reload also
// changes labelsForPV, so the same-method cases restart the controller too.
//
// For each case: the volume is cleaned exactly once (never zero times, never
// twice: the run log would show a second "start"), its bytes read back zero,
// its PV is deleted exactly once (one DELETED watch event for its UID, one
// persistentvolume_delete_total), and the work started by the old generation is
// finished by the new one (the log line that deletes the PV carries the new
// generation number).
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { AtomicWriter } from '../test/support/atomic-writer.ts';
import { generatePVName } from '../src/volume/naming.ts';
import { adminClients, apiStatus, uniqueName, waitFor } from './harness/kube.ts';
import { createNode, startNodeAgent, type NodeAgent } from './harness/node-agent.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import {
  allZero,
  applyConfig,
  childPids,
  configFiles,
  createLocalStorageClass,
  fillDevice,
  keepLog,
  hostJobRunner,
  logsWith,
  metric,
  PVWatch,
  releasePV,
  startTestProvisioner,
  runLogLines,
  waitPV,
  waitPVGone,
  writeSlowBlockCleaner,
  type ConfigSpec,
} from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';

const { kc, core, batch, storage } = adminClients();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const DEVICE_MIB = 8;
const childPidsOf = (p: ProvisionerProcess): number[] => childPids(p.child.pid ?? 0);
const DELETE_TOTAL = 'local_volume_provisioner_persistentvolume_delete_total';

type Method = 'process' | 'job';
const CASES = 4;

describe.skipIf(!isRoot())('hot reload while a cleanup is in flight', () => {
  const host = new HostFixtures('lsp-hrc-');
  const node = uniqueName('hrc-node');
  const blockClass = uniqueName('hrc-blk');
  let runLog = '';
  const jobRuns: Array<{ pod: string; command: string[]; exitCode: number }> = [];
  let blockDir = '';
  let cleaner = '';
  let writer: AtomicWriter;
  let prov: ProvisionerProcess | undefined;
  let agent: NodeAgent | undefined;
  let watch: PVWatch | undefined;
  let current: ConfigSpec;
  const devices: string[] = [];

  const config = (useJob: boolean, label: string): ConfigSpec => ({
    classes: { [blockClass]: { hostDir: blockDir, mountDir: blockDir, volumeMode: 'Block', blockCleanerCommand: [cleaner] } },
    useJobForCleaning: useJob,
    labelsForPV: { step: label },
  });

  beforeAll(async () => {
    runLog = host.path('cleaner-runs.log');
    await createNode(core, node);
    await createLocalStorageClass(storage, blockClass);
    blockDir = host.mkdir('block');
    cleaner = writeSlowBlockCleaner(host.path('slow-cleaner.sh'), runLog, DEVICE_MIB, 4);
    for (let i = 0; i < CASES; i++) {
      const dev = host.loopDevice(DEVICE_MIB, `blk${i}`);
      host.symlink(dev, 'block', `blk${i}`);
      devices.push(dev);
    }
    writer = new AtomicWriter(host.mkdir('config'));
    current = config(false, 'initial');
    await writer.write(configFiles(current));
    agent = startNodeAgent({ core, nodeName: node, namespace: 'kube-system', run: hostJobRunner(jobRuns), onError: () => undefined });
    prov = await startTestProvisioner(host, writer.dir, node, inject('provisionerKubeconfig'), ['--discovery-period=1s', '--config-sync-period=500ms']);
    await Promise.all(devices.map((_, i) => waitPV(core, generatePVName(`blk${i}`, node, blockClass))));
    watch = await PVWatch.start(kc, core, node);
  });

  afterAll(async () => {
    watch?.stop();
    await prov?.stop();
    await agent?.stop();
    keepLog(host.path('provisioner.log'), 'hot-reload-cleaning');
    host.cleanup();
  });

  async function reloadMidClean(from: Method, to: Method, i: number): Promise<void> {
    const vol = `blk${i}`;
    const containerPath = join(blockDir, vol);
    const name = generatePVName(vol, node, blockClass);
    const jobName = `cleanup-${name}`;
    if (current.useJobForCleaning !== (from === 'job')) {
      current = config(from === 'job', `before-${i}`);
      await applyConfig(prov!, () => writer.write(configFiles(current)));
    }
    const pv = await waitPV(core, name);
    const uid = pv.metadata!.uid!;
    fillDevice(devices[i]!, DEVICE_MIB);
    expect(allZero(devices[i]!, DEVICE_MIB * 1024 * 1024)).toBe(false);
    const deletes0 = await metric(prov!, DELETE_TOTAL);
    const deletesByType0 = await metric(prov!, DELETE_TOTAL, { type: from });

    await releasePV(core, pv);
    const starts = (): string[] => runLogLines(runLog).filter((l) => l.startsWith(`start ${containerPath} `));
    const dones = (): string[] => runLogLines(runLog).filter((l) => l.startsWith(`done ${containerPath} `));
    await waitFor(() => starts().length > 0, { what: `the ${from} cleanup of ${vol} to start`, timeoutMs: 30_000 });
    if (from === 'job') expect((await batch.readNamespacedJob({ namespace: 'kube-system', name: jobName })).metadata?.name).toBe(jobName);

    // Reload mid-clean: switch the method (or only the labels, for the same-method cases).
    const reloaded = (): Array<Record<string, unknown>> => logsWith(prov!, 'configuration reloaded; local controller restarted');
    const reloadsBefore = reloaded().length;
    current = config(to === 'job', `during-${i}`);
    await applyConfig(prov!, () => writer.write(configFiles(current)));
    expect(dones()).toEqual([]); // the reload really happened while the cleaner ran
    // The log reaches its file through a pipe: wait for the new line rather than reading at once.
    const newGeneration = (
      await waitFor(() => (reloaded().length > reloadsBefore ? reloaded().at(-1) : undefined), {
        what: 'the reload log line of the new generation',
        timeoutMs: 10_000,
      })
    )['controllerGeneration'];
    expect(typeof newGeneration).toBe('number');

    await waitPVGone(core, name, uid, 30_000);
    await sleep(2500); // room for a second, wrong clean to show up
    expect(starts()).toHaveLength(1);
    expect(dones()).toHaveLength(1);
    expect(allZero(devices[i]!, DEVICE_MIB * 1024 * 1024)).toBe(true);
    expect(watch!.count('DELETED', (e) => e.uid === uid)).toBe(1);
    expect(await metric(prov!, DELETE_TOTAL)).toBe(deletes0 + 1);
    expect(await metric(prov!, DELETE_TOTAL, { type: from })).toBe(deletesByType0 + 1);

    const jobPods = jobRuns.filter((r) => r.pod.startsWith(`${jobName}-`));
    if (from === 'job') {
      // Created by the old generation, finished (PV deleted, then the Job) by the new one.
      expect(jobPods).toHaveLength(1);
      expect(jobPods[0]!.exitCode).toBe(0);
      const deleted = logsWith(prov!, 'deleting PV after a successful cleanup job').filter((l) => l['pv'] === name);
      expect(deleted).toHaveLength(1);
      expect(deleted[0]!['controllerGeneration']).toBe(newGeneration);
      await waitFor(
        async () => {
          try {
            await batch.readNamespacedJob({ namespace: 'kube-system', name: jobName });
            return false;
          } catch (err) {
            return apiStatus(err) === 404;
          }
        },
        { what: `Job ${jobName} to be deleted` },
      );
    } else {
      // Started in-process by the old generation (the process table outlives it); the new one deleted the PV.
      expect(jobPods).toEqual([]);
      const deleted = logsWith(prov!, `Deleting pv ${name} after successful cleanup`);
      expect(deleted).toHaveLength(1);
      expect(deleted[0]!['controllerGeneration']).toBe(newGeneration);
    }
    // The volume is offered again under a new PV.
    const again = await waitPV(core, name, { notUid: uid });
    expect(again.metadata?.labels).toEqual({ step: `during-${i}` });
  }

  const title = (from: Method, to: Method): string => `${from} -> ${to}: cleaned once, zeroed, PV deleted once, finished by the new generation`;
  it(title('process', 'job'), () => reloadMidClean('process', 'job', 0));
  // Found by this test and fixed in c49ebe7: the new generation's first deleter pass ran before
  // its Job informer had synced, saw no Job, and started a second, concurrent in-process clean.
  it(title('job', 'process'), () => reloadMidClean('job', 'process', 1));
  it(title('process', 'process'), () => reloadMidClean('process', 'process', 2));
  it(title('job', 'job'), () => reloadMidClean('job', 'job', 3));

  it('left no cleaner process behind, and every cleaner run finished', async () => {
    await waitFor(() => childPidsOf(prov!).length === 0, { what: 'no child process of the daemon', timeoutMs: 10_000 });
    const lines = runLogLines(runLog);
    const starts = lines.filter((l) => l.startsWith('start ')).length;
    expect(starts).toBe(CASES); // one clean per case, none twice
    expect(lines.filter((l) => l.startsWith('done ')).length).toBe(starts);
    expect(watch!.error).toBeUndefined();
  });
});
