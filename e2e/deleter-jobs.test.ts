// Issue 4 end to end, cleaning through Kubernetes Jobs (useJobForCleaning):
// the daemon creates a Job per Released PV, the real job controller of the
// control plane creates its Pod, a node agent (kubelet stand-in) runs the Pod's
// command on this host against the real loop device / tmpfs and reports the
// Pod's status, and the daemon's job controller deletes the PV, then the Job.
// A Job whose cleaner keeps failing is reported (Event, metrics), deleted, and
// retried with a new Job after a backoff: never stuck forever.
import { chmodSync, chownSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1Job, V1PersistentVolume, V1Pod, V1VolumeMount } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClients, apiStatus, uniqueName, waitFor } from './harness/kube.ts';
import { startNodeAgent, type NodeAgent } from './harness/node-agent.ts';
import {
  createDeleterCluster,
  keepLogs,
  deviceSize,
  isMountPoint,
  onFailureRunner,
  pvEvents,
  readAt,
  reapPods,
  releaseAndRediscover,
  sleep,
  startDaemon,
  waitPVEvent,
  writeScript,
} from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { allZero, bindPV, configFiles, fillDevice, hostJobRunner, logsWith, metric, readPV, runLogLines, waitPV, waitPVGone } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const { core, batch, storage } = adminClients();
const MIB = 1024 * 1024;
const M = 'local_volume_provisioner_';
const JOB_NS = 'kube-system';

const TOLERATIONS_YAML = `- key: node.kubernetes.io/disk-pressure
  operator: Exists
  effect: NoSchedule
- key: example.com/dedicated
  operator: Equal
  value: storage
  effect: NoExecute
  tolerationSeconds: 30
`;
const TOLERATIONS = [
  { key: 'node.kubernetes.io/disk-pressure', operator: 'Exists', effect: 'NoSchedule' },
  { key: 'example.com/dedicated', operator: 'Equal', value: 'storage', effect: 'NoExecute', tolerationSeconds: 30 },
];

async function readJob(name: string): Promise<V1Job | undefined> {
  try {
    return await batch.readNamespacedJob({ name, namespace: JOB_NS });
  } catch (err) {
    if (apiStatus(err) === 404) return undefined;
    throw err;
  }
}

/** Block writes to a device node: privileged. Filesystem only unlinks files: unprivileged, two capabilities. */
const SECURITY_CONTEXT = {
  Block: { privileged: true },
  Filesystem: {
    privileged: false,
    allowPrivilegeEscalation: false,
    capabilities: { drop: ['ALL'], add: ['DAC_OVERRIDE', 'FOWNER'] },
    seccompProfile: { type: 'RuntimeDefault' },
  },
};

/** Block follows host mounts; Filesystem has a private view, fixed when the container starts. */
const MOUNT_PROPAGATION = {
  Block: (m: V1VolumeMount): V1VolumeMount => ({ ...m, mountPropagation: 'HostToContainer' }),
  Filesystem: (m: V1VolumeMount): V1VolumeMount => m,
};

/** The least-privilege fields of a cleanup Job (issue 8, point 12). */
function expectLeastPrivilege(job: V1Job, mode: 'Block' | 'Filesystem'): void {
  expect(job.spec?.activeDeadlineSeconds).toBe(3600); // --clean-timeout's default
  const podSpec = job.spec?.template.spec;
  expect(podSpec?.automountServiceAccountToken).toBe(false);
  expect(podSpec?.containers[0]?.securityContext).toEqual(SECURITY_CONTEXT[mode]);
  expect(podSpec?.containers[0]?.resources).toEqual({ requests: { cpu: '10m', memory: '32Mi' }, limits: { memory: '256Mi' } });
}

