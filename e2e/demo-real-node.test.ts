// `npm run demo -- --real-node` (scripts/demo-real-node.ts): the shipped DaemonSet on a real node
// discovers the demo's mounts under /mnt/disks, a scheduled Pod's PVC is printed Bound to a local
// PV with the pod on that node; with the kubeconfig and kubectl it printed first, `kubectl logs` of the
// DaemonSet and examples/pvc-and-pod.yaml as written work; Ctrl-C stops the node and the control plane and restores the host
// (sysctls, iptables, mounts, cgroups, links, fixed paths), /mnt/disks and the temp dirs included.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { diffHost, snapshotHost } from './harness/host-state.ts';
import { waitFor } from './harness/kube.ts';
import { pgrep, runNodeScript } from './harness/procs.ts';
import { realNodeUnsupportedReason } from './support/real-node.ts';

const reason = realNodeUnsupportedReason();
const demoScript = join(import.meta.dirname, '..', 'scripts', 'demo.ts');

describe.skipIf(reason !== undefined)(`npm run demo -- --real-node${reason ? ` (skipped: ${reason})` : ''}`, () => {
  it('prints the PVC Bound to a local PV and the pod on the real node; on Ctrl-C leaves nothing behind', { timeout: 1_200_000 }, async () => {
    // One kubelet per host: another run's node (e2e/real-node.test.ts) goes first.
    await waitFor(() => pgrep('testplane kubelet').length === 0, { what: 'no other kubelet on this host', timeoutMs: 600_000, intervalMs: 2_000 });
    const mntExisted = existsSync('/mnt');
    const before = snapshotHost();
    const root = mkdtempSync(join(tmpdir(), 'lsp-e2e-demo-')); // private TMPDIR: the demo's dirs (control plane, node) go here
    const demo = runNodeScript(demoScript, ['--real-node'], { TMPDIR: root });
    try {
      // (waitFor retries on a throw: an early exit ends the wait as a value instead.)
      const state = await waitFor(() => (demo.child.exitCode !== null ? 'exited' : demo.stdout().includes('Ctrl-C to stop') && 'ready'), {
        what: 'the demo to print "Ctrl-C to stop"',
        timeoutMs: 900_000,
        intervalMs: 1_000,
      });
      if (state === 'exited') throw new Error(`demo exited with ${demo.child.exitCode}: ${demo.stderr()}`);
      const out = demo.stdout();
      for (const v of ['vol1', 'vol2', 'vol3']) expect(out).toMatch(new RegExp(`^local-pv-\\S+\\s.*\\sfast-disks\\s+/mnt/disks/fast-disks/${v}$`, 'm'));
      const row = /^demo-claim\s+(\S+)\s+(local-pv-\S+)\s+\S+\s+fast-disks\s+demo-app\s+demo-real-node\s+Running$/m.exec(out);
      expect(row?.[1], out).toBe('Bound');
      expect(out).toMatch(/the pod wrote \/mnt\/disks\/fast-disks\/vol\d\/hello\.txt: written by demo-app/);
      // etcd, apiserver, KCM, scheduler, kubelet, containerd, the watchdog (all under the private TMPDIR)
      expect(pgrep(root).length).toBeGreaterThanOrEqual(7);

      // What a user does next with what the demo printed first: the kubeconfig and a kubectl.
      const kubeconfig = /^ {2}export KUBECONFIG=(\S+)$/m.exec(out)?.[1] ?? '';
      expect(out.indexOf(`  export KUBECONFIG=${kubeconfig}`)).toBeLessThan(out.indexOf('local-pv-'));
      const kubectl = /\(no kubectl\? (\S+) is one/.exec(out)?.[1] ?? '';
      const env = { ...process.env, KUBECONFIG: kubeconfig };
      const run = (...args: string[]): string => execFileSync(kubectl, args, { encoding: 'utf8', env, timeout: 120_000 });
      expect(out).toMatch(/^pod logs: kubectl logs -n kube-system ds\/local-volume-provisioner; files under \S+\/pod-logs /m);
      expect(run('logs', '-n', 'kube-system', 'ds/local-volume-provisioner')).toContain('/mnt/disks/fast-disks/vol');
      // examples/pvc-and-pod.yaml as written: its claim binds to one of the demo's volumes, its Pod runs.
      run('apply', '-f', join(import.meta.dirname, '..', 'examples', 'pvc-and-pod.yaml'));
      await waitFor(() => run('get', 'pod', 'example-local-pod', '-o', 'jsonpath={.status.phase}') === 'Running', { what: 'example-local-pod Running on the demo', timeoutMs: 180_000, intervalMs: 1_000 });
      expect(run('get', 'pvc', 'example-local-claim', '-o', 'jsonpath={.status.phase}')).toBe('Bound');
      await waitFor(() => /\d{2}:\d{2}:\d{2}/.test(run('logs', 'example-local-pod')), { what: 'the log of example-local-pod', timeoutMs: 60_000 });

      expect(await demo.interrupt()).toBe(0);
      expect(pgrep(root)).toEqual([]);
      expect(existsSync('/mnt/disks')).toBe(false);
      expect(existsSync('/mnt')).toBe(mntExisted);
      // Other runs on a shared machine mount in their own lsp-* temp dirs meanwhile.
      expect(diffHost(before, snapshotHost(), { ignoreMount: (m) => m.startsWith(`${tmpdir()}/lsp-`) && !m.startsWith(root) })).toEqual([]);
      expect(readdirSync(root)).toEqual([]);
    } finally {
      await demo.interrupt();
      rmSync(root, { recursive: true, force: true });
    }
  });
});
