// Footprint on a real node (issue 20, point 3): the image built from the Dockerfile run as the shipped
// DaemonSet (kustomize base + the e2e overlay of e2e/support/real-node.ts) on a real kubelet + containerd,
// N tmpfs volumes under /mnt/disks/fast-disks. What users see: the container's working set as the kubelet
// (cAdvisor) computes it for `kubectl top` and for eviction, usage minus inactive file pages of the
// container's memory cgroup (cgroup v2: memory.current - memory.stat inactive_file; v1:
// memory.usage_in_bytes - memory.stat total_inactive_file), right after the Nth PV and after an idle
// period; with the container's CPU (cgroup cpu usage) and its processes' VmRSS.
//
//   node bench/footprint-real-node.ts [--volumes 500] [--idle-s 60]
// (bench/footprint.ts --footprint-real-node adds the row to its table.) Needs what e2e/real-node.test.ts
// needs (root, containerd, buildah, ...; no /mnt/disks and no other kubelet on the host).
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startControlPlane, type ControlPlane } from '../e2e/harness/controlplane.ts';
import { ensureProvisionerImage } from '../e2e/harness/image.ts';
import { clientsFor, waitFor } from '../e2e/harness/kube.ts';
import { ensureKustomizeBinary } from '../e2e/harness/kustomize.ts';
import { startNode, type RealNode } from '../e2e/harness/node.ts';
import { applyBaseOverlay, baseDaemonSet, DiscoveryRoot, realNodeUnsupportedReason } from '../e2e/support/real-node.ts';
import type { WorkingSetRow } from './footprint.ts';
import { log, repoRoot, sleep } from './lib.ts';

/** A memory cgroup's usage, its inactive file pages and the working set, bytes. */
export interface CgroupMemory {
  readonly version: 'v1' | 'v2';
  readonly usageBytes: number;
  readonly inactiveFileBytes: number;
  readonly workingSetBytes: number;
  /** Anonymous memory of the cgroup (v2 anon, v1 total_rss). */
  readonly anonBytes: number;
  /** File pages (v2 file, v1 total_cache). */
  readonly fileBytes: number;
}

/** `key value` lines of a memory.stat file. */
export function parseMemoryStat(text: string): Map<string, number> {
  const m = new Map<string, number>();
  for (const line of text.split('\n')) {
    const [k, v] = line.split(' ');
    if (k !== undefined && k !== '' && v !== undefined) m.set(k, Number(v));
  }
  return m;
}

/**
 * The working set as cAdvisor computes it: usage - inactive file pages, never below 0
 * (v2: memory.current and inactive_file; v1: memory.usage_in_bytes and total_inactive_file).
 */
export function workingSet(version: 'v1' | 'v2', usage: number, stat: ReadonlyMap<string, number>): CgroupMemory {
  const inactive = (version === 'v2' ? stat.get('inactive_file') : stat.get('total_inactive_file')) ?? 0;
  return {
    version,
    usageBytes: usage,
    inactiveFileBytes: inactive,
    workingSetBytes: Math.max(0, usage - inactive),
    anonBytes: (version === 'v2' ? stat.get('anon') : stat.get('total_rss')) ?? NaN,
    fileBytes: (version === 'v2' ? stat.get('file') : stat.get('total_cache')) ?? NaN,
  };
}

/** The cgroup directories of a process: memory and CPU accounting (v1 controllers or the v2 unified dir). */
export function cgroupDirs(pid: number): { version: 'v1' | 'v2'; memory: string; cpu: string } {
  const lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n');
  const v1 = (ctrl: string): string | undefined => {
    const l = lines.find((x) => x.split(':')[1]?.split(',').includes(ctrl));
    return l === undefined ? undefined : l.slice(l.indexOf(':', l.indexOf(':') + 1) + 1);
  };
  const mem = v1('memory');
  if (mem !== undefined) return { version: 'v1', memory: join('/sys/fs/cgroup/memory', mem), cpu: join('/sys/fs/cgroup/cpuacct', v1('cpuacct') ?? '') };
  const unified = lines.find((x) => x.startsWith('0::'))?.slice(3) ?? '/';
  return { version: 'v2', memory: join('/sys/fs/cgroup', unified), cpu: join('/sys/fs/cgroup', unified) };
}

