// YAML -> a small value tree with the scalar resolution of Go's
// sigs.k8s.io/yaml (go-yaml v2, YAML 1.1), plus Go's ways of turning those
// scalars into strings. The `yaml` package only tokenises here (failsafe
// schema: every scalar is text); the resolution rules below are Go's:
// - plain y/Y/yes/Yes/YES/true/True/TRUE/on/On/ON are true, the n/no/false/off
//   forms false; ""/~/null/Null/NULL are null; .inf/.nan forms are floats;
// - plain scalars starting with a digit or sign are integers when Go's
//   strconv.ParseInt(s, 0, 64) accepts them after removing '_' (so 0x1F, 0o17,
//   017 (octal), 0b101, 1_000), else uint64, else floats matching YAML's float
//   syntax; anything else (dates included) stays a string;
// - quoted and block scalars are strings; `!!str` forces a string;
// - `<<` merges mappings; anchors and aliases are followed.
import { Composer, isAlias, isMap, isPair, isScalar, isSeq, LineCounter, Parser, YAMLParseError } from 'yaml';
import type { Document, Node as YamlNode } from 'yaml';
import { boundedParse, forbiddenCharacter, MAX_YAML_NESTING, YamlLimitError } from './yaml-guard.ts';

/** 1-based line, when known. */
export type Line = number | undefined;

export interface MapEntry {
  /** The key as Go turns it into a JSON object key. */
  readonly key: string;
  readonly keyLine: Line;
  readonly value: GoValue;
}

export type GoValue =
  | { readonly kind: 'null'; readonly line: Line }
  | { readonly kind: 'bool'; readonly value: boolean; readonly line: Line }
  | { readonly kind: 'int'; readonly value: bigint; readonly line: Line }
  | { readonly kind: 'float'; readonly value: number; readonly line: Line }
  | { readonly kind: 'string'; readonly value: string; readonly line: Line }
  | { readonly kind: 'map'; readonly entries: readonly MapEntry[]; readonly line: Line }
  | { readonly kind: 'seq'; readonly items: readonly GoValue[]; readonly line: Line };

export interface YamlProblem {
  readonly message: string;
  readonly line: Line;
  /** The parser's further messages after a syntax error: mostly consequences of the first one (logged at debug). */
  readonly detail?: readonly string[] | undefined;
}

export interface YamlParseOutcome {
  /** undefined when the text could not be parsed at all. */
  readonly value: GoValue | undefined;
  readonly errors: readonly YamlProblem[];
}

const TRUE_FORMS = new Set(['y', 'Y', 'yes', 'Yes', 'YES', 'true', 'True', 'TRUE', 'on', 'On', 'ON']);
const FALSE_FORMS = new Set(['n', 'N', 'no', 'No', 'NO', 'false', 'False', 'FALSE', 'off', 'Off', 'OFF']);
const NULL_FORMS = new Set(['', '~', 'null', 'Null', 'NULL']);
const NAN_FORMS = new Set(['.nan', '.NaN', '.NAN']);
const POS_INF_FORMS = new Set(['.inf', '.Inf', '.INF', '+.inf', '+.Inf', '+.INF']);
const NEG_INF_FORMS = new Set(['-.inf', '-.Inf', '-.INF']);

const GO_INT = /^([+-]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)$/;
const YAML_FLOAT = /^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$/;
const DOT_FLOAT = /^\.[0-9]+([eE][-+]?[0-9]+)?$/;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const UINT64_MAX = 2n ** 64n - 1n;

const TAG_PREFIX = 'tag:yaml.org,2002:';

/**
 * Limits on the converted tree. The parser's nesting is bounded while it
 * parses (yaml-guard.ts); a tree it builds is at most twice as deep ("[k: v]"
 * items are one-pair maps), so only aliases can reach MAX_DEPTH.
 */
const MAX_DEPTH = 2 * MAX_YAML_NESTING + 2;
const MAX_NODES = 100_000;

function parseGoInt(plain: string): bigint | undefined {
  const m = GO_INT.exec(plain);
  if (!m) return undefined;
  const digits = m[2]!;
  let magnitude: bigint;
  if (/^0[xXoObB]/.test(digits)) {
    const base = digits[1]!.toLowerCase();
    magnitude = BigInt(`0${base}${digits.slice(2)}`);
  } else if (digits.length > 1 && digits.startsWith('0')) {
    magnitude = BigInt(`0o${digits.slice(1)}`);
  } else {
    magnitude = BigInt(digits);
  }
  return m[1] === '-' ? -magnitude : magnitude;
}

