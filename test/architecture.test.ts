// The dependency direction of src/ (docs/architecture.md): the PV vocabulary
// (src/volume) and the host facts (src/host) sit below their users, and no
// module imports itself back through a chain of imports (type-only imports
// included: they are edges a reader follows too).
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../src');
const IMPORT = /(?:import|export)\s[^;]*?from\s+['"](\.[^'"]+)['"]|import\(\s*['"](\.[^'"]+)['"]\s*\)/gs;

/** Module (path relative to src/) -> the src/ modules it imports. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const entry of readdirSync(SRC, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.ts')) continue;
    const file = join(entry.parentPath, entry.name);
    const deps = [...readFileSync(file, 'utf8').matchAll(IMPORT)].map((m) => relative(SRC, resolve(dirname(file), m[1] ?? m[2] ?? '')));
    graph.set(relative(SRC, file), deps);
  }
  return graph;
}

const folder = (mod: string): string => mod.split('/')[0] ?? mod;

/** Every cycle a depth-first walk of the graph meets, as "a -> b -> a". */
function findCycles(graph: ReadonlyMap<string, Iterable<string>>): string[] {
  const state = new Map<string, 'open' | 'done'>();
  const cycles: string[] = [];
  const visit = (node: string, path: string[]): void => {
    state.set(node, 'open');
    for (const dep of graph.get(node) ?? []) {
      if (state.get(dep) === 'open') cycles.push([...path.slice(path.indexOf(dep)), dep].join(' -> '));
      else if (!state.has(dep) && graph.has(dep)) visit(dep, [...path, dep]);
    }
    state.set(node, 'done');
  };
  for (const node of graph.keys()) if (!state.has(node)) visit(node, [node]);
  return cycles;
}

describe('src/ import graph', () => {
  const graph = importGraph();

  it('resolves every relative import to a module of src/', () => {
    const dangling = [...graph].flatMap(([mod, deps]) => deps.filter((d) => !graph.has(d)).map((d) => `${mod} -> ${d}`));
    expect(dangling).toEqual([]);
  });

  it('keeps src/volume, src/identity and src/host below discovery, deleter, controller and server', () => {
    const upper = new Set(['discovery', 'deleter', 'cache', 'controller', 'server', 'node-cleanup', 'watcher']);
    const upward = [...graph]
      .filter(([mod]) => ['volume', 'identity', 'host'].includes(folder(mod)))
      .flatMap(([mod, deps]) => deps.filter((d) => upper.has(folder(d)) || !d.includes('/')).map((d) => `${mod} -> ${d}`));
    expect(upward).toEqual([]);
  });

  it('has no import cycle between modules', () => {
    expect(findCycles(graph)).toEqual([]);
  });

  it('has no import cycle between folders (a root module counts as a folder of its own)', () => {
    const folders = new Map<string, Set<string>>();
    for (const [mod, deps] of graph) {
      const from = folder(mod);
      const to = folders.get(from) ?? new Set<string>();
      for (const dep of deps) if (folder(dep) !== from) to.add(folder(dep));
      folders.set(from, to);
    }
    expect(findCycles(folders)).toEqual([]);
  });

  it('reads process.env only in the flags module of each binary', () => {
    const readers = [...graph.keys()].filter((mod) => /\bprocess\.env\b/.test(readFileSync(join(SRC, mod), 'utf8'))).sort();
    expect(readers).toEqual(['flags.ts', 'node-cleanup/flags.ts']);
  });

  it('waits with node:timers/promises, not a hand-made Promise around setTimeout', () => {
    // A cancellable sleep is `setTimeout(ms, undefined, { signal })` from node:timers/promises.
    const HAND_MADE_SLEEP = /new Promise(?:<[^>]*>)?\(\((?:resolve|res)\b[\s\S]{0,300}?\bsetTimeout\(/;
    const sleepers = [...graph.keys()].filter((mod) => HAND_MADE_SLEEP.test(readFileSync(join(SRC, mod), 'utf8')));
    expect(sleepers).toEqual([]);
  });

  it('spells the hostname label once', () => {
    const copies = [...graph.keys()].filter((mod) => readFileSync(join(SRC, mod), 'utf8').includes("'kubernetes.io/hostname'"));
    expect(copies).toEqual(['volume/pv-spec.ts']);
  });
});
