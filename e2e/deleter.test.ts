// Issue 4 end to end, in-process cleaning: the real daemon (node src/main.ts)
// against the real control plane (PV binder, PV protection), on real tmpfs
// mounts and loop devices. PV Available -> PVC Bound by the real binder -> PVC
// deleted -> Released -> cleaned (files gone / device bytes read back) -> PV
// deleted -> the volume comes back as a new Available PV. Also: a nested mount
// is never crossed, a vanished volume is never cleaned, and a cleaner that is
// missing, fails or hangs gives a clear Event and is retried with backoff.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import {
  createDeleterCluster,
  keepLogs,
  deviceSize,
  isMountPoint,
  pgrep,
  pvEvents,
  readAt,
  releaseAndRediscover,
  signatures,
  sleep,
  startDaemon,
  waitPVEvent,
  writeScript,
  zombieChildren,
} from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { allZero, bindPV, configFiles, fillDevice, logsWith, metric, PVWatch, readPV, runLogLines, waitPV, waitPVGone } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const { kc, core, storage } = adminClients();
const SCRIPTS = join(import.meta.dirname, '..', 'deployment', 'scripts');
const MIB = 1024 * 1024;
const M = 'local_volume_provisioner_';

describe.skipIf(!isRoot())('deleter: in-process cleaning on real mounts and loop devices', () => {
  const host = new HostFixtures('lsp-del-');
  const node = uniqueName('del-node');
  const ns = uniqueName('del-ns');
  const marker = uniqueName('lspdel');
  const cls = {
    fs: uniqueName('del-fs'),
    zero: uniqueName('del-zero'),
    quick: uniqueName('del-quick'),
    missing: uniqueName('del-miss'),
    failing: uniqueName('del-fail'),
    hanging: uniqueName('del-hang'),
  };
  const dev: Record<'zero' | 'quick' | 'missing' | 'failing' | 'hanging', string> = { zero: '', quick: '', missing: '', failing: '', hanging: '' };
  let prov: ProvisionerProcess | undefined;
  let watch: PVWatch | undefined;
  let fsDir = '';
  let failLog = '';
  let hangLog = '';
  const pvName = (entry: string, className: string): string => generatePVName(entry, node, className);
  const startLines = (name: string): Array<Record<string, unknown>> =>
    logsWith(prov!, `Start cleanup for pv ${name}`).filter((l) => l['pv'] === name);

  /** The phases the watch saw for one PV object, in order, without repeats. */
  const phases = (uid: string): string[] =>
    watch!.events.filter((e) => e.uid === uid).map((e) => (e.type === 'DELETED' ? 'DELETED' : (e.phase ?? ''))).filter((p, i, a) => p !== a[i - 1]);

  beforeAll(async () => {
    failLog = host.path('fail-runs.log');
    hangLog = host.path('hang-runs.log');
    await createDeleterCluster(core, storage, { node, ns, classes: Object.values(cls) });
    fsDir = host.mkdir('fs');
    for (const v of ['cycle', 'nested', 'gone']) host.tmpfs(8, 'fs', v);
    host.tmpfs(4, 'fs', 'nested', 'inner');
    for (const k of Object.keys(dev) as Array<keyof typeof dev>) {
      host.mkdir(k);
      dev[k] = host.loopDevice(k === 'zero' || k === 'quick' ? 16 : 4, k);
      host.symlink(dev[k], k, 'disk');
    }
    const failScript = writeScript(host.path('fail.sh'), [
      `echo "attempt $$ $(date +%s%N)" >> ${JSON.stringify(failLog)}`,
      'echo "wiping $LOCAL_PV_BLKDEVICE"',
      'echo "disk on fire" >&2',
      'exit 3',
    ]);
    const hangScript = writeScript(host.path('hang.sh'), [
      `echo "attempt $$ $(date +%s%N)" >> ${JSON.stringify(hangLog)}`,
      'sleep 600 &',
      `echo "child $! $(date +%s%N)" >> ${JSON.stringify(hangLog)}`,
      'wait',
    ]);
    const block = (k: keyof typeof dev, cmd: string[]) => ({ hostDir: `/mnt/host/${k}`, mountDir: host.path(k), volumeMode: 'Block' as const, blockCleanerCommand: cmd });
    const files = configFiles({
      classes: {
        [cls.fs]: { hostDir: '/mnt/host/fs', mountDir: fsDir },
        [cls.zero]: block('zero', [join(SCRIPTS, 'dd_zero.sh')]),
        [cls.quick]: block('quick', [join(SCRIPTS, 'quick_reset.sh')]),
        [cls.missing]: block('missing', [`/nonexistent/${marker}-cleaner`]),
        [cls.failing]: block('failing', [failScript, marker]),
        [cls.hanging]: block('hanging', [hangScript, marker]),
      },
    });
    watch = await PVWatch.start(kc, core, node);
    prov = await startDaemon(host, { nodeName: node, files, args: ['--clean-timeout=2s'] });
  });

  afterAll(async () => {
    watch?.stop();
    await prov?.stop();
    await core.deleteNamespace({ name: ns }).catch(() => undefined); // best effort
    keepLogs(host, node, ['provisioner.log', 'fail-runs.log', 'hang-runs.log']);
    host.cleanup();
  });

  it('Filesystem: a released volume is emptied (dotfiles, subdirs), its mount point kept, the PV deleted and rediscovered', async () => {
    const name = pvName('cycle', cls.fs);
    const pv = await waitPV(core, name);
    expect(pv.status?.phase === 'Available' || pv.status?.phase === 'Pending').toBe(true);
    const claim = await bindPV(core, pv, ns);
    const vol = join(fsDir, 'cycle');
    writeFileSync(join(vol, 'data.bin'), Buffer.alloc(64 * 1024, 7));
    writeFileSync(join(vol, '.hidden'), 'secret');
    mkdirSync(join(vol, 'sub', 'deeper'), { recursive: true });
    writeFileSync(join(vol, 'sub', 'deeper', 'file.txt'), 'nested data');

    const fresh = await releaseAndRediscover(core, ns, pv, claim);

    expect(readdirSync(vol)).toEqual([]);
    expect(isMountPoint(vol)).toBe(true);
    expect(fresh.metadata?.uid).not.toBe(pv.metadata?.uid);
    expect(fresh.spec?.local?.path).toBe('/mnt/host/fs/cycle');
    // The real binder and the deleter in order: Bound -> Released -> deleted.
    expect(phases(pv.metadata!.uid!).slice(-3)).toEqual(['Bound', 'Released', 'DELETED']);
    // Cleaned before deleted, exactly once.
    const msgs = prov!.logLines().filter((l) => l['pv'] === name).map((l) => String(l['msg']));
    const cleaned = msgs.indexOf(`Completed cleanup of pv ${JSON.stringify(name)}`);
    expect(cleaned).toBeGreaterThanOrEqual(0);
    expect(msgs.indexOf(`Deleting pv ${name} after successful cleanup`)).toBeGreaterThan(cleaned);
    expect(startLines(name)).toHaveLength(1);
    expect(await metric(prov!, `${M}persistentvolume_delete_total`, { mode: 'Filesystem', type: 'process' })).toBe(1);
  });

  it('Block with dd_zero.sh: every byte of the device reads back as zero before the PV is deleted and rediscovered', async () => {
    const name = pvName('disk', cls.zero);
    const size = deviceSize(dev.zero);
    fillDevice(dev.zero, size / MIB);
    expect(readAt(dev.zero, size - 4096, 4096).every((b) => b === 0xa5)).toBe(true);
    const pv = await waitPV(core, name);
    expect(pv.spec?.volumeMode).toBe('Block');
    const claim = await bindPV(core, pv, ns);
    const fresh = await releaseAndRediscover(core, ns, pv, claim);

    expect(allZero(dev.zero, size)).toBe(true);
    expect(fresh.metadata?.uid).not.toBe(pv.metadata?.uid);
    const start = await waitPVEvent(core, pv, 'VolumeDelete');
    expect(start.type).toBe('Normal');
    expect(start.message).toBe(`Starting cleanup of Block PV ${JSON.stringify(name)}, this may take a while`);
    // The script's own output is logged line by line.
    expect(prov!.logs()).toContain('dd_zero.sh: done');
    const m = await prov!.metrics();
    expect(m).toMatch(new RegExp(`${M}persistentvolume_delete_duration_seconds_count\\{[^}]*mode="Block"[^}]*cleanup_command="${join(SCRIPTS, 'dd_zero.sh').replace(/[/.]/g, '\\$&')}"[^}]*\\} 1`));
  });

  it('Block with quick_reset.sh: signatures wiped, first and last MiB zeroed, PV deleted and rediscovered', async () => {
    const name = pvName('disk', cls.quick);
    const size = deviceSize(dev.quick);
    fillDevice(dev.quick, size / MIB);
    execFileSync('mkfs.ext4', ['-q', '-F', dev.quick], { stdio: ['ignore', 'ignore', 'pipe'] });
    expect(signatures(dev.quick).join('\n')).toContain('ext4');
    const pv = await waitPV(core, name);
    const claim = await bindPV(core, pv, ns);
    await releaseAndRediscover(core, ns, pv, claim);

    expect(signatures(dev.quick)).toEqual([]);
    expect(readAt(dev.quick, 0, MIB).every((b) => b === 0)).toBe(true);
    expect(readAt(dev.quick, size - MIB, MIB).every((b) => b === 0)).toBe(true);
    expect(await metric(prov!, `${M}persistentvolume_delete_total`, { mode: 'Block', type: 'process' })).toBe(2);
  });

  it('never crosses into a nested mount: the clean fails with a clear Event, the PV stays; after the unmount a retry cleans and deletes it', async () => {
    const name = pvName('nested', cls.fs);
    const vol = join(fsDir, 'nested');
    const pv = await waitPV(core, name);
    const claim = await bindPV(core, pv, ns);
    writeFileSync(join(vol, 'outer.txt'), 'outer');
    writeFileSync(join(vol, 'inner', 'foreign.txt'), 'data of another mount');
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });

    const ev = await waitPVEvent(core, pv, 'VolumeFailedDelete');
    expect(ev.type).toBe('Warning');
    expect(ev.message).toContain(`Error cleaning PV ${JSON.stringify(name)}`);
    expect(ev.message).toContain(`on another mount and were not removed (unmount them): ${join(vol, 'inner')}`);
    expect(ev.message).toMatch(/retrying in \d+s/);
    expect(readFileSync(join(vol, 'inner', 'foreign.txt'), 'utf8')).toBe('data of another mount');
    expect(existsSync(join(vol, 'outer.txt'))).toBe(false);
    const kept = await readPV(core, name);
    expect(kept?.metadata?.uid).toBe(pv.metadata?.uid);
    expect(kept?.status?.phase).toBe('Released');
    const firstFailure = Date.now();

    host.unmount(join(vol, 'inner'));
    await waitPVGone(core, name, pv.metadata!.uid!, 40_000);
    // Retried after the backoff (10 s), not on the next 1 s pass.
    const starts = startLines(name).map((l) => Date.parse(String(l['time'])));
    expect(starts).toHaveLength(2);
    expect(starts[1]! - starts[0]!).toBeGreaterThanOrEqual(9_000);
    expect(Date.now() - firstFailure).toBeGreaterThan(5_000);
    expect(readdirSync(vol)).toEqual([]);
    expect(isMountPoint(vol)).toBe(true);
    await waitPV(core, name, { notUid: pv.metadata!.uid! });
  });

  it('a vanished volume (no longer a mount point) is never cleaned or deleted: VolumeMissing Event and metric, once per backoff window', async () => {
    const name = pvName('gone', cls.fs);
    const vol = join(fsDir, 'gone');
    const pv = await waitPV(core, name);
    const claim = await bindPV(core, pv, ns);
    writeFileSync(join(vol, 'data.txt'), 'user data');
    host.unmount(vol); // the disk is gone; a plain directory of the root filesystem is left
    writeFileSync(join(vol, 'keep-me'), 'not the volume');
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim });

    const ev = await waitPVEvent(core, pv, 'VolumeMissing');
    expect(ev.type).toBe('Warning');
    expect(ev.message).toContain(`Volume of PV ${JSON.stringify(name)} is missing`);
    expect(ev.message).toContain(`path ${JSON.stringify(vol)} is not a valid mount point`);
    expect(await metric(prov!, `${M}persistentvolume_volume_missing_total`, { class: cls.fs })).toBe(1);

    await sleep(5_000); // ~5 passes
    const kept = await readPV(core, name);
    expect(kept?.metadata?.uid).toBe(pv.metadata?.uid);
    expect(kept?.status?.phase).toBe('Released');
    expect(readdirSync(vol).sort()).toEqual(['keep-me']);
    expect(startLines(name)).toEqual([]);
    expect(await metric(prov!, `${M}persistentvolume_volume_missing_total`, { class: cls.fs })).toBe(1);
    const missing = (await pvEvents(core, pv)).filter((e) => e.reason === 'VolumeMissing');
    expect(missing).toHaveLength(1);
    expect(missing[0]!.count ?? 1).toBe(1);
  });

  it('a cleaner that is missing, exits non-zero or hangs: clear Event, PV stays Released, retried with backoff, no leftover process', async () => {
    const names = { missing: pvName('disk', cls.missing), failing: pvName('disk', cls.failing), hanging: pvName('disk', cls.hanging) };
    const pvs = await Promise.all(Object.values(names).map((n) => waitPV(core, n)));
    const claims = await Promise.all(pvs.map((pv) => bindPV(core, pv, ns)));
    const failedBefore = await metric(prov!, `${M}proctable_failed`);
    const retriesBefore = await metric(prov!, `${M}cleanup_retries_total`, { type: 'process' });
    await Promise.all(claims.map((name) => core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name })));

    const [missEv, failEv, hangEv] = await Promise.all([
      waitPVEvent(core, pvs[0]!, 'VolumeFailedDelete'),
      waitPVEvent(core, pvs[1]!, 'VolumeFailedDelete'),
      waitPVEvent(core, pvs[2]!, 'VolumeFailedDelete'),
    ]);
    expect(missEv.message).toContain(`block cleaner command ${JSON.stringify(`/nonexistent/${marker}-cleaner`)} was not found`);
    expect(failEv.message).toContain('exited with code 3: disk on fire');
    expect(hangEv.message).toContain('timed out after 2000 ms and was killed');
    for (const e of [missEv, failEv, hangEv]) {
      expect(e.type).toBe('Warning');
      expect(e.message).toMatch(/retrying in (9|10|11)s$/);
    }

    // Count attempts over a window of 24 s from each PV's first attempt: with the 10 s, 20 s
    // backoff that is exactly 2 (a retry on every 1 s pass would be ~20).
    const firsts = Object.values(names).map((n) => Date.parse(String(startLines(n)[0]?.['time'])));
    await sleep(Math.max(0, Math.max(...firsts) + 24_000 - Date.now()));
    for (const [i, n] of Object.values(names).entries()) {
      const at = startLines(n).map((l) => Date.parse(String(l['time']))).filter((t) => t <= firsts[i]! + 24_000);
      expect(at, `cleanup attempts of ${n}`).toHaveLength(2);
      expect(at[1]! - at[0]!, `gap between the attempts of ${n}`).toBeGreaterThanOrEqual(9_000);
    }
    expect(runLogLines(failLog).filter((l) => l.startsWith('attempt'))).toHaveLength(2);
    expect(runLogLines(hangLog).filter((l) => l.startsWith('attempt'))).toHaveLength(2);

    for (const pv of pvs) {
      const cur = await readPV(core, pv.metadata!.name!);
      expect(cur?.metadata?.uid).toBe(pv.metadata?.uid);
      expect(cur?.status?.phase).toBe('Released');
    }
    expect(await metric(prov!, `${M}proctable_failed`)).toBe(failedBefore + 6);
    expect(await metric(prov!, `${M}cleanup_retries_total`, { type: 'process' })).toBe(retriesBefore + 6);
    expect(await metric(prov!, `${M}persistentvolume_delete_failed_total`, { mode: 'Block', type: 'process' })).toBe(6);

    // The hung cleaner and its child were killed (whole process group); nothing is left, no zombie.
    const hangPids = runLogLines(hangLog).map((l) => Number(l.split(' ')[1]));
    expect(hangPids).toHaveLength(4);
    await waitFor(() => hangPids.every((pid) => !existsSync(`/proc/${pid}`)), { what: 'the hung cleaners to be gone', timeoutMs: 5_000 });
    expect(pgrep(marker)).toEqual([]);
    expect(zombieChildren(prov!.child.pid!)).toEqual([]);
  });
});
