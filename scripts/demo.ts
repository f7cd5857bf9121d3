// `npm run demo`: the main job on one machine. Starts the real control plane
// (e2e/controlplane, with a real kube-scheduler), makes demo tmpfs mounts and a
// loop device, runs the provisioner (node src/main.ts) against them as its
// restricted identity and shows the PersistentVolumes it created; then a Pod
// with a PVC of the WaitForFirstConsumer class is placed by the scheduler, the
// PVC binds to a local PV, and the node agent (the kubelet stand-in) runs the
// pod, which writes a file into the volume. The kubeconfig is printed first. Ctrl-C
// (SIGINT, SIGTERM or SIGHUP to npm or to this process; package.json execs node, so
// npm forwards them) removes the mounts, the loop device, the processes and the temp dirs. `npm run demo -- --once` exits after
// showing the bound PVC (used by tests). `--real-node`: the shipped DaemonSet on a real
// node instead (scripts/demo-real-node.ts).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startControlPlane, freePort } from '../e2e/harness/controlplane.ts';
import { clientsFor, waitFor } from '../e2e/harness/kube.ts';
import { applyManifests } from '../e2e/harness/manifests.ts';
import { claimWriter, createNode, markNodeReady, startNodeAgent, type NodeAgent } from '../e2e/harness/node-agent.ts';
import { HostFixtures, isRoot } from '../e2e/support/host.ts';
import { startProvisioner, type ProvisionerProcess } from '../e2e/support/provisioner.ts';
import { claimTable, clusterAccess, pvTable, stopHint, stopOn } from './demo-output.ts';

const { values } = parseArgs({
  options: { once: { type: 'boolean', default: false }, 'real-node': { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h' } },
});
if (values.help) {
  console.log(
    [
      'usage: npm run demo [-- [--real-node] [--once]]',
      '  Starts a real control plane with a scheduler, demo mounts and the provisioner; shows the PVs and a PVC bound by a Pod. Ctrl-C cleans up.',
      '  --real-node  the shipped kustomize base instead: its DaemonSet runs the product image on a real node (kubelet +',
      '               containerd) and discovers tmpfs mounts under /mnt/disks; the Pod with the PVC runs on that node.',
      '               Needs root, containerd, runc, containernetworking-plugins, iptables, nftables, buildah, mmdebstrap,',
      '               no /mnt/disks and no other kubelet; otherwise exits 1 with the reason. Ctrl-C restores the host.',
      '  --once       exit (and clean up) after showing the bound PVC',
    ].join('\n'),
  );
  process.exit(0);
}
if (!isRoot()) {
  console.error('npm run demo needs root: it mounts tmpfs volumes and attaches a loop device');
  process.exit(1);
}

if (values['real-node']) await (await import('./demo-real-node.ts')).realNodeDemo(values.once);

const log = (m: string): void => console.error(`[demo] ${m}`);
const NODE = 'demo-node';
const cp = await startControlPlane({ log, scheduler: true });
const host = new HostFixtures('lsp-demo-');
let prov: ProvisionerProcess | undefined;
let agent: NodeAgent | undefined;
let cleaning = false;
const cleanup = async (code: number): Promise<never> => {
  if (cleaning) process.exit(code);
  cleaning = true;
  log('cleaning up: node agent, provisioner, mounts, loop device, control plane, temp dirs');
  await agent?.stop().catch(() => undefined);
  await prov?.stop().catch(() => undefined);
  host.cleanup();
  await cp.stop();
  log('done');
  process.exit(code);
};
stopOn(() => cleanup(0));

console.log(clusterAccess(cp, [`  The provisioner's log: ${host.path('provisioner.log')} (no kubelet here: \`kubectl logs\` needs \`npm run demo -- --real-node\`)`]));

try {
  await applyManifests(cp.adminKubeconfig);
  const { core, storage } = clientsFor(cp.adminKubeconfig);
  await createNode(core, NODE, { 'topology.kubernetes.io/zone': 'demo-zone' });
  await markNodeReady(core, NODE); // Ready, untainted, with capacity: the scheduler may place pods on it
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
  console.log(`\n${pvTable(pvs)}\n`);

  // A Pod with a claim of the WaitForFirstConsumer class: the scheduler picks the node and the
  // PV (VolumeBinding), the PV controller binds the claim, the node agent "runs" the pod.
  agent = startNodeAgent({ core, nodeName: NODE, namespace: 'default', run: claimWriter(core, 'hello.txt'), onError: () => undefined });
  const claimed = performance.now();
  await core.createNamespacedPersistentVolumeClaim({
    namespace: 'default',
    body: { metadata: { name: 'demo-claim' }, spec: { storageClassName: 'local-fs', accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '100Mi' } } } },
  });
  await core.createNamespacedPod({
    namespace: 'default',
    body: {
      metadata: { name: 'demo-app' },
      spec: {
        restartPolicy: 'Never',
        containers: [{ name: 'app', image: 'demo', command: ['sh', '-c', 'echo hello > /data/hello.txt'], volumeMounts: [{ name: 'data', mountPath: '/data' }] }],
        volumes: [{ name: 'data', persistentVolumeClaim: { claimName: 'demo-claim' } }],
      },
    },
  });
  log('created PVC demo-claim (local-fs, 100Mi) and Pod demo-app using it; waiting for the scheduler');
  const pvc = await waitFor(
    async () => {
      const c = await core.readNamespacedPersistentVolumeClaim({ name: 'demo-claim', namespace: 'default' });
      return c.status?.phase === 'Bound' ? c : undefined;
    },
    { what: 'PVC demo-claim Bound', timeoutMs: 60_000 },
  );
  const boundMs = performance.now() - claimed;
  const pod = await waitFor(
    async () => {
      const p = await core.readNamespacedPod({ name: 'demo-app', namespace: 'default' });
      return p.status?.phase === 'Succeeded' ? p : undefined;
    },
    { what: 'Pod demo-app Succeeded', timeoutMs: 60_000 },
  );
  const pv = await core.readPersistentVolume({ name: pvc.spec?.volumeName ?? '' });
  log(`PVC demo-claim Bound in ${(boundMs / 1000).toFixed(1)} s after it was created`);
  console.log(`\n${claimTable(pvc, pv, pod)}\n`);
  console.log(`the pod wrote ${join(pv.spec?.local?.path ?? '', 'hello.txt')}: ${readFileSync(join(pv.spec?.local?.path ?? '', 'hello.txt'), 'utf8').trim()}\n`);
  if (values.once) await cleanup(0);
  console.log(`export KUBECONFIG=${cp.adminKubeconfig}`);
  console.log(`provisioner log: ${host.path('provisioner.log')}`);
  console.log(`config dir (edit it to see a hot reload): ${cfg}`);
  console.log(stopHint);
} catch (err) {
  console.error(`[demo] failed: ${(err as Error).message}`);
  if (prov) console.error(prov.logs().split('\n').slice(-20).join('\n'));
  await cleanup(1);
}
