// Typed readers over GoValue trees with Go encoding/json decoding rules
// (case-insensitive struct fields, unknown keys ignored, scalars stringified
// for string fields, null = "leave the default"). Every problem is collected
// in the Issues sink instead of thrown, so one pass reports all of them.
import type { ConfigError } from './types.ts';
import { describe, goScalarString } from './goyaml.ts';
import { unknownKeyMessage } from './suggest.ts';
import type { GoValue, Line, MapEntry } from './goyaml.ts';

type MapValue = Extract<GoValue, { kind: 'map' }>;

/** Unknown keys named one by one in warnings; the rest are counted in one last warning. */
export const MAX_UNKNOWN_KEY_WARNINGS = 20;

export class Issues {
  readonly errors: ConfigError[] = [];
  readonly warnings: ConfigError[] = [];
  /** ConfigMap key the values being decoded come from. */
  file: string | undefined;
  /** Unknown keys met so far (named or not). */
  #unknownKeys = 0;

  /**
   * An unknown key: a warning naming it (and the nearest known key) for the
   * first MAX_UNKNOWN_KEY_WARNINGS; the others are only counted (finish()).
   */
  unknownKey(path: string, line: Line, key: string, known: readonly string[]): void {
    this.#unknownKeys++;
    if (this.#unknownKeys <= MAX_UNKNOWN_KEY_WARNINGS) this.warn(path, line, unknownKeyMessage(key, known));
  }

  /** Adds the "and N more unknown keys" warning, if any were left unnamed. Call once, at the end. */
  finish(): void {
    const more = this.#unknownKeys - MAX_UNKNOWN_KEY_WARNINGS;
    if (more > 0) {
      this.warnings.push(
        mkIssue('', `and ${more} more unknown key${more === 1 ? '' : 's'} ignored (only the first ${MAX_UNKNOWN_KEY_WARNINGS} are named)`, undefined, undefined),
      );
    }
  }

  error(path: string, line: Line, message: string): void {
    this.errors.push(mkIssue(path, message, this.file, line));
  }

  warn(path: string, line: Line, message: string): void {
    this.warnings.push(mkIssue(path, message, this.file, line));
  }
}

function mkIssue(path: string, message: string, file: string | undefined, line: Line): ConfigError {
  const e: { path: string; message: string; file?: string; line?: number } = { path, message };
  if (file !== undefined) e.file = file;
  if (line !== undefined) e.line = line;
  return e;
}

/** Appends a map key to a key path. */
export function joinPath(base: string, key: string): string {
  return base === '' ? key : `${base}.${key}`;
}

function typeError(issues: Issues, path: string, v: GoValue, expected: string): undefined {
  issues.error(path, v.line, `expected ${expected}, got ${describe(v)}`);
  return undefined;
}

/**
 * No string of the config may hold a NUL byte: none can be a path, an argv
 * item, a label or a name, and Node's fs and child_process throw on one.
 */
function nulError(issues: Issues, path: string, line: Line, what: string): undefined {
  issues.error(path, line, `${what} contains a NUL byte (\\0), which no path, command or name may contain`);
  return undefined;
}

/** The Go string of a scalar, or undefined (reported) for non-scalars and strings with a NUL byte. */
function scalarText(issues: Issues, v: GoValue, path: string): string | undefined {
  const s = goScalarString(v);
  if (s === undefined) return typeError(issues, path, v, 'a string');
  if (s.includes('\0')) return nulError(issues, path, v.line, 'the value');
  return s;
}

/** A boolean field; undefined when null or wrong (wrong is reported). */
export function readBool(issues: Issues, v: GoValue, path: string): boolean | undefined {
  if (v.kind === 'null') return undefined;
  if (v.kind === 'bool') return v.value;
  return typeError(issues, path, v, 'a boolean (true/false, yes/no, on/off)');
}

/** A string field: scalars are stringified the Go way; undefined when null or not a scalar. */
export function readString(issues: Issues, v: GoValue, path: string): string | undefined {
  if (v.kind === 'null') return undefined;
  return scalarText(issues, v, path);
}

/** A []string field; null -> undefined; null items are reported (Go would make them ""). */
export function readStringList(issues: Issues, v: GoValue, path: string): string[] | undefined {
  if (v.kind === 'null') return undefined;
  if (v.kind !== 'seq') return typeError(issues, path, v, 'a list of strings');
  const out: string[] = [];
  let ok = true;
  v.items.forEach((item, i) => {
    const s = scalarText(issues, item, `${path}[${i}]`);
    if (s === undefined) ok = false;
    else out.push(s);
  });
  return ok ? out : undefined;
}

/** A map[string]string field; null values become "" as in Go. */
export function readStringMap(issues: Issues, v: GoValue, path: string): Record<string, string> | undefined {
  if (v.kind === 'null') return undefined;
  if (v.kind !== 'map') return typeError(issues, path, v, 'a map of strings');
  const out = new Map<string, string>();
  let ok = true;
  for (const e of exactEntries(issues, v, path)) {
    const p = joinPath(path, e.key);
    if (e.key.includes('\0')) {
      ok = false;
      nulError(issues, p, e.keyLine, 'the key');
      continue;
    }
    if (e.value.kind === 'null') {
      out.set(e.key, '');
      continue;
    }
    const s = scalarText(issues, e.value, p);
    if (s === undefined) ok = false;
    else out.set(e.key, s);
  }
  return ok ? Object.fromEntries(out) : undefined;
}

/** An object map (e.g. storageClassMap): later duplicates win, with a warning. */
export function exactEntries(issues: Issues, v: MapValue, path: string): MapEntry[] {
  const byKey = new Map<string, MapEntry>();
  for (const e of v.entries) {
    const prev = byKey.get(e.key);
    if (prev !== undefined) {
      issues.warn(
        joinPath(path, e.key),
        e.keyLine,
        `duplicate key ${JSON.stringify(e.key)} (first on line ${prev.keyLine ?? '?'}); the last one wins, as in the Go provisioner`,
      );
      byKey.delete(e.key);
    }
    byKey.set(e.key, e);
  }
  return [...byKey.values()];
}

/**
 * Matches the keys of a map against struct field names case-insensitively, as
 * Go's encoding/json does. Unknown keys are warnings; a field given twice (in
 * any spelling) keeps the last value, with a warning.
 */
export function readStruct(
  issues: Issues,
  v: GoValue,
  path: string,
  known: readonly string[],
  expected: string,
): Map<string, MapEntry> | undefined {
  if (v.kind === 'null') return undefined;
  if (v.kind !== 'map') return typeError(issues, path, v, expected);
  const byLower = new Map(known.map((k) => [k.toLowerCase(), k]));
  const fields = new Map<string, MapEntry>();
  for (const e of v.entries) {
    const field = byLower.get(e.key.toLowerCase());
    if (field === undefined) {
      issues.unknownKey(joinPath(path, e.key), e.keyLine, e.key, known);
      continue;
    }
    const prev = fields.get(field);
    if (prev !== undefined) {
      issues.warn(
        joinPath(path, field),
        e.keyLine,
        `${field} given twice (${JSON.stringify(prev.key)} on line ${prev.keyLine ?? '?'}, ${JSON.stringify(e.key)} here); the last one wins, as in the Go provisioner`,
      );
    }
    fields.set(field, e);
  }
  return fields;
}
