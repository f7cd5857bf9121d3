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

describe('src/ import graph', () => {
  const graph = importGraph();

  it('resolves every relative import to a module of src/', () => {
    const dangling = [...graph].flatMap(([mod, deps]) => deps.filter((d) => !graph.has(d)).map((d) => `${mod} -> ${d}`));
    expect(dangling).toEqual([]);
  });

  it('keeps src/volume and src/host below discovery, deleter, controller and server', () => {
    const upper = new Set(['discovery', 'deleter', 'cache', 'controller', 'server', 'node-cleanup', 'watcher']);
    const upward = [...graph]
      .filter(([mod]) => ['volume', 'host'].includes(folder(mod)))
      .flatMap(([mod, deps]) => deps.filter((d) => upper.has(folder(d)) || !d.includes('/')).map((d) => `${mod} -> ${d}`));
    expect(upward).toEqual([]);
  });

  it('has no import cycle between modules', () => {
    const state = new Map<string, 'open' | 'done'>();
    const cycles: string[] = [];
    const visit = (mod: string, path: string[]): void => {
      state.set(mod, 'open');
      for (const dep of graph.get(mod) ?? []) {
        if (state.get(dep) === 'open') cycles.push([...path.slice(path.indexOf(dep)), dep].join(' -> '));
        else if (!state.has(dep) && graph.has(dep)) visit(dep, [...path, dep]);
      }
      state.set(mod, 'done');
    };
    for (const mod of graph.keys()) if (!state.has(mod)) visit(mod, [mod]);
    expect(cycles).toEqual([]);
  });

  it('reads process.env only in the flags module of each binary', () => {
    const readers = [...graph.keys()].filter((mod) => /\bprocess\.env\b/.test(readFileSync(join(SRC, mod), 'utf8'))).sort();
    expect(readers).toEqual(['flags.ts', 'node-cleanup/flags.ts']);
  });

  it('spells the hostname label once', () => {
    const copies = [...graph.keys()].filter((mod) => readFileSync(join(SRC, mod), 'utf8').includes("'kubernetes.io/hostname'"));
    expect(copies).toEqual(['volume/pv-spec.ts']);
  });
});
