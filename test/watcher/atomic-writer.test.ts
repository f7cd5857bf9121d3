// The kubelet AtomicWriter double must produce the layout the watcher is tested against.
import { mkdtemp, readdir, readFile, readlink, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AtomicWriter } from '../support/atomic-writer.ts';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'aw-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('AtomicWriter', () => {
  it('writes a timestamped generation, ..data and visible key symlinks', async () => {
    const w = new AtomicWriter(dir);
    await w.write({ storageClassMap: 'a: 1\n', useAlphaAPI: 'false' });
    const entries = (await readdir(dir)).sort();
    const gen = entries.find((e) => /^\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d+$/.test(e));
    expect(gen).toBeDefined();
    expect(entries).toEqual(['..data', gen, 'storageClassMap', 'useAlphaAPI'].sort());
    expect(await readlink(path.join(dir, '..data'))).toBe(gen);
    expect(await readlink(path.join(dir, 'storageClassMap'))).toBe('..data/storageClassMap');
    expect(await readFile(path.join(dir, 'storageClassMap'), 'utf8')).toBe('a: 1\n');
  });

  it('swaps generations, removes the old one, adds and removes visible keys', async () => {
    const w = new AtomicWriter(dir);
    await w.write({ a: '1', b: '2' });
    const first = await w.dataTarget();
    await w.write({ a: '10', c: '3' });
    const second = await w.dataTarget();
    expect(second).not.toBe(first);
    const entries = (await readdir(dir)).sort();
    expect(entries).toEqual(['..data', second, 'a', 'c'].sort());
    expect(await readFile(path.join(dir, 'a'), 'utf8')).toBe('10');
    expect(await readFile(path.join(dir, 'c'), 'utf8')).toBe('3');
    expect(w.generations).toBe(2);
  });

  it('touch() makes a new generation with the same content, or bumps mtimes', async () => {
    const w = new AtomicWriter(dir);
    await w.write({ a: 'x' });
    const g1 = await w.dataTarget();
    await w.touch();
    const g2 = await w.dataTarget();
    expect(g2).not.toBe(g1);
    expect(await readFile(path.join(dir, 'a'), 'utf8')).toBe('x');
    const before = (await stat(path.join(dir, 'a'))).mtimeMs;
    await new Promise((r) => setTimeout(r, 20));
    await w.touch('mtime');
    expect(await w.dataTarget()).toBe(g2);
    expect((await stat(path.join(dir, 'a'))).mtimeMs).toBeGreaterThan(before);
  });

  it('rejects keys the kubelet rejects', async () => {
    const w = new AtomicWriter(dir);
    await expect(w.write({ '..x': '' })).rejects.toThrow(/invalid key/);
    await expect(w.write({ 'a/b': '' })).rejects.toThrow(/invalid key/);
  });
});
