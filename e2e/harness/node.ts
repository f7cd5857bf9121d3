// A real node beside the e2e control plane, started on demand: containerd (Debian package, root,
// state and socket in a temp dir), runc, CNI (bridge + host-local from containernetworking-plugins)
// and the kubelet from the testplane binary. The kubelet and containerd change the host (sysctls,
// iptables, cgroups, a bridge, fixed paths, mounts; the harness adds a link holding the node's
// address): a snapshot is taken first and a detached
// watchdog (node-watchdog.ts) restores it when stop() asks, or when this process dies (SIGKILL
// included). One node per host at a time.
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { appendFileSync, closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import { stringify as toYaml } from 'yaml';
import { freePort, tailFile } from './controlplane.ts';
import { fixedPaths, snapshotHost } from './host-state.ts';
import { isRunning } from './procs.ts';
import { clientsFor, waitFor } from './kube.ts';
import { armedFile, pidsFile, teardown, type WatchdogConfig } from './node-watchdog.ts';
import { ensurePauseImage } from './oci.ts';

const execFileP = promisify(execFile);

/** Where Debian's containernetworking-plugins puts the plugins. */
export const cniBinDir = '/usr/lib/cni';
/** The CNI bridge on the host (deleted by the restore). */
export const cniBridge = 'lspcni0';
const podSubnet = '10.244.77.0/24';
/**
 * The link that holds the node's address (deleted by the restore). The kubelet refuses a loopback
 * node IP, and without an address the Node has no InternalIP: the apiserver cannot reach the kubelet
 * (`kubectl logs/exec/port-forward`: "no preferred addresses found"), a hostNetwork pod has no IP and
 * a Service no endpoint. A private /32 on a link of its own gives it one, local to this host.
 */
export const nodeLink = 'lspnode0';
/** Where the node's address is taken from: the first 10.250.77.N (N = 1..254) the host does not use. */
const nodeAddressPrefix = '10.250.77.';

const requiredCommands = ['containerd', 'containerd-shim-runc-v2', 'runc', 'ctr', 'iptables-save', 'ip6tables-save', 'nft', 'ip', 'umount'] as const;
const requiredPlugins = ['bridge', 'host-local', 'loopback'] as const;

/** Whether `cmd` is an executable file in a PATH directory. */
export function onPath(cmd: string): boolean {
  return (process.env['PATH'] ?? '').split(delimiter).some((d) => d !== '' && existsSync(join(d, cmd)));
}

/**
 * Why this host cannot run the node (undefined: it can). Node tests skip with this reason; CI
 * installs the packages (.ci/run: containerd runc containernetworking-plugins iptables nftables).
 */
export function nodeUnsupportedReason(): string | undefined {
  if (process.platform !== 'linux') return `a real node needs Linux (this is ${process.platform})`;
  if (process.getuid?.() !== 0) return 'a real node needs root (the kubelet and containerd manage cgroups, mounts and iptables)';
  const missing = [...requiredCommands.filter((c) => !onPath(c)), ...requiredPlugins.filter((p) => !existsSync(join(cniBinDir, p))).map((p) => `${cniBinDir}/${p}`)];
  if (missing.length > 0) return `a real node needs ${missing.join(', ')} (Debian: apt-get install containerd runc containernetworking-plugins iptables nftables)`;
  if (!existsSync('/sys/fs/cgroup/memory') && !existsSync('/sys/fs/cgroup/cgroup.controllers')) return 'a real node needs cgroups mounted at /sys/fs/cgroup';
  return undefined;
}

/** What the node needs of the control plane (a ControlPlane fits; so do the globalSetup's values). */
export interface NodeControlPlane {
  /** kubeconfig the kubelet uses (the admin's: no node bootstrap or NodeRestriction here). */
  readonly adminKubeconfig: string;
  /** The testplane binary (holds the kubelet). */
  readonly binary: string;
}

export interface NodeOptions {
  /** Node name (--hostname-override; also the kubernetes.io/hostname label). */
  readonly name: string;
  readonly log?: (msg: string) => void;
  /** Timeout for containerd and the Node to become Ready (default 180 s). */
  readonly readyTimeoutMs?: number;
  /** Extra KubeletConfiguration fields, merged last. */
  readonly kubeletConfig?: Record<string, unknown>;
}

export interface NodeStats {
  /** ms from startNode() to the Node Ready. */
  readonly startToReadyMs: number;
  /** VmRSS of the kubelet and containerd, KiB. */
  readonly rssKiB: Record<'kubelet' | 'containerd', number | undefined>;
}

export interface RealNode {
  readonly name: string;
  /** The node's temp dir (removed by the watchdog once the host is restored). */
  readonly dir: string;
  readonly containerdSocket: string;
  /** The node's InternalIP (on the link `nodeLink`): the kubelet listens there, hostNetwork pods have it. */
  readonly address: string;
  readonly logs: Record<'kubelet' | 'containerd' | 'watchdog', string>;
  readonly pids: Record<'kubelet' | 'containerd' | 'watchdog', number>;
  /** Imports an OCI or Docker image archive into the CRI namespace (k8s.io). */
  importImage(archive: string): Promise<void>;
  /** Runs `ctr --address <socket> -n k8s.io <args>`; returns stdout. */
  ctr(args: readonly string[]): Promise<string>;
  stats(): NodeStats;
  /**
   * The processes of a running container (id from a pod's containerStatuses, with or without the
   * containerd:// prefix), found through its task's cgroup, and the sum of their VmRSS in KiB.
   */
  containerMemory(containerId: string): Promise<{ pids: number[]; rssKiB: number }>;
  /**
   * Deletes the Node object, stops the kubelet, and has the watchdog stop the pods, containerd
   * and restore the host; rejects with the watchdog's log when something was left. Idempotent.
   */
  stop(): Promise<void>;
}

const watchdogScript = join(import.meta.dirname, 'node-watchdog.ts');
const dirPrefix = 'lsp-node-';


/**
 * Before a start: a node dir whose watchdog is alive means another node runs (one per host);
 * one whose watchdog is gone (killed, or its restore failed) is torn down again from its snapshot.
 * A snapshot taken over such leftovers would make them part of "before". Throws when the host
 * still carries a node's traces.
 */
async function sweepStaleNodes(log: (m: string) => void): Promise<void> {
  for (const name of (await readdir(tmpdir())).filter((n) => n.startsWith(dirPrefix))) {
    const dir = join(tmpdir(), name);
    const watchdogPid = Number((await readFile(armedFile(dir), 'utf8').catch(() => '0')).trim());
    if (watchdogPid > 0 && isRunning(watchdogPid)) throw new Error(`a real node is already running (${dir}, watchdog ${watchdogPid}); one node per host`);
    let cfg: WatchdogConfig;
    try {
      cfg = JSON.parse(await readFile(join(dir, 'watchdog.json'), 'utf8')) as WatchdogConfig;
    } catch {
      continue; // not started far enough to have touched the host
    }
    const left = await teardown(cfg);
    if (left.length > 0) throw new Error(`node dir ${dir} was left behind and its host changes cannot be undone:\n${left.join('\n')}`);
    await rm(dir, { recursive: true, force: true });
    log(`node: restored the host from ${dir}, left behind by a node whose watchdog is gone`);
  }
  const leftover = snapshotHost().cgroups;
  if (leftover.length > 0) throw new Error(`the host has cgroups of another kubelet or containerd (${leftover.join(', ')}); one node per host`);
}
let running: string | undefined;

function readRssKiB(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

function spawnLogged(cmd: string, args: readonly string[], logPath: string, env: NodeJS.ProcessEnv = process.env): ChildProcess {
  const fd = openSync(logPath, 'a');
  try {
    return spawn(cmd, args, { detached: true, stdio: ['ignore', fd, fd], env });
  } finally {
    closeSync(fd);
  }
}

const exitOf = (c: ChildProcess): Promise<number | null> =>
  c.exitCode !== null || c.signalCode !== null ? Promise.resolve(c.exitCode) : new Promise((res) => c.once('exit', (code) => res(code)));

function containerdConfig(dir: string, socket: string, sandboxImage: string): string {
  // TOML written by hand: a few tables of strings and booleans.
  const cri = 'plugins."io.containerd.grpc.v1.cri"';
  return [
    'version = 2',
    `root = "${dir}/containerd/root"`,
    `state = "${dir}/containerd/state"`,
    // Plugins this node does not need (some probe or write outside root/state).
    'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
    '[grpc]',
    `  address = "${socket}"`,
    '[ttrpc]',
    `  address = "${socket}.ttrpc"`,
    '[plugins."io.containerd.internal.v1.opt"]',
    `  path = "${dir}/containerd/opt"`,
    `[${cri}]`,
    `  sandbox_image = "${sandboxImage}"`,
    // root lacks CAP_SYS_RESOURCE here: runc may not lower oom_score_adj below the parent's.
    '  restrict_oom_score_adj = true',
    '  stream_server_address = "127.0.0.1"',
    `[${cri}.containerd]`,
    '  snapshotter = "overlayfs"',
    '  default_runtime_name = "runc"',
    `[${cri}.containerd.runtimes.runc]`,
    '  runtime_type = "io.containerd.runc.v2"',
    `[${cri}.containerd.runtimes.runc.options]`,
    '  SystemdCgroup = false',
    `[${cri}.cni]`,
    `  bin_dir = "${cniBinDir}"`,
    `  conf_dir = "${dir}/cni/net.d"`,
    '',
  ].join('\n');
}

function cniConfig(dir: string): string {
  return JSON.stringify({
    cniVersion: '0.4.0',
    name: 'lsp-e2e',
    plugins: [
      {
        type: 'bridge',
        bridge: cniBridge,
        isGateway: true,
        ipMasq: false, // no NAT rules: pods here talk to the host only
        hairpinMode: true,
        ipam: { type: 'host-local', ranges: [[{ subnet: podSubnet }]], dataDir: `${dir}/cni/ipam` },
      },
    ],
  });
}

function kubeletConfig(dir: string, socket: string, address: string, port: number, healthzPort: number, extra: Record<string, unknown>): string {
  return toYaml({
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    cgroupDriver: 'cgroupfs', // cgroup v1 here, no systemd
    failCgroupV1: false,
    failSwapOn: false,
    containerRuntimeEndpoint: `unix://${socket}`,
    address, // the node's InternalIP: where the apiserver reaches the kubelet (logs, exec, port-forward)
    port,
    healthzBindAddress: '127.0.0.1',
    healthzPort,
    readOnlyPort: 0,
    authentication: { anonymous: { enabled: true }, webhook: { enabled: false } },
    authorization: { mode: 'AlwaysAllow' },
    syncFrequency: '10s', // ConfigMap edits reach the pods within ~10 s (default 1 min)
    podLogsDir: `${dir}/pod-logs`,
    volumePluginDir: `${dir}/volume-plugins`,
    // A shared test machine: never evict or garbage-collect images for disk or memory use.
    evictionHard: { 'memory.available': '1Mi', 'nodefs.available': '1%', 'nodefs.inodesFree': '1%', 'imagefs.available': '1%' },
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    serializeImagePulls: false,
    ...extra,
  });
}

/** IPv4 addresses on the host's links. */
async function hostAddresses(): Promise<Set<string>> {
  const { stdout } = await execFileP('ip', ['-o', '-4', 'addr', 'show']);
  return new Set([...stdout.matchAll(/ inet (\d+\.\d+\.\d+\.\d+)\//g)].map((m) => m[1] ?? ''));
}

/**
 * Creates the link `nodeLink` (a dummy; a bridge without ports where the kernel has no dummy driver)
 * with a free private /32, up; resolves with the address. Called after the watchdog is armed: the
 * link is new in its snapshot, so the restore deletes it, address included, whatever happens.
 */
async function addNodeAddress(): Promise<string> {
  const used = await hostAddresses();
  let address: string | undefined;
  for (let n = 1; n < 255 && address === undefined; n++) if (!used.has(`${nodeAddressPrefix}${n}`)) address = `${nodeAddressPrefix}${n}`;
  if (address === undefined) throw new Error(`no free address in ${nodeAddressPrefix}0/24 for the node`);
  try {
    await execFileP('ip', ['link', 'add', nodeLink, 'type', 'dummy']);
  } catch {
    await execFileP('ip', ['link', 'add', nodeLink, 'type', 'bridge']);
  }
  await execFileP('ip', ['addr', 'add', `${address}/32`, 'dev', nodeLink]);
  await execFileP('ip', ['link', 'set', nodeLink, 'up']);
  return address;
}

/**
 * Starts the node and resolves when its Node object is Ready. Throws (after restoring the host)
 * when the host cannot run it (see nodeUnsupportedReason) or a component fails.
 */
export async function startNode(cp: NodeControlPlane, opts: NodeOptions): Promise<RealNode> {
  const t0 = performance.now();
  const log = opts.log ?? ((m: string) => console.log(m));
  const timeoutMs = opts.readyTimeoutMs ?? 180_000;
  const reason = nodeUnsupportedReason();
  if (reason !== undefined) throw new Error(reason);
  if (running !== undefined) throw new Error(`a real node (${running}) is already running in this process; one node per host`);
  running = opts.name;
  let pause: { name: string; archive: string };
  let dir: string;
  try {
    await sweepStaleNodes(log);
    pause = await ensurePauseImage();
    dir = await mkdtemp(join(tmpdir(), dirPrefix));
  } catch (err) {
    running = undefined;
    throw err;
  }
  const { core } = clientsFor(cp.adminKubeconfig);
  const socket = join(dir, 'containerd.sock');
  const logs = { kubelet: join(dir, 'kubelet.log'), containerd: join(dir, 'containerd.log'), watchdog: join(dir, 'watchdog.log') };
  // The watchdog first: from here on, whatever happens to this process, the host gets restored.
  const cfg: WatchdogConfig = {
    parentPid: process.pid,
    dir,
    containerdSocket: socket,
    bridge: cniBridge,
    nodeLink,
    mountRoots: [dir, ...fixedPaths, '/var/lib/kubelet'],
    snapshot: snapshotHost(),
  };
  await writeFile(join(dir, 'watchdog.json'), JSON.stringify(cfg));
  const watchdog = spawnLogged(process.execPath, [watchdogScript, join(dir, 'watchdog.json')], logs.watchdog);
  watchdog.unref();
  const watchdogExit = exitOf(watchdog);
  await waitFor(() => existsSync(armedFile(dir)) || watchdog.exitCode !== null, { what: 'the node watchdog to start', timeoutMs: 30_000 });
  if (!existsSync(armedFile(dir))) {
    running = undefined;
    await rm(dir, { recursive: true, force: true }); // nothing touched the host yet
    throw new Error(`the node watchdog exited with ${String(watchdog.exitCode)}:\n${await tailFile(logs.watchdog)}`);
  }
  const procs: Record<'kubelet' | 'containerd', ChildProcess | undefined> = { kubelet: undefined, containerd: undefined };
  const record = (name: string, c: ChildProcess): void => appendFileSync(pidsFile(dir), `${name} ${String(c.pid)}\n`);
  const ctr = async (args: readonly string[]): Promise<string> =>
    (await execFileP('ctr', ['--address', socket, '-n', 'k8s.io', ...args], { maxBuffer: 16 * 1024 * 1024 })).stdout;

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      await core.deleteNode({ name: opts.name }).catch(() => undefined);
      if (procs.kubelet) {
        procs.kubelet.kill('SIGTERM');
        await exitOf(procs.kubelet);
      }
      if (watchdog.exitCode === null && watchdog.signalCode === null) watchdog.kill('SIGTERM');
      const code = await watchdogExit;
      running = undefined;
      if (code !== 0) throw new Error(`the host was not fully restored after node ${opts.name} (watchdog exit ${String(code)}); ${logs.watchdog}:\n${await tailFile(logs.watchdog, 60)}`);
      log(`node ${opts.name}: stopped, host restored`);
    })();
    return stopping;
  };

  const failIfExited = async (name: 'kubelet' | 'containerd'): Promise<void> => {
    const c = procs[name];
    if (c && (c.exitCode !== null || c.signalCode !== null)) {
      throw new Error(`${name} of node ${opts.name} exited (${String(c.exitCode ?? c.signalCode)}); ${logs[name]}:\n${await tailFile(logs[name])}`);
    }
  };

  let address: string;
  try {
    address = await addNodeAddress();
    log(`node ${opts.name}: address ${address} on link ${nodeLink}`);
    for (const d of ['cni/net.d', 'kubelet', 'pod-logs', 'volume-plugins']) await mkdir(join(dir, d), { recursive: true });
    await writeFile(join(dir, 'containerd.toml'), containerdConfig(dir, socket, pause.name));
    await writeFile(join(dir, 'cni/net.d/10-lsp-e2e.conflist'), cniConfig(dir));
    procs.containerd = spawnLogged('containerd', ['--config', join(dir, 'containerd.toml')], logs.containerd);
    record('containerd', procs.containerd);
    await waitFor(
      async () => {
        await failIfExited('containerd');
        return spawnSync('ctr', ['--address', socket, 'version'], { timeout: 10_000 }).status === 0;
      },
      { what: `containerd of node ${opts.name} to answer on ${socket}`, timeoutMs },
    );
    await ctr(['images', 'import', pause.archive]);

    const [port, healthzPort] = [await freePort(), await freePort()];
    await writeFile(join(dir, 'kubelet.yaml'), kubeletConfig(dir, socket, address, port, healthzPort, opts.kubeletConfig ?? {}));
    procs.kubelet = spawnLogged(
      cp.binary,
      [
        'kubelet',
        `--config=${join(dir, 'kubelet.yaml')}`,
        `--kubeconfig=${cp.adminKubeconfig}`,
        `--root-dir=${join(dir, 'kubelet')}`,
        `--cert-dir=${join(dir, 'kubelet-pki')}`,
        `--hostname-override=${opts.name}`,
        `--node-ip=${address}`,
      ],
      logs.kubelet,
      { ...process.env, TESTPLANE_PARENT_PID: String(process.pid) },
    );
    record('kubelet', procs.kubelet);
    await waitFor(
      async () => {
        await failIfExited('kubelet');
        await failIfExited('containerd');
        const n = await core.readNode({ name: opts.name }).catch(() => undefined);
        return n?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True';
      },
      { what: `node ${opts.name} Ready (kubelet log ${logs.kubelet})`, timeoutMs, intervalMs: 500 },
    );
  } catch (err) {
    await stop().catch((e: unknown) => log((e as Error).message));
    throw err;
  }
  const startToReadyMs = performance.now() - t0;
  log(`node ${opts.name}: Ready in ${(startToReadyMs / 1000).toFixed(1)} s (dir ${dir})`);
  const pid = (c: ChildProcess | undefined): number => c?.pid ?? 0;
  return {
    name: opts.name,
    dir,
    containerdSocket: socket,
    address,
    logs,
    pids: { kubelet: pid(procs.kubelet), containerd: pid(procs.containerd), watchdog: pid(watchdog) },
    importImage: async (archive) => {
      await ctr(['images', 'import', archive]);
    },
    ctr,
    containerMemory: async (containerId) => {
      const id = containerId.replace(/^containerd:\/\//, '');
      const row = (await ctr(['tasks', 'ls'])).split('\n').find((l) => l.startsWith(`${id} `));
      const pid = Number(row?.trim().split(/\s+/)[1]);
      if (!Number.isInteger(pid) || pid <= 0) throw new Error(`no running task for container ${id} on node ${opts.name}`);
      const rel = /^\d+:memory:(.*)$/m.exec(readFileSync(`/proc/${pid}/cgroup`, 'utf8'))?.[1] ?? '';
      const pids = readFileSync(join('/sys/fs/cgroup/memory', rel, 'cgroup.procs'), 'utf8')
        .split('\n')
        .filter((l) => l !== '')
        .map(Number);
      return { pids, rssKiB: pids.reduce((sum, p) => sum + (readRssKiB(p) ?? 0), 0) };
    },
    stats: () => ({
      startToReadyMs: Math.round(startToReadyMs),
      rssKiB: { kubelet: readRssKiB(pid(procs.kubelet)), containerd: readRssKiB(pid(procs.containerd)) },
    }),
    stop,
  };
}
