// Helpers for the deleter e2e tests (e2e/deleter*.test.ts): a kubelet-like
// runner for cleanup Job pods (restartPolicy OnFailure restarts the container
// in place and reports restartCount, as a kubelet does, so the real job
// controller fails the Job after backoffLimit restarts without its 10 s/20 s/40 s
// pod re-creation backoff), process lookups (pgrep, zombies), block-device
// reads/writes and shell-script fixtures; startDaemon, the provisioner start-up
// fixture (config files in the host fixture, a free port, 1 s periods) most e2e files share.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, closeSync, copyFileSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, readSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { PatchStrategy, setHeaderOptions, type CoreV1Api, type CoreV1Event, type StorageV1Api, type V1PersistentVolume, type V1Pod } from '@kubernetes/client-node';
import { inject } from 'vitest';
import { freePort } from '../harness/controlplane.ts';
import { apiStatus, waitFor } from '../harness/kube.ts';
import { createNode, type RunResult } from '../harness/node-agent.ts';
import type { HostFixtures } from './host.ts';
import { readPV, waitPV, waitPVGone } from './hot-reload.ts';
import { startProvisioner, type ProvisionerProcess } from './provisioner.ts';

/** One execution of a pod's container on the host. */
export interface ContainerRun {
  readonly pod: string;
  readonly command: string[];
  readonly exitCode: number;
}

/** Executes the pod's container command on the host once (e.g. hostJobRunner of support/hot-reload.ts). */
export type ExecOnce = (pod: V1Pod) => Promise<RunResult>;

export interface OnFailureOptions {
  readonly core: CoreV1Api;
  /** Runs the container once. */
  readonly exec: ExecOnce;
  /** Pause between a failed run and its restart (a kubelet's CrashLoopBackOff, shortened; default 300 ms). */
  readonly restartDelayMs?: number;
  /** Never restart more often than this (default 10). */
  readonly maxRestarts?: number;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function readPod(core: CoreV1Api, pod: V1Pod): Promise<V1Pod | undefined> {
  try {
    return await core.readNamespacedPod({ name: pod.metadata?.name ?? '', namespace: pod.metadata?.namespace ?? 'default' });
  } catch (err) {
    if (apiStatus(err) === 404) return undefined;
    throw err;
  }
}

/**
 * A node-agent `run` callback with the kubelet's restartPolicy OnFailure semantics: a failed
 * container is restarted in place, and each restart is reported in the pod status (phase Running,
 * restartCount, lastState terminated, state waiting CrashLoopBackOff). The real job controller
 * fails the Job once the restarts reach backoffLimit and deletes the pod; the runner then stops
 * and resolves with the last failure. restartPolicy Never: one run, as the plain agent does.
 */
export function onFailureRunner(o: OnFailureOptions): (pod: V1Pod) => Promise<RunResult> {
  const delay = o.restartDelayMs ?? 300;
  const max = o.maxRestarts ?? 10;
  return async (pod) => {
    const name = pod.metadata?.name ?? '';
    const namespace = pod.metadata?.namespace ?? 'default';
    const container = pod.spec?.containers[0]?.name ?? 'cleaner';
    for (let restarts = 0; ; restarts++) {
      const startedAt = new Date();
      const r = await o.exec(pod);
      if (r.exitCode === 0 || pod.spec?.restartPolicy !== 'OnFailure' || restarts >= max) return r;
      const finishedAt = new Date();
      await o.core.patchNamespacedPodStatus(
        {
          name,
          namespace,
          body: {
            status: {
              phase: 'Running',
              startTime: startedAt.toISOString(),
              containerStatuses: [
                {
                  name: container,
                  image: pod.spec?.containers[0]?.image ?? '',
                  imageID: '',
                  ready: false,
                  started: false,
                  restartCount: restarts + 1,
                  state: { waiting: { reason: 'CrashLoopBackOff' } },
                  lastState: {
                    terminated: {
                      exitCode: r.exitCode,
                      reason: 'Error',
                      startedAt: startedAt.toISOString(),
                      finishedAt: finishedAt.toISOString(),
                      ...(r.message !== undefined ? { message: r.message } : {}),
                    },
                  },
                },
              ],
            },
          },
        },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
      await sleep(delay);
      const cur = await readPod(o.core, pod);
      if (!cur || cur.metadata?.deletionTimestamp) return r; // the job controller gave up on this pod
    }
  };
}

/** Force-deletes (grace 0) the pods of `namespace` bound to `node`: what a kubelet does after killing them. */
export async function reapPods(core: CoreV1Api, namespace: string, node: string): Promise<number> {
  const pods = await core.listNamespacedPod({ namespace, fieldSelector: `spec.nodeName=${node}` });
  let n = 0;
  for (const p of pods.items) {
    try {
      await core.deleteNamespacedPod({ name: p.metadata?.name ?? '', namespace, gracePeriodSeconds: 0 });
      n++;
    } catch (err) {
      if (apiStatus(err) !== 404) throw err;
    }
  }
  return n;
}

export { pgrep } from '../harness/procs.ts';

/** State letter (R, S, Z, ...) and parent PID of a process, or undefined when it is gone. */
export function procState(pid: number): { state: string; ppid: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: rest[0] ?? '?', ppid: Number(rest[1]) };
  } catch {
    return undefined;
  }
}

