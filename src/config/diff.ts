// Which settings differ between two configs, as key paths for logs and events:
//   storageClassMap.fast (added), storageClassMap.slow (removed),
//   storageClassMap.fast.namePattern, labelsForPV, useJobForCleaning.
// Removals count as changes (upstream never noticed them, §8.2).
import { CLASS_KEYS, canonicalJson, TOP_LEVEL_KEYS } from './parse.ts';
import type { ProvisionerConfig } from './types.ts';

type TopField = Exclude<keyof ProvisionerConfig, 'storageClassMap'>;

/** ConfigMap key -> ProvisionerConfig field, for the keys whose field is named differently. */
const FIELD_OF: Partial<Record<string, TopField>> = { minResyncPeriod: 'minResyncPeriodMs' };

function same(a: unknown, b: unknown): boolean {
  // canonicalJson sorts keys and drops undefined fields, so key order never counts.
  const canon = (v: unknown): string => (v === undefined ? 'undefined' : canonicalJson(v as ProvisionerConfig));
  return canon(a) === canon(b);
}

/** Changed key paths from `a` to `b`; with no `a`, every class is "added" and every key listed. */
export function diffConfigs(a: ProvisionerConfig | undefined, b: ProvisionerConfig): string[] {
  const out: string[] = [];
  const before = a?.storageClassMap ?? {};
  const after = b.storageClassMap;
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
  for (const name of names) {
    const x = Object.hasOwn(before, name) ? before[name] : undefined;
    const y = Object.hasOwn(after, name) ? after[name] : undefined;
    const path = `storageClassMap.${name}`;
    if (x === undefined && y !== undefined) out.push(`${path} (added)`);
    else if (x !== undefined && y === undefined) out.push(`${path} (removed)`);
    else if (x !== undefined && y !== undefined) {
      for (const f of CLASS_KEYS) if (!same(x[f], y[f])) out.push(`${path}.${f}`);
    }
  }
  for (const key of TOP_LEVEL_KEYS) {
    if (key === 'storageClassMap') continue;
    const f = FIELD_OF[key] ?? (key as TopField);
    if (a === undefined || !same(a[f], b[f])) out.push(key);
  }
  return out;
}
