// Issue 4 end to end, crash safety: the daemon is killed with SIGKILL in the
// middle of an in-process block clean and started again. The volume must be
// cleaned again (a marker written after the kill is gone) before its PV is
// deleted, no cleaner of the killed daemon may keep running, and a Bound PV and
// an Available PV on the same node are never touched (files, device bytes,
// PV objects) across all of it. Then the same with SIGTERM (a graceful stop, issue
// 12): the daemon kills its own cleaner and logs the abort before it exits 0, the
// PV stays Released, and the next daemon cleans the volume again.
//
// Every wait is on an event (a log line, a file, a process, an API object) with a
// generous deadline: the cleaner blocks until the test opens its gate or it is
// killed, so a slow restart on a busy machine cannot let the killed daemon's
// cleaner finish on its own.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import {
  createDeleterCluster,
  keepLogs,
  deviceSize,
  killGroups,
  openGate,
  pgrep,
  readAt,
  startDaemon,
  waitForGate,
  waitPVEvent,
  writeAt,
  writeScript,
} from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { allZero, bindPV, configFiles, fillDevice, logsWith, PVWatch, readPV, runLogLines, waitPV } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const { kc, core, storage, batch } = adminClients();
const MIB = 1024 * 1024;
const SCRIPTS = join(import.meta.dirname, '..', 'deployment', 'scripts');
/** Deadline of every wait: far beyond what a loaded 2-core machine needs. */
const LONG = 180_000;

interface Run {
  readonly what: 'start' | 'done';
  readonly pid: number;
  readonly atMs: number;
}
const parseRuns = (lines: string[]): Run[] =>
  lines.map((l) => {
    const [what, pid, ns] = l.split(' ');
    return { what: what as Run['what'], pid: Number(pid), atMs: Number(BigInt(ns ?? '0') / 1_000_000n) };
  });

