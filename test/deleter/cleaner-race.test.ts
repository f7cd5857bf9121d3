// A hostile tenant swaps a directory of its volume for a symlink to a sibling volume on the same device, in a
// tight loop, while the volume is cleaned. No clean may ever delete a file of the sibling.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cleanFilesystem } from '../../src/deleter/cleaner.ts';
import { killAndReap, swapRacer, waitReady } from '../support/child.ts';
import { canMount, mountAt as mountIn, NEEDS_ROOT, umountAll } from '../support/mountinfo.ts';

const CLEANS = 60;
const DEADLINE_MS = 30_000;
const SIBLING_FILES = 40;

// Makes <vol>/x a directory holding decoys with the sibling's file names, then moves it away and puts a symlink
// to the sibling in its place, over and over: a cleaner that lists x and then removes x/<name> by path deletes
// the sibling's files.
const RACER = swapRacer("fs.mkdirSync(d); for (const n of args) fs.writeFileSync(d + '/' + n, 'decoy');", '50 + (i % 7) * 50', '50 + (i % 5) * 100');

let dir: string;
let mounts: string[];
let racer: ChildProcess | undefined;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'lsp-cleaner-race-'));
  mounts = [];
});
afterEach(async () => {
  await killAndReap(racer);
  racer = undefined;
  umountAll(mounts);
  rmSync(dir, { recursive: true, force: true });
});

const mountAt = (target: string, ...args: string[]): string => mountIn(mounts, target, ...args);

async function startRacer(vol: string, target: string, names: readonly string[]): Promise<void> {
  racer = spawn(process.execPath, ['-e', RACER, vol, target, ...names], { stdio: ['ignore', 'pipe', 'inherit'] });
  await waitReady(racer);
}

describe.skipIf(!canMount)(`cleanFilesystem against a symlink racer (${NEEDS_ROOT})`, () => {
  it('never deletes a file of a sibling volume on the same device', { timeout: DEADLINE_MS + 30_000 }, async () => {
    // One disk (tmpfs), two volumes on it, each bind-mounted like a real local volume.
    const disk = mountAt(join(dir, 'disk'), '-t', 'tmpfs', '-o', 'size=16m', 'lsp-race');
    mkdirSync(join(disk, 'vol'));
    mkdirSync(join(disk, 'sibling'));
    const vol = mountAt(join(dir, 'mnt', 'vol'), '--bind', join(disk, 'vol'));
    const sibling = mountAt(join(dir, 'mnt', 'sibling'), '--bind', join(disk, 'sibling'));
    const names = Array.from({ length: SIBLING_FILES }, (_, i) => `s${i}`);
    for (const n of names) writeFileSync(join(sibling, n), `sibling ${n}`);

    await startRacer(vol, sibling, names);
    const deadline = Date.now() + DEADLINE_MS;
    let cleans = 0;
    const outcomes = new Map<string, number>();
    while (cleans < CLEANS && Date.now() < deadline) {
      for (let i = 0; i < 20; i++) writeFileSync(join(vol, `t${i}`), 'tenant');
      const r = await cleanFilesystem(vol);
      cleans++;
      const key = r.ok ? 'ok' : (r.error ?? '').replace(/^.*: /, '');
      outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
      expect(readdirSync(sibling).sort(), `after clean ${cleans}`).toEqual([...names].sort());
      for (const n of names) expect(readFileSync(join(sibling, n), 'utf8')).toBe(`sibling ${n}`);
    }
    expect(racer?.exitCode).toBe(null); // the racer ran the whole time
    expect(cleans).toBeGreaterThan(0);
    // The racer did get in the way (a clean it disturbed fails with a reason; the next one retries).
    expect([...outcomes.keys()].filter((k) => k !== 'ok').length, JSON.stringify([...outcomes])).toBeGreaterThan(0);
  });
});
