// Go path/filepath.Match semantics (Unix flavour), used for the per-class
// `namePattern`.
//
// Behaviour reproduced from Go:
// - `*` matches any run of non-'/' characters, `?` one non-'/' character;
// - `[...]` character classes with ranges (`a-z`), `^` negation and `\`
//   escapes; `]` or `-` cannot start a class item, so `[]]` and `[-]` are
//   malformed; a class never matches '/'-crossing runs but may match '/' itself
//   (as Go does);
// - `\x` matches x literally; a trailing `\` is malformed;
// - a leading '.' has no special meaning;
// - matching works on UTF-8 bytes, where `?` and classes consume one rune
//   (an invalid byte counts as one U+FFFD rune), exactly like Go;
// - a star tries the leftmost position where the following chunk matches and
//   never revisits earlier chunks (Go's algorithm, so results are identical);
// - any malformed pattern is reported, whether or not the name would match
//   (Go's ErrBadPattern, "syntax error in pattern").

const SLASH = 0x2f;
const RUNE_ERROR = 0xfffd;
const BAD_PATTERN = 'syntax error in pattern';

interface ClassToken {
  readonly kind: 'class';
  readonly negated: boolean;
  /** Inclusive [lo, hi] rune ranges. */
  readonly ranges: readonly (readonly [number, number])[];
}
type Token = { readonly kind: 'byte'; readonly value: number } | { readonly kind: 'any' } | ClassToken;

/** A run of fixed-width tokens, optionally preceded by a star. */
interface Chunk {
  readonly star: boolean;
  readonly tokens: readonly Token[];
}

class GlobSyntaxError extends Error {
  readonly detail: string;
  constructor(detail: string) {
    super(BAD_PATTERN);
    this.detail = detail;
  }
}

const encoder = new TextEncoder();

/** Decodes one rune like Go's utf8.DecodeRune: invalid or truncated input is (U+FFFD, 1). */
function decodeRune(b: Uint8Array, i: number): [rune: number, width: number] {
  const b0 = b[i] ?? 0;
  if (b0 < 0x80) return [b0, 1];
  const cont = (k: number): number => {
    const c = b[i + k];
    return c !== undefined && (c & 0xc0) === 0x80 ? c & 0x3f : -1;
  };
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    const c1 = cont(1);
    if (c1 >= 0) return [((b0 & 0x1f) << 6) | c1, 2];
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    const c1 = cont(1);
    const c2 = cont(2);
    if (c1 >= 0 && c2 >= 0) {
      const r = ((b0 & 0x0f) << 12) | (c1 << 6) | c2;
      if (r >= 0x800 && (r < 0xd800 || r > 0xdfff)) return [r, 3];
    }
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    const c1 = cont(1);
    const c2 = cont(2);
    const c3 = cont(3);
    if (c1 >= 0 && c2 >= 0 && c3 >= 0) {
      const r = ((b0 & 0x07) << 18) | (c1 << 12) | (c2 << 6) | c3;
      if (r >= 0x10000 && r <= 0x10ffff) return [r, 4];
    }
  }
  return [RUNE_ERROR, 1];
}

/** Reads one class item endpoint at p[i]; returns the rune and the next index. */
function readClassRune(p: Uint8Array, start: number): [rune: number, next: number] {
  let i = start;
  const c = p[i];
  if (c === undefined) throw new GlobSyntaxError('unterminated character class');
  if (c === 0x2d /* - */ || c === 0x5d /* ] */) {
    throw new GlobSyntaxError(`unexpected '${String.fromCharCode(c)}' at offset ${i} in character class`);
  }
  if (c === 0x5c /* \ */) {
    i++;
    if (i >= p.length) throw new GlobSyntaxError('unterminated character class');
  }
  // The pattern comes from a JS string, so it is valid UTF-8 (Go would reject invalid bytes here).
  const [rune, width] = decodeRune(p, i);
  i += width;
  if (i >= p.length) throw new GlobSyntaxError('unterminated character class');
  return [rune, i];
}

/** Parses `[...]` starting just after the '['; returns the token and the index after ']'. */
function parseClass(p: Uint8Array, start: number): [ClassToken, number] {
  let i = start;
  let negated = false;
  if (p[i] === 0x5e /* ^ */) {
    negated = true;
    i++;
  }
  const ranges: (readonly [number, number])[] = [];
  for (;;) {
    if (p[i] === 0x5d /* ] */ && ranges.length > 0) return [{ kind: 'class', negated, ranges }, i + 1];
    const [lo, afterLo] = readClassRune(p, i);
    i = afterLo;
    let hi = lo;
    if (p[i] === 0x2d /* - */) {
      const [h, afterHi] = readClassRune(p, i + 1);
      hi = h;
      i = afterHi;
    }
    ranges.push([lo, hi]);
  }
}

