// Starts a real Kubernetes control plane from the `testplane` multi-call binary: embedded etcd,
// kube-apiserver (RBAC, static tokens), kube-controller-manager and (on request) kube-scheduler,
// one process each, on free
// loopback ports with a private temp dir. stop() (and the process exit/signal hooks) leave no
// process and no temp dir behind.
import { spawn, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { closeSync, openSync, readFileSync, rmSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { ensureControlPlaneBinary } from './build.ts';

export type ComponentName = 'etcd' | 'kube-apiserver' | 'kube-controller-manager' | 'kube-scheduler';

/** Identity the provisioner's restricted kubeconfig authenticates as (a static token). */
export const provisionerUser = 'system:serviceaccount:kube-system:local-volume-provisioner';
export const provisionerGroups = ['system:serviceaccounts', 'system:serviceaccounts:kube-system'] as const;

/**
 * Identity the kube-scheduler authenticates as (a static token): the user the apiserver's
 * bootstrap RBAC binds to system:kube-scheduler and system:volume-scheduler, as in a real cluster.
 */
export const schedulerUser = 'system:kube-scheduler';

/** Controllers the KCM runs: what the e2e tests need, nothing that assumes a kubelet. */
export const kcmControllers = [
  'persistentvolume-binder-controller',
  'persistentvolume-protection-controller',
  'persistentvolumeclaim-protection-controller',
  'job-controller',
  'garbage-collector-controller',
  'namespace-controller',
  'serviceaccount-controller',
  'ttl-after-finished-controller',
] as const;

export interface ControlPlaneOptions {
  /** The testplane binary (default: ensureControlPlaneBinary()). */
  readonly binary?: string;
  /** Progress messages (default: console.log). */
  readonly log?: (msg: string) => void;
  /** Start the kube-controller-manager too (default true). */
  readonly controllerManager?: boolean;
  /**
   * Start a kube-scheduler too (default false), as schedulerUser, without leader election.
   * Nodes are only schedulable once Ready and untainted (see markNodeReady in node-agent.ts).
   */
  readonly scheduler?: boolean;
  /**
   * Run every KCM controller (`--controllers=*`, default false: kcmControllers only), as a real
   * node needs: DaemonSets, the node lifecycle (taints), kube-root-ca.crt and token volumes, pod GC.
   * Only for a control plane of its own: node lifecycle would taint the node-agent tests' Nodes.
   */
  readonly allControllers?: boolean;
  /** Per-component readiness timeout in ms (default 120 s). */
  readonly readyTimeoutMs?: number;
  /** Extra flags per component, appended last (tests use this to break one). */
  readonly extraArgs?: Partial<Record<ComponentName, readonly string[]>>;
  /** Where the temp dir is created (default os.tmpdir()). */
  readonly tmpRoot?: string;
  /** Picks a port (default freePort(); tests hand out a busy one to exercise the retry). */
  readonly pickPort?: () => Promise<number>;
}

export interface ComponentStats {
  readonly pid: number;
  /** ms from spawn to ready. */
  readonly readyMs: number;
  /** Resident set size now, KiB (/proc/<pid>/status VmRSS); undefined when the process is gone. */
  readonly rssKiB: number | undefined;
  /** Peak resident set size, KiB (VmHWM). */
  readonly peakRssKiB: number | undefined;
}

export interface ControlPlaneStats {
  /** ms from startControlPlane() to every component ready. */
  readonly startupMs: number;
  readonly components: Partial<Record<ComponentName, ComponentStats>>;
  /** Sum of VmRSS over the components, KiB. */
  readonly totalRssKiB: number;
}

export interface ControlPlane {
  /** Private temp dir: data, certs, tokens, kubeconfigs, logs. Removed by stop(). */
  readonly dir: string;
  /** kubeconfig for the static-token admin (system:masters). */
  readonly adminKubeconfig: string;
  /** kubeconfig for the restricted provisioner identity (see provisionerUser). */
  readonly provisionerKubeconfig: string;
  /** https://127.0.0.1:<port> */
  readonly server: string;
  /** PEM CA bundle the kubeconfigs trust (the apiserver's self-signed cert and its CA). */
  readonly caFile: string;
  readonly adminToken: string;
  readonly provisionerToken: string;
  readonly binary: string;
  readonly pids: Partial<Record<ComponentName, number>>;
  /** Log file of each component (stdout and stderr). */
  readonly logs: Partial<Record<ComponentName, string>>;
  stats(): ControlPlaneStats;
  /**
   * Settles when a component exits while the control plane is not being stopped (a crash);
   * stays pending otherwise.
   */
  readonly crashed: Promise<{ component: ComponentName; code: number | null; signal: NodeJS.Signals | null; logTail: string }>;
  /** SIGTERM every component (SIGKILL after ~5 s), wait for exit, remove the temp dir. Idempotent. */
  stop(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// Process bookkeeping and exit hooks

interface Running {
  readonly name: ComponentName;
  readonly child: ChildProcess;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly log: string;
  readonly startedAt: number;
  readyMs: number;
  exitInfo: { code: number | null; signal: NodeJS.Signals | null } | undefined;
}

interface Live {
  readonly dir: string;
  readonly procs: Running[];
  stop(): Promise<void>;
}

const live = new Set<Live>();
let hooksInstalled = false;

function installExitHooks(): void {
  if (hooksInstalled) return;
  hooksInstalled = true;
  // Last resort, synchronous: kill every process group and remove the temp dirs.
  process.on('exit', () => {
    for (const l of live) {
      for (const p of l.procs) killGroup(p, 'SIGKILL');
      rmSync(l.dir, { recursive: true, force: true });
    }
  });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    const handler = (): void => {
      const all = [...live].map((l) => l.stop());
      void Promise.allSettled(all).then(() => {
        // If someone else (vitest, the CLI) also listens, let them decide when to exit;
        // otherwise behave like the default action and die from the same signal.
        if (process.listenerCount(sig) <= 1) {
          process.off(sig, handler);
          process.kill(process.pid, sig);
        }
      });
    };
    process.on(sig, handler);
  }
}

function killGroup(p: Running, sig: NodeJS.Signals): void {
  if (p.exitInfo !== undefined || p.child.pid === undefined) return;
  try {
    process.kill(-p.child.pid, sig); // the component runs in its own process group
  } catch {
    try {
      p.child.kill(sig);
    } catch {
      /* already gone */
    }
  }
}

async function stopProcess(p: Running, graceMs = 5000): Promise<void> {
  if (p.exitInfo !== undefined) return;
  killGroup(p, 'SIGTERM');
  const timer = new Promise<'timeout'>((res) => setTimeout(() => res('timeout'), graceMs).unref());
  if ((await Promise.race([p.exited, timer])) === 'timeout') {
    killGroup(p, 'SIGKILL');
    await p.exited;
  }
  // The group may still hold stray children of the component; make sure it is gone.
  if (p.child.pid !== undefined) {
    try {
      process.kill(-p.child.pid, 'SIGKILL');
    } catch {
      /* no such group: good */
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Small helpers

/** A free TCP port on 127.0.0.1 (listen on 0, close). */
export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => (port > 0 ? res(port) : rej(new Error('could not get a free port'))));
    });
  });
}

