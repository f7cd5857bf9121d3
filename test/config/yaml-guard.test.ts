import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { Composer, isMap, isPair, isSeq, LineCounter, Parser } from 'yaml';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseGoYaml } from '../../src/config/goyaml.ts';
import type { GoValue } from '../../src/config/goyaml.ts';
import { boundedParse, MAX_YAML_NESTING, MAX_YAML_NODES, YamlLimitError } from '../../src/config/yaml-guard.ts';

const LOAD_TS = fileURLToPath(new URL('../../src/config/load.ts', import.meta.url));

function treeDepth(v: GoValue | undefined): number {
  if (v === undefined) return -1;
  if (v.kind === 'map') return 1 + Math.max(0, ...v.entries.map((e) => treeDepth(e.value)));
  if (v.kind === 'seq') return 1 + Math.max(0, ...v.items.map(treeDepth));
  return 0;
}

describe('parseGoYaml: nesting is bounded before the parser builds it', () => {
  it('rejects 1 MiB of "[" at once, naming the line', () => {
    const r = parseGoYaml('['.repeat(1024 * 1024));
    expect(r.value).toBeUndefined();
    expect(r.errors).toEqual([{ message: `YAML nested deeper than ${MAX_YAML_NESTING} levels`, line: 1 }]);
  });

  it('rejects deep block nesting by indentation with the line where it gets too deep', () => {
    const text = Array.from({ length: 80 }, (_, i) => `${' '.repeat(i)}k:`).join('\n') + ' v\n';
    const r = parseGoYaml(text);
    expect(r.value).toBeUndefined();
    expect(r.errors).toHaveLength(1);
    expect(r.errors[0]!.message).toBe(`YAML nested deeper than ${MAX_YAML_NESTING} levels`);
    expect(r.errors[0]!.line).toBeGreaterThan(MAX_YAML_NESTING - 5);
    expect(r.errors[0]!.line).toBeLessThanOrEqual(MAX_YAML_NESTING + 1);
  });

  it('rejects compact nesting on one line ("- - - …", "{k: {k: …") at the limit, not later', () => {
    for (const text of [`${'- '.repeat(70)}x`, `${'{k: '.repeat(70)}v${'}'.repeat(70)}`]) {
      expect(parseGoYaml(text).errors).toEqual([{ message: `YAML nested deeper than ${MAX_YAML_NESTING} levels`, line: 1 }]);
    }
  });

  it('accepts nesting well inside the limit', () => {
    const block = Array.from({ length: 40 }, (_, i) => `${' '.repeat(i)}k:`).join('\n') + ' v\n';
    expect(treeDepth(parseGoYaml(block).value)).toBe(40);
    const flow = `${'['.repeat(40)}x${']'.repeat(40)}`;
    expect(treeDepth(parseGoYaml(flow).value)).toBe(40);
  });

  it('stops a flat text of too many nodes while parsing it, with the line reached', () => {
    const nodes = `${MAX_YAML_NODES} nodes (values, keys, lists and maps)`;
    expect(parseGoYaml(`x: [${'a,'.repeat(MAX_YAML_NODES)}a]\n`).errors).toEqual([{ message: `YAML has more than ${nodes}`, line: 1 }]);
    const block = parseGoYaml(`x:\n${'- a\n'.repeat(MAX_YAML_NODES / 2)}`);
    expect(block.errors).toEqual([{ message: `YAML has more than ${nodes}`, line: MAX_YAML_NODES / 2 + 1 }]); // "x:" is line 1, item 25,000 starts token 50,001
    // 20,000 list items (plus their indicators) are fine
    const fine = parseGoYaml(`x:\n${'- a\n'.repeat(20_000)}`).value;
    expect(fine?.kind === 'map' && fine.entries[0]!.value.kind === 'seq' && fine.entries[0]!.value.items.length).toBe(20_000);
  }, 60_000);

  it('rejects characters YAML forbids, with their line, as go-yaml does', () => {
    expect(parseGoYaml('a: 1\nb: x\u0000y\n').errors).toEqual([
      { message: 'character U+0000 is not allowed in YAML (control characters are not allowed)', line: 2 },
    ]);
    expect(parseGoYaml('a: \u001b[31m\n').errors[0]!.message).toContain('U+001B');
    // tab, CR, LF, NEL and ordinary Unicode are fine
    expect(parseGoYaml('a:\t"x\u0085é"\r\nb: 2\n').errors).toEqual([]);
  });

  it('never lets the parser build a tree deeper than twice its stack limit, whatever the text (property)', () => {
    const pieces = ['- ', ': ', '? ', 'a', 'k: ', '\n', '\n  ', '\n    ', ' ', '[', ']', '{', '}', ',', '&x ', '*x', '!t ', '|', '"s"', "'s'", '#c', '[k: ', '---\n', '\t', '\r'];
    const nodeDepth = (n: unknown): number => {
      if (isMap(n) || isSeq(n)) {
        let m = 0;
        for (const it of n.items) m = Math.max(m, isPair(it) ? Math.max(nodeDepth(it.key), nodeDepth(it.value)) : nodeDepth(it));
        return 1 + m;
      }
      return 0;
    };
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...pieces), { maxLength: 60 }), fc.integer({ min: 1, max: 8 }), (parts, limit) => {
        const text = parts.join('');
        const lines = new LineCounter();
        const composer = new Composer({ version: '1.1', schema: 'failsafe', uniqueKeys: false });
        try {
          for (const doc of composer.compose(boundedParse(new Parser(lines.addNewLine), text, lines, { maxNesting: limit }), true, text.length)) {
            expect(nodeDepth(doc.contents)).toBeLessThanOrEqual(2 * limit);
          }
        } catch (err) {
          if (!(err instanceof YamlLimitError)) throw err;
        }
      }),
      { numRuns: 3000 },
    );
  }, 60_000);
});

describe('loading a deeply nested file under the DaemonSet memory limit', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'lsp-deep-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reports 1 MiB of "[" as invalid in a 256 MiB heap instead of dying', async () => {
    await writeFile(path.join(dir, 'storageClassMap'), '['.repeat(1024 * 1024));
    // The size limit would stop this file first: raise it so the nesting guard is what is tested.
    const script = `
      const { loadConfig } = await import(${JSON.stringify(LOAD_TS)});
      const { result } = await loadConfig(${JSON.stringify(dir)}, { maxFileBytes: 2 * 1024 * 1024 });
      process.stdout.write(JSON.stringify(result));`;
    const child = spawnSync(process.execPath, ['--max-old-space-size=256', '--input-type=module', '-e', script], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(child.stderr).not.toContain('heap out of memory');
    expect(child.status).toBe(0);
    const result = JSON.parse(child.stdout) as { ok: boolean; errors: unknown[] };
    expect(result).toMatchObject({ ok: false });
    expect(result.errors).toEqual([
      { path: 'storageClassMap', file: 'storageClassMap', line: 1, message: `YAML nested deeper than ${MAX_YAML_NESTING} levels` },
    ]);
  }, 150_000);
});
