// Helpers for the hot-reload e2e tests: ConfigMap payloads, PV watching,
// releasing a PV through a real PVC, Events and metrics polling, a node-agent
// runner that executes cleanup Job commands on the host, and a slow block
// cleaner script.
import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import { Watch, type CoreV1Api, type CoreV1Event, type KubeConfig, type StorageV1Api, type V1Container, type V1PersistentVolume, type V1Pod, type V1SecurityContext } from '@kubernetes/client-node';
import { freePort } from '../harness/controlplane.ts';
import { apiStatus, waitFor } from '../harness/kube.ts';
import type { RunResult } from '../harness/node-agent.ts';
import type { HostFixtures } from './host.ts';
import { metricValue, startProvisioner, type ProvisionerProcess } from './provisioner.ts';

const repo = join(import.meta.dirname, '..', '..');

export interface ClassSpec {
  readonly hostDir: string;
  readonly mountDir: string;
  readonly volumeMode?: 'Filesystem' | 'Block';
  readonly fsType?: string;
  readonly namePattern?: string;
  readonly blockCleanerCommand?: readonly string[];
}

export interface ConfigSpec {
  readonly classes: Readonly<Record<string, ClassSpec>>;
  readonly labelsForPV?: Readonly<Record<string, string>>;
  readonly useJobForCleaning?: boolean;
  readonly useNodeNameOnly?: boolean;
}

/** The ConfigMap keys (file name -> content) of a config, in the Go provisioner's format. */
export function configFiles(c: ConfigSpec): Record<string, string> {
  const q = (s: string): string => JSON.stringify(s); // JSON strings are valid YAML scalars
  let scm = '';
  for (const [name, cls] of Object.entries(c.classes)) {
    scm += `${name}:\n  hostDir: ${q(cls.hostDir)}\n  mountDir: ${q(cls.mountDir)}\n`;
    if (cls.volumeMode) scm += `  volumeMode: ${cls.volumeMode}\n`;
    if (cls.fsType !== undefined) scm += `  fsType: ${q(cls.fsType)}\n`;
    if (cls.namePattern !== undefined) scm += `  namePattern: ${q(cls.namePattern)}\n`;
    if (cls.blockCleanerCommand) scm += `  blockCleanerCommand:\n${cls.blockCleanerCommand.map((a) => `    - ${q(a)}\n`).join('')}`;
  }
  const files: Record<string, string> = { storageClassMap: scm };
  if (c.labelsForPV) {
    files['labelsForPV'] = Object.entries(c.labelsForPV)
      .map(([k, v]) => `${q(k)}: ${q(v)}\n`)
      .join('');
  }
  if (c.useJobForCleaning !== undefined) files['useJobForCleaning'] = c.useJobForCleaning ? 'true' : 'false';
  files['useNodeNameOnly'] = (c.useNodeNameOnly ?? true) ? 'true' : 'false';
  return files;
}

/**
 * Starts the daemon for a test file: config dir `configDir`, logs in the fixture dir, the
 * restricted provisioner identity, a free port, `args` (periods) and extra `env`.
 */
export async function startTestProvisioner(
  host: HostFixtures,
  configDir: string,
  nodeName: string,
  kubeconfig: string,
  args: string[],
  env?: Record<string, string>,
): Promise<ProvisionerProcess> {
  return startProvisioner({ configDir, nodeName, kubeconfig, port: await freePort(), logFile: host.path('provisioner.log'), args, ...(env ? { env } : {}) });
}

/** Creates a StorageClass for static local volumes (reclaim Delete, WaitForFirstConsumer), with these mountOptions if given. */
export async function createLocalStorageClass(storage: StorageV1Api, name: string, mountOptions?: readonly string[]): Promise<void> {
  await storage.createStorageClass({
    body: {
      metadata: { name },
      provisioner: 'kubernetes.io/no-provisioner',
      volumeBindingMode: 'WaitForFirstConsumer',
      reclaimPolicy: 'Delete',
      ...(mountOptions ? { mountOptions: [...mountOptions] } : {}),
    },
  });
}

/** PVs made by the provisioner of `node` (useNodeNameOnly). */
export async function pvsOfNode(core: CoreV1Api, node: string): Promise<V1PersistentVolume[]> {
  const all = await core.listPersistentVolume();
  return all.items.filter((pv) => pv.metadata?.annotations?.['pv.kubernetes.io/provisioned-by'] === `local-volume-provisioner-${node}`);
}

