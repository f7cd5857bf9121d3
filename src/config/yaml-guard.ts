// Bounds on what a config file may make the YAML parser build.
//
// The `yaml` package builds one object per collection level, and nothing in it
// limits the depth: 1 MiB of "[[[[…" takes its parser past a 256 MiB heap in
// about 5 s (the DaemonSet's limit; the pod is OOM-killed and crash-loops).
// Its lexer, on the other hand, is a flat state machine that yields strings
// (1 MiB of "[" lexes in 0.4 s and 11 MB). So instead of handing the text to
// parseDocument, parseGoYaml feeds the parser one lexical token at a time and
// watches the parser's stack, the path of collections open at that token:
// past MAX_YAML_NESTING it stops, having built no more than that many levels.
// Watching the parser itself, rather than guessing depth from the text,
// also covers what its error recovery builds from malformed input (block
// sequences inside flow ones, "a b: c" as a nested map, …).
//
// The same loop counts the tokens that become nodes (scalars, aliases,
// collections, pairs) and stops past MAX_YAML_NODES: the parser and the tree
// cost about 1.4 KB of RSS per node, so 256 KiB of "[a,a,a,…" (131,000
// nodes) would take +190 MB. A real 256 KiB config has under 38,000.
//
// Characters YAML does not allow are rejected first, as go-yaml v2 does
// ("control characters are not allowed").
import { CST, Lexer } from 'yaml';
import type { LineCounter, Parser } from 'yaml';

/**
 * Deepest parser stack accepted in one config file: about one entry per
 * collection level (a real config needs about 8). The tree built from it can
 * be deeper by the one-pair maps of "[k: v]" items (at most twice as deep).
 */
export const MAX_YAML_NESTING = 64;

/** Most node-making tokens accepted in one config file; 2,000 classes with every key set take 34,000. */
export const MAX_YAML_NODES = 50_000;

const NODE_TOKENS = new Set([
  'scalar',
  'single-quoted-scalar',
  'double-quoted-scalar',
  'alias',
  'flow-map-start',
  'flow-seq-start',
  'seq-item-ind',
  'explicit-key-ind',
  'map-value-ind',
]);

export class YamlLimitError extends Error {
  /** 1-based line, when known. */
  readonly line: number | undefined;

  constructor(message: string, line: number | undefined) {
    super(message);
    this.name = 'YamlLimitError';
    this.line = line;
  }
}

// C0 controls except TAB, LF, CR; DEL; C1 controls except NEL; U+FFFE, U+FFFF.
// eslint-disable-next-line no-control-regex
const NOT_PRINTABLE = /[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x84\x86-\x9F\uFFFE\uFFFF]/;

function lineAt(text: string, index: number): number {
  let line = 1;
  for (let i = text.indexOf('\n'); i !== -1 && i < index; i = text.indexOf('\n', i + 1)) line++;
  return line;
}

/** The first character YAML does not allow, as a one-line problem; undefined when there is none. */
export function forbiddenCharacter(text: string): YamlLimitError | undefined {
  const bad = NOT_PRINTABLE.exec(text);
  if (bad === null) return undefined;
  const cp = bad[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0');
  return new YamlLimitError(`character U+${cp} is not allowed in YAML (control characters are not allowed)`, lineAt(text, bad.index));
}

export interface YamlLimits {
  readonly maxNesting?: number | undefined;
  readonly maxNodes?: number | undefined;
}

/**
 * What `parser.parse(source)` yields, but throws a YamlLimitError as soon as
 * the parser has more than `maxNesting` tokens open, or the text has more than
 * `maxNodes` tokens that make nodes.
 */
export function* boundedParse(parser: Parser, source: string, lines: LineCounter, limits: YamlLimits = {}): Generator<CST.Token, void> {
  const maxNesting = limits.maxNesting ?? MAX_YAML_NESTING;
  const maxNodes = limits.maxNodes ?? MAX_YAML_NODES;
  let nodes = 0;
  lines.addNewLine(0); // what Parser#parse does first
  for (const lexeme of new Lexer().lex(source)) {
    if (NODE_TOKENS.has(CST.tokenType(lexeme) ?? '') && ++nodes > maxNodes) {
      throw new YamlLimitError(`YAML has more than ${maxNodes} nodes (values, keys, lists and maps)`, lines.linePos(parser.offset).line);
    }
    yield* parser.next(lexeme);
    if (parser.stack.length > maxNesting) {
      throw new YamlLimitError(`YAML nested deeper than ${maxNesting} levels`, lines.linePos(parser.offset).line);
    }
  }
  yield* parser.end();
}