/** The last `n` lines of a file ('' when it cannot be read). */
export async function tailFile(path: string, n = 30): Promise<string> {
  try {
    const text = await readFile(path, 'utf8');
    return text.split('\n').filter((l) => l !== '').slice(-n).join('\n');
  } catch {
    return '';
  }
}

interface HttpResult {
  readonly status: number;
  readonly body: string;
}

function httpGet(url: string, opts: { ca?: Buffer; token?: string; insecure?: boolean; timeoutMs?: number }): Promise<HttpResult> {
  return new Promise((res, rej) => {
    const u = new URL(url);
    const headers: Record<string, string> = {};
    if (opts.token !== undefined) headers['Authorization'] = `Bearer ${opts.token}`;
    const common = { method: 'GET', headers, timeout: opts.timeoutMs ?? 5000 };
    const onResponse = (r: import('node:http').IncomingMessage): void => {
      let body = '';
      r.setEncoding('utf8');
      r.on('data', (c: string) => (body += c));
      r.on('end', () => res({ status: r.statusCode ?? 0, body }));
      r.on('error', rej);
    };
    const req =
      u.protocol === 'https:'
        ? httpsRequest(u, { ...common, ...(opts.ca ? { ca: opts.ca } : {}), rejectUnauthorized: opts.insecure !== true }, onResponse)
        : httpRequest(u, common, onResponse);
    req.on('timeout', () => req.destroy(new Error(`timed out after ${common.timeout} ms`)));
    req.on('error', rej);
    req.end();
  });
}