/** Resolves an untagged plain scalar the way go-yaml v2 does. */
export function resolvePlain(text: string, line: Line): GoValue {
  if (TRUE_FORMS.has(text)) return { kind: 'bool', value: true, line };
  if (FALSE_FORMS.has(text)) return { kind: 'bool', value: false, line };
  if (NULL_FORMS.has(text)) return { kind: 'null', line };
  if (NAN_FORMS.has(text)) return { kind: 'float', value: Number.NaN, line };
  if (POS_INF_FORMS.has(text)) return { kind: 'float', value: Number.POSITIVE_INFINITY, line };
  if (NEG_INF_FORMS.has(text)) return { kind: 'float', value: Number.NEGATIVE_INFINITY, line };
  const first = text[0]!;
  if (first === '.') {
    if (DOT_FLOAT.test(text)) {
      const f = Number(text);
      if (Number.isFinite(f)) return { kind: 'float', value: f, line };
    }
    return { kind: 'string', value: text, line };
  }
  if (first === '+' || first === '-' || (first >= '0' && first <= '9')) {
    const plain = text.replaceAll('_', '');
    const i = parseGoInt(plain);
    if (i !== undefined) {
      if (i >= INT64_MIN && i <= INT64_MAX) return { kind: 'int', value: i, line };
      // ParseUint takes no sign.
      if (i > 0n && i <= UINT64_MAX && !/^[+-]/.test(plain)) return { kind: 'int', value: i, line };
    }
    if (YAML_FLOAT.test(plain)) {
      const f = Number(plain);
      if (Number.isFinite(f)) return { kind: 'float', value: f, line };
    }
  }
  return { kind: 'string', value: text, line };
}

/**
 * Go's strconv.FormatFloat(f, 'g', -1, 32): the shortest decimal that reads
 * back as the same float32, in %e form when the exponent is < -4 or >= 6
 * (two-digit minimum exponent, e.g. 1e+06), else in %f form.
 */
export function formatGoFloat32(f: number): string {
  if (Number.isNaN(f)) return 'NaN';
  if (f === Number.POSITIVE_INFINITY) return '+Inf';
  if (f === Number.NEGATIVE_INFINITY) return '-Inf';
  const v = Math.fround(f);
  if (!Number.isFinite(v)) return v > 0 ? '+Inf' : '-Inf';
  const neg = v < 0 || Object.is(v, -0);
  const a = Math.abs(v);
  if (a === 0) return neg ? '-0' : '0';
  let mantissa = '';
  let exp10 = 0;
  for (let p = 1; p <= 9; p++) {
    const e = a.toExponential(p - 1); // "d.ddde+x"
    if (Math.fround(Number(e)) === a || p === 9) {
      const [m, x] = e.split('e') as [string, string];
      mantissa = m.replace('.', '').replace(/0+$/, '') || '0';
      exp10 = Number(x);
      break;
    }
  }
  const nd = mantissa.length;
  let out: string;
  if (exp10 < -4 || exp10 >= 6) {
    const frac = nd > 1 ? `.${mantissa.slice(1)}` : '';
    const ae = Math.abs(exp10);
    out = `${mantissa[0]}${frac}e${exp10 < 0 ? '-' : '+'}${ae < 10 ? '0' : ''}${ae}`;
  } else if (exp10 < 0) {
    out = `0.${'0'.repeat(-exp10 - 1)}${mantissa}`;
  } else if (nd <= exp10 + 1) {
    out = mantissa + '0'.repeat(exp10 + 1 - nd);
  } else {
    out = `${mantissa.slice(0, exp10 + 1)}.${mantissa.slice(exp10 + 1)}`;
  }
  return neg ? `-${out}` : out;
}

/** The string Go gives a scalar aimed at a string field; undefined for null, maps and lists. */
export function goScalarString(v: GoValue): string | undefined {
  switch (v.kind) {
    case 'string':
      return v.value;
    case 'bool':
      return v.value ? 'true' : 'false';
    case 'int':
      return v.value.toString();
    case 'float':
      return formatGoFloat32(v.value);
    default:
      return undefined;
  }
}

