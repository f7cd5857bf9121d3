// `npm run demo` as a user starts it (issue 18, point 7): the kubeconfig and a kubectl are printed
// first, before the minutes of the rest; the provisioner's log is named; SIGINT sent to the npm
// process alone (not to its process group, as a terminal's Ctrl-C does) stops the demo and removes its
// processes, mounts, loop device and temp dirs. npm → node: package.json execs node, so npm forwards
// the signal to it (with `sh -c node ...` in between, the shell swallowed it).
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { waitFor } from './harness/kube.ts';
import { isRunning, pgrep } from './harness/procs.ts';
import { isRoot } from './support/host.ts';

const repo = join(import.meta.dirname, '..');

/** The pids whose parent is `pid`. */
const childrenOf = (pid: number): number[] => {
  try {
    return execFileSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' }).split('\n').filter((l) => l !== '').map(Number);
  } catch {
    return [];
  }
};

describe.skipIf(!isRoot())('npm run demo, as started by a user', () => {
  it('prints the kubeconfig and a kubectl first; SIGINT to the npm process stops it and leaves nothing behind', { timeout: 400_000 }, async () => {
    const root = mkdtempSync(join(tmpdir(), 'lsp-e2e-npm-demo-')); // private TMPDIR: the demo's dirs go here
    // Its own process group, so that the test's cleanup can signal the whole chain whatever happens.
    const npm = spawn('npm', ['run', 'demo'], { cwd: repo, env: { ...process.env, TMPDIR: root }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let out = '';
    let err = '';
    npm.stdout.on('data', (d: Buffer) => (out += d.toString()));
    npm.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((res) => npm.on('exit', (code) => res(code)));
    const demoPids: number[] = [];
    try {
      // The kubeconfig comes right after the control plane answers, before the PVs.
      const kubeconfig = await waitFor(
        () => {
          if (npm.exitCode !== null) throw new Error(`npm run demo exited with ${npm.exitCode}: ${err}`);
          return /^ {2}export KUBECONFIG=(\S+)$/m.exec(out)?.[1] ?? (out.includes('Ctrl-C to stop') ? 'printed-at-the-end-only' : undefined);
        },
        { what: 'the demo to print the kubeconfig', timeoutMs: 200_000, intervalMs: 250 },
      );
      await waitFor(
        () => {
          if (npm.exitCode !== null) throw new Error(`npm run demo exited with ${npm.exitCode}: ${err}`);
          return out.includes('Ctrl-C to stop');
        },
        { what: 'the demo to print "Ctrl-C to stop"', timeoutMs: 200_000 },
      );
      const at = out.indexOf(`  export KUBECONFIG=${kubeconfig}`);
      expect.soft(at >= 0 && at < out.indexOf('local-pv-'), `the kubeconfig printed before the PV table:\n${out}`).toBe(true);
      // The printed kubectl works with the printed kubeconfig.
      const kubectl = /\(no kubectl\? (\S+) is one/.exec(out)?.[1];
      expect.soft(kubectl, out).toBeDefined();
      if (kubectl) expect.soft(execFileSync(kubectl, ['get', 'pvc', 'demo-claim'], { encoding: 'utf8', env: { ...process.env, KUBECONFIG: kubeconfig } })).toMatch(/^demo-claim\s+Bound\s+local-pv-/m);
      const log = /^provisioner log: (\S+)$/m.exec(out)?.[1];
      expect.soft(log && existsSync(log) && readFileSync(log, 'utf8').includes('local-pv-'), `the provisioner's log is named: ${out}`).toBe(true);

      demoPids.push(...childrenOf(npm.pid ?? 0));
      expect(demoPids.length).toBeGreaterThan(0);
      expect(pgrep(root).length).toBeGreaterThanOrEqual(5); // etcd, apiserver, KCM, scheduler, provisioner
      npm.kill('SIGINT'); // to npm only
      const code = await Promise.race([exited, new Promise<string>((res) => setTimeout(() => res('still running 90 s after SIGINT to npm'), 90_000))]);
      expect(code).toBe(0);
      expect(demoPids.filter(isRunning)).toEqual([]);
      expect(pgrep(root)).toEqual([]);
      expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(root);
      expect(execFileSync('losetup', ['-a'], { encoding: 'utf8' })).not.toContain(root); // the loop device's backing file
      expect(err).toMatch(/\[demo\] done/);
    } finally {
      if (npm.exitCode === null && npm.signalCode === null) {
        try {
          process.kill(-(npm.pid ?? 0), 'SIGINT'); // the whole chain, as a terminal's Ctrl-C
        } catch {
          /* gone */
        }
        await exited;
      }
      await waitFor(() => pgrep(root).length === 0 && demoPids.every((p) => !isRunning(p)), { what: 'the demo processes gone', timeoutMs: 120_000 }).catch(() => undefined);
      rmSync(root, { recursive: true, force: true });
    }
  });
});