function readProcKiB(pid: number, field: 'VmRSS' | 'VmHWM'): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status);
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

const sleep = (ms: number): Promise<void> => new Promise((res) => setTimeout(res, ms));

const dirPrefix = 'lsp-controlplane-';

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'; // exists, someone else's
  }
}

/**
 * Removes control-plane temp dirs in `tmpRoot` whose owner process is dead (a harness killed
 * with SIGKILL cannot clean up; its components stop themselves when they see their parent
 * gone, see TESTPLANE_PARENT_PID in e2e/controlplane/main.go). Returns the removed dirs.
 */
export async function sweepStaleControlPlanes(tmpRoot: string = tmpdir(), log: (msg: string) => void = () => undefined): Promise<string[]> {
  const removed: string[] = [];
  let names: string[];
  try {
    names = (await readdir(tmpRoot)).filter((n) => n.startsWith(dirPrefix));
  } catch {
    return removed;
  }
  for (const name of names) {
    const dir = join(tmpRoot, name);
    let owner: number;
    try {
      owner = Number((await readFile(join(dir, 'owner.pid'), 'utf8')).trim());
    } catch {
      continue; // no owner file: not ours to judge
    }
    if (!Number.isInteger(owner) || owner <= 0 || processAlive(owner)) continue;
    await rm(dir, { recursive: true, force: true });
    removed.push(dir);
    log(`control plane: removed ${dir} left behind by process ${owner}, which is gone`);
  }
  return removed;
}

// ---------------------------------------------------------------------------------------------
// Components

/** Error from a component that did not come up; carries its name and log tail. */
export class ComponentStartError extends Error {
  readonly component: ComponentName;
  readonly logTail: string;
  readonly portInUse: boolean;
  constructor(component: ComponentName, message: string, logTail: string) {
    super(`${message}\n--- last lines of the ${component} log ---\n${logTail || '(empty log)'}`);
    this.name = 'ComponentStartError';
    this.component = component;
    this.logTail = logTail;
    this.portInUse = /address already in use|bind: address/i.test(logTail);
  }
}

function spawnComponent(binary: string, name: ComponentName, args: readonly string[], logPath: string): Running {
  const fd = openSync(logPath, 'a');
  let child: ChildProcess;
  try {
    child = spawn(binary, [name, ...args], {
      detached: true, // own process group: stop() kills the group, a terminal Ctrl-C does not reach it
      stdio: ['ignore', fd, fd],
      env: { ...process.env, TESTPLANE_PARENT_PID: String(process.pid) },
    });
  } finally {
    closeSync(fd);
  }
  const running: Running = {
    name,
    child,
    log: logPath,
    startedAt: performance.now(),
    readyMs: 0,
    exitInfo: undefined,
    exited: new Promise((res) => {
      child.on('exit', (code, signal) => {
        running.exitInfo = { code, signal };
        res({ code, signal });
      });
      child.on('error', (err) => {
        running.exitInfo = { code: null, signal: null };
        void writeFile(logPath, `spawn ${binary} failed: ${err.message}\n`, { flag: 'a' }).finally(() =>
          res({ code: null, signal: null }),
        );
      });
    }),
  };
  return running;
}

/**
 * Polls `probe` until it returns true. Fails with a ComponentStartError naming the component
 * (with its log tail) when the process exits first or the timeout passes.
 */