/** The JSON object key Go makes of a YAML map key; undefined when Go refuses the key. */
function goMapKey(v: GoValue): string | undefined {
  if (v.kind === 'float') {
    const s = formatGoFloat32(v.value);
    if (s === '+Inf') return '.inf';
    if (s === '-Inf') return '-.inf';
    if (s === 'NaN') return '.nan';
    return s;
  }
  return goScalarString(v);
}

/** A short description of a value for error messages: `string "x"`, `number 5`, `a map`. */
export function describe(v: GoValue): string {
  switch (v.kind) {
    case 'null':
      return 'null';
    case 'bool':
      return `boolean ${v.value}`;
    case 'int':
      return `number ${v.value.toString()}`;
    case 'float':
      return `number ${formatGoFloat32(v.value)}`;
    case 'string':
      return `string ${JSON.stringify(v.value.length > 60 ? `${v.value.slice(0, 57)}...` : v.value)}`;
    case 'map':
      return 'a map';
    case 'seq':
      return 'a list';
  }
}

class Converter {
  private nodes = 0;
  readonly errors: YamlProblem[] = [];
  private readonly lines: LineCounter;
  /** Alias node -> the anchored node it refers to (the last anchor of that name before it). */
  private readonly aliasTargets = new Map<unknown, unknown>();
  /** Anchored node -> its converted value and expanded size, so aliases are converted once. */
  private readonly memo = new Map<unknown, { value: GoValue; size: number }>();

  constructor(doc: Document.Parsed, lines: LineCounter) {
    this.lines = lines;
    this.indexAnchors(doc.contents, new Map(), 0);
  }

  /** One pass in document order mapping every alias to its anchor (Alias.resolve would rescan the document each time). */
  private indexAnchors(node: unknown, anchors: Map<string, unknown>, depth: number): void {
    if (node === null || node === undefined || depth > MAX_DEPTH) return;
    if (isAlias(node)) {
      this.aliasTargets.set(node, anchors.get(node.source));
      return;
    }
    const anchor = (node as { anchor?: unknown }).anchor;
    if (typeof anchor === 'string' && anchor !== '') anchors.set(anchor, node);
    if (isSeq(node)) for (const item of node.items) this.indexAnchors(item, anchors, depth + 1);
    if (isMap(node)) {
      for (const pair of node.items) {
        this.indexAnchors(pair.key, anchors, depth + 1);
        this.indexAnchors(pair.value, anchors, depth + 1);
      }
    }
  }

  lineOf(node: unknown): Line {
    const range = (node as { range?: readonly number[] | null } | null)?.range;
    if (!range || typeof range[0] !== 'number') return undefined;
    return this.lines.linePos(range[0]).line;
  }

  private count(n: number): void {
    this.nodes += n;
    if (this.nodes > MAX_NODES) throw new LimitError(`more than ${MAX_NODES} YAML nodes after alias expansion`);
  }

  convert(node: unknown, depth: number, fallbackLine: Line): GoValue {
    if (node === null || node === undefined) return { kind: 'null', line: fallbackLine };
    if (depth > MAX_DEPTH) throw new LimitError(`YAML nested deeper than ${MAX_DEPTH} levels (with aliases expanded)`);
    const line = this.lineOf(node) ?? fallbackLine;
    if (isAlias(node)) {
      const target = this.aliasTargets.get(node);
      if (target === undefined) {
        this.errors.push({ message: `unknown anchor ${JSON.stringify(node.source)}`, line });
        return { kind: 'null', line };
      }
      const known = this.memo.get(target);
      if (known !== undefined) {
        this.count(known.size);
        return { ...known.value, line };
      }
      return { ...this.convert(target, depth + 1, line), line };
    }
    const before = this.nodes;
    this.count(1);
    const value = this.convertNode(node, depth, line);
    if (typeof (node as { anchor?: unknown }).anchor === 'string') this.memo.set(node, { value, size: this.nodes - before });
    return value;
  }

