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
// Characters YAML does not allow are rejected first, as go-yaml v2 does
// ("control characters are not allowed").
import { Lexer } from 'yaml';
import type { CST, LineCounter, Parser } from 'yaml';

/**
 * Deepest parser stack accepted in one config file: about one entry per
 * collection level (a real config needs about 8). The tree built from it can
 * be deeper by the one-pair maps of "[k: v]" items (at most twice as deep).
 */
export const MAX_YAML_NESTING = 64;

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

/**
 * What `parser.parse(source)` yields, but throws a YamlLimitError as soon as
 * the parser has more than `maxNesting` tokens open.
 */
export function* boundedParse(
  parser: Parser,
  source: string,
  lines: LineCounter,
  maxNesting: number = MAX_YAML_NESTING,
): Generator<CST.Token, void> {
  lines.addNewLine(0); // what Parser#parse does first
  for (const lexeme of new Lexer().lex(source)) {
    yield* parser.next(lexeme);
    if (parser.stack.length > maxNesting) {
      throw new YamlLimitError(`YAML nested deeper than ${maxNesting} levels`, lines.linePos(parser.offset).line);
    }
  }
  yield* parser.end();
}