export async function readPV(core: CoreV1Api, name: string): Promise<V1PersistentVolume | undefined> {
  try {
    return await core.readPersistentVolume({ name });
  } catch (err) {
    if (apiStatus(err) === 404) return undefined;
    throw err;
  }
}

/** Waits for a PV of that name to exist (optionally: with another UID than `notUid`). */
export function waitPV(core: CoreV1Api, name: string, opts: { notUid?: string; timeoutMs?: number } = {}): Promise<V1PersistentVolume> {
  return waitFor(
    async () => {
      const pv = await readPV(core, name);
      return pv && pv.metadata?.uid !== opts.notUid ? pv : undefined;
    },
    { what: `PV ${name}${opts.notUid ? ` (not uid ${opts.notUid})` : ''}`, timeoutMs: opts.timeoutMs ?? 60_000 },
  );
}

/** Waits until the PV with this UID no longer exists (deleted, or replaced by a new PV of the same name). */
export function waitPVGone(core: CoreV1Api, name: string, uid: string, timeoutMs = 60_000): Promise<true> {
  return waitFor(
    async () => {
      const pv = await readPV(core, name);
      return pv === undefined || pv.metadata?.uid !== uid;
    },
    { what: `PV ${name} (uid ${uid}) to be deleted`, timeoutMs },
  );
}

/**
 * Binds a PVC to the PV (pre-bound by spec.volumeName, as a scheduler would), then deletes the
 * PVC so the PV controller marks the PV Released. Resolves with the Released PV.
 */
export async function releasePV(core: CoreV1Api, pv: V1PersistentVolume, namespace = 'default'): Promise<V1PersistentVolume> {
  const pvName = pv.metadata?.name ?? '';
  const claim = await bindPV(core, pv, namespace);
  await core.deleteNamespacedPersistentVolumeClaim({ namespace, name: claim });
  return waitFor(
    async () => {
      const v = await readPV(core, pvName);
      // Released, or already gone: a fast provisioner may clean and delete it between two polls.
      if (v === undefined || v.metadata?.uid !== pv.metadata?.uid) return { ...pv, status: { phase: 'Released' } };
      return v.status?.phase === 'Released' ? v : undefined;
    },
    { what: `PV ${pvName} to be Released` },
  );
}

/** Binds a PVC to the PV and waits until it is Bound; returns the claim name. */
export async function bindPV(core: CoreV1Api, pv: V1PersistentVolume, namespace = 'default'): Promise<string> {
  const pvName = pv.metadata?.name ?? '';
  const claim = `c-${pvName}`.slice(0, 50) + `-${Math.random().toString(36).slice(2, 7)}`;
  await core.createNamespacedPersistentVolumeClaim({
    namespace,
    body: {
      metadata: { name: claim },
      spec: {
        storageClassName: pv.spec?.storageClassName ?? '',
        volumeName: pvName,
        volumeMode: pv.spec?.volumeMode ?? 'Filesystem',
        accessModes: ['ReadWriteOnce'],
        resources: { requests: { storage: '1Mi' } },
      },
    },
  });
  await waitFor(async () => (await core.readPersistentVolume({ name: pvName })).status?.phase === 'Bound', {
    what: `PV ${pvName} to be Bound to ${namespace}/${claim}`,
  });
  return claim;
}

export interface PVWatchEvent {
  readonly type: string;
  readonly name: string;
  readonly uid: string;
  readonly phase: string | undefined;
  readonly at: number;
}

/** Records every watch event of the PVs of one node's provisioner. */
export class PVWatch {
  readonly events: PVWatchEvent[] = [];
  #abort: AbortController | undefined;
  #error: unknown;

  static async start(kc: KubeConfig, core: CoreV1Api, node: string): Promise<PVWatch> {
    const w = new PVWatch();
    const list = await core.listPersistentVolume();
    const owner = `local-volume-provisioner-${node}`;
    w.#abort = await new Watch(kc).watch(
      '/api/v1/persistentvolumes',
      { resourceVersion: list.metadata?.resourceVersion ?? '', allowWatchBookmarks: false },
      (type: string, obj: V1PersistentVolume) => {
        if (obj.metadata?.annotations?.['pv.kubernetes.io/provisioned-by'] !== owner) return;
        w.events.push({ type, name: obj.metadata.name ?? '', uid: obj.metadata.uid ?? '', phase: obj.status?.phase, at: Date.now() });
      },
      (err: unknown) => {
        if (err && !(err instanceof Error && err.name === 'AbortError')) w.#error = err;
      },
    );
    return w;
  }

  /** The error that ended the watch early, if any. */
  get error(): unknown {
    return this.#error;
  }

  count(type: string, pred: (e: PVWatchEvent) => boolean = () => true): number {
    return this.events.filter((e) => e.type === type && pred(e)).length;
  }

  stop(): void {
    this.#abort?.abort();
  }
}