/** Zombie processes whose parent is `ppid`. */
export function zombieChildren(ppid: number): number[] {
  const out: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    const s = procState(Number(e));
    if (s && s.ppid === ppid && s.state === 'Z') out.push(Number(e));
  }
  return out;
}

/** SIGKILLs each PID's process group (or the PID alone when it leads none); ignores the gone ones. */
export function killGroups(pids: readonly number[]): void {
  for (const pid of pids) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
  }
}

/** Starts a process that holds `device` open with O_EXCL (as mkfs, a VM or a database on the raw device does); resolves once it does. */
export async function holdExclusively(device: string): Promise<ChildProcess> {
  const script = `const fs = require('node:fs'); fs.openSync(${JSON.stringify(device)}, fs.constants.O_RDONLY | fs.constants.O_EXCL); process.stdout.write('held\\n'); setInterval(() => {}, 1 << 30);`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on('data', (b: Buffer) => (b.toString().includes('held') ? resolve() : undefined));
    child.on('exit', (code) => reject(new Error(`the O_EXCL holder exited with ${code}`)));
  });
  return child;
}

/** Writes `data` at `offset` of a block device (or file), synchronously and flushed. */
export function writeAt(device: string, offset: number, data: Buffer): void {
  const fd = openSync(device, 'r+');
  try {
    writeSync(fd, data, 0, data.length, offset);
  } finally {
    closeSync(fd);
  }
  execFileSync('blockdev', ['--flushbufs', device]);
}

/** Reads `length` bytes at `offset` of a device, bypassing the page cache. */
export function readAt(device: string, offset: number, length: number): Buffer {
  execFileSync('blockdev', ['--flushbufs', device]);
  const fd = openSync(device, 'r');
  try {
    const buf = Buffer.alloc(length);
    const n = readSync(fd, buf, 0, length, offset);
    return buf.subarray(0, n);
  } finally {
    closeSync(fd);
  }
}

/** Size of a block device in bytes. */
export const deviceSize = (device: string): number => Number(execFileSync('blockdev', ['--getsize64', device], { encoding: 'utf8' }).trim());

/** Filesystem/RAID/partition-table signatures on a device (wipefs --noheadings), one per line. */
export function signatures(device: string): string[] {
  return execFileSync('wipefs', ['--noheadings', '--no-act', device], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.trim() !== '');
}

/** True when `path` is a mount point (mountpoint -q). */
export function isMountPoint(path: string): boolean {
  try {
    execFileSync('mountpoint', ['-q', path]);
    return true;
  } catch {
    return false;
  }
}

/** Writes an executable bash script. */
export function writeScript(path: string, lines: readonly string[]): string {
  writeFileSync(path, ['#!/bin/bash', ...lines, ''].join('\n'));
  chmodSync(path, 0o755);
  return path;
}

/**
 * A shell line that blocks a script until the test calls openGate(gate, <the script's pid>): a
 * cleaner that ends only when the test lets it, or when it is killed, however slow the machine is.
 */
export const waitForGate = (gate: string): string => `until [ -e ${JSON.stringify(gate)}."$$" ]; do sleep 0.1; done`;

/** Lets the script with this pid that runs waitForGate(gate) go on. */
export const openGate = (gate: string, pid: number): void => writeFileSync(`${gate}.${pid}`, '');

/** A StorageClass for static local volumes with reclaim Delete and Immediate binding. */
export async function createImmediateClass(storage: StorageV1Api, name: string): Promise<void> {
  await storage.createStorageClass({
    body: { metadata: { name }, provisioner: 'kubernetes.io/no-provisioner', volumeBindingMode: 'Immediate', reclaimPolicy: 'Delete' },
  });
}

