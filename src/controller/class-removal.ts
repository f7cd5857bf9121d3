// What a controller generation says about storage classes that left the
// config (issue 18, 13): a Warning `StorageClassRemoved` on the provisioner
// Pod and Node, and a log line, for each removed class that still has PVs of
// this node, naming them (the first MAX_NAMED, then a count) with their phase
// and what happens to each: Available PVs are deleted by the deleter (not
// offered any more), Released ones are cleaned with the class's last settings
// (or kept when those are not known), Bound ones stay until released.
import type { V1PersistentVolume } from '@kubernetes/client-node';
import type { EventRecorder, ObjectRef } from '../kube/events.ts';
import { REASON_STORAGE_CLASS_REMOVED } from '../kube/reasons.ts';
import type { Logger } from '../util/log.ts';

/** PV names an Event lists at most; the rest are counted. */
export const MAX_NAMED_PVS = 8;

export interface RemovalReportOptions {
  readonly recorder: EventRecorder;
  readonly refs: readonly ObjectRef[];
  readonly logger: Logger;
  /** Whether the settings of a class are still known (for cleaning its Released PVs). */
  readonly remembered: (className: string) => boolean;
}

/** The Event message for one removed class and its PVs on this node (non-empty). */
export function removalMessage(className: string, pvs: readonly V1PersistentVolume[], remembered: boolean): string {
  const sorted = [...pvs].sort((a, b) => (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''));
  const named = sorted.slice(0, MAX_NAMED_PVS).map((pv) => `${pv.metadata?.name ?? ''} (${pv.status?.phase ?? 'no phase yet'})`);
  const more = sorted.length > MAX_NAMED_PVS ? ` and ${sorted.length - MAX_NAMED_PVS} more` : '';
  const released = remembered
    ? 'Released PVs are still cleaned with the settings the class last had'
    : 'its settings are not known, so Released PVs are kept, not cleaned';
  return (
    `Storage class ${JSON.stringify(className)} was removed from the configuration but ${sorted.length} PV(s) of this node name it: ${named.join(', ')}${more}. ` +
    `Available PVs are deleted so that no claim binds them (their volumes are left untouched and offered again if the class comes back); ${released}; Bound PVs stay until released.`
  );
}

/** Reports each removed class; `pvs` are this node's PVs of this provisioner. */
export function reportRemovedClasses(removed: readonly string[], pvs: readonly V1PersistentVolume[], o: RemovalReportOptions): void {
  for (const className of removed) {
    const mine = pvs.filter((pv) => pv.spec?.storageClassName === className && !pv.metadata?.deletionTimestamp);
    if (mine.length === 0) {
      o.logger.info({ class: className }, `storage class ${JSON.stringify(className)} was removed from the configuration; no PV of this node names it`);
      continue;
    }
    const remembered = o.remembered(className);
    const msg = removalMessage(className, mine, remembered);
    const phases: Record<string, number> = {};
    for (const pv of mine) phases[pv.status?.phase ?? 'none'] = (phases[pv.status?.phase ?? 'none'] ?? 0) + 1;
    o.logger.warn({ class: className, pvs: mine.length, phases, settingsKnown: remembered, reason: REASON_STORAGE_CLASS_REMOVED }, msg);
    for (const ref of o.refs) {
      try {
        o.recorder.event(ref, 'Warning', REASON_STORAGE_CLASS_REMOVED, msg);
      } catch (e) {
        o.logger.warn({ err: e, reason: REASON_STORAGE_CLASS_REMOVED }, 'recording an event failed');
      }
    }
  }
}
