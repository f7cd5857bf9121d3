// Which raw disk a class's deviceSelector takes (issue 21): a pure decision
// over one DeviceState record, so a property test can check every rule.
//
// Two steps:
// - matchDevice: the selector's filters (stable-name patterns, size range,
//   rotational, model, vendor). A disk that does not match is none of this
//   class's business: no Event, only a line in --dry-run.
// - refusals: the safety rules. A matching disk is linked only when the list is
//   empty. A fact that was not read (signatures or usage not probed) is itself
//   a refusal: the decision never assumes a disk is blank.
import type { DeviceSelector } from '../config/types.ts';
import type { BlockBusy, BlockBusyReason } from '../host/block-usage.ts';
import { globMatch } from '../util/glob.ts';

/** What sysfs says a device is: a whole disk, a partition, a loop device, or another virtual device (dm, md, zram, ram, nbd, ...). */
export type DeviceKind = 'disk' | 'partition' | 'loop' | 'virtual';

/** libblkid's low-level probe (`blkid -p -o export`) of a device. */
export type ProbeResult =
  /** Exit 2, no output: no filesystem, RAID, LVM, crypto or partition-table signature. */
  | { readonly kind: 'blank' }
  /** Exit 0: what it found, as KEY=value lines (TYPE=ext4, PTTYPE=gpt, USAGE=raid, ...). */
  | { readonly kind: 'signatures'; readonly found: readonly string[] }
  /** Exit 8 (ambivalent: more than one signature), another exit code, or not run: why. */
  | { readonly kind: 'failed'; readonly why: string };

export interface DeviceState {
  /** Kernel name (sda, nvme0n1, loop3). */
  readonly name: string;
  /** MAJ:MIN. */
  readonly devno: string;
  readonly kind: DeviceKind;
  /** Stable names (absolute paths under /dev/disk/by-id, /dev/disk/by-path) that resolve to it, sorted. */
  readonly stableNames: readonly string[];
  readonly sizeBytes: number;
  /** /sys/block/<d>/queue/rotational; undefined when absent. */
  readonly rotational: boolean | undefined;
  /** /sys/block/<d>/device/model and .../vendor, trimmed; undefined when absent. */
  readonly model: string | undefined;
  readonly vendor: string | undefined;
  /** /sys/block/<d>/ro, /sys/block/<d>/removable. */
  readonly readOnly: boolean;
  readonly removable: boolean;
  /** Kernel names of its partitions (sysfs subdirectories with a `partition` file). */
  readonly partitions: readonly string[];
  /** Undefined: not probed (yet). */
  readonly probe?: ProbeResult | undefined;
  /** block-usage.ts: mounted, holders, swap, `/` or kubelet root, O_EXCL holder, size 0. Undefined: not checked (yet). */
  readonly busy?: readonly BlockBusy[] | undefined;
}

export type RefusalReason =
  | 'partition'
  | 'virtual'
  | 'read-only'
  | 'removable'
  | 'partition-table'
  | 'signature'
  | 'probe-failed'
  | 'not-probed'
  | 'usage-unknown'
  | BlockBusyReason;

export interface Refusal {
  readonly reason: RefusalReason;
  readonly detail: string;
}

export type Match = { readonly matches: false; readonly why: string } | { readonly matches: true; readonly target: string };

/** The /dev name of a loop device (allowLoop only: loop devices have no stable name). */
export const loopName = (s: DeviceState): string => `/dev/${s.name}`;

const anyMatch = (patterns: readonly string[], value: string): boolean => patterns.some((p) => globMatch(p, value));

/**
 * The selector's filters. `target` is the name the link will point to: the first stable name (sorted) that
 * matches `paths`; for a loop device under allowLoop, its /dev name may match too.
 */