async function waitReady(p: Running, what: string, timeoutMs: number, probe: () => Promise<string | true>): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  let last: string;
  for (;;) {
    if (p.exitInfo !== undefined) break;
    try {
      const r = await probe();
      if (r === true) {
        p.readyMs = performance.now() - p.startedAt;
        return;
      }
      last = r;
    } catch (err) {
      last = (err as Error).message;
    }
    if (performance.now() > deadline) {
      throw new ComponentStartError(
        p.name,
        `${p.name} was not ready after ${Math.round(timeoutMs / 1000)} s (${what}: ${last}); log ${p.log}`,
        await tailFile(p.log),
      );
    }
    await Promise.race([sleep(250), p.exited]);
  }
  await sleep(100); // let the log flush
  const info = p.exitInfo ?? { code: null, signal: null };
  const how = info.signal ? `was killed by ${info.signal}` : `exited with code ${String(info.code)}`;
  throw new ComponentStartError(p.name, `${p.name} ${how} before it was ready; log ${p.log}`, await tailFile(p.log));
}

function kubeconfig(server: string, caFile: string, user: string, token: string): string {
  return toYaml({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'testplane', cluster: { server, 'certificate-authority': caFile } }],
    users: [{ name: user, user: { token } }],
    contexts: [{ name: user, context: { cluster: 'testplane', user, namespace: 'default' } }],
    'current-context': user,
  });
}

// ---------------------------------------------------------------------------------------------

