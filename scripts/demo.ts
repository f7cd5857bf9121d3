// `npm run demo`: the main job on one machine. Starts the real control plane
// (e2e/controlplane), makes demo tmpfs mounts and a loop device, runs the
// provisioner (node src/main.ts) against them as its restricted identity and
// shows the PersistentVolumes it created. Ctrl-C removes the mounts, the loop
// device, the processes and the temp dirs. `npm run demo -- --once` exits after
// showing the PVs (used by tests).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startControlPlane, freePort } from '../e2e/harness/controlplane.ts';
import { clientsFor, waitFor } from '../e2e/harness/kube.ts';
import { applyManifests } from '../e2e/harness/manifests.ts';
import { createNode } from '../e2e/harness/node-agent.ts';
import { HostFixtures, isRoot } from '../e2e/support/host.ts';
import { startProvisioner, type ProvisionerProcess } from '../e2e/support/provisioner.ts';

const { values } = parseArgs({ options: { once: { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h' } } });
if (values.help) {
  console.log('usage: npm run demo [-- --once]\n  Starts a real control plane, demo mounts and the provisioner; shows the PVs. Ctrl-C cleans up.');
  process.exit(0);
}
if (!isRoot()) {
  console.error('npm run demo needs root: it mounts tmpfs volumes and attaches a loop device');
  process.exit(1);
}

const log = (m: string): void => console.error(`[demo] ${m}`);
const NODE = 'demo-node';
const cp = await startControlPlane({ log });
const host = new HostFixtures('lsp-demo-');
let prov: ProvisionerProcess | undefined;
let cleaning = false;
const cleanup = async (code: number): Promise<never> => {
  if (cleaning) process.exit(code);
  cleaning = true;
  log('cleaning up: provisioner, mounts, loop device, control plane, temp dirs');
  await prov?.stop().catch(() => undefined);
  host.cleanup();
  await cp.stop();
  log('done');
  process.exit(code);
};
process.on('SIGINT', () => void cleanup(0));
process.on('SIGTERM', () => void cleanup(0));

try {
  await applyManifests(cp.adminKubeconfig);
  const { core, storage } = clientsFor(cp.adminKubeconfig);
  await createNode(core, NODE, { 'topology.kubernetes.io/zone': 'demo-zone' });
  for (const [name, mode] of [['local-fs', 'Filesystem'], ['local-block', 'Block']] as const) {
    await storage.createStorageClass({
      body: { metadata: { name }, provisioner: 'kubernetes.io/no-provisioner', volumeBindingMode: 'WaitForFirstConsumer', reclaimPolicy: 'Delete' },
    });
    log(`StorageClass ${name} (${mode})`);
  }
  const fsDir = host.mkdir('disks', 'fs');
  const blockDir = host.mkdir('disks', 'block');
  for (const [i, size] of [64, 128, 256].entries()) host.tmpfs(size, 'disks', 'fs', `vol${i + 1}`);
  host.symlink(host.loopDevice(32, 'demo-disk'), 'disks', 'block', 'disk1');
  log(`mounted 3 tmpfs volumes under ${fsDir} and a loop device under ${blockDir}`);

  const cfg = host.mkdir('config');
  writeFileSync(
    join(cfg, 'storageClassMap'),
    [
      'local-fs:',
      `  hostDir: ${fsDir}`,
      `  mountDir: ${fsDir}`,
      'local-block:',
      `  hostDir: ${blockDir}`,
      `  mountDir: ${blockDir}`,
      '  volumeMode: Block',
      `  blockCleanerCommand: ["${join(import.meta.dirname, '..', 'deployment', 'scripts', 'quick_reset.sh')}"]`,
      '',
    ].join('\n'),
  );
  writeFileSync(join(cfg, 'useNodeNameOnly'), 'true\n');
  writeFileSync(join(cfg, 'nodeLabelsForPV'), '- topology.kubernetes.io/zone\n');
  const port = await freePort();
  prov = startProvisioner({
    configDir: cfg,
    nodeName: NODE,
    kubeconfig: cp.provisionerKubeconfig,
    port,
    logFile: host.path('provisioner.log'),
    args: ['--discovery-period=2s', '--config-sync-period=2s'],
  });
  log(`provisioner running (logs: ${host.path('provisioner.log')}, metrics: http://127.0.0.1:${port}/metrics)`);

  const pvs = await waitFor(
    async () => {
      const l = (await core.listPersistentVolume()).items;
      return l.length >= 4 ? l : undefined;
    },
    { what: '4 PersistentVolumes', timeoutMs: 60_000 },
  );
  const rows = pvs.map((pv) => [
    pv.metadata?.name ?? '',
    pv.spec?.capacity?.['storage'] ?? '',
    pv.spec?.volumeMode ?? '',
    pv.spec?.persistentVolumeReclaimPolicy ?? '',
    pv.status?.phase ?? '',
    pv.spec?.storageClassName ?? '',
    pv.spec?.local?.path ?? '',
  ]);
  const head = ['NAME', 'CAPACITY', 'MODE', 'RECLAIM', 'STATUS', 'STORAGECLASS', 'PATH'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const fmt = (r: string[]): string => r.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ').trimEnd();
  console.log(`\n${fmt(head)}\n${rows.map(fmt).join('\n')}\n`);
  if (values.once) await cleanup(0);
  console.log(`export KUBECONFIG=${cp.adminKubeconfig}`);
  console.log(`config dir (edit it to see a hot reload): ${cfg}`);
  console.log('Ctrl-C to stop and clean up.');
} catch (err) {
  console.error(`[demo] failed: ${(err as Error).message}`);
  if (prov) console.error(prov.logs().split('\n').slice(-20).join('\n'));
  await cleanup(1);
}
