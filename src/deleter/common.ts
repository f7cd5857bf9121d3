// Helpers shared by the deleter and the job controller: the
// PV-capacity parser for the delete-duration metric, the delete metrics.
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { capacityBreakDown, type Metrics } from '../metrics/metrics.ts';

export type CleanupType = 'process' | 'job';
/** Mode label of the delete metrics: the detected mode, or "unknown" when it could not be detected. */
export type ModeLabel = 'Block' | 'Filesystem' | 'unknown';

const SUFFIX: Record<string, number> = {
  '': 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
  m: 1e-3,
};

/** Bytes of a Kubernetes quantity ("100Gi", "1.5T", "1e9"); undefined when it does not parse. */
export function quantityBytes(q: string | undefined): number | undefined {
  if (q === undefined) return undefined;
  const m = /^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?)$/.exec(q.trim());
  if (!m) return undefined;
  const n = Number(`${m[1] ?? ''}${m[2] ?? ''}`);
  const mult = SUFFIX[m[3] ?? ''] ?? 1;
  return Number.isFinite(n) ? n * mult : undefined;
}

export const pvCapacityBytes = (pv: V1PersistentVolume): number => quantityBytes(pv.spec?.capacity?.['storage']) ?? 0;

/** Counts a PV deleted after a successful cleanup and observes the cleanup-to-delete latency. */
export function recordDeleted(
  metrics: Metrics,
  p: { mode: ModeLabel; type: CleanupType; pv: V1PersistentVolume; command: string; startTime?: number | undefined; now: number },
): void {
  metrics.deleteTotal.inc({ mode: p.mode, type: p.type });
  if (p.startTime !== undefined) {
    metrics.deleteDuration.observe(
      { mode: p.mode, type: p.type, capacity: capacityBreakDown(pvCapacityBytes(p.pv)), cleanup_command: p.command },
      Math.max(0, (p.now - p.startTime) / 1000),
    );
  }
}
