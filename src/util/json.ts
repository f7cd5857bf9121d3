// Hostile JSON from a file of the state dir: the top-level object, or why the text is not one.

/** The object `text` holds, or 'not JSON' / 'not a JSON object'. Never throws. */
export function parseJsonObject(text: string): Record<string, unknown> | string {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return 'not JSON';
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return 'not a JSON object';
  return v as Record<string, unknown>;
}
