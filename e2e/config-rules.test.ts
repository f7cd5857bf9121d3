// Issue 17 (3a, 4) end to end: the real daemon (node src/main.ts) against the real control plane, on real tmpfs
// mounts, its ConfigMap written the kubelet's way (AtomicWriter). A hot-reloaded config that nests a class inside
// a volume of another class, and then one that points a class at /etc, are refused with the ConfigInvalid Warning
// on the Node and the Pod; the last good config keeps running (new volumes of it get PVs), and the entry a tenant
// mounted inside its volume never becomes a PV.
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { AtomicWriter } from '../test/support/atomic-writer.ts';
import { generatePVName } from '../src/volume/naming.ts';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { createNode } from './harness/node-agent.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import {
  configFiles,
  createLocalStorageClass,
  eventsAbout,
  lastReloadOkMetric,
  metric,
  readPV,
  reloadMetric,
  restartsMetric,
  startTestProvisioner,
  waitMetric,
  waitPV,
  type ConfigSpec,
} from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';

const { core, storage } = adminClients();

describe.skipIf(!isRoot())('config rules on hot reload: nested classes and system directories are refused', () => {
  const host = new HostFixtures('lsp-cfg-');
  const node = uniqueName('cfg-node');
  const outer = uniqueName('cfg-outer');
  const inner = uniqueName('cfg-inner');
  const etc = uniqueName('cfg-etc');
  const podName = `local-volume-provisioner-${node}`;
  let prov: ProvisionerProcess | undefined;
  let writer: AtomicWriter;
  let outerDir = '';
  let good: ConfigSpec;

  /** Messages of the Events with `reason` on the Node and on the Pod, each prefixed "Node <type>:" or "Pod <type>:". */
  const events = async (reason: string): Promise<string[]> => {
    const out: string[] = [];
    for (const [kind, ns, name] of [['Node', 'default', node], ['Pod', 'kube-system', podName]] as const) {
      for (const e of await eventsAbout(core, ns, kind, name)) if (e.reason === reason) out.push(`${kind} ${e.type}:${e.message ?? ''}`);
    }
    return out;
  };
  /** Waits for a ConfigInvalid Warning containing `text` on the Node and on the Pod. */
  const waitRejected = (text: string): Promise<string[]> =>
    waitFor(
      async () => {
        const found = (await events('ConfigInvalid')).filter((m) => m.includes(text));
        return found.some((m) => m.startsWith('Node Warning:')) && found.some((m) => m.startsWith('Pod Warning:')) ? found : undefined;
      },
      { what: `ConfigInvalid Warnings on the Node and the Pod saying ${JSON.stringify(text)}`, timeoutMs: 20_000 },
    );

  beforeAll(async () => {
    await createNode(core, node);
    for (const c of [outer, inner, etc]) await createLocalStorageClass(storage, c);
    outerDir = host.mkdir(outer);
    host.tmpfs(4, outer, 'vol1');
    // The tenant of vol1 mounts something inside its volume: a class on vol1 would discover it.
    host.tmpfs(4, outer, 'vol1', 'tenant-mount');
    writer = new AtomicWriter(host.mkdir('config'));
    good = { classes: { [outer]: { hostDir: outerDir, mountDir: outerDir } } };
    await writer.write(configFiles(good));
    prov = await startTestProvisioner(host, writer.dir, node, inject('provisionerKubeconfig'), ['--discovery-period=1s', '--config-sync-period=500ms']);
  });

  afterAll(async () => {
    await prov?.stop();
    host.cleanup();
  });

  it('refuses a class inside a volume of another, then a class on /etc; the last good config keeps running', async () => {
    await waitPV(core, generatePVName('vol1', node, outer), { timeoutMs: 30_000 });
    const invalid0 = await metric(prov!, reloadMetric, { result: 'invalid' });
    const applied0 = await metric(prov!, reloadMetric, { result: 'applied' });
    const restarts0 = await metric(prov!, restartsMetric);
    const pid = prov!.child.pid;

    const vol1 = `${outerDir}/vol1`;
    await writer.write(configFiles({ classes: { ...good.classes, [inner]: { hostDir: vol1, mountDir: vol1 } } }));
    await waitMetric(prov!, reloadMetric, { result: 'invalid' }, (v) => v === invalid0 + 1, { what: 'the nested config to be rejected' });
    const nested = await waitRejected(`hostDir ${JSON.stringify(vol1)} of storage class ${inner} lies inside hostDir ${JSON.stringify(outerDir)} of storage class ${outer}`);
    for (const m of nested) expect(m).toMatch(/Warning:Configuration rejected \(1 error\), keeping configuration [0-9a-f]{12} running: /);
    expect(await metric(prov!, lastReloadOkMetric)).toBe(0);

    await writer.write(configFiles({ classes: { ...good.classes, [etc]: { hostDir: '/mnt/../etc', mountDir: '/etc' } } }));
    await waitMetric(prov!, reloadMetric, { result: 'invalid' }, (v) => v === invalid0 + 2, { what: 'the /etc config to be rejected' });
    await waitRejected(`hostDir "/mnt/../etc" ("/etc" once normalised) of storage class ${etc} is /etc`);
    await waitRejected(`mountDir "/etc" of storage class ${etc} is /etc`);

    // The last good config still runs in the same process: a new volume of the outer class gets a PV ...
    host.tmpfs(4, outer, 'vol2');
    const vol2: V1PersistentVolume = await waitPV(core, generatePVName('vol2', node, outer), { timeoutMs: 20_000 });
    expect(vol2.spec?.local?.path).toBe(`${outerDir}/vol2`);
    // ... while the tenant's mount never became a PV, and nothing was applied or restarted.
    expect(await readPV(core, generatePVName('tenant-mount', node, inner))).toBeUndefined();
    expect(await metric(prov!, reloadMetric, { result: 'applied' })).toBe(applied0);
    expect(await metric(prov!, restartsMetric)).toBe(restarts0);
    expect(prov!.child.pid).toBe(pid);
    expect(prov!.child.exitCode).toBeNull();
  });
});
