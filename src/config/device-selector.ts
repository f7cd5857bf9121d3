// The per-class `deviceSelector` (issue 21): which raw disks of the node the
// daemon may link into the class's mountDir itself. Keys are matched
// case-insensitively like every other key; the Go provisioner's keys are
// untouched (it ignores this one with its other unknown keys).
import { globSyntaxError } from '../util/glob.ts';
import { parseQuantity } from '../util/quantity.ts';
import { Issues, joinPath, readBool, readStringList, readStruct } from './decode.ts';
import { describe } from './goyaml.ts';
import type { GoValue, MapEntry } from './goyaml.ts';
import type { DeviceSelector, VolumeMode } from './types.ts';

export const DEVICE_SELECTOR_KEYS = ['paths', 'minSize', 'maxSize', 'rotational', 'models', 'vendors', 'maxCount', 'allowLoop'] as const;

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** A list of Go filepath.Match patterns; `absolute`: each must start with "/". Undefined when unset or wrong (reported). */
function readPatterns(issues: Issues, v: GoValue, path: string, absolute: boolean): string[] | undefined {
  const list = readStringList(issues, v, path);
  if (list === undefined) return undefined;
  let ok = true;
  list.forEach((p, i) => {
    const at = `${path}[${i}]`;
    const bad = globSyntaxError(p);
    if (bad !== undefined) {
      ok = false;
      issues.error(at, v.line, `pattern ${JSON.stringify(p)}: ${bad}`);
    } else if (absolute && !p.startsWith('/dev/')) {
      ok = false;
      issues.error(at, v.line, `pattern ${JSON.stringify(p)} must be an absolute device name under /dev/, e.g. /dev/disk/by-id/nvme-*`);
    } else if (p === '') {
      ok = false;
      issues.error(at, v.line, 'an empty pattern matches nothing');
    }
  });
  return ok ? list : undefined;
}

/** A size (Quantity string or integer bytes) as whole bytes; undefined when unset or wrong (reported). */
function readSize(issues: Issues, v: GoValue, path: string, round: 'up' | 'down'): number | undefined {
  if (v.kind === 'null') return undefined;
  const text = v.kind === 'string' ? v.value : v.kind === 'int' ? String(v.value) : undefined;
  const n = text === undefined ? undefined : parseQuantity(text);
  if (n === undefined || !Number.isFinite(n) || n < 0 || n > Number.MAX_SAFE_INTEGER) {
    issues.error(path, v.line, `expected a size such as "100Gi", "1T" or a number of bytes, got ${describe(v)}`);
    return undefined;
  }
  return round === 'up' ? Math.ceil(n) : Math.floor(n);
}

/**
 * The class's deviceSelector, or undefined (unset, or wrong: reported). `fsType` and `volumeMode` are the
 * class's: a Filesystem class must name the fsType the kubelet formats a linked disk with.
 */
export function readDeviceSelector(issues: Issues, entry: MapEntry, path: string, cls: { volumeMode: VolumeMode; fsType: string | undefined }): DeviceSelector | undefined {
  const v = entry.value;
  if (v.kind === 'null') return undefined;
  const before = issues.errors.length;
  const fields = readStruct(issues, v, path, DEVICE_SELECTOR_KEYS, 'a device selector (map)');
  if (fields === undefined) return undefined;
  const field = (k: string): GoValue => fields.get(k)?.value ?? { kind: 'null', line: v.line ?? entry.keyLine };
  const at = (k: string): string => joinPath(path, k);

  const paths = readPatterns(issues, field('paths'), at('paths'), true);
  if (paths !== undefined && paths.length === 0) issues.error(at('paths'), field('paths').line, 'paths is empty: name the stable device names this class may take, e.g. /dev/disk/by-id/nvme-*');
  if (!fields.has('paths') || field('paths').kind === 'null') {
    issues.error(at('paths'), v.line, 'deviceSelector needs paths: the stable device names this class may take, e.g. /dev/disk/by-id/nvme-* (no default: which disks a class may take is always said explicitly)');
  }
  const minSizeBytes = readSize(issues, field('minSize'), at('minSize'), 'up');
  const maxSizeBytes = readSize(issues, field('maxSize'), at('maxSize'), 'down');
  if (minSizeBytes !== undefined && maxSizeBytes !== undefined && minSizeBytes > maxSizeBytes) {
    issues.error(at('maxSize'), field('maxSize').line, `maxSize (${maxSizeBytes} bytes) is below minSize (${minSizeBytes} bytes): no disk can match`);
  }
  const rotational = readBool(issues, field('rotational'), at('rotational'));
  const models = readPatterns(issues, field('models'), at('models'), false);
  const vendors = readPatterns(issues, field('vendors'), at('vendors'), false);
  let maxCount: number | undefined;
  const mc = field('maxCount');
  if (mc.kind === 'int' && mc.value >= 0n && mc.value <= 1_000_000n) maxCount = Number(mc.value);
  else if (mc.kind !== 'null') issues.error(at('maxCount'), mc.line, `expected a whole number from 0 to 1000000, got ${describe(mc)}`);
  const allowLoop = readBool(issues, field('allowLoop'), at('allowLoop')) ?? false;
  if (allowLoop) issues.warn(at('allowLoop'), field('allowLoop').line, 'allowLoop is for tests: loop devices have no stable name and are linked by their /dev/loopN name');

  if (cls.volumeMode === 'Filesystem' && (cls.fsType === undefined || cls.fsType === '')) {
    issues.error(
      path,
      entry.keyLine,
      'a deviceSelector on a Filesystem class needs fsType (e.g. ext4 or xfs): the kubelet formats a linked raw disk with it on first use; or set volumeMode: Block',
    );
  }
  if (issues.errors.length > before || paths === undefined || paths.length === 0) return undefined;
  const sel: Mutable<DeviceSelector> = { paths, allowLoop };
  if (minSizeBytes !== undefined) sel.minSizeBytes = minSizeBytes;
  if (maxSizeBytes !== undefined) sel.maxSizeBytes = maxSizeBytes;
  if (rotational !== undefined) sel.rotational = rotational;
  if (models !== undefined) sel.models = models;
  if (vendors !== undefined) sel.vendors = vendors;
  if (maxCount !== undefined) sel.maxCount = maxCount;
  return sel;
}