describe.skipIf(!isRoot())('deleter: cleaning through Jobs run by the real job controller', () => {
  const host = new HostFixtures('lsp-delj-');
  const node = uniqueName('delj-node');
  const ns = uniqueName('delj-ns');
  const marker = uniqueName('lspdelj');
  const cls = { blk: uniqueName('delj-blk'), fs: uniqueName('delj-fs'), flaky: uniqueName('delj-flaky') };
  let blkDev = '';
  let flakyDev = '';
  let fsDir = '';
  let prov: ProvisionerProcess | undefined;
  let agent: NodeAgent | undefined;
  let failFlag = '';
  let flakyLog = '';
  /** The Job and Pod of every pod the agent ran, read just before it ran. */
  const seen: Array<{ pod: V1Pod; job: V1Job | undefined }> = [];
  const runs: Array<{ pod: string; command: string[]; exitCode: number }> = [];
  const agentErrors: unknown[] = [];
  const pvName = (entry: string, className: string): string => generatePVName(entry, node, className);
  const jobsOf = (name: string): V1Job[] =>
    seen.map((s) => s.job).filter((j): j is V1Job => j?.metadata?.name === `cleanup-${name}`).filter((j, i, a) => a.findIndex((x) => x.metadata?.uid === j.metadata?.uid) === i);

  beforeAll(async () => {
    failFlag = host.path('flaky-fails');
    flakyLog = host.path('flaky-runs.log');
    await createDeleterCluster(core, storage, { node, ns, classes: Object.values(cls) });
    host.mkdir('blk');
    blkDev = host.loopDevice(16, 'blk');
    host.symlink(blkDev, 'blk', 'disk');
    host.mkdir('flaky');
    flakyDev = host.loopDevice(8, 'flaky');
    host.symlink(flakyDev, 'flaky', 'disk');
    fsDir = host.mkdir('fs');
    host.tmpfs(8, 'fs', 'vol');
    const flaky = writeScript(host.path('flaky.sh'), [
      `echo "run $$ $(date +%s%N)" >> ${JSON.stringify(flakyLog)}`,
      `if [[ -e ${JSON.stringify(failFlag)} ]]; then echo "controller says no" >&2; exit 4; fi`,
      `exec ${JSON.stringify(join(import.meta.dirname, '..', 'deployment', 'scripts', 'dd_zero.sh'))}`,
    ]);
    const files = configFiles({
      useJobForCleaning: true,
      classes: {
        [cls.blk]: { hostDir: '/mnt/host/blk', mountDir: host.path('blk'), volumeMode: 'Block', blockCleanerCommand: ['/scripts/dd_zero.sh', '1'] },
        [cls.fs]: { hostDir: '/mnt/host/fs', mountDir: fsDir },
        [cls.flaky]: { hostDir: '/mnt/host/flaky', mountDir: host.path('flaky'), volumeMode: 'Block', blockCleanerCommand: [flaky, marker] },
      },
    });
    files['jobTolerations'] = TOLERATIONS_YAML;
    const exec = hostJobRunner(runs);
    const runner = onFailureRunner({ core, exec });
    agent = startNodeAgent({
      core,
      nodeName: node,
      namespace: JOB_NS,
      run: async (pod) => {
        const owner = pod.metadata?.ownerReferences?.find((r) => r.kind === 'Job');
        seen.push({ pod, job: owner ? await readJob(owner.name) : undefined });
        return runner(pod);
      },
      // A pod the job controller deleted cannot get its final status: expected, not an error.
      onError: (err) => {
        if (apiStatus(err) !== 404) agentErrors.push(err);
      },
    });
    prov = await startDaemon(host, { nodeName: node, files });
  });

  afterAll(async () => {
    await agent?.stop();
    await prov?.stop();
    try {
      await reapPods(core, JOB_NS, node);
      await core.deleteNamespace({ name: ns });
    } catch {
      /* best effort */
    }
    keepLogs(host, node, ['provisioner.log', 'flaky-runs.log']);
    host.cleanup();
  });

  /** Checks the Job the daemon made for `pv` against the list, and the Pod the real job controller made from it. */
  function expectJobSpec(pv: V1PersistentVolume, mode: 'Block' | 'Filesystem', containerPath: string, hostDir: string, mountDir: string, command: string[]): void {
    const name = pv.metadata!.name!;
    const entry = seen.find((s) => s.job?.metadata?.name === `cleanup-${name}` && s.job.metadata.labels?.['pvuuid'] === pv.metadata?.uid);
    expect(entry, `a Job cleanup-${name} for PV uid ${pv.metadata?.uid}`).toBeDefined();
    const job = entry!.job!;
    expect(job.metadata?.namespace).toBe(JOB_NS);
    expect(job.metadata?.labels).toEqual({
      'kubernetes.io/hostname': node,
      pv: name,
      pvuuid: pv.metadata?.uid,
      'app.kubernetes.io/managed-by': 'local-volume-provisioner',
    });
    expect(job.metadata?.annotations?.['device']).toBe(containerPath);
    expect(Date.parse(job.metadata?.annotations?.['start-time'] ?? '')).toBeGreaterThan(Date.now() - 120_000);
    expect(job.spec?.backoffLimit).toBe(3);
    expect(job.spec?.ttlSecondsAfterFinished).toBe(3600);
    const podSpec = job.spec!.template.spec!;
    expect(podSpec.restartPolicy).toBe('OnFailure');
    expect(podSpec.nodeSelector).toEqual({ 'kubernetes.io/hostname': node });
    expect(podSpec.tolerations).toEqual(TOLERATIONS);
    expect(podSpec.containers).toHaveLength(1);
    const c = podSpec.containers[0]!;
    expect(c.image).toBe('local-static-provisioner:e2e');
    expect(c.command).toEqual(command);
    expect(c.env).toEqual([{ name: mode === 'Block' ? 'LOCAL_PV_BLKDEVICE' : 'LOCAL_PV_FILESYSTEM', value: containerPath }]);
    // Block writes to a device node: privileged. Filesystem only unlinks files: unprivileged, and the
    // node agent runs it confined to these capabilities (hostJobRunner), so the clean below proves them enough.
    expectLeastPrivilege(job, mode);
    const vol = podSpec.volumes?.find((v) => v.hostPath?.path === hostDir);
    expect(vol, `a hostPath volume for ${hostDir}`).toBeDefined();
    expect(c.volumeMounts).toContainEqual(MOUNT_PROPAGATION[mode]({ name: vol!.name, mountPath: mountDir }));
    const devVol = podSpec.volumes?.find((v) => v.hostPath?.path === '/dev');
    if (mode === 'Block') {
      expect(devVol).toMatchObject({ name: 'dev', hostPath: { path: '/dev' } });
      expect(c.volumeMounts).toContainEqual({ name: 'dev', mountPath: '/dev' });
    } else {
      expect(devVol).toBeUndefined();
    }
    // The Pod is the real job controller's, owned by the Job, and ran on our node.
    const pod = entry!.pod;
    expect(pod.metadata?.ownerReferences?.[0]).toMatchObject({ kind: 'Job', name: `cleanup-${name}`, uid: job.metadata?.uid, controller: true });
    expect(pod.spec?.containers[0]?.command).toEqual(command);
  }

  it('Block: the Job zeroes the loop device on the host, then the PV is deleted, the Job deleted, the volume rediscovered', async () => {
    const name = pvName('disk', cls.blk);
    const size = deviceSize(blkDev);
    fillDevice(blkDev, size / MIB);
    const pv = await waitPV(core, name);
    const claim = await bindPV(core, pv, ns);
    const fresh = await releaseAndRediscover(core, ns, pv, claim);

    expect(allZero(blkDev, size)).toBe(true);
    expect(fresh.metadata?.uid).not.toBe(pv.metadata?.uid);
    expectJobSpec(pv, 'Block', host.path('blk', 'disk'), '/mnt/host/blk', host.path('blk'), ['/scripts/dd_zero.sh', '1']);
    expect(runs.filter((r) => r.pod.startsWith(`cleanup-${name}-`)).map((r) => r.exitCode)).toEqual([0]);
    await waitFor(async () => (await readJob(`cleanup-${name}`)) === undefined, { what: `Job cleanup-${name} to be deleted`, timeoutMs: 15_000 });
    expect(await metric(prov!, `${M}persistentvolume_delete_total`, { mode: 'Block', type: 'job' })).toBe(1);
    // Nothing was cleaned in-process.
    expect(logsWith(prov!, `Start cleanup for pv ${name}`)).toEqual([]);
    expect(await metric(prov!, `${M}proctable_succeeded`)).toBe(0);
  });

  it('Filesystem: also cleaned by a Job (fsclean.sh): files gone, mount point kept, PV deleted and rediscovered', async () => {
    const name = pvName('vol', cls.fs);
    const vol = join(fsDir, 'vol');
    const pv = await waitPV(core, name);
    const claim = await bindPV(core, pv, ns);
    writeFileSync(join(vol, 'data'), 'user data');
    writeFileSync(join(vol, '.dot'), 'hidden');
    mkdirSync(join(vol, 'a', 'b'), { recursive: true });
    writeFileSync(join(vol, 'a', 'b', 'c'), 'deep');
    // Another user's private tree: the unprivileged Job (run confined to its capabilities) must still remove it.
    for (const p of ['a', 'a/b', 'a/b/c']) chownSync(join(vol, p), 1234, 1234);
    chmodSync(join(vol, 'a', 'b'), 0o000);
    chmodSync(join(vol, 'a'), 0o000);
    await releaseAndRediscover(core, ns, pv, claim);

    expect(readdirSync(vol)).toEqual([]);
    expect(isMountPoint(vol)).toBe(true);
    expectJobSpec(pv, 'Filesystem', join(fsDir, 'vol'), '/mnt/host/fs', fsDir, ['/scripts/fsclean.sh']);
    await waitFor(async () => (await readJob(`cleanup-${name}`)) === undefined, { what: `Job cleanup-${name} to be deleted`, timeoutMs: 15_000 });
    expect(await metric(prov!, `${M}persistentvolume_delete_total`, { mode: 'Filesystem', type: 'job' })).toBe(1);
    expect(logsWith(prov!, `Start cleanup for pv ${name}`)).toEqual([]);
  });

  /** How the first (failed) Job of the flaky PV was reported, for the check after the flow test. */
  const firstFailure = { retries: 0, failedDeletes: 0, logLines: 0, events: 0 };

  it('a failing Job: Warning Event, PV kept, Job deleted, a new Job only after the backoff, and the PV deleted once a Job succeeds', async () => {
    const name = pvName('disk', cls.flaky);
    writeFileSync(failFlag, '');
    const size = deviceSize(flakyDev);
    fillDevice(flakyDev, size / MIB);
    const pv = await waitPV(core, name);
    const claim = await bindPV(core, pv, ns);
    const retriesBefore = await metric(prov!, `${M}cleanup_retries_total`, { type: 'job' });
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });

    // The container fails and is restarted in place until the real job controller gives up (backoffLimit 3).
    await waitPVEvent(core, pv, 'VolumeFailedDelete', (m) => m.includes('Cleanup job'), 60_000);
    const failedAt = Date.now();
    expect(runLogLines(flakyLog).length).toBeGreaterThanOrEqual(3);
    expect(runs.filter((r) => r.pod.startsWith(`cleanup-${name}-`)).every((r) => r.exitCode === 4)).toBe(true);
    const firstJob = jobsOf(name)[0]!;
    await waitFor(async () => (await readJob(`cleanup-${name}`)) === undefined, { what: 'the failed Job to be deleted', timeoutMs: 15_000 });
    await sleep(1000); // let any further report of the same Job land
    const evs = (await pvEvents(core, pv)).filter((e) => e.reason === 'VolumeFailedDelete');
    // The first report of a failure names the 30 s (+10 % jitter) backoff.
    const re = new RegExp(`^Cleanup job ${JOB_NS}/cleanup-${name} failed \\(BackoffLimitExceeded.*\\); a new one starts in (3[0-3])s$`);
    const ev = evs.find((e) => re.test(e.message ?? ''));
    expect(ev, `an Event matching ${re}; got ${JSON.stringify(evs.map((e) => e.message))}`).toBeDefined();
    expect(ev!.type).toBe('Warning');
    firstFailure.events = evs.length;
    firstFailure.retries = (await metric(prov!, `${M}cleanup_retries_total`, { type: 'job' })) - retriesBefore;
    firstFailure.failedDeletes = await metric(prov!, `${M}persistentvolume_delete_failed_total`, { mode: 'Block', type: 'job' });
    firstFailure.logLines = logsWith(prov!, `Cleanup job ${JOB_NS}/cleanup-${name} failed`).length;
    expect(firstFailure.retries).toBeGreaterThanOrEqual(1);

    // Backoff: no new Job for the next 20 s (a retry per 1 s pass would make ~20), the PV stays Released.
    const quietUntil = failedAt + 20_000;
    while (Date.now() < quietUntil) {
      expect(await readJob(`cleanup-${name}`)).toBeUndefined();
      await sleep(1000);
    }
    const kept = await readPV(core, name);
    expect(kept?.metadata?.uid).toBe(pv.metadata?.uid);
    expect(kept?.status?.phase).toBe('Released');
    expect(readAt(flakyDev, 0, 4096).every((b) => b === 0xa5)).toBe(true); // not cleaned by anything

    rmSync(failFlag);
    await waitPVGone(core, name, pv.metadata!.uid!, 90_000);
    const jobs = jobsOf(name);
    expect(jobs.length).toBe(2);
    expect(jobs[1]!.metadata?.uid).not.toBe(firstJob.metadata?.uid);
    const gapMs = Date.parse(String(jobs[1]!.metadata?.creationTimestamp)) - Date.parse(String(ev!.firstTimestamp ?? ev!.eventTime));
    expect(gapMs).toBeGreaterThanOrEqual(27_000);
    expect(allZero(flakyDev, size)).toBe(true);
    await waitPV(core, name, { notUid: pv.metadata!.uid! });
    expect(await metric(prov!, `${M}persistentvolume_delete_total`, { mode: 'Block', type: 'job' })).toBe(2);
    expect(agentErrors).toEqual([]);
  });

  // The failed Job's uid is remembered until the informer reports the Job deleted, so a queued
  // update of the same Job is not a second failure (one Event, one retry, one backoff step).
  it('reports a failed Job exactly once: one Event, one retry count, one backoff step', () => {
    expect(firstFailure).toEqual({ retries: 1, failedDeletes: 1, logLines: 1, events: 1 });
  });
});
