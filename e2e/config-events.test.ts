// Issue 18, points 10 and 12, end to end: `kubectl get events` keeps the latest word. A misspelt key is a Warning
// ConfigWarning naming it, its fix a Normal ConfigRecovered; a bad YAML line is one ConfigInvalid error with its line
// and a hint; reverting it is a Normal ConfigRecovered. A daemon of its own: the Event spam filter (25 per object)
// would drop these after the many Events of e2e/hot-reload.test.ts.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { AtomicWriter } from '../test/support/atomic-writer.ts';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { createNode } from './harness/node-agent.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { configFiles, createLocalStorageClass, eventTexts, expectStillRunning, lastReloadOkMetric, metric, startTestProvisioner, waitPV, type ConfigSpec } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const { core, storage } = adminClients();

describe.skipIf(!isRoot())('config Events: warnings and recovery', () => {
  const host = new HostFixtures('lsp-cfgev-');
  const node = uniqueName('cfgev-node');
  const cls = uniqueName('cfgev');
  const podName = `local-volume-provisioner-${node}`;
  let prov: ProvisionerProcess | undefined;
  let writer: AtomicWriter;
  let pid = 0;
  let config: ConfigSpec;
  const nodeEvents = (reason: string): Promise<string[]> => eventTexts(core, 'default', 'Node', node, reason);
  const podEvents = (reason: string): Promise<string[]> => eventTexts(core, 'kube-system', 'Pod', podName, reason);

  beforeAll(async () => {
    await createNode(core, node);
    await createLocalStorageClass(storage, cls);
    const dir = host.mkdir(cls);
    host.tmpfs(4, cls, 'vol1');
    writer = new AtomicWriter(host.mkdir('config'));
    config = { classes: { [cls]: { hostDir: dir, mountDir: dir } } };
    await writer.write(configFiles(config));
    prov = await startTestProvisioner(host, writer.dir, node, inject('provisionerKubeconfig'), ['--discovery-period=1s', '--config-sync-period=500ms']);
    pid = prov.child.pid ?? 0;
    await waitPV(core, generatePVName('vol1', node, cls));
  });

  afterAll(async () => {
    await prov?.stop();
    host.cleanup();
  });

  const expectSameProcess = (): void => expectStillRunning(prov!, pid);

  it('Events say the latest word: a misspelt key is a ConfigWarning, its fix and a reverted bad edit a ConfigRecovered; a bad YAML line is one error with its line and a hint (issue 18, points 10, 12)', async () => {
    const good = configFiles(config);
    const latest = async (events: (reason: string) => Promise<string[]>, reason: string, text: string, what: string): Promise<string> =>
      waitFor(async () => (await events(reason)).find((m) => m.includes(text)), { what, timeoutMs: 15_000 });

    await writer.write({ ...good, useNodeNameOnIy: 'true' });
    for (const events of [nodeEvents, podEvents]) {
      const ev = await latest(events, 'ConfigWarning', 'useNodeNameOnIy', 'a ConfigWarning naming the misspelt key');
      expect(ev).toMatch(/^Warning:Configuration [0-9a-f]{12} has 1 warning \(keys useNodeNameOnIy\); the rest of it is valid: useNodeNameOnIy: unknown key "useNodeNameOnIy" ignored; did you mean "useNodeNameOnly"\?/);
    }
    await writer.write(good);
    for (const events of [nodeEvents, podEvents]) {
      expect(await latest(events, 'ConfigRecovered', 'has no warnings any more', 'a ConfigRecovered once the typo is fixed')).toMatch(/^Normal:Configuration [0-9a-f]{12} has no warnings any more$/);
    }

    // One line indented by one space less than its neighbours (line 3: mountDir of the first class).
    const lines = good['storageClassMap']!.split('\n');
    expect(lines[2]).toMatch(/^ {2}mountDir: /);
    lines[2] = lines[2]!.slice(1);
    await writer.write({ ...good, storageClassMap: lines.join('\n') });
    for (const events of [nodeEvents, podEvents]) {
      const ev = await latest(events, 'ConfigInvalid', 'bad indentation', 'a ConfigInvalid for the bad line');
      expect(ev).toMatch(
        /^Warning:Configuration rejected \(1 error\), keeping configuration [0-9a-f]{12} running: storageClassMap: YAML syntax error: bad indentation of a mapping entry; check that keys at the same level under storageClassMap are indented the same \(file storageClassMap, line 3\)$/,
      );
    }
    await writer.write(good); // the bad edit reverted: the running config is kept, and the Events say so
    for (const events of [nodeEvents, podEvents]) {
      expect(await latest(events, 'ConfigRecovered', 'valid again', 'a ConfigRecovered after the revert')).toMatch(
        /^Normal:Configuration valid again: [0-9a-f]{12}, the one running, is kept; the rejected content was replaced$/,
      );
    }
    expect(await metric(prov!, lastReloadOkMetric)).toBe(1);
    expectSameProcess();
  });
});
