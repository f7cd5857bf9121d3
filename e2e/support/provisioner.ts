// Runs the real daemons (node src/main.ts, node src/node-cleanup/main.ts) as child
// processes for e2e tests and the demo, with their logs in a file; stop() and kill()
// leave no process behind.
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync } from 'node:fs';
import { join } from 'node:path';

const repo = join(import.meta.dirname, '..', '..');

export interface ProvisionerProcess {
  readonly child: ChildProcess;
  readonly logFile: string;
  readonly port: number;
  logs(): string;
  /** What the daemon wrote to stdout alone (it should write nothing: logs go to stderr). */
  stdout(): string;
  /** Parsed JSON log lines. */
  logLines(): Array<Record<string, unknown>>;
  metrics(): Promise<string>;
  ready(): Promise<boolean>;
  /** SIGTERM, SIGKILL after 10 s; resolves when the process has exited. */
  stop(): Promise<void>;
  /** SIGKILL at once (crash tests). */
  kill(): Promise<void>;
  exited: Promise<number | null>;
}

export interface StartOptions {
  configDir: string;
  nodeName: string;
  kubeconfig: string;
  namespace?: string;
  port: number;
  logFile: string;
  args?: string[];
  env?: Record<string, string>;
  /** --log-level to pass (default debug); null passes none (e.g. to let -v decide). */
  logLevel?: string | null;
  /** Entry point to run (default src/main.ts; the footprint bench runs the built dist/main.js). */
  script?: string;
  /** Node options before the script (e.g. the image's ENTRYPOINT flags). */
  nodeArgs?: readonly string[];
}

export function startProvisioner(o: StartOptions): ProvisionerProcess {
  return startDaemonProcess({
    script: o.script ?? join(repo, 'src', 'main.ts'),
    nodeArgs: o.nodeArgs ?? [],
    args: [
      `--config-dir=${o.configDir}`,
      `--listen-address=127.0.0.1:${o.port}`,
      ...(o.logLevel === null ? [] : [`--log-level=${o.logLevel ?? 'debug'}`]),
      ...(o.args ?? []),
    ],
    env: {
      // The tests read the log as JSON lines (logLines()); a test that wants the default (klog text) passes LOG_FORMAT: ''.
      LOG_FORMAT: 'json',
      KUBECONFIG: o.kubeconfig,
      MY_NODE_NAME: o.nodeName,
      MY_NAMESPACE: o.namespace ?? 'kube-system',
      MY_POD_NAME: `local-volume-provisioner-${o.nodeName}`,
      JOB_CONTAINER_IMAGE: 'local-static-provisioner:e2e',
      ...o.env,
    },
    port: o.port,
    logFile: o.logFile,
  });
}

/** Runs local-volume-node-cleanup (node src/node-cleanup/main.ts) on 127.0.0.1:<port> with debug logs. */
export function startNodeCleanup(o: { kubeconfig: string; port: number; logFile: string; args: readonly string[] }): ProvisionerProcess {
  return startDaemonProcess({
    script: join(repo, 'src', 'node-cleanup', 'main.ts'),
    nodeArgs: [],
    args: [`--kubeconfig=${o.kubeconfig}`, `--listen-address=127.0.0.1:${o.port}`, '--log-level=debug', ...o.args],
    env: {},
    port: o.port,
    logFile: o.logFile,
  });
}

/** Runs `node <script> <args>` with only PATH and `env` in its environment, logs appended to logFile. */
function startDaemonProcess(o: {
  script: string;
  nodeArgs: readonly string[];
  args: readonly string[];
  env: Record<string, string>;
  port: number;
  logFile: string;
}): ProvisionerProcess {
  const out = createWriteStream(o.logFile, { flags: 'a' });
  const child = spawn(process.execPath, [...o.nodeArgs, o.script, ...o.args], {
    cwd: repo,
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', ...o.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    stdout += chunk.toString('utf8');
  });
  child.stdout?.pipe(out, { end: false });
  child.stderr?.pipe(out, { end: false });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const base = `http://127.0.0.1:${o.port}`;
  const waitExit = async (signal: NodeJS.Signals, graceMs: number): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill(signal);
    const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(t);
  };
  return {
    child,
    logFile: o.logFile,
    port: o.port,
    exited,
    logs: () => readFileSync(o.logFile, 'utf8'),
    stdout: () => stdout,
    logLines: () =>
      readFileSync(o.logFile, 'utf8')
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => {
          try {
            return JSON.parse(l) as Record<string, unknown>;
          } catch {
            return {};
          }
        }),
    metrics: async () => (await fetch(`${base}/metrics`)).text(),
    ready: async () => {
      try {
        return (await fetch(`${base}/ready`)).status === 200;
      } catch {
        return false;
      }
    },
    stop: () => waitExit('SIGTERM', 10_000),
    kill: () => waitExit('SIGKILL', 1000),
  };
}

/** Sum of a metric's samples whose labels contain every given label (e.g. { method: 'create' }). */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const ls = m[2] ?? '';
    if (Object.entries(labels).every(([k, v]) => ls.includes(`${k}="${v}"`))) sum += Number(m[3]);
  }
  return sum;
}
