// What `npm run demo` prints: kubectl-like tables of PVs and of the claimed PVC with its Pod.
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
