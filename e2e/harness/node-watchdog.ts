// The real node's watchdog (started detached by node.ts before anything touches the host):
//   node <this file> <node dir>/watchdog.json
// It waits until the process that started the node is gone (even a SIGKILL) or it gets SIGTERM
// (node.stop()), then tears the node down: kubelet, the pods' processes (through the node's
// cgroups), the containerd shims and containerd, then restoreHost() from the snapshot taken
// before the start. It checks the result with diffHost(): exit 0 and the node dir removed when the
// host is as before; exit 1 with the differences in <node dir>/watchdog.log (dir kept) otherwise.
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { diffHost, killNewCgroupProcesses, restoreHost, snapshotHost, type HostSnapshot } from './host-state.ts';
import { isRunning } from './procs.ts';

/** What node.ts hands the watchdog (written before the watchdog starts). */
export interface WatchdogConfig {
  readonly parentPid: number;
  /** The node's temp dir: configs, containerd root/state/socket, kubelet root, logs. */
  readonly dir: string;
  readonly containerdSocket: string;
  /** Name of the CNI bridge (deleted when new). */
  readonly bridge: string;
  /** Name of the link holding the node's address (deleted when new; absent in configs of older harnesses). */
  readonly nodeLink?: string;
  /** Dirs whose new mounts are the node's (its dir, the kubelet's and containerd's fixed paths). */
  readonly mountRoots: readonly string[];
  readonly snapshot: HostSnapshot;
}

/** File of "name pid" lines, appended by node.ts as it starts processes. */
export const pidsFile = (dir: string): string => join(dir, 'pids');
/** Written by the watchdog once it watches (node.ts waits for it before touching the host). */
export const armedFile = (dir: string): string => join(dir, 'watchdog.armed');

const log = (msg: string): void => console.log(`${new Date().toISOString()} ${msg}`);
const sleep = (ms: number): Promise<void> => new Promise((res) => setTimeout(res, ms));


/** The pid if it still runs a command that mentions `marker` (guards against pid reuse). */
function ours(pid: number, marker: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(marker);
  } catch {
    return false;
  }
}

async function stopPids(pids: readonly number[], graceMs: number): Promise<void> {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGTERM');
    } catch {
      /* gone */
    }
  }
  const deadline = Date.now() + graceMs;
  while (pids.some(isRunning) && Date.now() < deadline) await sleep(100);
  for (const pid of pids.filter(isRunning)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  while (pids.some(isRunning)) await sleep(50);
}

/** Every process (but this one) whose command line contains `marker`. */
function processesMentioning(marker: string): number[] {
  return readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .map(Number)
    .filter((pid) => pid !== process.pid && ours(pid, marker));
}

function startedPids(cfg: WatchdogConfig): Map<string, number> {
  const m = new Map<string, number>();
  let text: string;
  try {
    text = readFileSync(pidsFile(cfg.dir), 'utf8');
  } catch {
    return m;
  }
  for (const line of text.split('\n')) {
    const [name, pid] = line.split(' ');
    if (name && pid && ours(Number(pid), cfg.dir)) m.set(name, Number(pid));
  }
  return m;
}

/** Stops the node's processes and restores the host; returns the differences left ([] = clean). */
export async function teardown(cfg: WatchdogConfig): Promise<string[]> {
  const pids = startedPids(cfg);
  const kubelet = pids.get('kubelet');
  if (kubelet !== undefined) await stopPids([kubelet], 5000); // first: it would restart what we kill
  killNewCgroupProcesses(cfg.snapshot, log);
  await stopPids(processesMentioning(cfg.containerdSocket), 2000); // the shims (they daemonize)
  await stopPids([...pids.values()].filter((p) => p !== kubelet), 5000);
  restoreHost(cfg.snapshot, {
    mountRoots: cfg.mountRoots,
    ownLink: (name) => name === cfg.bridge || name === cfg.nodeLink || name.startsWith('veth'),
    log,
  });
  const roots = cfg.mountRoots;
  // Other test runs may mount things of their own meanwhile: judge only the node's mounts.
  const foreign = (m: string): boolean => !roots.some((r) => m === r || m.startsWith(`${r}/`));
  return diffHost(cfg.snapshot, snapshotHost(), { ignoreMount: foreign });
}

async function main(): Promise<void> {
  const file = process.argv[2];
  if (file === undefined) throw new Error('usage: node-watchdog.ts <watchdog.json>');
  const cfg = JSON.parse(readFileSync(file, 'utf8')) as WatchdogConfig;
  let trigger: (why: string) => void = () => undefined;
  const triggered = new Promise<string>((res) => (trigger = res));
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(sig, () => trigger(sig));
  const poll = setInterval(() => {
    if (!isRunning(cfg.parentPid)) trigger(`process ${cfg.parentPid} is gone`);
  }, 250);
  writeFileSync(armedFile(cfg.dir), `${process.pid}\n`);
  log(`watching process ${cfg.parentPid} for the node in ${cfg.dir}`);
  const why = await triggered;
  clearInterval(poll);
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.removeAllListeners(sig).on(sig, () => undefined); // finish the restore
  log(`tearing the node down (${why})`);
  const left = await teardown(cfg);
  if (left.length === 0) {
    log('host restored');
    rmSync(cfg.dir, { recursive: true, force: true });
    return;
  }
  log(`host NOT fully restored:\n${left.join('\n')}`);
  process.exitCode = 1;
}

if (import.meta.url === `file://${process.argv[1] ?? ''}`) {
  main().catch((err: unknown) => {
    log(`watchdog failed: ${(err as Error).stack ?? String(err)}`);
    process.exitCode = 2;
  });
}