/** Events about one object (core/v1, in `namespace`). */
export async function eventsAbout(core: CoreV1Api, namespace: string, kind: string, name: string): Promise<CoreV1Event[]> {
  const evs = await core.listNamespacedEvent({ namespace });
  return evs.items.filter((e) => e.involvedObject.kind === kind && e.involvedObject.name === name);
}

/** The Events with `reason` about one object (as eventsAbout), each as "<type>:<message>". */
export function eventTexts(core: CoreV1Api, namespace: string, kind: string, name: string, reason: string): Promise<string[]> {
  return eventsAbout(core, namespace, kind, name).then((es) => es.filter((e) => e.reason === reason).map((e) => `${e.type}:${e.message ?? ''}`));
}

/** The current value of a metric (sum over the samples matching `labels`). */
export async function metric(prov: ProvisionerProcess, name: string, labels: Record<string, string> = {}): Promise<number> {
  return metricValue(await prov.metrics(), name, labels);
}

/** Waits until a metric satisfies `pred`; returns its value. */
export function waitMetric(
  prov: ProvisionerProcess,
  name: string,
  labels: Record<string, string>,
  pred: (v: number) => boolean,
  opts: { what?: string; timeoutMs?: number; intervalMs?: number } = {},
): Promise<number> {
  return waitFor(
    async () => {
      const v = await metric(prov, name, labels);
      return pred(v) ? { v } : undefined;
    },
    {
      what: opts.what ?? `${name}${JSON.stringify(labels)}`,
      timeoutMs: opts.timeoutMs ?? 30_000,
      intervalMs: opts.intervalMs ?? 100,
    },
  ).then((r) => r.v);
}

export const reloadMetric = 'local_volume_provisioner_config_reload_total';
export const restartsMetric = 'local_volume_provisioner_controller_restarts_total';
export const lastReloadOkMetric = 'local_volume_provisioner_config_last_reload_successful';

/** Writes the config and waits until the daemon has applied it (config_reload_total{result="applied"} + 1). */
export async function applyConfig(
  prov: ProvisionerProcess,
  write: () => Promise<void>,
  opts: { sighup?: boolean; timeoutMs?: number } = {},
): Promise<number> {
  const before = await metric(prov, reloadMetric, { result: 'applied' });
  await write();
  if (opts.sighup) prov.child.kill('SIGHUP');
  return waitMetric(prov, reloadMetric, { result: 'applied' }, (v) => v >= before + 1, {
    what: 'the new configuration to be applied',
    timeoutMs: opts.timeoutMs ?? 15_000,
    intervalMs: opts.sighup ? 20 : 100,
  });
}

/** The daemon is still the process it was started as (`pid`), not exited. */
export function expectStillRunning(prov: ProvisionerProcess, pid: number): void {
  expect(prov.child.pid).toBe(pid);
  expect(prov.child.exitCode).toBeNull();
}

/** Log lines of the daemon with this msg (exact) or containing this text. */
export function logsWith(prov: ProvisionerProcess, text: string): Array<Record<string, unknown>> {
  return prov.logLines().filter((l) => typeof l['msg'] === 'string' && (l['msg']).includes(text));
}

/** Direct child processes of `pid` (pgrep -P). */
export function childPids(pid: number): number[] {
  try {
    return execFileSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map(Number);
  } catch {
    return []; // pgrep exits 1 when there is none
  }
}

/**
 * A slow block cleaner: appends "start <dev>" to `runLog`, sleeps `sleepSeconds`, zeroes the
 * first `sizeMiB` MiB of $LOCAL_PV_BLKDEVICE with dd, appends "done <dev>". Returns its path.
 */
export function writeSlowBlockCleaner(path: string, runLog: string, sizeMiB: number, sleepSeconds = 3): string {
  writeFileSync(
    path,
    [
      '#!/bin/sh',
      'set -eu',
      'dev="${LOCAL_PV_BLKDEVICE:?LOCAL_PV_BLKDEVICE not set}"',
      `echo "start $dev $$" >> ${JSON.stringify(runLog)}`,
      `sleep ${sleepSeconds}`,
      `dd if=/dev/zero of="$dev" bs=1M count=${sizeMiB} conv=fsync status=none`,
      `echo "done $dev $$" >> ${JSON.stringify(runLog)}`,
      '',
    ].join('\n'),
  );
  chmodSync(path, 0o755);
  return path;
}

