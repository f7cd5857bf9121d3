// `npm run demo -- --real-node` (scripts/demo-real-node.ts): the shipped DaemonSet on a real node
// discovers the demo's mounts under /mnt/disks, a scheduled Pod's PVC is printed Bound to a local
// PV with the pod on that node; Ctrl-C stops the node and the control plane and restores the host
// (sysctls, iptables, mounts, cgroups, links, fixed paths), /mnt/disks and the temp dirs included.
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
