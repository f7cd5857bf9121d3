// kubectl for the e2e tests and the demo: the testplane binary's `kubectl` component (k8s.io/kubectl's
// command, the control plane's version; e2e/controlplane/main.go), so no kubectl need be installed.
// `testplane kubectl <args>` or a symlink named kubectl to the binary (argv[0] dispatch).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readlinkSync, rmSync, symlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';

export interface KubectlResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** The arguments before the user's: the component, the kubeconfig, a discovery cache beside it. */
const baseArgs = (kubeconfig: string): string[] => ['kubectl', `--kubeconfig=${kubeconfig}`, `--cache-dir=${join(dirname(kubeconfig), 'kubectl-cache')}`];

/** Starts `kubectl <args>` against `kubeconfig` (stdout and stderr piped); for long-running verbs (port-forward). */
export function startKubectl(binary: string, kubeconfig: string, args: readonly string[]): ChildProcess {
  return spawn(binary, [...baseArgs(kubeconfig), ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KUBECONFIG: kubeconfig } });
}

/** Runs `kubectl <args>` to its end; never rejects on the exit code (it is in the result). */
export function kubectl(binary: string, kubeconfig: string, args: readonly string[], opts: { readonly timeoutMs?: number } = {}): Promise<KubectlResult> {
  return new Promise((res, rej) => {
    const child = startKubectl(binary, kubeconfig, args);
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
    child.stderr?.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
    child.on('error', (err) => {
      clearTimeout(timer);
      rej(err);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      res({ code, stdout, stderr });
    });
  });
}

/** A `kubectl` symlink to the testplane binary in `dir` (created if missing); returns its path. */
export function kubectlLink(binary: string, dir: string): string {
  mkdirSync(dir, { recursive: true });
  const link = join(dir, 'kubectl');
  let target: string | undefined;
  try {
    target = readlinkSync(link);
  } catch {
    target = undefined;
  }
  if (target !== binary) {
    rmSync(link, { force: true });
    symlinkSync(binary, link);
  }
  return link;
}
