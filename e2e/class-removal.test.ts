// Issue 18, point 13 end to end: a storage class is removed from the config
// while PVs of this node still name it (real apiserver and controller-manager,
// real loop devices, the daemon as a child process).
//
// - The hot reload that removes it records a Warning StorageClassRemoved on the
//   provisioner Pod and Node naming its PVs with their phase; its Available PV
//   is deleted (no claim can bind it), its volume untouched; the clean already
//   running for its Released PV finishes.
// - The daemon is restarted (a new process) with the class still removed: a PV
//   of the class released meanwhile is cleaned with the class's own settings,
//   remembered in --state-dir (its own block cleaner, its mountDir, which is not
//   its hostDir), and never with another class's cleaner.
// - The remembered settings are then forged (a record the config parser
//   refuses): the next Released PV of that class is kept, with an Event that
//   says so, and nothing touches its device.
//
// Cleaners are scripts of ours that log their runs; the removed class's one
// blocks at a gate until the test opens it, so a slow machine cannot let a
// clean end early. Every wait is on an event with a generous deadline.
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generatePVName } from '../src/volume/naming.ts';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { createDeleterCluster, deviceSize, keepLogs, killGroups, openGate, pgrep, startDaemon, waitForGate, waitPVEvent, writeScript } from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { allZero, applyConfig, bindPV, configFiles, eventsAbout, fillDevice, logsWith, PVWatch, readPV, runLogLines, waitPV, type ConfigSpec } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';