/** Starts etcd, kube-apiserver and (by default) kube-controller-manager; resolves when all are ready. */
export async function startControlPlane(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const t0 = performance.now();
  const log = opts.log ?? ((msg: string) => console.log(msg));
  const binary = opts.binary ?? (await ensureControlPlaneBinary({ log }));
  const timeoutMs = opts.readyTimeoutMs ?? 120_000;
  const extra = (c: ComponentName): readonly string[] => opts.extraArgs?.[c] ?? [];
  const pickPort = opts.pickPort ?? freePort;

  installExitHooks();
  const tmpRoot = opts.tmpRoot ?? tmpdir();
  await sweepStaleControlPlanes(tmpRoot, log);
  const dir = await mkdtemp(join(tmpRoot, dirPrefix));
  await writeFile(join(dir, 'owner.pid'), `${process.pid}\n`);
  const procs: Running[] = [];
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      // Controllers and apiserver first (they talk to etcd), then etcd.
      await Promise.all(procs.filter((p) => p.name !== 'etcd').map((p) => stopProcess(p)));
      await Promise.all(procs.filter((p) => p.name === 'etcd').map((p) => stopProcess(p)));
      await rm(dir, { recursive: true, force: true });
      live.delete(entry);
    })();
    return stopping;
  };
  const entry: Live = { dir, procs, stop };
  live.add(entry);

  const adminToken = randomBytes(24).toString('hex');
  const provisionerToken = randomBytes(24).toString('hex');
  const schedulerToken = randomBytes(24).toString('hex');
  const saKey = join(dir, 'sa.key');
  const tokens = join(dir, 'tokens.csv');
  const pki = join(dir, 'pki');
  const caFile = join(pki, 'apiserver.crt');
  const adminKubeconfig = join(dir, 'admin.kubeconfig');
  const provisionerKubeconfig = join(dir, 'provisioner.kubeconfig');
  const schedulerKubeconfig = join(dir, 'scheduler.kubeconfig');
  const { privateKey } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
    publicKeyEncoding: { type: 'spki', format: 'pem' },
  });
  await writeFile(saKey, privateKey, { mode: 0o600 });
  await writeFile(
    tokens,
    `${adminToken},admin,uid-admin,"system:masters"\n` +
      `${provisionerToken},${provisionerUser},uid-local-volume-provisioner,"${provisionerGroups.join(',')}"\n` +
      `${schedulerToken},${schedulerUser},uid-kube-scheduler\n`,
    { mode: 0o600 },
  );

  // Waits for a 200 from a component that serves a self-signed cert of its own (KCM, scheduler)
  // on a loopback port: a health probe, so the certificate is not checked.
  const waitSelfServed = (p: Running, port: number | undefined, path: string): Promise<void> =>
    waitReady(p, `GET ${path}`, timeoutMs, async () => {
      const r = await httpGet(`https://127.0.0.1:${String(port)}${path}`, { insecure: true });
      return r.status === 200 ? true : `HTTP ${r.status} ${r.body.slice(0, 200)}`;
    });

  // Starts one component, retrying with fresh ports when its port was taken meanwhile.
  const start = async (
    name: ComponentName,
    args: (ports: number[]) => Promise<string[]>,
    nPorts: number,
    ready: (p: Running, ports: number[]) => Promise<void>,
  ): Promise<number[]> => {
    for (let attempt = 1; ; attempt++) {
      const ports = await Promise.all(Array.from({ length: nPorts }, () => pickPort()));
      const p = spawnComponent(binary, name, [...(await args(ports)), ...extra(name)], join(dir, `${name}.log`));
      procs.push(p);
      try {
        await ready(p, ports);
        log(`control plane: ${name} ready in ${(p.readyMs / 1000).toFixed(1)} s (pid ${String(p.child.pid)})`);
        return ports;
      } catch (err) {
        await stopProcess(p);
        procs.splice(procs.indexOf(p), 1);
        if (err instanceof ComponentStartError && err.portInUse && attempt < 3) {
          log(`control plane: ${name}: port in use, retrying with other ports`);
          await writeFile(p.log, `--- retry ${attempt + 1} with new ports ---\n`, { flag: 'a' });
          continue;
        }
        throw err;
      }
    }
  };

  try {
    // etcd
    const [etcdPort] = await start(
      'etcd',
      ([client, peer]) =>
        Promise.resolve([
          '--name=default',
          `--data-dir=${join(dir, 'etcd')}`,
          `--listen-client-urls=http://127.0.0.1:${client}`,
          `--advertise-client-urls=http://127.0.0.1:${client}`,
          `--listen-peer-urls=http://127.0.0.1:${peer}`,
          `--initial-advertise-peer-urls=http://127.0.0.1:${peer}`,
          `--initial-cluster=default=http://127.0.0.1:${peer}`,
          '--unsafe-no-fsync=true',
          '--log-level=warn',
        ]),
      2,
      (p, [client]) =>
        waitReady(p, 'GET /health', timeoutMs, async () => {
          const r = await httpGet(`http://127.0.0.1:${client}/health`, {});
          return r.status === 200 && /"health":\s*"true"/.test(r.body) ? true : `HTTP ${r.status} ${r.body.slice(0, 200)}`;
        }),
    );

    // kube-apiserver
    let server = '';
    await start(
      'kube-apiserver',
      ([port]) => {
        server = `https://127.0.0.1:${port}`;
        return Promise.resolve([
          '--advertise-address=127.0.0.1',
          '--bind-address=127.0.0.1',
          `--secure-port=${port}`,
          `--cert-dir=${pki}`,
          `--etcd-servers=http://127.0.0.1:${etcdPort}`,
          '--service-cluster-ip-range=10.0.0.0/24',
          `--service-account-issuer=${server}`,
          `--service-account-key-file=${saKey}`,
          `--service-account-signing-key-file=${saKey}`,
          '--authorization-mode=RBAC',
          `--token-auth-file=${tokens}`,
          '--anonymous-auth=false',
          '--allow-privileged=true',
          '--endpoint-reconciler-type=none',
          // The real node (node.ts) registers its InternalIP and its name as Hostname, which no DNS
          // resolves: reach kubelets by IP first (logs, exec, port-forward), as kubeadm clusters do.
          '--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname',
          '--enable-priority-and-fairness=false',
          '--profiling=false',
        ]);
      },
      1,
      async (p) => {
        let ca: Buffer | undefined;
        const get = async (path: string): Promise<HttpResult> => {
          ca ??= await readFile(caFile); // written by the apiserver once it starts serving
          return httpGet(`${server}${path}`, { ca, token: adminToken });
        };
        await waitReady(p, 'GET /readyz', timeoutMs, async () => {
          const r = await get('/readyz');
          return r.status === 200 ? true : `HTTP ${r.status} ${r.body.split('\n').filter((l) => l.includes('failed')).join('; ').slice(0, 300)}`;
        });
        await waitReady(p, 'GET namespace default', timeoutMs, async () => {
          const r = await get('/api/v1/namespaces/default');
          return r.status === 200 ? true : `HTTP ${r.status}`;
        });
        p.readyMs = performance.now() - p.startedAt;
      },
    );
    await writeFile(adminKubeconfig, kubeconfig(server, caFile, 'admin', adminToken), { mode: 0o600 });
    await writeFile(provisionerKubeconfig, kubeconfig(server, caFile, provisionerUser, provisionerToken), { mode: 0o600 });
    await writeFile(schedulerKubeconfig, kubeconfig(server, caFile, schedulerUser, schedulerToken), { mode: 0o600 });

    // kube-controller-manager
    if (opts.controllerManager !== false) {
      await start(
        'kube-controller-manager',
        ([port]) =>
          Promise.resolve([
            `--kubeconfig=${adminKubeconfig}`,
            `--authentication-kubeconfig=${adminKubeconfig}`,
            `--authorization-kubeconfig=${adminKubeconfig}`,
            '--leader-elect=false',
            ...(opts.allControllers === true
              ? [
                  '--controllers=*',
                  `--root-ca-file=${caFile}`, // published as kube-root-ca.crt, mounted in token volumes
                  `--service-account-private-key-file=${saKey}`,
                  `--flex-volume-plugin-dir=${join(dir, 'flexvolume')}`, // default is under /usr/libexec
                ]
              : [`--controllers=${kcmControllers.join(',')}`]),
            '--pvclaimbinder-sync-period=1s',
            '--bind-address=127.0.0.1',
            `--secure-port=${port}`,
            `--cert-dir=${join(dir, 'kcm-pki')}`,
            '--profiling=false',
          ]),
        1,
        (p, [port]) => waitSelfServed(p, port, '/healthz'),
      );
    }

    // kube-scheduler: its options in a KubeSchedulerConfiguration (the --kubeconfig flag is deprecated).
    if (opts.scheduler === true) {
      const schedulerConfig = join(dir, 'scheduler.yaml');
      await writeFile(
        schedulerConfig,
        toYaml({
          apiVersion: 'kubescheduler.config.k8s.io/v1',
          kind: 'KubeSchedulerConfiguration',
          clientConnection: { kubeconfig: schedulerKubeconfig },
          leaderElection: { leaderElect: false },
        }),
      );
      await start(
        'kube-scheduler',
        ([port]) =>
          Promise.resolve([
            `--config=${schedulerConfig}`,
            `--authentication-kubeconfig=${schedulerKubeconfig}`,
            `--authorization-kubeconfig=${schedulerKubeconfig}`,
            '--bind-address=127.0.0.1',
            `--secure-port=${port}`,
            `--cert-dir=${join(dir, 'scheduler-pki')}`,
          ]),
        1,
        // /readyz includes sched-handler-sync: the informers are synced and it schedules.
        (p, [port]) => waitSelfServed(p, port, '/readyz'),
      );
    }

    const startupMs = performance.now() - t0;
    log(`control plane: ready in ${(startupMs / 1000).toFixed(1)} s at ${server} (dir ${dir})`);
    const pids: Partial<Record<ComponentName, number>> = {};
    const logs: Partial<Record<ComponentName, string>> = {};
    for (const p of procs) {
      if (p.child.pid !== undefined) pids[p.name] = p.child.pid;
      logs[p.name] = p.log;
    }
    const crashed = Promise.race(
      procs.map(async (p) => {
        const info = await p.exited;
        if (stopping !== undefined) return new Promise<never>(() => undefined);
        return { component: p.name, ...info, logTail: await tailFile(p.log) };
      }),
    );
    return {
      dir,
      adminKubeconfig,
      crashed,
      provisionerKubeconfig,
      server,
      caFile,
      adminToken,
      provisionerToken,
      binary,
      pids,
      logs,
      stop,
      stats(): ControlPlaneStats {
        const components: Partial<Record<ComponentName, ComponentStats>> = {};
        let totalRssKiB = 0;
        for (const p of procs) {
          const pid = p.child.pid ?? 0;
          const rssKiB = p.exitInfo === undefined ? readProcKiB(pid, 'VmRSS') : undefined;
          const peakRssKiB = p.exitInfo === undefined ? readProcKiB(pid, 'VmHWM') : undefined;
          totalRssKiB += rssKiB ?? 0;
          components[p.name] = { pid, readyMs: Math.round(p.readyMs), rssKiB, peakRssKiB };
        }
        return { startupMs: Math.round(startupMs), components, totalRssKiB };
      },
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
