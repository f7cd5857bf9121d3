// What `npm run demo` prints: how to reach the cluster (first), kubectl-like tables of PVs and of the
// claimed PVC with its Pod, and how the demo stops.
import { join } from 'node:path';
import { kubectlLink } from '../e2e/harness/kubectl.ts';
import type { V1PersistentVolume, V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';

/** Columns padded to their widest cell, like kubectl get. */
export function table(head: string[], rows: string[][]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const fmt = (r: string[]): string => r.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ').trimEnd();
  return [fmt(head), ...rows.map(fmt)].join('\n');
}

/** The PVs as a table: name, capacity, mode, reclaim policy, phase, class, local path. */
export function pvTable(pvs: readonly V1PersistentVolume[]): string {
  return table(
    ['NAME', 'CAPACITY', 'MODE', 'RECLAIM', 'STATUS', 'STORAGECLASS', 'PATH'],
    pvs.map((pv) => [
      pv.metadata?.name ?? '',
      pv.spec?.capacity?.['storage'] ?? '',
      pv.spec?.volumeMode ?? '',
      pv.spec?.persistentVolumeReclaimPolicy ?? '',
      pv.status?.phase ?? '',
      pv.spec?.storageClassName ?? '',
      pv.spec?.local?.path ?? '',
    ]),
  );
}

/** One row: the claim, its phase and volume, and the Pod using it with its node and phase. */
export function claimTable(pvc: V1PersistentVolumeClaim, pv: V1PersistentVolume, pod: V1Pod): string {
  return table(
    ['PVC', 'STATUS', 'VOLUME', 'CAPACITY', 'STORAGECLASS', 'POD', 'NODE', 'POD STATUS'],
    [[pvc.metadata?.name ?? '', pvc.status?.phase ?? '', pv.metadata?.name ?? '', pvc.status?.capacity?.['storage'] ?? '', pvc.spec?.storageClassName ?? '', pod.metadata?.name ?? '', pod.spec?.nodeName ?? '', pod.status?.phase ?? '']],
  );
}

/**
 * How to reach the demo's cluster, printed as soon as the apiserver answers: the kubeconfig, and a
 * kubectl (a link to the control plane's binary, which holds one: e2e/harness/kubectl.ts) in the
 * control plane's dir (removed with it). `more`: lines about what else to look at.
 */
export function clusterAccess(cp: { readonly adminKubeconfig: string; readonly binary: string; readonly dir: string }, more: readonly string[] = []): string {
  const kubectl = kubectlLink(cp.binary, join(cp.dir, 'bin'));
  return [
    'The cluster answers. In another shell:',
    `  export KUBECONFIG=${cp.adminKubeconfig}`,
    '  kubectl get nodes,pv,pvc,pods -A',
    `  (no kubectl? ${kubectl} is one, of the control plane's version: export PATH=${join(cp.dir, 'bin')}:$PATH)`,
    ...more,
    '',
  ].join('\n');
}

/** The last lines: how to stop. Ctrl-C, or SIGINT/SIGTERM/SIGHUP to `npm` or to the node process under it. */
export const stopHint = 'Ctrl-C to stop and clean up (or SIGINT/SIGTERM to the npm process or to the node process under it).';

/**
 * Calls `stop` on SIGINT, SIGTERM or SIGHUP, and when the parent process is gone (`npm run demo` is
 * npm → node: the script execs node, so npm forwards SIGINT/SIGTERM to it; a SIGKILLed npm leaves this
 * process orphaned, which the ppid poll catches).
 */
export function stopOn(stop: () => unknown): void {
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => void stop());
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) void stop();
  }, 1000).unref();
}