describe.skipIf(!isRoot())('deleter: crash safety (SIGKILL or SIGTERM in the middle of a clean)', () => {
  const host = new HostFixtures('lsp-delc-');
  const node = uniqueName('delc-node');
  const ns = uniqueName('delc-ns');
  const marker = uniqueName('lspdelc');
  const cls = { blk: uniqueName('delc-blk'), fs: uniqueName('delc-fs') };
  let runLog = '';
  let gate = '';
  let stateArgs: string[] = [];
  let victimDev = '';
  let keepDev = '';
  let fsDir = '';
  let files: Record<string, string> = {};
  let watch: PVWatch | undefined;
  const daemons: ProvisionerProcess[] = [];
  /** Cleaner processes of the killed daemon still running right after the kill. */
  let leftovers: number[] = [];
  let reapedByRestart = false;
  let bound: V1PersistentVolume | undefined;
  let avail: V1PersistentVolume | undefined;
  let keepBlk: V1PersistentVolume | undefined;
  const pvName = (entry: string, className: string): string => generatePVName(entry, node, className);

  beforeAll(async () => {
    runLog = host.path('slow-runs.log');
    gate = host.path('gate');
    stateArgs = [`--state-dir=${host.path('state')}`];
    await createDeleterCluster(core, storage, { node, ns, classes: Object.values(cls) });
    host.mkdir('blk');
    victimDev = host.loopDevice(8, 'victim');
    host.symlink(victimDev, 'blk', 'victim');
    keepDev = host.loopDevice(8, 'keep');
    host.symlink(keepDev, 'blk', 'keep');
    fsDir = host.mkdir('fs');
    host.tmpfs(8, 'fs', 'bound');
    host.tmpfs(8, 'fs', 'avail');
    // A slow block cleaner: logs its start, waits until the test opens its gate (or it is killed),
    // zeroes the device, logs the end.
    const slow = writeScript(host.path('slow-clean.sh'), [
      'set -euo pipefail',
      `echo "start $$ $(date +%s%N)" >> ${JSON.stringify(runLog)}`,
      waitForGate(gate),
      JSON.stringify(join(SCRIPTS, 'dd_zero.sh')),
      `echo "done $$ $(date +%s%N)" >> ${JSON.stringify(runLog)}`,
    ]);
    files = configFiles({
      classes: {
        [cls.blk]: { hostDir: '/mnt/host/blk', mountDir: host.path('blk'), volumeMode: 'Block', blockCleanerCommand: [slow, marker] },
        [cls.fs]: { hostDir: '/mnt/host/fs', mountDir: fsDir },
      },
    });
    watch = await PVWatch.start(kc, core, node);
    daemons.push(await startDaemon(host, { nodeName: node, files, args: stateArgs, logName: 'provisioner-1.log' }));

    // The volumes that must never be touched: a Bound PV with data, an Available PV with data, an Available block PV.
    bound = await waitPV(core, pvName('bound', cls.fs), { timeoutMs: LONG });
    await bindPV(core, bound, ns);
    bound = await readPV(core, bound.metadata!.name!);
    writeFileSync(join(fsDir, 'bound', 'in-use.db'), 'live data of a running workload');
    avail = await waitPV(core, pvName('avail', cls.fs), { timeoutMs: LONG });
    writeFileSync(join(fsDir, 'avail', 'leftover.txt'), 'data on an Available volume');
    keepBlk = await waitPV(core, pvName('keep', cls.blk), { timeoutMs: LONG });
    fillDevice(keepDev, deviceSize(keepDev) / MIB);
  }, 10 * 60_000);

  afterAll(async () => {
    watch?.stop();
    for (const d of daemons) await d.stop();
    killGroups(pgrep(marker)); // only our own marked cleaners, should any be left
    await core.deleteNamespace({ name: ns }).catch(() => undefined); // best effort
    keepLogs(host, node, ['provisioner-1.log', 'provisioner-2.log', 'provisioner-3.log', 'slow-runs.log']);
    host.cleanup();
  });

  it('after a SIGKILL mid-clean and a restart, the volume is cleaned again before its PV is deleted', async () => {
    const name = pvName('victim', cls.blk);
    const size = deviceSize(victimDev);
    fillDevice(victimDev, size / MIB);
    const pv = await waitPV(core, name, { timeoutMs: LONG });
    const claim = await bindPV(core, pv, ns);
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });

    // The clean is running (the script logged its start and waits at its gate, which stays
    // closed for this run): kill the daemon.
    await waitFor(() => runLogLines(runLog).length === 1, { what: 'the slow cleaner to start', timeoutMs: LONG });
    await waitPVEvent(core, pv, 'VolumeDelete', undefined, LONG); // "Starting cleanup of Block PV ..."
    const firstRun = parseRuns(runLogLines(runLog))[0]!;
    const first = daemons[0]!;
    await first.kill(); // resolves once the daemon has exited
    // The killed daemon's cleaner runs in its own process group, so on a host (unlike in a Pod)
    // it outlives the daemon; the restarted daemon must stop it before it cleans again.
    leftovers = pgrep(marker);
    expect(leftovers, 'the first cleaner, blocked at its gate, outlives the killed daemon').toContain(firstRun.pid);

    // The PV was not deleted, the clean did not finish.
    const kept = await readPV(core, name);
    expect(kept?.metadata?.uid).toBe(pv.metadata?.uid);
    expect(kept?.status?.phase).toBe('Released');
    expect(parseRuns(runLogLines(runLog)).filter((r) => r.what === 'done')).toEqual([]);

    // New data appears on the device after the kill: it must be gone when the PV is deleted.
    const stamp = Buffer.from(`written after the kill ${marker}`);
    writeAt(victimDev, 0, stamp);
    writeAt(victimDev, 5 * MIB, stamp);
    expect(readAt(victimDev, 5 * MIB, stamp.length).equals(stamp)).toBe(true);

    const second = await startDaemon(host, { nodeName: node, files, args: stateArgs, logName: 'provisioner-2.log' });
    daemons.push(second);
    // Nothing but the restarted daemon can end the first cleaner: its gate is never opened.
    await waitFor(() => leftovers.every((pid) => !pgrep(marker).includes(pid)), {
      what: "the killed daemon's cleaner to be stopped by the restarted daemon",
      timeoutMs: LONG,
    });
    reapedByRestart = await waitFor(() => logsWith(second, 'killed a cleaner left running by a daemon that died').length > 0, {
      what: 'the restarted daemon to log that it stopped the orphaned cleaner',
      timeoutMs: LONG,
    });
    // The restarted daemon cleans again: let that run through its gate.
    const secondRun = await waitFor(() => parseRuns(runLogLines(runLog))[1], { what: 'the restarted daemon to start the cleaner again', timeoutMs: LONG });
    expect(secondRun.what).toBe('start');
    openGate(gate, secondRun.pid);
    const deleted = await waitFor(() => watch!.events.find((e) => e.type === 'DELETED' && e.uid === pv.metadata?.uid), {
      what: `PV ${name} to be deleted after the restart`,
      timeoutMs: LONG,
    });

    expect(allZero(victimDev, size)).toBe(true);
    const runs = parseRuns(runLogLines(runLog));
    const starts = runs.filter((r) => r.what === 'start');
    expect(starts).toHaveLength(2);
    const again = runs.find((r) => r.what === 'done' && r.pid === starts[1]!.pid);
    expect(again, 'the clean started by the restarted daemon finished').toBeDefined();
    expect(again!.atMs).toBeLessThanOrEqual(deleted.at);
    expect(runs.filter((r) => r.what === 'done')).toHaveLength(1);
    expect(logsWith(second, `Start cleanup for pv ${name}`)).toHaveLength(1);
    expect(logsWith(second, `Deleting pv ${name} after successful cleanup`)).toHaveLength(1);
    await waitPV(core, name, { notUid: pv.metadata!.uid!, timeoutMs: LONG });
  }, 10 * 60_000);

  // Block cleaners run in their own process group (so a timeout kills the whole tree). A daemon
  // killed by SIGKILL cannot stop them; in a Pod the container takes them down, on a host the
  // restarted daemon does (src/deleter/orphans.ts, --state-dir).
  it('the restarted daemon stops the cleaner the killed daemon left running (no two cleans of one device)', () => {
    // Checked in the test above: leftovers were found after the SIGKILL, then stopped by the new daemon.
    expect(leftovers.length, `cleaner processes (pgrep -f ${marker}) left by the killed daemon`).toBeGreaterThan(0);
    expect(reapedByRestart).toBe(true);
  });

  it('a Bound PV and an Available PV on the same node are never touched, across the kill and the restart', async () => {
    // A few more passes of the restarted daemon: each new volume gets its PV in a discovery pass,
    // which follows a deleter pass.
    for (const probe of ['probe-1', 'probe-2']) {
      host.tmpfs(8, 'fs', probe);
      await waitPV(core, pvName(probe, cls.fs), { timeoutMs: LONG });
    }
    for (const pv of [bound!, avail!, keepBlk!]) {
      const cur = await readPV(core, pv.metadata!.name!);
      expect(cur?.metadata?.uid, `PV ${pv.metadata?.name} still the same object`).toBe(pv.metadata?.uid);
      expect(cur?.metadata?.deletionTimestamp).toBeUndefined();
      expect(watch!.events.filter((e) => e.uid === pv.metadata?.uid && e.type === 'DELETED')).toEqual([]);
      for (const d of daemons) expect(logsWith(d, `Start cleanup for pv ${pv.metadata!.name!}`)).toEqual([]);
    }
    expect((await readPV(core, bound!.metadata!.name!))?.status?.phase).toBe('Bound');
    expect((await readPV(core, avail!.metadata!.name!))?.status?.phase).toBe('Available');
    expect((await readPV(core, keepBlk!.metadata!.name!))?.status?.phase).toBe('Available');
    expect(readFileSync(join(fsDir, 'bound', 'in-use.db'), 'utf8')).toBe('live data of a running workload');
    expect(readFileSync(join(fsDir, 'avail', 'leftover.txt'), 'utf8')).toBe('data on an Available volume');
    expect(readAt(keepDev, 0, MIB).every((b) => b === 0xa5)).toBe(true);
    expect(readAt(keepDev, deviceSize(keepDev) - MIB, MIB).every((b) => b === 0xa5)).toBe(true);
    const jobs = await batch.listNamespacedJob({ namespace: 'kube-system', labelSelector: `kubernetes.io/hostname=${node}` });
    expect(jobs.items).toEqual([]);
  }, 10 * 60_000);

  // Issue 12 point 4: a graceful stop (SIGTERM, what the kubelet sends) loses nothing in flight.
  it('after a SIGTERM mid-clean the daemon stops its own cleaner and exits 0, the PV stays Released; the next start cleans again before deleting it', async () => {
    const name = pvName('victim', cls.blk);
    const size = deviceSize(victimDev);
    const pv = await waitPV(core, name, { timeoutMs: LONG }); // rediscovered after the first test
    fillDevice(victimDev, size / MIB);
    const runsBefore = parseRuns(runLogLines(runLog)).length;
    const claim = await bindPV(core, pv, ns);
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });
    const firstRun = await waitFor(() => parseRuns(runLogLines(runLog))[runsBefore], { what: 'the slow cleaner to start', timeoutMs: LONG });
    expect(firstRun.what).toBe('start');

    const running = daemons.at(-1)!;
    running.child.kill('SIGTERM');
    // Exit code 0: the daemon finished its shutdown itself (a SIGKILL would give null).
    expect(await running.exited, 'exit code after SIGTERM').toBe(0);
    expect(pgrep(marker), 'the daemon stopped its cleaner before exiting').not.toContain(firstRun.pid);
    const aborted = logsWith(running, 'cleanup failed').filter((l) => l['pv'] === name && JSON.stringify(l['err']).includes('was cancelled and killed'));
    expect(aborted, 'the clean is reported as aborted').toHaveLength(1);
    const kept = await readPV(core, name);
    expect(kept?.metadata?.uid).toBe(pv.metadata?.uid);
    expect(kept?.metadata?.deletionTimestamp).toBeUndefined();
    expect(kept?.status?.phase).toBe('Released');
    expect(parseRuns(runLogLines(runLog)).slice(runsBefore).filter((r) => r.what === 'done')).toEqual([]);

    // Data written while no daemon runs must be gone when the PV is deleted.
    const stamp = Buffer.from(`written after the SIGTERM ${marker}`);
    writeAt(victimDev, 0, stamp);
    writeAt(victimDev, 5 * MIB, stamp);

    const next = await startDaemon(host, { nodeName: node, files, args: stateArgs, logName: 'provisioner-3.log' });
    daemons.push(next);
    const secondRun = await waitFor(() => parseRuns(runLogLines(runLog))[runsBefore + 1], { what: 'the next daemon to start the cleaner again', timeoutMs: LONG });
    expect(secondRun.what).toBe('start');
    expect(secondRun.pid).not.toBe(firstRun.pid);
    openGate(gate, secondRun.pid);
    const deleted = await waitFor(() => watch!.events.find((e) => e.type === 'DELETED' && e.uid === pv.metadata?.uid), {
      what: `PV ${name} to be deleted after the restart`,
      timeoutMs: LONG,
    });
    expect(allZero(victimDev, size)).toBe(true);
    const runs = parseRuns(runLogLines(runLog)).slice(runsBefore);
    expect(runs.filter((r) => r.what === 'start')).toHaveLength(2);
    const done = runs.filter((r) => r.what === 'done');
    expect(done.map((r) => r.pid)).toEqual([secondRun.pid]);
    expect(done[0]!.atMs).toBeLessThanOrEqual(deleted.at);
    expect(logsWith(next, `Deleting pv ${name} after successful cleanup`)).toHaveLength(1);
    await waitPV(core, name, { notUid: pv.metadata!.uid!, timeoutMs: LONG });
  }, 10 * 60_000);
});
