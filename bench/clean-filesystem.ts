// `node bench/clean-filesystem.ts`: time of an in-process Filesystem clean of N dirs x M files on a fresh tmpfs,
// against `find -mindepth 1 -delete` on the same tree. Needs root (tmpfs mounts).
//
//   node bench/clean-filesystem.ts [--dirs 100 --files 100 --rounds 5 --compare path/to/other-cleaner.ts]
//   node bench/clean-filesystem.ts --depth 1500   # one chain of 1500 directories, a file in each, instead
//
// --compare imports another module exporting cleanFilesystem (e.g. an older cleaner.ts copied into src/deleter/)
// and times it in the same run, rounds interleaved.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { cleanFilesystem } from '../src/deleter/cleaner.ts';

type Clean = (path: string) => Promise<{ ok: boolean; error?: string | undefined }>;

const { values } = parseArgs({
  options: {
    dirs: { type: 'string', default: '100' },
    files: { type: 'string', default: '100' },
    rounds: { type: 'string', default: '5' },
    depth: { type: 'string', default: '0' },
    compare: { type: 'string' },
  },
});
const dirs = Number(values.dirs);
const files = Number(values.files);
const rounds = Number(values.rounds);
const depth = Number(values.depth);

const base = mkdtempSync(join(tmpdir(), 'lsp-bench-clean-'));
const vol = join(base, 'vol');
mkdirSync(vol);
execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256m', 'lsp-bench', vol]);

function populate(): void {
  if (depth > 0) {
    const levels = Array.from({ length: depth }, (_, i) => join(vol, ...Array.from({ length: i + 1 }, () => 'd')));
    mkdirSync(levels.at(-1) as string, { recursive: true });
    for (const l of levels) writeFileSync(join(l, 'f'), 'x');
    return;
  }
  for (let d = 0; d < dirs; d++) {
    mkdirSync(join(vol, `d${d}`));
    for (let f = 0; f < files; f++) writeFileSync(join(vol, `d${d}`, `f${f}`), 'x');
  }
}

const contenders: Array<[string, Clean]> = [
  ['cleanFilesystem', (p) => cleanFilesystem(p)],
  [
    'find -delete',
    (p) => {
      execFileSync('find', [p, '-mindepth', '1', '-delete']);
      return Promise.resolve({ ok: true });
    },
  ],
];
if (values.compare) {
  const other = (await import(resolve(values.compare))) as { cleanFilesystem: Clean };
  contenders.push([`${values.compare} cleanFilesystem`, (p) => other.cleanFilesystem(p)]);
}

try {
  const times = new Map<string, number[]>(contenders.map(([n]) => [n, []]));
  for (let r = 0; r < rounds; r++) {
    for (const [name, clean] of contenders) {
      populate();
      const t0 = performance.now();
      const res = await clean(vol);
      const ms = performance.now() - t0;
      if (!res.ok || readdirSync(vol).length > 0) throw new Error(`${name} did not clean the volume: ${res.error ?? 'entries left'}`);
      times.get(name)?.push(ms);
    }
  }
  const tree = depth > 0 ? `a chain of ${depth} dirs, a file in each (${2 * depth} entries)` : `${dirs} dirs x ${files} files (${dirs * files + dirs} entries)`;
  process.stdout.write(`${tree} on tmpfs, ${rounds} rounds, interleaved\n\n`);
  process.stdout.write('| cleaner | min (s) | median (s) | max (s) |\n|---|---|---|---|\n');
  for (const [name, ts] of times) {
    const s = [...ts].sort((a, b) => a - b);
    const f = (ms: number | undefined): string => ((ms ?? NaN) / 1000).toFixed(3);
    process.stdout.write(`| ${name} | ${f(s[0])} | ${f(s[Math.floor(s.length / 2)])} | ${f(s.at(-1))} |\n`);
  }
} finally {
  execFileSync('umount', [vol]);
  rmSync(base, { recursive: true, force: true });
}
