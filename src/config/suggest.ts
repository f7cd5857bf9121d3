// "Did you mean ...?" for unknown ConfigMap keys: the known key nearest in
// edit distance (case-insensitive, a swap of two neighbours counts as one edit).

/** Optimal-string-alignment distance between a and b. */
export function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d: number[][] = Array.from({ length: rows }, (_, i) => Array.from({ length: cols }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/** The known key closest to `key`, if it is close enough to be a typo (at most a third of its length, 1 to 3 edits). */
export function nearestKey(key: string, known: readonly string[]): string | undefined {
  const k = key.toLowerCase();
  let best: { key: string; d: number } | undefined;
  for (const candidate of known) {
    const d = editDistance(k, candidate.toLowerCase());
    if (d <= Math.max(1, Math.min(3, Math.floor(candidate.length / 3))) && (best === undefined || d < best.d)) best = { key: candidate, d };
  }
  return best?.key;
}

/** `unknown key "x" ignored` plus the nearest known key, if any. */
export function unknownKeyMessage(key: string, known: readonly string[]): string {
  const near = nearestKey(key, known);
  return `unknown key ${JSON.stringify(key)} ignored${near === undefined ? '' : `; did you mean ${JSON.stringify(near)}?`}`;
}