/** A local PV made by hand, as an admin would (8Mi, RWO, reclaim Delete, Filesystem), at `path` on `node`; `meta` and `spec` add or override fields. */
export function handMadeLocalPV(o: {
  name: string;
  node: string;
  cls: string;
  path: string;
  meta?: V1PersistentVolume['metadata'];
  spec?: Partial<V1PersistentVolume['spec']>;
}): V1PersistentVolume {
  return {
    metadata: { ...o.meta, name: o.name },
    spec: {
      capacity: { storage: '8Mi' },
      accessModes: ['ReadWriteOnce'],
      persistentVolumeReclaimPolicy: 'Delete',
      storageClassName: o.cls,
      volumeMode: 'Filesystem',
      local: { path: o.path },
      nodeAffinity: { required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [o.node] }] }] } },
      ...o.spec,
    },
  };
}

/** Events about this PV object (matched by UID: a rediscovered PV has the same name). */
export async function pvEvents(core: CoreV1Api, pv: V1PersistentVolume): Promise<CoreV1Event[]> {
  const evs = await core.listNamespacedEvent({ namespace: 'default' });
  return evs.items.filter((e) => e.involvedObject.kind === 'PersistentVolume' && e.involvedObject.uid === pv.metadata?.uid);
}

/** Waits for an Event with this reason (and a message matching `pred`) about this PV object. */
export function waitPVEvent(
  core: CoreV1Api,
  pv: V1PersistentVolume,
  reason: string,
  pred: (msg: string) => boolean = () => true,
  timeoutMs = 30_000,
): Promise<CoreV1Event> {
  return waitFor(async () => (await pvEvents(core, pv)).find((e) => e.reason === reason && pred(e.message ?? '')), {
    what: `a ${reason} event on PV ${pv.metadata?.name ?? ''}`,
    timeoutMs,
  });
}

/**
 * Deletes the claim bound to `pv`, waits until the PV object is gone, then for the new PV that
 * discovery creates for the same volume (same name, another UID) to be Available; returns it.
 */
export async function releaseAndRediscover(core: CoreV1Api, namespace: string, pv: V1PersistentVolume, claim: string, timeoutMs = 60_000): Promise<V1PersistentVolume> {
  const name = pv.metadata?.name ?? '';
  const uid = pv.metadata?.uid ?? '';
  await core.deleteNamespacedPersistentVolumeClaim({ namespace, name: claim });
  await waitPVGone(core, name, uid, timeoutMs);
  const fresh = await waitPV(core, name, { notUid: uid });
  return waitFor(
    async () => {
      const p = await readPV(core, name);
      return p?.status?.phase === 'Available' && p.metadata?.uid === fresh.metadata?.uid ? p : undefined;
    },
    { what: `the rediscovered PV ${name} to be Available` },
  );
}

/** The cluster side of a deleter test: its Node, its namespace and one Immediate StorageClass per name. */
export async function createDeleterCluster(core: CoreV1Api, storage: StorageV1Api, o: { node: string; ns: string; classes: readonly string[] }): Promise<void> {
  await createNode(core, o.node);
  await core.createNamespace({ body: { metadata: { name: o.ns } } });
  for (const c of o.classes) await createImmediateClass(storage, c);
}

/** Writes the config files into host/<dirName> and starts the daemon on it as the provisioner identity (or `kubeconfig`'s). */
export async function startDaemon(
  host: HostFixtures,
  o: {
    nodeName: string;
    files: Record<string, string>;
    args?: readonly string[];
    dirName?: string;
    logName?: string;
    logLevel?: string | null;
    kubeconfig?: string;
    /** MY_NAMESPACE (default kube-system). */
    namespace?: string;
    /** More environment (e.g. JOB_CONTAINER_IMAGE). */
    env?: Record<string, string>;
  },
): Promise<ProvisionerProcess> {
  const cfg = host.mkdir(o.dirName ?? 'config');
  for (const [k, v] of Object.entries(o.files)) writeFileSync(join(cfg, k), v);
  return startProvisioner({
    configDir: cfg,
    nodeName: o.nodeName,
    kubeconfig: o.kubeconfig ?? inject('provisionerKubeconfig'),
    port: await freePort(),
    logFile: host.path(o.logName ?? 'provisioner.log'),
    args: ['--discovery-period=1s', '--config-sync-period=1s', ...(o.args ?? [])],
    ...(o.logLevel === undefined ? {} : { logLevel: o.logLevel }),
    ...(o.namespace === undefined ? {} : { namespace: o.namespace }),
    ...(o.env === undefined ? {} : { env: o.env }),
  });
}

/** With LSP_E2E_KEEP_LOGS=<dir>, copies these files of the fixture root there (prefixed) before cleanup. */
export function keepLogs(host: HostFixtures, prefix: string, names: readonly string[]): void {
  const dir = process.env['LSP_E2E_KEEP_LOGS'];
  if (!dir) return;
  mkdirSync(dir, { recursive: true });
  for (const n of names) if (existsSync(host.path(n))) copyFileSync(host.path(n), join(dir, `${prefix}-${n}`));
}
