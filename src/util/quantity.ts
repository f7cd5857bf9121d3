// Kubernetes resource.Quantity strings: the canonical form of an integer
// Quantity created with resource.BinarySI (formatQuantity, for PV capacities)
// and a float reading of any Quantity (parseQuantity, for metrics). A value
// format with no Kubernetes client behind it, so it sits in util/, below both
// src/volume and src/metrics.

const BINARY_SUFFIXES = ['', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei'] as const;
const DECIMAL_SUFFIXES: Readonly<Record<number, string>> = { 0: '', 3: 'k', 6: 'M', 9: 'G', 12: 'T', 15: 'P', 18: 'E' };

/**
 * Canonical string of an integer Quantity in BinarySI format (apimachinery's
 * CanonicalizeBytes):
 *  - 0 is "0";
 *  - values strictly between -1024 and 1024 fall back to DecimalSI: trailing
 *    zeros are folded into a power of ten that is a multiple of 3 ("1000" -> "1k", "500" -> "500");
 *  - otherwise the value is divided by 1024 as long as it divides exactly and
 *    gets the matching Ki..Ei suffix ("1024" -> "1Ki", "12345" -> "12345").
 * Go would print a bare number for 1024^7 and above (no suffix exists); such
 * sizes cannot come from a real device, and we keep dividing only up to Ei.
 */
export function formatQuantity(bytes: bigint): string {
  if (bytes === 0n) return '0';
  const negative = bytes < 0n;
  let abs = negative ? -bytes : bytes;
  const sign = negative ? '-' : '';
  if (abs < 1024n) {
    let exp = 0;
    while (abs % 10n === 0n) {
      abs /= 10n;
      exp++;
    }
    // Make the exponent a multiple of 3 by putting the extra zeros back.
    const extra = exp % 3;
    abs *= 10n ** BigInt(extra);
    exp -= extra;
    return `${sign}${abs}${DECIMAL_SUFFIXES[exp] ?? ''}`;
  }
  let idx = 0;
  while (idx < BINARY_SUFFIXES.length - 1 && abs % 1024n === 0n) {
    abs /= 1024n;
    idx++;
  }
  return `${sign}${abs}${BINARY_SUFFIXES[idx]}`;
}

const QUANTITY = /^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei)|([numkMGTPE])|[eE]([+-]?\d+))?$/;
const SUFFIX_POWER: Readonly<Record<string, number>> = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };

/**
 * The value of a Quantity string ("12Mi", "10Gi", "1.5G", "12345", "1e3") as a
 * number; undefined when it is not a Quantity. Used for metrics only, where a
 * float is precise enough (exact up to 8 PiB).
 */
export function parseQuantity(s: string): number | undefined {
  const m = QUANTITY.exec(s.trim());
  if (!m) return undefined;
  const n = Number(m[1]);
  if (m[2] !== undefined) return n * 1024 ** (BINARY_SUFFIXES.indexOf(m[2] as (typeof BINARY_SUFFIXES)[number]));
  if (m[3] !== undefined) return n * 10 ** SUFFIX_POWER[m[3]]!;
  if (m[4] !== undefined) return n * 10 ** Number(m[4]);
  return n;
}