  private convertNode(node: unknown, depth: number, line: Line): GoValue {
    if (isScalar(node)) return this.scalar(String(node.value), node.type, node.tag, line);
    if (isSeq(node)) {
      return { kind: 'seq', items: node.items.map((item) => this.convert(item, depth + 1, line)), line };
    }
    if (isMap(node)) return this.map(node.items, depth, line);
    this.errors.push({ message: 'unsupported YAML node', line });
    return { kind: 'null', line };
  }

  private scalar(text: string, type: string | undefined, tag: string | undefined, line: Line): GoValue {
    const quotedOrBlock = type !== undefined && type !== 'PLAIN';
    const short = tag?.startsWith(TAG_PREFIX) ? tag.slice(TAG_PREFIX.length) : undefined;
    if (short === 'str' || short === 'binary') return { kind: 'string', value: text, line };
    if (quotedOrBlock && short === undefined) return { kind: 'string', value: text, line };
    const v = resolvePlain(text, line);
    if (short === undefined || short === 'merge' || short === 'timestamp') return v;
    const kindForTag: Record<string, GoValue['kind'][]> = {
      bool: ['bool'],
      int: ['int'],
      float: ['float', 'int'],
      null: ['null'],
    };
    const allowed = kindForTag[short];
    if (allowed === undefined) return v;
    if (!allowed.includes(v.kind)) {
      this.errors.push({ message: `cannot decode ${JSON.stringify(text)} as !!${short}`, line });
      return { kind: 'null', line };
    }
    if (short === 'float' && v.kind === 'int') return { kind: 'float', value: Number(v.value), line };
    return v;
  }

  private map(items: readonly unknown[], depth: number, line: Line): GoValue {
    const explicit: MapEntry[] = [];
    const merged: MapEntry[] = [];
    for (const pair of items) {
      if (!isPair(pair)) continue;
      const keyNode = pair.key as YamlNode | null;
      const keyLine = this.lineOf(keyNode) ?? line;
      if (isScalar(keyNode) && keyNode.type === 'PLAIN' && keyNode.value === '<<' && keyNode.tag === undefined) {
        merged.push(...this.mergeSource(pair.value, depth, keyLine));
        continue;
      }
      const keyValue = this.convert(keyNode, depth + 1, keyLine);
      const key = goMapKey(keyValue);
      if (key === undefined) {
        this.errors.push({ message: `unsupported map key (${describe(keyValue)})`, line: keyLine });
        continue;
      }
      explicit.push({ key, keyLine, value: this.convert(pair.value, depth + 1, keyLine) });
    }
    // Explicit keys win over merged ones; among merged sources the first wins.
    const seen = new Set(explicit.map((e) => e.key));
    const entries = [...explicit];
    for (const e of merged) {
      if (seen.has(e.key)) continue;
      seen.add(e.key);
      entries.push(e);
    }
    return { kind: 'map', entries, line };
  }

  private mergeSource(node: unknown, depth: number, line: Line): MapEntry[] {
    const v = this.convert(node, depth + 1, line);
    if (v.kind === 'map') return [...v.entries];
    if (v.kind === 'seq' && v.items.every((i) => i.kind === 'map')) {
      return v.items.flatMap((i) => (i.kind === 'map' ? i.entries : []));
    }
    this.errors.push({ message: `map merge (<<) needs a map or a list of maps, got ${describe(v)}`, line });
    return [];
  }
}

class LimitError extends Error {}

/**
 * parseDocument, but with the parser's nesting bounded (yaml-guard.ts).
 * Throws YamlLimitError when the text is too deep.
 */
function parseBounded(text: string, lines: LineCounter): Document.Parsed {
  const composer = new Composer({ version: '1.1', schema: 'failsafe', uniqueKeys: false });
  let doc: Document.Parsed | undefined;
  for (const d of composer.compose(boundedParse(new Parser(lines.addNewLine), text, lines), true, text.length)) {
    if (doc === undefined) {
      doc = d;
    } else {
      doc.errors.push(new YAMLParseError(d.range.slice(0, 2) as [number, number], 'MULTIPLE_DOCS', 'Source contains multiple documents'));
      break;
    }
  }
  return doc!; // compose(…, forceDoc = true) always yields one
}

const parserText = (e: YAMLParseError): string => e.message.replace(/ at line \d+, column \d+:?[\s\S]*$/, '');