const { kc, core, storage } = adminClients();
const MIB = 1024 * 1024;
/** Deadline of every wait: far beyond what a loaded 2-core machine needs. */
const LONG = 120_000;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe.skipIf(!isRoot())('removing a storage class that still has PVs on this node', () => {
  const host = new HostFixtures('lsp-clsrm-');
  const node = uniqueName('clsrm-node');
  const ns = uniqueName('clsrm-ns');
  const cls = { keep: uniqueName('clsrm-keep'), gone: uniqueName('clsrm-gone') };
  const marker = uniqueName('clsrm-cleaner');
  const vols = ['g0', 'g1', 'g2', 'g3'] as const;
  const devs: Record<string, string> = {};
  const claims: Record<string, string> = {};
  const pvs: Record<string, V1PersistentVolume> = {};
  const daemons: ProvisionerProcess[] = [];
  let goneLog = '';
  let keepLog = '';
  let gate = '';
  let stateDir = '';
  let keepCleaner = '';
  let withBoth: ConfigSpec;
  let keepOnly: ConfigSpec;
  let watch: PVWatch | undefined;
  const pvName = (vol: string, className = cls.gone): string => generatePVName(vol, node, className);
  const podName = `local-volume-provisioner-${node}`;
  const started = (vol: string): string[] => runLogLines(goneLog).filter((l) => l.startsWith('start ') && l.endsWith(` ${join(host.path('gone'), vol)}`));
  const startDaemonN = async (n: number, spec: ConfigSpec): Promise<ProvisionerProcess> => {
    const d = await startDaemon(host, { nodeName: node, files: configFiles(spec), args: [`--state-dir=${stateDir}`], logName: `provisioner-${n}.log` });
    daemons.push(d);
    return d;
  };
  const deletedEvent = (pv: V1PersistentVolume): Promise<{ at: number }> =>
    waitFor(() => watch!.events.find((e) => e.type === 'DELETED' && e.uid === pv.metadata?.uid), { what: `PV ${pv.metadata?.name ?? ''} to be deleted`, timeoutMs: LONG });

  beforeAll(async () => {
    goneLog = host.path('gone-runs.log');
    keepLog = host.path('keep-runs.log');
    gate = host.path('gate');
    stateDir = host.path('state');
    await createDeleterCluster(core, storage, { node, ns, classes: Object.values(cls) });
    host.mkdir('gone');
    host.mkdir('keep');
    for (const v of vols) {
      devs[v] = host.loopDevice(8, v);
      host.symlink(devs[v], 'gone', v);
    }
    devs['k0'] = host.loopDevice(8, 'k0');
    host.symlink(devs['k0'], 'keep', 'k0');
    // Each class has its own cleaner; the removed class's one waits at a gate.
    const goneCleaner = writeScript(host.path('gone-clean.sh'), [
      'set -euo pipefail',
      'dev="${LOCAL_PV_BLKDEVICE:?}"',
      `echo "start $$ $dev" >> ${JSON.stringify(goneLog)}`,
      waitForGate(gate),
      `dd if=/dev/zero of="$dev" bs=1M count=8 conv=fsync status=none`,
      `echo "done $$ $dev" >> ${JSON.stringify(goneLog)}`,
    ]);
    keepCleaner = writeScript(host.path('keep-clean.sh'), ['set -euo pipefail', `echo "start $$ $LOCAL_PV_BLKDEVICE" >> ${JSON.stringify(keepLog)}`]);
    // hostDir differs from mountDir: cleaning with guessed settings would look in the wrong place.
    const keep = { hostDir: '/mnt/host/keep', mountDir: host.path('keep'), volumeMode: 'Block', blockCleanerCommand: [keepCleaner, marker] } as const;
    const gone = { hostDir: '/mnt/host/gone', mountDir: host.path('gone'), volumeMode: 'Block', blockCleanerCommand: [goneCleaner, marker] } as const;
    withBoth = { classes: { [cls.keep]: keep, [cls.gone]: gone } };
    keepOnly = { classes: { [cls.keep]: keep } };
    watch = await PVWatch.start(kc, core, node);
    await startDaemonN(1, withBoth);
    for (const v of vols) pvs[v] = await waitPV(core, pvName(v), { timeoutMs: LONG });
    await waitPV(core, pvName('k0', cls.keep), { timeoutMs: LONG });
    for (const v of vols) fillDevice(devs[v]!, deviceSize(devs[v]!) / MIB);
    // g2 and g3 in use; g1 released, its clean running (blocked at the gate) when the class goes.
    for (const v of ['g1', 'g2', 'g3']) claims[v] = await bindPV(core, pvs[v]!, ns);
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claims['g1']! });
    await waitFor(() => started('g1').length === 1, { what: 'the clean of g1 to start', timeoutMs: LONG });
  }, 10 * 60_000);

  afterAll(async () => {
    watch?.stop();
    for (const d of daemons) await d.stop();
    killGroups(pgrep(marker)); // only our own marked cleaners, should any be left
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    for (const v of [...vols, 'k0']) {
      const name = v === 'k0' ? pvName(v, cls.keep) : pvName(v);
      await core.deletePersistentVolume({ name }).catch(() => undefined);
    }
    keepLogs(host, node, ['provisioner-1.log', 'provisioner-2.log', 'provisioner-3.log', 'gone-runs.log', 'keep-runs.log']);
    host.cleanup();
  });

  it('hot reload: a StorageClassRemoved Event names its PVs, its Available PV is deleted (volume untouched), the running clean finishes', async () => {
    const first = daemons[0]!;
    const write = (): Promise<void> => {
      const tmp = host.path('storageClassMap.tmp');
      writeFileSync(tmp, configFiles(keepOnly)['storageClassMap']!);
      renameSync(tmp, join(host.path('config'), 'storageClassMap')); // atomic, as the kubelet's swap is
      return Promise.resolve();
    };
    await applyConfig(first, write, { timeoutMs: LONG });
    const about = async (namespace: string, kind: string, name: string): Promise<string | undefined> =>
      (await eventsAbout(core, namespace, kind, name)).find((e) => e.reason === 'StorageClassRemoved' && e.type === 'Warning')?.message;
    const onNode = await waitFor(() => about('default', 'Node', node), { what: 'a StorageClassRemoved Event on the Node', timeoutMs: LONG });
    const onPod = await waitFor(() => about('kube-system', 'Pod', podName), { what: 'a StorageClassRemoved Event on the Pod', timeoutMs: LONG });
    expect(onPod).toBe(onNode);
    expect(onNode).toContain(`Storage class "${cls.gone}" was removed from the configuration but 4 PV(s) of this node name it`);
    for (const [v, phase] of [['g0', 'Available'], ['g1', 'Released'], ['g2', 'Bound'], ['g3', 'Bound']] as const) expect(onNode).toContain(`${pvName(v)} (${phase})`);
    expect(logsWith(first, `Storage class "${cls.gone}" was removed`)).toHaveLength(1);

    // The Available PV is no longer offered: deleted; its device keeps its bytes, no cleaner ran on it.
    await deletedEvent(pvs['g0']!);
    expect(logsWith(first, `Deleted Available PV "${pvName('g0')}"`)).toHaveLength(1);
    expect(allZero(devs['g0']!, 8 * MIB)).toBe(false);
    expect(started('g0')).toEqual([]);

    // A claim of that class (Immediate binding: the PV controller binds at once) finds nothing to bind.
    const claim = 'late-claim';
    await core.createNamespacedPersistentVolumeClaim({
      namespace: ns,
      body: {
        metadata: { name: claim },
        spec: { storageClassName: cls.gone, volumeMode: 'Block', accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Mi' } } },
      },
    });
    await waitFor(async () => (await eventsAbout(core, ns, 'PersistentVolumeClaim', claim)).length > 0, {
      what: 'the PV controller to handle the new claim',
      timeoutMs: LONG,
    });
    const pending = await core.readNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });
    expect(pending.status?.phase).toBe('Pending');
    expect(pending.spec?.volumeName ?? '').toBe('');
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });

    // The clean that was running goes on with the class's last settings, then its PV is deleted.
    const pid = Number(started('g1')[0]!.split(' ')[1]);
    openGate(gate, pid);
    await deletedEvent(pvs['g1']!);
    expect(allZero(devs['g1']!, 8 * MIB)).toBe(true);
    // Neither comes back: the class is not in the configuration (a few discovery passes of 1 s).
    await sleep(3000);
    expect(await readPV(core, pvName('g0'))).toBeUndefined();
    expect(await readPV(core, pvName('g1'))).toBeUndefined();
    // Bound PVs are never touched.
    for (const v of ['g2', 'g3']) expect((await readPV(core, pvName(v)))?.status?.phase).toBe('Bound');
  }, 10 * 60_000);

  it("after a restart, a Released PV of the removed class is cleaned with that class's remembered settings", async () => {
    await daemons[0]!.stop();

    // Released while no daemon runs.
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claims['g2']! });
    await waitFor(async () => (await readPV(core, pvName('g2')))?.status?.phase === 'Released', { what: 'g2 to be Released', timeoutMs: LONG });

    const second = await startDaemonN(2, keepOnly);
    const run = await waitFor(() => started('g2')[0], { what: "the removed class's own cleaner to start on g2 after the restart", timeoutMs: LONG });
    openGate(gate, Number(run.split(' ')[1]));
    await deletedEvent(pvs['g2']!);
    expect(allZero(devs['g2']!, 8 * MIB)).toBe(true);
    expect(logsWith(second, `Start cleanup for pv ${pvName('g2')}`)).toHaveLength(1);
    expect(runLogLines(keepLog)).toEqual([]); // never the other class's cleaner
    expect(started('g3')).toEqual([]);
    expect((await readPV(core, pvName('g3')))?.status?.phase).toBe('Bound');
    await sleep(3000);
    expect(await readPV(core, pvName('g2'))).toBeUndefined(); // not rediscovered
    // What the restarted daemon read: the classes of the last config, and the removed class kept (g3 still names it).
    const state = JSON.parse(readFileSync(join(stateDir, 'classes.json'), 'utf8')) as { configured: string[]; classes: Record<string, { mountDir: string }> };
    expect(state.configured).toEqual([cls.keep]);
    expect(state.classes[cls.gone]?.mountDir).toBe(host.path('gone'));
  }, 10 * 60_000);

  it('with the remembered settings forged, a Released PV of the removed class is kept, with an Event, and never cleaned', async () => {
    for (const d of daemons) await d.stop();
    // A record the config parser refuses (a relative mountDir), pointing at the other class's cleaner.
    const forged = { hostDir: '/mnt/host/gone', mountDir: 'gone', blockCleanerCommand: [keepCleaner, marker], volumeMode: 'Block', namePattern: '*' };
    const state = { version: 1, node, configured: [cls.keep], classes: { [cls.gone]: forged } };
    writeFileSync(join(stateDir, 'classes.json'), JSON.stringify(state), { mode: 0o600 });

    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claims['g3']! });
    const released = await waitFor(async () => ((await readPV(core, pvName('g3')))?.status?.phase === 'Released' ? readPV(core, pvName('g3')) : undefined), {
      what: 'g3 to be Released',
      timeoutMs: LONG,
    });
    const third = await startDaemonN(3, keepOnly);
    const ev = await waitPVEvent(core, released, 'VolumeFailedDelete', (m) => m.includes('Unknown storage class name') && m.includes('the PV is kept'), LONG);
    expect(ev.type).toBe('Warning');
    expect(logsWith(third, `ignoring the remembered settings of storage class "${cls.gone}"`)).toHaveLength(1);
    await sleep(3000); // a few more passes
    expect((await readPV(core, pvName('g3')))?.metadata?.uid).toBe(pvs['g3']!.metadata?.uid);
    expect(started('g3')).toEqual([]);
    expect(runLogLines(keepLog)).toEqual([]);
    expect(allZero(devs['g3']!, 8 * MIB)).toBe(false);
  }, 10 * 60_000);
});
