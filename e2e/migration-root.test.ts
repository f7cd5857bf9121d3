// Issue 13, one discovery root: every class is a directory under one parent
// (in the base DaemonSet, host /mnt/disks mounted once with HostToContainer),
// so a class is added by a ConfigMap edit alone. Here the daemon runs on the
// host (the fixture root plays /mnt/disks): a class added whose directory does
// not exist yet gets one Warning Event on the Node saying which directory (or
// hostPath volume) is missing; once the admin creates it and mounts a volume
// there, the volume gets its PV, in the same process, without another reload.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { createNode } from './harness/node-agent.ts';
import { createImmediateClass, keepLogs, startDaemon } from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { applyConfig, configFiles, eventsAbout, metric, restartsMetric, waitPV, type ConfigSpec } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const { core, storage } = adminClients();

describe.skipIf(!isRoot())('one discovery root: a class added by a ConfigMap edit alone', () => {
  const host = new HostFixtures('lsp-root-');
  const node = uniqueName('root-node');
  const first = uniqueName('root-a');
  const added = uniqueName('root-b');
  let prov: ProvisionerProcess | undefined;
  let root = '';
  const dir = (cls: string): string => join(root, cls);
  const config = (classes: string[]): ConfigSpec => ({ classes: Object.fromEntries(classes.map((c) => [c, { hostDir: dir(c), mountDir: dir(c) }])) });

  beforeAll(async () => {
    await createNode(core, node);
    for (const c of [first, added]) await createImmediateClass(storage, c);
    root = host.mkdir('disks');
    host.tmpfs(4, 'disks', first, 'vol1');
    prov = await startDaemon(host, { nodeName: node, files: configFiles(config([first])) });
    await waitPV(core, generatePVName('vol1', node, first));
  });

  afterAll(async () => {
    await prov?.stop();
    keepLogs(host, node, ['provisioner.log']);
    host.cleanup();
  });

  it('the new class directory is missing: one Warning on the Node naming it; created later, its volume gets a PV without a restart', async () => {
    const pid = prov!.child.pid;
    await applyConfig(prov!, () => {
      for (const [k, v] of Object.entries(configFiles(config([first, added])))) writeFileSync(host.path('config', k), v);
      return Promise.resolve();
    });
    const restarts = await metric(prov!, restartsMetric);

    const warning = await waitFor(
      async () => (await eventsAbout(core, 'default', 'Node', node)).find((e) => e.reason === 'DiscoveryFailed' && (e.message ?? '').includes(`class "${added}"`)),
      { what: `a DiscoveryFailed Warning on the Node about class ${added}` },
    );
    expect(warning.type).toBe('Warning');
    expect(warning.message).toMatch(new RegExp(`^mountDir "${dir(added)}" of class "${added}" does not exist`));
    expect(warning.message).toContain(`hostDir "${dir(added)}"`);
    expect(await prov!.ready()).toBe(true); // a missing class directory is a warning, not an error

    mkdirSync(dir(added));
    host.tmpfs(4, 'disks', added, 'vol1');
    const pv = await waitPV(core, generatePVName('vol1', node, added));
    expect(pv.spec?.local?.path).toBe(join(dir(added), 'vol1'));
    expect(prov!.child.pid).toBe(pid);
    expect(await metric(prov!, restartsMetric)).toBe(restarts);
    const warnings = (await eventsAbout(core, 'default', 'Node', node)).filter((e) => e.reason === 'DiscoveryFailed' && (e.message ?? '').includes(`class "${added}"`));
    expect(warnings.map((e) => e.count ?? 1)).toEqual([1]); // reported once, not on every pass
  });
});