/**
 * One bad line makes the YAML parser report a cascade of errors in its own terms: report the first one (by
 * position) only, in plain words, on the line to look at, with a hint; the parser's own messages go to `detail`.
 * `context` names the ConfigMap key in the hint (e.g. "storageClassMap").
 */
function syntaxError(errors: readonly YAMLParseError[], lines: LineCounter, context: string | undefined): YamlProblem {
  const sorted = [...errors].sort((a, b) => a.pos[0] - b.pos[0]);
  const first = sorted[0]!;
  const startLine = (e: YAMLParseError): number => e.linePos?.[0].line ?? lines.linePos(e.pos[0]).line;
  const endLine = (e: YAMLParseError): number => e.linePos?.[1]?.line ?? lines.linePos(e.pos[1]).line;
  const start = startLine(first);
  const level = context === undefined ? 'at the same level' : `at the same level under ${context}`;
  const detail = sorted.map((e) => `line ${startLine(e)}: ${parserText(e)}`);
  let line = start;
  let what: string;
  switch (first.code) {
    case 'BAD_INDENT':
      what = `bad indentation of a mapping entry; check that keys ${level} are indented the same`;
      break;
    case 'TAB_AS_INDENT':
      what = 'a tab used for indentation; YAML indents with spaces only';
      break;
    case 'BLOCK_AS_IMPLICIT_KEY':
    case 'MULTILINE_IMPLICIT_KEY': {
      // "key: value" then a line indented deeper: that line reads as part of the value above it.
      const spill = sorted.find((e) => e.code === 'MULTILINE_IMPLICIT_KEY' && endLine(e) > startLine(e));
      if (first.code === 'BLOCK_AS_IMPLICIT_KEY' && /sequence/.test(first.message)) {
        what = `bad indentation of a list item; check that the items of one list (and keys ${level}) are indented the same`;
      } else if (first.code === 'BLOCK_AS_IMPLICIT_KEY' && spill !== undefined && /:(\s|$)/.test(lineText(lines, startLine(spill) + 1))) {
        line = startLine(spill) + 1;
        what = `bad indentation of a mapping entry: this line is indented more than the key above it; check that keys ${level} are indented the same`;
      } else {
        what = `a key not followed by ":" on its line (a missing ":", or a line indented differently from the keys ${level})`;
      }
      break;
    }
    case 'MISSING_CHAR':
      what = /quote/i.test(first.message) ? 'a quoted value is not closed' : `a key not followed by ":" (a missing ":", or a line indented differently from the keys ${level})`;
      break;
    default:
      what = parserText(first);
  }
  return { message: `YAML syntax error: ${what}`, line, detail: detail.length > 1 ? detail : undefined };
}

/** Text of 1-based line `n` of the source the LineCounter counted (set by parseGoYaml). */
function lineText(lines: LineCounter, n: number): string {
  const src = sourceOf.get(lines) ?? '';
  const from = lines.lineStarts[n - 1];
  if (from === undefined) return '';
  const to = lines.lineStarts[n] ?? src.length;
  return src.slice(from, to);
}
const sourceOf = new WeakMap<LineCounter, string>();

/** Parses one YAML text into a GoValue; never throws. `context` (the ConfigMap key) is named in syntax hints. */
export function parseGoYaml(text: string, context?: string): YamlParseOutcome {
  const forbidden = forbiddenCharacter(text);
  if (forbidden !== undefined) return { value: undefined, errors: [{ message: forbidden.message, line: forbidden.line }] };
  const lines = new LineCounter();
  sourceOf.set(lines, text);
  let doc: Document.Parsed;
  try {
    doc = parseBounded(text, lines);
  } catch (err) {
    if (err instanceof YamlLimitError) return { value: undefined, errors: [{ message: err.message, line: err.line }] };
    return { value: undefined, errors: [{ message: `YAML parser failed: ${String(err)}`, line: undefined }] };
  }
  if (doc.errors.length > 0) return { value: undefined, errors: [syntaxError(doc.errors, lines, context)] };
  const conv = new Converter(doc, lines);
  try {
    const value = conv.convert(doc.contents, 0, 1);
    return { value, errors: conv.errors };
  } catch (err) {
    const message = err instanceof LimitError ? err.message : `YAML conversion failed: ${String(err)}`;
    return { value: undefined, errors: [...conv.errors, { message, line: undefined }] };
  }
}
