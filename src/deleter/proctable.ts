// The process table: in-process cleanups, by PV. Process scope: it is created
// once in main and survives config reloads, so a cleanup started by one
// controller generation is followed to completion by the next one.
//
// Differences from the Go provisioner's ProcTable:
// - Every entry remembers the UID of the PV it cleans. A finished entry is only
//   ever reported for the same UID: a stale "Succeeded" of an old PV can never
//   stand for a new PV with the same name (upstream #174: data leaked because a
//   recreated PV was deleted without being wiped).
// - The succeeded/failed counters count real Running -> Succeeded/Failed
//   transitions only (upstream counted in a defer, even on error).
// - A failed entry keeps the error message so the deleter can report it.
import type { ProcTableStats } from '../metrics/metrics.ts';
import { capText } from '../util/errors.ts';

export type ProcState = 'Running' | 'Succeeded' | 'Failed';

export interface ProcEntry {
  readonly pvName: string;
  /** UID of the PV being cleaned; "" when unknown. */
  readonly uid: string;
  readonly state: ProcState;
  /** When markRunning was called (ms since epoch). */
  readonly startTime: number;
  /** When the cleanup finished (ms since epoch). */
  readonly endTime?: number | undefined;
  /** The cleanup error, for Failed entries. */
  readonly error?: string | undefined;
  /** What the caller noted at markRunning (e.g. volume mode and cleanup command, for metrics). */
  readonly info?: CleanupInfo | undefined;
}

export interface CleanupInfo {
  readonly mode?: string | undefined;
  readonly command?: string | undefined;
}

export interface RemoveResult {
  readonly state: 'NotFound' | 'Succeeded' | 'Failed';
  readonly startTime?: number | undefined;
  readonly error?: string | undefined;
  readonly info?: CleanupInfo | undefined;
  /** True when a finished entry of another UID (an older PV with the same name) was dropped. */
  readonly droppedStale?: boolean | undefined;
}

export class ProcTable {
  readonly #entries = new Map<string, ProcEntry>();
  readonly #now: () => number;
  #succeeded = 0;
  #failed = 0;

  constructor(opts: { now?: () => number } = {}) {
    this.#now = opts.now ?? Date.now;
  }

  /**
   * Records the start of a cleanup. Throws when the PV already has an entry,
   * except a finished entry of another UID (stale: its PV is gone), which is replaced.
   */
  markRunning(pvName: string, uid = '', info?: CleanupInfo): void {
    const cur = this.#entries.get(pvName);
    if (cur && (cur.state === 'Running' || cur.uid === uid)) {
      throw new Error(`cannot mark cleanup of PV ${JSON.stringify(pvName)} running: it is already ${cur.state.toLowerCase()}`);
    }
    this.#entries.set(pvName, { pvName, uid, state: 'Running', startTime: this.#now(), info });
  }

  markSucceeded(pvName: string, uid = ''): void {
    this.#finish(pvName, uid, 'Succeeded', undefined);
    this.#succeeded++;
  }

  /** The error is stored capped (MAX_TEXT_BYTES): it is logged and recorded later. */
  markFailed(pvName: string, uid = '', error?: string): void {
    this.#finish(pvName, uid, 'Failed', error === undefined ? undefined : capText(error));
    this.#failed++;
  }

  #finish(pvName: string, uid: string, state: 'Succeeded' | 'Failed', error: string | undefined): void {
    const cur = this.#entries.get(pvName);
    if (!cur) throw new Error(`cannot mark cleanup of PV ${JSON.stringify(pvName)} ${state.toLowerCase()}: not in the process table`);
    if (cur.uid !== uid) {
      throw new Error(`cannot mark cleanup of PV ${JSON.stringify(pvName)} ${state.toLowerCase()}: the entry is for UID ${JSON.stringify(cur.uid)}, not ${JSON.stringify(uid)}`);
    }
    if (cur.state !== 'Running') {
      throw new Error(`cannot mark cleanup of PV ${JSON.stringify(pvName)} ${state.toLowerCase()}: it is already ${cur.state.toLowerCase()}`);
    }
    this.#entries.set(pvName, { ...cur, state, endTime: this.#now(), error });
  }

  /** True while a cleanup of this PV name runs, whatever the UID (one path is never cleaned twice at once). */
  isRunning(pvName: string): boolean {
    return this.#entries.get(pvName)?.state === 'Running';
  }

  /** The entry, if any, without consuming it. */
  get(pvName: string): ProcEntry | undefined {
    return this.#entries.get(pvName);
  }

  /**
   * Consumes a finished entry exactly once. With `uid`, an entry of another UID is
   * stale: it is dropped and NotFound is returned. Throws while the cleanup runs.
   */
  removeEntry(pvName: string, uid?: string): RemoveResult {
    const cur = this.#entries.get(pvName);
    if (!cur) return { state: 'NotFound' };
    if (cur.state === 'Running') {
      throw new Error(`cannot remove the process table entry of PV ${JSON.stringify(pvName)}: its cleanup is still running`);
    }
    this.#entries.delete(pvName);
    if (uid !== undefined && cur.uid !== uid) return { state: 'NotFound', droppedStale: true };
    return { state: cur.state, startTime: cur.startTime, error: cur.error, info: cur.info };
  }

  isEmpty(): boolean {
    return this.#entries.size === 0;
  }

  /** Running entries now; succeeded/failed are cumulative transition counts (for metrics.registerProcTable). */
  stats(): ProcTableStats {
    let running = 0;
    for (const e of this.#entries.values()) if (e.state === 'Running') running++;
    return { running, succeeded: this.#succeeded, failed: this.#failed };
  }
}
