// The Filesystem cleaner's rules, each asserted on its own (mutation testing,
// docs/cleanup.md "Mutation testing"). cleaner.test.ts has the end-to-end cases.
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cleanFilesystem } from '../../src/deleter/fs-cleaner.ts';
import { writeMountInfo } from '../support/mountinfo.ts';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'lsp-fsrules-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** A volume directory listed as a mount point in a mount table of its own (no mount needed). */
function volume(): { vol: string; mountInfoPath: string } {
  const vol = join(dir, 'vol');
  mkdirSync(vol);
  const mountInfoPath = join(dir, 'mountinfo');
  writeMountInfo(mountInfoPath, [vol]);
  return { vol, mountInfoPath };
}

function countTree(p: string): number {
  let n = 0;
  for (const e of readdirSync(p, { withFileTypes: true })) {
    n++;
    if (e.isDirectory()) n += countTree(join(p, e.name));
  }
  return n;
}

const openFds = (): number => readdirSync('/proc/self/fd').length;

describe('cleanFilesystem: abort', () => {
  it('an abort during the walk stops it: the clean fails as aborted (not as "entries left"), and every directory fd is closed', async () => {
    const { vol, mountInfoPath } = volume();
    // A chain of 12 nested directories with 40 files each: the walk is several levels deep when it first yields.
    let d = vol;
    for (let i = 0; i < 12; i++) {
      d = join(d, `d${i}`);
      mkdirSync(d);
      for (let j = 0; j < 40; j++) writeFileSync(join(d, `f${j}`), 'x');
    }
    const total = countTree(vol);
    const ac = new AbortController();
    // The walk yields to the event loop (setImmediate) in batches: abort at the first yield after a removal.
    const poll = (): void => {
      if (countTree(vol) < total) ac.abort();
      else setImmediate(poll);
    };
    setImmediate(poll);
    const fdsBefore = openFds();
    const r = await cleanFilesystem(vol, { mountInfoPath, signal: ac.signal });
    expect(ac.signal.aborted).toBe(true);
    expect(r.ok).toBe(false);
    expect(r.error).toBe('cleanup aborted');
    const left = countTree(vol);
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThan(total);
    expect(r.removed).toBe(total - left);
    expect(openFds()).toBe(fdsBefore);
  });
});

describe('cleanFilesystem: the fresh mount check', () => {
  it('a mount table that cannot be read fails the clean (it never throws) and removes nothing', async () => {
    const { vol } = volume();
    writeFileSync(join(vol, 'data'), 'x');
    const r = await cleanFilesystem(vol, { mountInfoPath: join(dir, 'no-such-mountinfo') });
    expect(r.ok).toBe(false);
    expect(r.error).toMatch(new RegExp(`^cannot check that ${vol} is still the volume's mount point: .*; nothing was removed$`));
    expect(readdirSync(vol)).toEqual(['data']);
  });
});