/** Splits a pattern into star-led chunks of fixed-width tokens; throws GlobSyntaxError when malformed. */
function compile(pattern: string): Chunk[] {
  const p = encoder.encode(pattern);
  const chunks: Chunk[] = [];
  let tokens: Token[] = [];
  let star = false;
  let i = 0;
  while (i < p.length) {
    const c = p[i]!;
    if (c === 0x2a /* * */) {
      // A star ends the chunk being built; consecutive stars collapse into one.
      if (tokens.length > 0) {
        chunks.push({ star, tokens });
        tokens = [];
      }
      star = true;
      i++;
    } else if (c === 0x3f /* ? */) {
      tokens.push({ kind: 'any' });
      i++;
    } else if (c === 0x5b /* [ */) {
      const [tok, next] = parseClass(p, i + 1);
      tokens.push(tok);
      i = next;
    } else if (c === 0x5c /* \ */) {
      if (i + 1 >= p.length) throw new GlobSyntaxError('trailing backslash');
      tokens.push({ kind: 'byte', value: p[i + 1]! });
      i += 2;
    } else {
      tokens.push({ kind: 'byte', value: c });
      i++;
    }
  }
  if (tokens.length > 0 || star) chunks.push({ star, tokens });
  return chunks;
}

/** Matches one chunk's tokens at the start of name[from..]; returns the end index or -1. */
function matchTokens(tokens: readonly Token[], name: Uint8Array, from: number): number {
  let i = from;
  for (const t of tokens) {
    if (i >= name.length) return -1;
    if (t.kind === 'byte') {
      if (name[i] !== t.value) return -1;
      i++;
    } else if (t.kind === 'any') {
      if (name[i] === SLASH) return -1;
      i += decodeRune(name, i)[1];
    } else {
      const [r, width] = decodeRune(name, i);
      let hit = false;
      for (const [lo, hi] of t.ranges) {
        if (lo <= r && r <= hi) {
          hit = true;
          break;
        }
      }
      if (hit === t.negated) return -1;
      i += width;
    }
  }
  return i;
}

function run(chunks: readonly Chunk[], name: Uint8Array): boolean {
  let pos = 0;
  for (let c = 0; c < chunks.length; c++) {
    const chunk = chunks[c]!;
    const last = c === chunks.length - 1;
    if (chunk.star && chunk.tokens.length === 0) {
      // Trailing star: matches the rest unless it contains a '/'.
      return !name.subarray(pos).includes(SLASH);
    }
    let end = matchTokens(chunk.tokens, name, pos);
    if (end >= 0 && (!last || end === name.length)) {
      pos = end;
      continue;
    }
    if (!chunk.star) return false;
    // The star may skip bytes, but never a '/'.
    end = -1;
    for (let skip = pos; skip < name.length && name[skip] !== SLASH; skip++) {
      const e = matchTokens(chunk.tokens, name, skip + 1);
      if (e >= 0 && (!last || e === name.length)) {
        end = e;
        break;
      }
    }
    if (end < 0) return false;
    pos = end;
  }
  return pos === name.length;
}

function compileOrThrow(pattern: string): Chunk[] {
  try {
    return compile(pattern);
  } catch (err) {
    if (err instanceof GlobSyntaxError) throw new Error(BAD_PATTERN, { cause: err });
    throw err;
  }
}

/**
 * Go filepath.Match: reports whether `name` matches the shell pattern.
 * Throws Error('syntax error in pattern') when the pattern is malformed.
 */
export function globMatch(pattern: string, name: string): boolean {
  return run(compileOrThrow(pattern), encoder.encode(name));
}

/** Returns a message starting with "syntax error in pattern" when malformed, else undefined. */
export function globSyntaxError(pattern: string): string | undefined {
  try {
    compile(pattern);
    return undefined;
  } catch (err) {
    if (err instanceof GlobSyntaxError) return `${BAD_PATTERN}: ${err.detail}`;
    throw err;
  }
}

/**
 * The Go provisioner's namePattern rule: split on ',' (no trimming), skip empty
 * pieces, and report whether any piece matches. Pieces are tried in order, so a
 * malformed piece throws (like Go) only when no earlier piece matched.
 */
export function matchesNamePattern(namePattern: string, name: string): boolean {
  const bytes = encoder.encode(name);
  for (const piece of namePattern.split(',')) {
    if (piece === '') continue;
    if (run(compileOrThrow(piece), bytes)) return true;
  }
  return false;
}
