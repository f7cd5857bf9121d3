// Trees deeper than the fd limit (issue 17, point 6): the Filesystem cleaner runs in a child process whose fd
// limit is 64 (soft and hard: node raises the soft limit to the hard one at start), on a real tmpfs mount, and
// must still empty a tree hundreds of levels deep, keep every safety rule while it closes and re-opens directory
// fds, and keep its error texts bounded.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cleanFilesystem } from '../../src/deleter/cleaner.ts';
import { MAX_OPEN_DIRS } from '../../src/deleter/fs-cleaner.ts';
import { MAX_TEXT_BYTES } from '../../src/util/errors.ts';
import { killAndReap, swapRacer, waitReady } from '../support/child.ts';
import { canMount, mountAt as mountIn, mountLine, mountOf, NEEDS_ROOT, umountAll, writeMountInfo } from '../support/mountinfo.ts';

const FD_LIMIT = 64;
const CLEANER = join(import.meta.dirname, '..', '..', 'src', 'deleter', 'fs-cleaner.ts');

let dir: string;
let mounts: string[];
let children: ChildProcess[];
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'lsp-cleaner-deep-'));
  mounts = [];
  children = [];
});
afterEach(async () => {
  for (const c of children) await killAndReap(c);
  umountAll(mounts);
  rmSync(dir, { recursive: true, force: true });
});

const mountAt = (target: string, ...args: string[]): string => mountIn(mounts, target, ...args);

