// Issue 21 end to end: the deviceSelector on the real control plane with real loop devices (allowLoop, the
// test-only switch: loop devices have no /dev/disk/by-id name). Five disks match the selector: only the blank
// one is linked and gets a PV; the one with an ext4 signature, the one with a partition table, the mounted one
// and the one another process holds open with O_EXCL are refused, one RawDeviceRefused Warning per disk and
// reason. A hand-made link is never touched. A link of ours that no longer matches stays while its PV exists,
// and is removed once no PV uses it. A pass where nothing changes sends no API request.
import { execFile, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, lstatSync, readlinkSync, writeFileSync } from 'node:fs';
import { basename } from 'node:path';
import type { CoreV1Event } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { createNode } from './harness/node-agent.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { holdExclusively, keepLogs, startDaemon, writeAt } from './support/cleanup.ts';
import { createLocalStorageClass, waitPV } from './support/hot-reload.ts';
import { metricValue, type ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const { core, storage } = adminClients();

async function nodeEvents(node: string, reason: string): Promise<CoreV1Event[]> {
  const evs = await core.listNamespacedEvent({ namespace: 'default' });
  return evs.items.filter((e) => e.involvedObject.kind === 'Node' && e.involvedObject.name === node && e.reason === reason);
}

/** A DOS partition table (MBR) with one Linux partition from sector 2048: what fdisk writes. */
function mbr(sectors: number): Buffer {
  const b = Buffer.alloc(512);
  const e = 446;
  b[e + 4] = 0x83;
  b.writeUInt32LE(2048, e + 8);
  b.writeUInt32LE(sectors - 2048, e + 12);
  b.writeUInt32LE(0x12345678, 440); // disk identifier
  b[510] = 0x55;
  b[511] = 0xaa;
  return b;
}

describe.skipIf(!isRoot())('deviceSelector: raw disks linked into a class dir (issue 21)', () => {
  const host = new HostFixtures('lsp-devsel-');
  const node = uniqueName('devsel-node');
  const cls = uniqueName('raw');
  let prov: ProvisionerProcess | undefined;
  let holder: ChildProcess | undefined;
  let mnt = '';
  const devs: Record<string, string> = {};
  let dir = '';

  const sh = (cmd: string, args: string[]): string => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
  const pvOf = (dev: string): string => generatePVName(basename(dev), node, cls);
  const config = (paths: readonly string[]): string =>
    `${cls}:\n  hostDir: /mnt/host/raw\n  mountDir: ${dir}\n  volumeMode: Block\n  deviceSelector:\n    paths: [${paths.join(', ')}]\n    allowLoop: true\n`;
  /** PVs of this test's class (the PVs' provisioned-by names the node's UID too). */
  const classPVs = async (): Promise<string[]> =>
    (await core.listPersistentVolume()).items.filter((p) => p.spec?.storageClassName === cls).map((p) => p.metadata?.name ?? '').sort();
  const passes = (): number => prov!.logs().split('\n').filter((l) => l.includes('device selection pass')).length;
  const waitPasses = async (n: number): Promise<void> => {
    const start = passes();
    await waitFor(() => passes() >= start + n, { what: `${n} device selection passes`, timeoutMs: 60_000 });
  };

  /** A 20 MiB loop device of ours, read-write (a /dev/loopN left read-only by someone's blockdev --setro attaches read-only). */
  const loop = (name: string): string => {
    const d = host.loopDevice(20, name);
    sh('blockdev', ['--setrw', d]);
    return d;
  };

  beforeAll(async () => {
    await createNode(core, node);
    await createLocalStorageClass(storage, cls);
    dir = host.mkdir('raw');
    devs['blank'] = loop('blank');
    devs['ext4'] = loop('ext4');
    sh('mkfs.ext4', ['-q', '-F', devs['ext4']]);
    devs['pt'] = loop('pt');
    writeAt(devs['pt'], 0, mbr(20 * 2048));
    devs['mounted'] = loop('mounted');
    sh('mkfs.ext4', ['-q', '-F', devs['mounted']]);
    mnt = host.mountDevice(devs['mounted'], [], 'mnt');
    devs['held'] = loop('held');
    // A hand-made link to a blank disk the selector does not name: discovery makes its PV; the linker never touches it.
    devs['hand'] = loop('hand');
    host.symlink(devs['hand'], 'raw', 'hand-made');
    holder = await holdExclusively(devs['held']);
    // Another test's cleanup that detaches a /dev/loopN twice can take one of ours away: say so plainly.
    for (const [k, d] of Object.entries(devs)) expect(sh('losetup', ['-n', '-O', 'BACK-FILE', d]), `${d} (${k}) is still ours`).toBe(host.path(`${k}.img`));
    // Only our own loop devices are named: the selector never looks at another test's disks.
    prov = await startDaemon(host, {
      nodeName: node,
      args: [`--state-dir=${host.mkdir('state')}`],
      files: { storageClassMap: config(['blank', 'ext4', 'pt', 'mounted', 'held'].map((k) => devs[k]!)) },
    });
  });

  afterAll(async () => {
    try {
      await prov?.stop();
    } finally {
      if (holder?.pid !== undefined && holder.exitCode === null) process.kill(holder.pid, 'SIGKILL');
      for (const name of await classPVs().catch(() => [])) await core.deletePersistentVolume({ name }).catch(() => undefined);
      keepLogs(host, node, ['provisioner.log']);
      host.cleanup();
    }
  });

  it('links only the blank disk (PV made by discovery); ext4, partition table, mounted and O_EXCL-held disks are refused, one Warning per disk and reason', async () => {
    const pv = await waitPV(core, pvOf(devs['blank']!));
    expect(pv.spec?.volumeMode).toBe('Block');
    expect(pv.spec?.local?.path).toBe(`/mnt/host/raw/${basename(devs['blank']!)}`);
    expect(readlinkSync(`${dir}/${basename(devs['blank']!)}`)).toBe(devs['blank']);
    const about = (msgs: string[], k: string): string[] => msgs.filter((m) => m.includes(`disk ${basename(devs[k]!)} (`));
    const msgs = await waitFor(
      async () => {
        const m = (await nodeEvents(node, 'RawDeviceRefused')).map((e) => e.message ?? '');
        return ['ext4', 'pt', 'mounted', 'held'].every((k) => about(m, k).length > 0) ? m : undefined;
      },
      { what: 'RawDeviceRefused events for ext4, pt, mounted and held', timeoutMs: 60_000 },
    );
    expect(about(msgs, 'ext4')).toEqual([expect.stringMatching(/holds a signature \(.*TYPE=ext4/)]);
    expect(about(msgs, 'pt')).toEqual([expect.stringMatching(/has a partition table \(PTTYPE=dos/)]);
    expect(about(msgs, 'mounted').some((m) => m.includes(`is mounted at "${mnt}"`))).toBe(true);
    expect(about(msgs, 'mounted').some((m) => m.includes('TYPE=ext4'))).toBe(true);
    expect(about(msgs, 'held')).toEqual([expect.stringContaining('is opened exclusively (O_EXCL) by another process')]);
    const names = await classPVs();
    expect(names).toEqual([pvOf(devs['blank']!), generatePVName('hand-made', node, cls)].sort());
    for (const k of ['ext4', 'pt', 'mounted', 'held']) expect(existsSync(`${dir}/${basename(devs[k]!)}`)).toBe(false);
    expect((await nodeEvents(node, 'RawDeviceLinked')).map((e) => e.message)).toEqual([expect.stringContaining(`${dir}/${basename(devs['blank']!)} -> ${devs['blank']}`)]);
  });

  it('--dry-run prints every block device seen for the class, and what it would do and why not', async () => {
    const out = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, ['src/main.ts', '--dry-run', `--config-dir=${host.path('config')}`, `--node-name=${node}`], { env: { PATH: process.env['PATH'] ?? '' }, timeout: 120_000 }, (err, stdout, stderr) =>
        err ? reject(new Error(`--dry-run failed: ${err.message}: ${stderr}`)) : resolve(stdout),
      );
    });
    const line = (k: string): string => out.split('\n').find((l) => l.startsWith(`#   ${basename(devs[k]!)} (`)) ?? `(no line for ${k})`;
    expect(out).toMatch(new RegExp(`# raw disks for storage class ${cls} \\(deviceSelector\\): \\d+ block device\\(s\\) seen`));
    expect(line('blank')).toContain(`skip: already a volume entry: ${dir}/${basename(devs['blank']!)}`);
    expect(line('ext4')).toMatch(/refuse: signature: .*TYPE=ext4/);
    expect(line('pt')).toMatch(/refuse: partition-table: .*PTTYPE=dos/);
    expect(line('mounted')).toContain(`mounted: `);
    expect(line('held')).toContain('exclusive-open: ');
    expect(line('hand')).toContain('skip: no name of it matches paths');
    // It links nothing.
    expect(existsSync(`${dir}/${basename(devs['ext4']!)}`)).toBe(false);
  });

  it('sends no API request in passes where nothing changes (refusals are not reported again)', async () => {
    await waitPasses(2);
    const before = metricValue(await prov!.metrics(), 'local_volume_provisioner_kube_requests_total');
    await waitPasses(4);
    const after = metricValue(await prov!.metrics(), 'local_volume_provisioner_kube_requests_total');
    expect(after - before).toBe(0);
    expect((await nodeEvents(node, 'RawDeviceRefused')).every((e) => (e.count ?? 1) === 1)).toBe(true);
  });

  it('keeps its link while the PV exists after the selector stops matching, removes it once no PV uses it; the hand-made link stays', async () => {
    writeFileSync(host.path('config', 'storageClassMap'), config([devs['ext4']!]));
    await waitFor(() => prov!.logs().includes('Controller started') && prov!.logs().split('Controller started').length > 2, { what: 'the second generation', timeoutMs: 60_000 });
    await waitPasses(3);
    const link = `${dir}/${basename(devs['blank']!)}`;
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    // No PV uses it any more (an admin deletes the Available PV): the next pass removes the link before discovery.
    await core.deletePersistentVolume({ name: pvOf(devs['blank']!) });
    await waitFor(async () => (await nodeEvents(node, 'RawDeviceUnlinked')).length > 0, { what: 'a RawDeviceUnlinked event', timeoutMs: 60_000 });
    expect(existsSync(link)).toBe(false);
    await waitPasses(2);
    const names = await classPVs();
    expect(names).not.toContain(pvOf(devs['blank']!));
    expect(readlinkSync(`${dir}/hand-made`)).toBe(devs['hand']);
    expect(names).toContain(generatePVName('hand-made', node, cls));
  });
});
