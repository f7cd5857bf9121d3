// Pure decisions of the node-cleanup controller about one PV or PVC: which nodes a
// local PV is pinned to, whether it is in scope, whether a PVC is the one bound to
// it, and whether the PV itself may be deleted.
import type { V1Node, V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { LABEL_HOSTNAME } from '../volume/pv-spec.ts';

/** A local PV (spec.local) of one of these StorageClasses. */
export function isLocalPVOfClasses(pv: V1PersistentVolume, classes: ReadonlySet<string>): boolean {
  return pv.spec?.local !== undefined && classes.has(pv.spec.storageClassName ?? '');
}

/**
 * The kubernetes.io/hostname values a PV's required node affinity pins it to: per
 * term, the intersection of its `hostname In` expressions; over the terms (ORed),
 * the union. Undefined, meaning "never act on this PV", when there is no required
 * affinity, when any term has no `hostname In` expression (that term admits nodes
 * by other labels, so the PV does not belong to named nodes only: the Go
 * controller's hazard treats it as "on a deleted node"), or when no name is left.
 */
export function pinnedHostnames(pv: V1PersistentVolume): string[] | undefined {
  const terms = pv.spec?.nodeAffinity?.required?.nodeSelectorTerms;
  if (!terms || terms.length === 0) return undefined;
  const all = new Set<string>();
  for (const term of terms) {
    let names: Set<string> | undefined;
    for (const e of term.matchExpressions ?? []) {
      if (e.key !== LABEL_HOSTNAME || e.operator !== 'In') continue;
      const values = new Set((e.values ?? []).filter((v) => v !== ''));
      names = names ? new Set([...names].filter((n) => values.has(n))) : values;
    }
    if (names === undefined) return undefined;
    for (const n of names) all.add(n);
  }
  return all.size > 0 ? [...all].sort() : undefined;
}

/** The hostname values a Node answers to: its name and its kubernetes.io/hostname label. */
export function nodeHostnames(node: V1Node): string[] {
  const out = new Set<string>();
  if (node.metadata?.name) out.add(node.metadata.name);
  const label = node.metadata?.labels?.[LABEL_HOSTNAME];
  if (label) out.add(label);
  return [...out];
}

/** True when this PVC is the very claim the PV is bound to: same UID as the claimRef, volumeName = the PV. */
export function isClaimOf(pvc: V1PersistentVolumeClaim, pv: V1PersistentVolume): boolean {
  const ref = pv.spec?.claimRef;
  return (
    ref?.uid !== undefined &&
    ref.uid !== '' &&
    pvc.metadata?.uid === ref.uid &&
    pvc.metadata.namespace === ref.namespace &&
    pvc.metadata.name === ref.name &&
    pvc.spec?.volumeName === pv.metadata?.name
  );
}

/**
 * The Go controller's rule for deleting a PV of a gone node: Available (whatever the
 * reclaim policy), or Released with reclaim policy Delete. A Bound PV waits for its
 * claim to go; Released with Retain, Failed and Pending PVs are left alone.
 */
export function pvDeletable(pv: V1PersistentVolume): boolean {
  const phase = pv.status?.phase;
  return phase === 'Available' || (phase === 'Released' && pv.spec?.persistentVolumeReclaimPolicy === 'Delete');
}