function readCgroupMemory(c: ReturnType<typeof cgroupDirs>): CgroupMemory {
  const usage = Number(readFileSync(join(c.memory, c.version === 'v2' ? 'memory.current' : 'memory.usage_in_bytes'), 'utf8').trim());
  return workingSet(c.version, usage, parseMemoryStat(readFileSync(join(c.memory, 'memory.stat'), 'utf8')));
}

/** CPU seconds the cgroup used (v1 cpuacct.usage, v2 cpu.stat usage_usec). */
function readCgroupCpuS(c: ReturnType<typeof cgroupDirs>): number {
  if (c.version === 'v1') return Number(readFileSync(join(c.cpu, 'cpuacct.usage'), 'utf8').trim()) / 1e9;
  return (parseMemoryStat(readFileSync(join(c.cpu, 'cpu.stat'), 'utf8')).get('usage_usec') ?? NaN) / 1e6;
}

const vmRssKiB = (pids: readonly number[]): number =>
  pids.reduce((sum, p) => {
    try {
      return sum + Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${p}/status`, 'utf8'))?.[1] ?? 0);
    } catch {
      return sum;
    }
  }, 0);

export interface RealNodeFootprint extends WorkingSetRow {
  readonly image: string;
  readonly firstPvAfterRunningMs: number;
  readonly lastPvAfterRunningMs: number;
  readonly createsCpuS: number;
  readonly idleCpuSPerMin: number;
  readonly afterCreates: CgroupMemory;
  readonly afterIdle: CgroupMemory;
}

const MiB = 1024 * 1024;

/** Runs the measurement on a node of its own and tears everything down (also on a failure). */
export async function realNodeWorkingSet(o: { volumes: number; idleS: number; repoDir?: string }): Promise<RealNodeFootprint> {
  const reason = realNodeUnsupportedReason();
  if (reason !== undefined) throw new Error(`footprint on a real node: ${reason}`);
  const cls = 'fast-disks';
  const image = await ensureProvisionerImage({ log: (m) => log(m), tty: false, ...(o.repoDir !== undefined ? { repoDir: o.repoDir } : {}) });
  const kustomize = await ensureKustomizeBinary();
  let disks: DiscoveryRoot | undefined;
  let cp: ControlPlane | undefined;
  let node: RealNode | undefined;
  let overlay: string | undefined;
  try {
    disks = new DiscoveryRoot();
    log(`real node: mounting ${o.volumes} tmpfs volumes under ${disks.root}/${cls}`);
    for (let i = 0; i < o.volumes; i++) disks.volume(cls, `vol${String(i).padStart(4, '0')}`);
    cp = await startControlPlane({ scheduler: true, allControllers: true, log: (m) => log(m) });
    const api = clientsFor(cp.adminKubeconfig);
    node = await startNode(cp, { name: 'lsp-footprint-node', log: (m) => log(m) });
    await node.importImage(image.archive);
    overlay = await applyBaseOverlay(cp, image, kustomize);
    const pvCount = async (): Promise<number> => (await api.core.listPersistentVolume()).items.filter((pv) => pv.spec?.storageClassName === cls).length;
    const pod = await waitFor(
      async () => (await api.core.listNamespacedPod({ namespace: 'kube-system', labelSelector: `app.kubernetes.io/name=${baseDaemonSet}` })).items.find((p) => p.status?.phase === 'Running' && p.status.containerStatuses?.[0]?.containerID),
      { what: 'the provisioner pod Running', timeoutMs: 300_000, intervalMs: 100 },
    );
    const tRunning = performance.now();
    const id = (pod.status?.containerStatuses?.[0]?.containerID ?? '').replace(/^containerd:\/\//, '');
    const row = (await node.ctr(['tasks', 'ls'])).split('\n').find((l) => l.startsWith(`${id} `));
    const taskPid = Number(row?.trim().split(/\s+/)[1]);
    if (!Number.isInteger(taskPid) || taskPid <= 0) throw new Error(`no running task for container ${id}`);
    const cg = cgroupDirs(taskPid);
    const first = await waitFor(async () => ((await pvCount()) > 0 ? performance.now() : undefined), { what: 'the first PV', timeoutMs: 120_000, intervalMs: 100 });
    const last = await waitFor(async () => ((await pvCount()) >= o.volumes ? performance.now() : undefined), { what: `${o.volumes} PVs`, timeoutMs: 120_000 + o.volumes * 500, intervalMs: 500 });
    const createsCpuS = readCgroupCpuS(cg);
    const afterCreates = readCgroupMemory(cg);
    log(`real node: ${o.volumes} PVs ${((last - tRunning) / 1000).toFixed(1)} s after Running, working set ${(afterCreates.workingSetBytes / MiB).toFixed(1)} MiB; idle ${o.idleS} s`);
    await sleep(5000);
    const c0 = readCgroupCpuS(cg);
    const i0 = performance.now();
    await sleep(o.idleS * 1000);
    const idleCpuSPerMin = ((readCgroupCpuS(cg) - c0) / ((performance.now() - i0) / 1000)) * 60;
    const afterIdle = readCgroupMemory(cg);
    const pids = (await node.containerMemory(id)).pids;
    const rss = vmRssKiB(pids);
    log(`real node: after the idle period working set ${(afterIdle.workingSetBytes / MiB).toFixed(1)} MiB, VmRSS ${(rss / 1024).toFixed(1)} MiB, idle ${idleCpuSPerMin.toFixed(2)} s/min`);
    return {
      volumes: o.volumes,
      cgroup: `cgroup ${cg.version}`,
      afterCreatesMiB: afterCreates.workingSetBytes / MiB,
      afterIdleMiB: afterIdle.workingSetBytes / MiB,
      vmRssAfterIdleMiB: rss / 1024,
      image: image.ref,
      firstPvAfterRunningMs: first - tRunning,
      lastPvAfterRunningMs: last - tRunning,
      createsCpuS,
      idleCpuSPerMin,
      afterCreates,
      afterIdle,
    };
  } finally {
    // Node first (its containers hold copies of the /mnt/disks mounts), then the control plane, the mounts.
    await node?.stop().catch((e: unknown) => log(`real node: node stop failed: ${String(e)}`));
    await cp?.stop().catch((e: unknown) => log(`real node: control plane stop failed: ${String(e)}`));
    try {
      disks?.cleanup();
    } catch (e) {
      log(`real node: ${String(e)}`);
    }
    if (overlay !== undefined) rmSync(overlay, { recursive: true, force: true });
  }
}

/** Markdown of one real-node measurement. */
export function realNodeMarkdown(r: RealNodeFootprint): string {
  const m = (x: number): string => (x / MiB).toFixed(1);
  return [
    `Image \`${r.image}\` as the shipped DaemonSet on a real node, ${r.volumes} tmpfs volumes; ${r.cgroup}.`,
    '',
    '| | after the creates | after the idle period |',
    '|---|---|---|',
    `| working set = usage − inactive_file (MiB), \`kubectl top\` | ${m(r.afterCreates.workingSetBytes)} | ${m(r.afterIdle.workingSetBytes)} |`,
    `| usage (MiB) | ${m(r.afterCreates.usageBytes)} | ${m(r.afterIdle.usageBytes)} |`,
    `| inactive file (MiB) | ${m(r.afterCreates.inactiveFileBytes)} | ${m(r.afterIdle.inactiveFileBytes)} |`,
    `| anonymous / file pages (MiB) | ${m(r.afterCreates.anonBytes)} / ${m(r.afterCreates.fileBytes)} | ${m(r.afterIdle.anonBytes)} / ${m(r.afterIdle.fileBytes)} |`,
    `| VmRSS of the container's processes (MiB) | | ${r.vmRssAfterIdleMiB.toFixed(1)} |`,
    '',
    `Pod Running → first PV ${(r.firstPvAfterRunningMs / 1000).toFixed(2)} s, → ${r.volumes}th PV ${(r.lastPvAfterRunningMs / 1000).toFixed(1)} s; container CPU to the ${r.volumes}th PV ${r.createsCpuS.toFixed(2)} s (start-up included), idle ${r.idleCpuSPerMin.toFixed(2)} s/min.`,
  ].join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { volumes: { type: 'string', default: '500' }, 'idle-s': { type: 'string', default: '60' }, repo: { type: 'string', default: repoRoot } } });
  const r = await realNodeWorkingSet({ volumes: Number(values.volumes), idleS: Number(values['idle-s']), repoDir: values.repo });
  process.stdout.write(`\n## Footprint on a real node (issue 20)\n\n${realNodeMarkdown(r)}\n`);
}