/** Runs `script` (an ES module, argv after it) in node under `ulimit -n FD_LIMIT`; resolves with its stdout. */
async function runLimited(script: string, ...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn('sh', ['-c', `ulimit -n ${FD_LIMIT} && exec "$0" "$@"`, process.execPath, '--input-type=module', '-e', script, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr };
}

/** A chain `<base>/<name>/<name>/...` of `depth` directories, with a file `f` in each; returns the levels. */
function chain(base: string, name: string, depth: number): string[] {
  const levels: string[] = [];
  let p = base;
  for (let i = 0; i < depth; i++) {
    p = join(p, name);
    levels.push(p);
  }
  mkdirSync(p, { recursive: true });
  for (const l of levels) writeFileSync(join(l, 'f'), 'old data');
  return levels;
}

const CLEAN_ONCE = `
import { cleanFilesystem } from ${JSON.stringify(CLEANER)};
const r = await cleanFilesystem(process.argv[1]);
process.stdout.write(JSON.stringify({ ok: r.ok, error: r.error, removed: r.removed }));
`;

describe.skipIf(!canMount)(`cleanFilesystem under a low fd limit (${NEEDS_ROOT})`, () => {
  it(`empties a tree far deeper than the fd limit (${FD_LIMIT}), going up and down through closed levels`, { timeout: 60_000 }, async () => {
    const vol = mountAt(join(dir, 'vol'), '-t', 'tmpfs', '-o', 'size=32m', 'lsp-deep');
    // 300 levels of d/, with a second chain of 200 levels of e/ branching off at level 150: the walk climbs back
    // through ~150 levels whose fds it closed, descends again, and climbs out.
    const main = chain(vol, 'd', 300);
    chain(main[149] as string, 'e', 200);
    writeFileSync(join(vol, '.hidden'), 'x');
    const r = await runLimited(CLEAN_ONCE, vol);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const res = JSON.parse(r.stdout) as { ok: boolean; error?: string; removed: number };
    expect(res.error).toBeUndefined();
    expect(res.ok).toBe(true);
    expect(res.removed).toBe(300 * 2 + 200 * 2 + 1);
    expect(readdirSync(vol)).toEqual([]);
    expect(MAX_OPEN_DIRS).toBeLessThan(FD_LIMIT / 2); // the bound leaves room for node's own fds
  });

  // The re-open step under attack: while the walk is deep inside <vol>/x (so x's fd is closed), x is moved away and
  // replaced by a symlink to a sibling volume on the same disk that holds the same names. Going back up must reach
  // the directory the walk came down through, or fail: never the sibling through the symlink.
  it('never follows a directory swapped for a symlink while its fd was closed', { timeout: 90_000 }, async () => {
    const disk = mountAt(join(dir, 'disk'), '-t', 'tmpfs', '-o', 'size=64m', 'lsp-deep-race');
    mkdirSync(join(disk, 'vol'));
    mkdirSync(join(disk, 'sibling'));
    const vol = mountAt(join(dir, 'mnt', 'vol'), '--bind', join(disk, 'vol'));
    const sibling = mountAt(join(dir, 'mnt', 'sibling'), '--bind', join(disk, 'sibling'));
    // > MAX_OPEN_DIRS: the fds of x and of the top of its chain are closed at the bottom; > the fd limit with one
    // fd per level (the old walk: EMFILE at about 43 levels under this limit)
    const DEPTH = 60;
    const names = Array.from({ length: 10 }, (_, i) => `s${i}`);
    // The sibling has what a walk that followed the symlink would find: the same chain, the same file names.
    const siblingFiles: string[] = [];
    let p = sibling;
    for (let i = 0; i <= DEPTH; i++) {
      for (const n of names) {
        writeFileSync(join(p, n), `sibling ${i} ${n}`);
        siblingFiles.push(join(p, n));
      }
      if (i < DEPTH) mkdirSync((p = join(p, 'c')));
    }
    const snapshot = (): string[] => siblingFiles.map((f) => (existsSync(f) ? readFileSync(f, 'utf8') : `gone: ${f}`));
    const before = snapshot();

    // Racer: builds the tree in <vol>/.racerN, renames it to x, waits, renames it back and puts the symlink at x.
    // The chain first, then the files: each directory lists c before the decoys, so a walk that came back up into
    // the wrong directory would still have the decoys' names to remove there.
    const fill = `const [depth, ...names] = args;
      const levels = [d];
      for (let l = 1; l <= +depth; l++) levels.push(levels[l - 1] + '/c');
      fs.mkdirSync(levels[levels.length - 1], { recursive: true });
      for (const p of levels) for (const n of names) fs.writeFileSync(p + '/' + n, 'decoy');`;
    const racer = spawn(process.execPath, ['-e', swapRacer(fill, '200 + (i % 7) * 300', '100 + (i % 5) * 200'), vol, sibling, String(DEPTH), ...names], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    children.push(racer);
    await waitReady(racer);

    // The cleaner, under the fd limit: cleans until 40 cleans or 20 s, then reports the outcomes.
    const r = await runLimited(
      `
import { writeFileSync } from 'node:fs';
import { cleanFilesystem } from ${JSON.stringify(CLEANER)};
const vol = process.argv[1];
const outcomes = {};
const deadline = Date.now() + 20_000;
for (let i = 0; i < 40 && Date.now() < deadline; i++) {
  for (let t = 0; t < 5; t++) writeFileSync(vol + '/t' + t, 'tenant');
  const r = await cleanFilesystem(vol);
  const key = r.ok ? 'ok' : r.error.replace(/^.*: /, '');
  outcomes[key] = (outcomes[key] ?? 0) + 1;
}
process.stdout.write(JSON.stringify(outcomes));
`,
      vol,
    );
    expect(racer.exitCode).toBe(null); // the racer ran the whole time
    await killAndReap(racer);
    expect(r.stderr).toBe('');
    const outcomes = JSON.parse(r.stdout) as Record<string, number>;
    expect(snapshot()).toEqual(before);
    expect(readdirSync(sibling).sort()).toEqual([...names, 'c'].sort());
    // The racer got in the way (a disturbed clean fails with a reason)...
    expect(Object.keys(outcomes).filter((k) => k !== 'ok').length, JSON.stringify(outcomes)).toBeGreaterThan(0);
    // ... and once it stopped, a clean under the same fd limit empties the volume (its .racerN trees included).
    const last = await runLimited(CLEAN_ONCE, vol);
    const lastRes = JSON.parse(last.stdout) as { ok: boolean; error?: string };
    expect(lastRes.error).toBeUndefined();
    expect(lastRes.ok).toBe(true);
    expect(readdirSync(vol)).toEqual([]);
    expect(snapshot()).toEqual(before);
  });
});

describe('going back up into a level whose fd was closed', () => {
  it('fails, naming it, when that level was moved meanwhile; nothing is removed through the symlink left in its place', async () => {
    const vol = join(dir, 'vol');
    mkdirSync(vol);
    const mountInfoPath = join(dir, 'mountinfo');
    writeMountInfo(mountInfoPath, [vol]);
    const outside = join(dir, 'outside');
    mkdirSync(join(outside, 'd'), { recursive: true });
    writeFileSync(join(outside, 'keep'), 'keep');
    writeFileSync(join(outside, 'd', 'keep'), 'keep');
    // 30 levels (> MAX_OPEN_DIRS: the fds of the top levels are closed at the bottom), 1,000 files at the bottom so
    // that the walk yields to the event loop several times while it is down there.
    const levels = chain(vol, 'd', 30);
    const bottom = levels.at(-1) as string;
    for (let i = 0; i < 1000; i++) writeFileSync(join(bottom, `b${i}`), 'x');
    let swapped = false;
    const swap = (): void => {
      if (readdirSync(bottom).length < 1000) {
        // Level 2 moves elsewhere in the volume; a symlink to a directory outside takes its place.
        renameSync(levels[1] as string, join(vol, 'moved'));
        symlinkSync(outside, levels[1] as string);
        swapped = true;
      } else setImmediate(swap);
    };
    setImmediate(swap);
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(swapped).toBe(true);
    expect(r.ok).toBe(false);
    // Level 2 is re-entered through `..` of level 3 (it is that same directory, moved); `..` of it is the volume
    // root, not level 1: the walk stops there.
    expect(r.error).toBe(`${levels[0]}: was moved or replaced during the clean; not re-entered`);
    expect(readdirSync(outside).sort()).toEqual(['d', 'keep']);
    expect(readdirSync(join(outside, 'd'))).toEqual(['keep']);
    // The retry cleans the volume, unlinking the symlink without following it.
    const again = await cleanFilesystem(vol, { mountInfoPath });
    expect(again.error).toBeUndefined();
    expect(readdirSync(vol)).toEqual([]);
    expect(readdirSync(outside).sort()).toEqual(['d', 'keep']);
  });
});

describe('error texts of the Filesystem cleaner are bounded', () => {
  it(`names at most 10 entries, each path cut to its head and tail, the whole text within ${MAX_TEXT_BYTES} bytes`, async () => {
    // 12 entries listed as nested mounts 1,500 levels deep (paths of ~3 KB each): the old text was ~31 KB.
    const vol = join(dir, 'vol');
    const deep = join(vol, ...Array.from({ length: 1500 }, () => 'd'));
    mkdirSync(deep, { recursive: true });
    const points = Array.from({ length: 12 }, (_, i) => join(deep, `m${i}`));
    for (const m of points) mkdirSync(m);
    writeFileSync(join(deep, 'm0', 'precious'), 'p');
    const mountInfoPath = join(dir, 'mountinfo');
    const { id, devno } = mountOf(vol);
    writeMountInfo(
      mountInfoPath,
      [vol],
      points.map((m) => mountLine(m, id + 1, devno)),
    );
    const r = await cleanFilesystem(vol, { mountInfoPath });
    expect(r.ok).toBe(false);
    const error = r.error ?? '';
    expect(Buffer.byteLength(error)).toBeLessThanOrEqual(MAX_TEXT_BYTES);
    expect(error).toMatch(/^12 entries are on another mount and were not removed \(unmount them\): /);
    expect(error).toMatch(/ and 2 more$/);
    expect(error).toContain(`${vol}/d/d/d/`);
    expect(error).toMatch(/\[\.\.\. \d+ bytes cut \.\.\.\](\/d)+\/m\d+, /);
    expect(readFileSync(join(deep, 'm0', 'precious'), 'utf8')).toBe('p');
  });
});