export function matchDevice(s: DeviceState, sel: DeviceSelector): Match {
  const names = sel.allowLoop && s.kind === 'loop' ? [...s.stableNames, loopName(s)] : s.stableNames;
  const target = names.find((n) => anyMatch(sel.paths, n));
  if (target === undefined) {
    return { matches: false, why: names.length === 0 ? 'it has no stable name (/dev/disk/by-id, /dev/disk/by-path)' : `no name of it matches paths (${names.join(', ')})` };
  }
  if (sel.minSizeBytes !== undefined && s.sizeBytes < sel.minSizeBytes) return { matches: false, why: `its size ${s.sizeBytes} bytes is below minSize (${sel.minSizeBytes} bytes)` };
  if (sel.maxSizeBytes !== undefined && s.sizeBytes > sel.maxSizeBytes) return { matches: false, why: `its size ${s.sizeBytes} bytes is above maxSize (${sel.maxSizeBytes} bytes)` };
  if (sel.rotational !== undefined && s.rotational !== sel.rotational) {
    const is = s.rotational === undefined ? 'unknown' : String(s.rotational);
    return { matches: false, why: `rotational is ${is}, the selector wants ${String(sel.rotational)}` };
  }
  if (sel.models !== undefined && !(s.model !== undefined && anyMatch(sel.models, s.model))) {
    return { matches: false, why: `model ${JSON.stringify(s.model ?? '')} matches no models pattern` };
  }
  if (sel.vendors !== undefined && !(s.vendor !== undefined && anyMatch(sel.vendors, s.vendor))) {
    return { matches: false, why: `vendor ${JSON.stringify(s.vendor ?? '')} matches no vendors pattern` };
  }
  return { matches: true, target };
}

/** Every safety rule the device fails; empty: it may be linked. `allowLoop`: a loop device is not refused as virtual. */
export function refusals(s: DeviceState, allowLoop: boolean): Refusal[] {
  const out: Refusal[] = [];
  const no = (reason: RefusalReason, detail: string): void => {
    out.push({ reason, detail });
  };
  if (s.kind === 'partition') no('partition', `${s.name} is a partition, not a whole disk`);
  if (s.kind === 'virtual' || (s.kind === 'loop' && !allowLoop)) no('virtual', `${s.name} is a ${s.kind === 'loop' ? 'loop' : 'virtual (dm, md, zram, ram, nbd, ...)'} device, not a disk`);
  if (s.readOnly) no('read-only', `${s.name} is read-only`);
  if (s.removable) no('removable', `${s.name} is removable`);
  if (s.sizeBytes <= 0) no('empty', `${s.name} has size 0`);
  if (s.partitions.length > 0) no('partition-table', `${s.name} has partitions (${s.partitions.join(', ')})`);
  const p = s.probe;
  if (p === undefined) no('not-probed', `${s.name} was not probed for signatures`);
  else if (p.kind === 'failed') no('probe-failed', `probing ${s.name} for signatures failed: ${p.why}`);
  else if (p.kind === 'signatures') {
    const pt = p.found.filter((f) => f.startsWith('PTTYPE='));
    if (pt.length > 0) no('partition-table', `${s.name} has a partition table (${pt.join(', ')})`);
    const other = p.found.filter((f) => !f.startsWith('PTTYPE=') && !f.startsWith('PTUUID='));
    if (other.length > 0 || pt.length === 0) no('signature', `${s.name} holds a signature (${(other.length > 0 ? other : p.found).join(', ') || 'blkid found something'})`);
  }
  if (s.busy === undefined) no('usage-unknown', `whether ${s.name} is in use was not checked`);
  else for (const b of s.busy) no(b.reason, b.detail);
  return out;
}

export type Decision =
  | { readonly kind: 'skip'; readonly why: string }
  | { readonly kind: 'refuse'; readonly target: string; readonly refusals: readonly Refusal[] }
  | { readonly kind: 'link'; readonly target: string };

/** The whole decision for one device and one class's selector. */
export function decideDevice(s: DeviceState, sel: DeviceSelector): Decision {
  const m = matchDevice(s, sel);
  if (!m.matches) return { kind: 'skip', why: m.why };
  const r = refusals(s, sel.allowLoop);
  return r.length > 0 ? { kind: 'refuse', target: m.target, refusals: r } : { kind: 'link', target: m.target };
}
