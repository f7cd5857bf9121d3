// The real node (e2e/harness/node.ts) leaves no trace on the host: sysctls, iptables rules, mounts,
// cgroups, links and the kubelet's/containerd's fixed paths are compared before and after a run
// with a pod, after stop() and after a SIGKILL of the process that started the node (the detached
// watchdog restores the host then).
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { diffHost, snapshotHost, type HostSnapshot } from './harness/host-state.ts';
import { adminClients, apiStatus, uniqueName, waitFor } from './harness/kube.ts';
import { nodeUnsupportedReason, startNode } from './harness/node.ts';
import { isRunning, pgrep } from './harness/procs.ts';
import { runPausePod } from './support/node-pods.ts';

const reason = nodeUnsupportedReason();
const { core } = adminClients();

// Other test runs on a shared machine mount things in their own lsp-* temp dirs meanwhile.
const tmp = tmpdir();
const foreignMount = (m: string): boolean => m.startsWith(`${tmp}/lsp-`) && !m.startsWith(`${tmp}/lsp-node-`);
const changes = (before: HostSnapshot): string[] => diffHost(before, snapshotHost(), { ignoreMount: foreignMount });

/** Processes whose command line mentions `marker`, with their state and command (for messages). */
const processesOf = (marker: string): string[] =>
  pgrep(marker).map((pid) => {
    try {
      return execFileSync('ps', ['-o', 'pid=,stat=,args=', '-p', String(pid)], { encoding: 'utf8' }).trim();
    } catch {
      return `${pid} (gone)`;
    }
  });


describe.skipIf(reason !== undefined)(`real node: host restored${reason ? ` (skipped: ${reason})` : ''}`, () => {
  const namespace = uniqueName('node-host');
  const nodes: string[] = [];
  const owners: ChildProcess[] = [];

  beforeAll(async () => {
    await core.createNamespace({ body: { metadata: { name: namespace } } });
  });
  afterAll(async () => {
    for (const o of owners) if (o.exitCode === null && o.signalCode === null) o.kill('SIGKILL');
    for (const pod of (await core.listNamespacedPod({ namespace })).items) {
      await core.deleteNamespacedPod({ name: pod.metadata?.name ?? '', namespace, gracePeriodSeconds: 0 }).catch(() => undefined);
    }
    await core.deleteNamespace({ name: namespace }).catch(() => undefined);
    for (const n of nodes) await core.deleteNode({ name: n }).catch(() => undefined);
  });

  it('after stop(): the host is as before, though the running node had changed it', async () => {
    const before = snapshotHost();
    const name = uniqueName('host-a');
    nodes.push(name);
    const node = await startNode({ adminKubeconfig: inject('kubeconfig'), binary: inject('binary') }, { name });
    let during: string[];
    try {
      await runPausePod(inject('kubeconfig'), namespace, name, 'pause-a');
      during = changes(before);
    } finally {
      await node.stop();
    }
    // The comparison sees what the node does (else "no difference" would prove nothing).
    for (const kind of [/^sysctl vm\.overcommit_memory/, /^iptables table filter/, /^mount added: .*\/kubelet /, /^cgroup added: .*\/kubepods$/, /^link added: lspcni0$/, /^link added: veth/, /^path added: \/var\/log\/containers$/, /^path added: \/run\/netns$/]) {
      expect(during, String(kind)).toContainEqual(expect.stringMatching(kind));
    }
    expect(changes(before)).toEqual([]);
    expect(existsSync(node.dir)).toBe(false);
    expect(processesOf(node.dir)).toEqual([]);
    expect(await core.readNode({ name }).catch((e: unknown) => apiStatus(e))).toBe(404);
  });

  /** Starts a node in a child process (e2e/support/node-owner.ts) with a pod; resolves on its READY line. */
  async function startOwnedNode(name: string): Promise<{ owner: ChildProcess; dir: string; pids: Record<'kubelet' | 'containerd' | 'watchdog', number> }> {
    nodes.push(name);
    const owner = spawn(process.execPath, [join(import.meta.dirname, 'support', 'node-owner.ts'), inject('kubeconfig'), inject('binary'), name, namespace], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    owners.push(owner);
    let out = '';
    let err = '';
    owner.stdout.on('data', (d: Buffer) => (out += d.toString()));
    owner.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const ready = await waitFor(
      () => {
        if (owner.exitCode !== null) throw new Error(`node owner exited with ${owner.exitCode}: ${err}`);
        const line = /^READY (.*)$/m.exec(out)?.[1];
        return line === undefined ? undefined : (JSON.parse(line) as { dir: string; pids: Record<'kubelet' | 'containerd' | 'watchdog', number> });
      },
      { what: 'the node owner to print READY', timeoutMs: 180_000 },
    );
    return { owner, ...ready };
  }

  it('after a SIGKILL of the process that started it: the watchdog stops the node and restores the host', async () => {
    const before = snapshotHost();
    const { owner, dir, pids } = await startOwnedNode(uniqueName('host-b'));
    expect(changes(before).length).toBeGreaterThan(0);
    expect(pgrep(dir).length).toBeGreaterThanOrEqual(4); // kubelet, containerd, a shim, the watchdog

    owner.kill('SIGKILL');
    await waitFor(() => !isRunning(pids.watchdog), { what: `watchdog ${pids.watchdog} to finish`, timeoutMs: 120_000, intervalMs: 250 });
    expect(existsSync(dir), `the watchdog keeps the dir when the restore failed: ${join(dir, 'watchdog.log')}`).toBe(false);
    expect(changes(before)).toEqual([]);
    expect(processesOf(dir)).toEqual([]);
    expect(isRunning(pids.kubelet) || isRunning(pids.containerd)).toBe(false);
  });

  it('a node left behind with its watchdog killed too is torn down by the next start', { timeout: 300_000 }, async () => {
    const before = snapshotHost();
    const { owner, dir, pids } = await startOwnedNode(uniqueName('host-c'));
    process.kill(pids.watchdog, 'SIGKILL');
    owner.kill('SIGKILL');
    await waitFor(() => !isRunning(pids.kubelet), { what: 'the orphaned kubelet to stop (TESTPLANE_PARENT_PID)', timeoutMs: 60_000 });
    expect(isRunning(pids.containerd)).toBe(true); // nobody restores this host now
    expect(changes(before).length).toBeGreaterThan(0);

    const logged: string[] = [];
    const name = uniqueName('host-d');
    nodes.push(name);
    const node = await startNode({ adminKubeconfig: inject('kubeconfig'), binary: inject('binary') }, { name, log: (m) => logged.push(m) });
    await node.stop();
    expect(logged).toContain(`node: restored the host from ${dir}, left behind by a node whose watchdog is gone`);
    expect(existsSync(dir)).toBe(false);
    expect(processesOf(dir)).toEqual([]);
    expect(changes(before)).toEqual([]);
  });
});