/** Lines of a cleaner run log ([] when it does not exist yet). */
export function runLogLines(runLog: string): string[] {
  try {
    return readFileSync(runLog, 'utf8').split('\n').filter((l) => l !== '');
  } catch {
    return [];
  }
}

/** True when the first `bytes` bytes of the device (or file) are all zero. */
export function allZero(device: string, bytes: number): boolean {
  const buf = readFileSync(device).subarray(0, bytes);
  return buf.length === bytes && buf.every((b) => b === 0);
}

/** Fills the first `sizeMiB` MiB of a device with a non-zero pattern. */
export function fillDevice(device: string, sizeMiB: number): void {
  const chunk = Buffer.alloc(1024 * 1024, 0xa5);
  const buf = Buffer.concat(Array.from({ length: sizeMiB }, () => chunk));
  writeFileSync(device, buf);
}

/**
 * A node-agent `run` callback that executes the Job pod's container command on the host, with
 * the container's env (plus PATH). /scripts/<x> maps to deployment/scripts/<x> of this repo
 * (the image's cleaner scripts). Records each run in `runs`.
 */
export function hostJobRunner(runs: Array<{ pod: string; command: string[]; exitCode: number }>): (pod: V1Pod) => Promise<RunResult> {
  return (pod) =>
    new Promise<RunResult>((resolve) => {
      const c = pod.spec?.containers[0];
      const command = (c?.command ?? []).map((a) => (a.startsWith('/scripts/') ? join(repo, 'deployment', 'scripts', a.slice('/scripts/'.length)) : a));
      const confine = [...mountView(c?.volumeMounts), ...confinement(c?.securityContext)];
      const env: Record<string, string> = { PATH: process.env['PATH'] ?? '/usr/bin:/bin' };
      for (const e of c?.env ?? []) if (e.value !== undefined) env[e.name] = e.value;
      const [file, ...args] = [...confine, ...command];
      if (file === undefined) {
        resolve({ exitCode: 1, message: 'no command' });
        return;
      }
      execFile(file, args, { env, timeout: 60_000 }, (err, _stdout, stderr) => {
        const exitCode = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        runs.push({ pod: pod.metadata?.name ?? '', command, exitCode });
        resolve(exitCode === 0 ? { exitCode } : { exitCode, message: stderr.slice(-200) });
      });
    });
}

/**
 * The container's view of the host's mounts: with `HostToContainer` it follows them (the host's own
 * namespace here); without propagation it is a private copy taken when the container starts.
 */
function mountView(mounts: V1Container['volumeMounts']): string[] {
  const hostDir = mounts?.[0];
  return hostDir && (hostDir.mountPropagation ?? 'None') === 'None' ? ['unshare', '--mount', '--propagation', 'private', '--'] : [];
}

/**
 * The container's privileges on the host, as a container runtime would apply them: nothing for a
 * privileged container; otherwise `setpriv` limits the process tree to the capabilities the
 * securityContext adds (after drop ALL), with no_new_privs when allowPrivilegeEscalation is false.
 */
function confinement(sc: V1SecurityContext | undefined): string[] {
  if (sc?.privileged === true) return [];
  if (!sc?.capabilities?.drop?.includes('ALL')) throw new Error('hostJobRunner: an unprivileged container must drop ALL capabilities');
  const caps = ['-all', ...(sc.capabilities.add ?? []).map((c) => `+${c.toLowerCase()}`)].join(',');
  return ['setpriv', '--bounding-set', caps, '--inh-caps', '-all', ...(sc.allowPrivilegeEscalation === false ? ['--no-new-privs'] : []), '--'];
}

/**
 * With LSP_E2E_KEEP_LOGS=1, copies a daemon log out of the fixture dir (which afterAll removes)
 * to $TMPDIR/lsp-e2e-<name>.log, and says where.
 */
export function keepLog(logFile: string, name: string): void {
  if (!process.env['LSP_E2E_KEEP_LOGS'] || !existsSync(logFile)) return;
  const to = join(tmpdir(), `lsp-e2e-${name}.log`);
  copyFileSync(logFile, to);
  console.log(`[e2e] kept the daemon log at ${to}`);
}
