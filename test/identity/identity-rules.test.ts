// The identity rules asserted one by one (mutation testing, docs/cleanup.md "Mutation testing"):
// what a path resolves to, what discovery records, and which recorded values match which paths.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { blockIdentity, discoveredIdentity, identityMismatch, pathKind, recordedIdentity, type PathKind } from '../../src/identity/identity.ts';

const blk = (major: number, minor: number): PathKind => ({ kind: 'block', major, minor });

let tmp: string;
beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'lsp-ident-rules-'));
});
afterEach(() => {
  rmSync(tmp, { recursive: true, force: true });
});

describe('what a path resolves to', () => {
  it('a regular file is "other", never a directory (a Filesystem PV on a file is not its mount point)', async () => {
    const f = join(tmp, 'file');
    writeFileSync(f, 'x');
    expect(await pathKind(f)).toEqual({ kind: 'other' });
    expect(identityMismatch('mount', await pathKind(f), f)).toBe(`it was discovered as "mount" but ${JSON.stringify(f)} is now neither a directory nor a block device`);
  });

  it.skipIf(process.getuid?.() !== 0)('a block device node is its device number, and discovery records exactly "block:<major>:<minor>"', async () => {
    const dev = join(tmp, 'dev');
    execFileSync('mknod', [dev, 'b', '250', '17']);
    expect(await pathKind(dev)).toEqual({ kind: 'block', major: 250, minor: 17 });
    expect(await discoveredIdentity(dev, 'Block')).toBe('block:250:17');
    expect(identityMismatch('block:250:17', await pathKind(dev), dev)).toBeUndefined();
    expect(identityMismatch('block:250:1', await pathKind(dev), dev)).toMatch(/now resolves to block device 250:17$/);
  });

  it('blockIdentity writes what identityMismatch reads', () => {
    expect(blockIdentity(8, 16)).toBe('block:8:16');
    expect(identityMismatch(blockIdentity(259, 3), blk(259, 3), '/d/b')).toBeUndefined();
  });
});

describe('the recorded identity', () => {
  it('a PV without metadata or without annotations has none (no throw)', () => {
    expect(recordedIdentity({})).toBeUndefined();
    expect(recordedIdentity({ metadata: {} })).toBeUndefined();
    expect(recordedIdentity({ metadata: { annotations: { 'local-static-provisioner/volume-identity': 'block:1:2' } } })).toBe('block:1:2');
  });

  it('only the exact form block:<digits>:<digits> is a block identity; anything around it is a value this provisioner never writes', () => {
    for (const bad of ['xblock:7:3', 'block:7:3x', 'block:7:3\n', ' block:7:3', 'block::3', 'block:7:']) {
      expect(identityMismatch(bad, blk(7, 3), '/d/b'), bad).toBe(`its identity annotation ${JSON.stringify(bad)} is not one this provisioner writes`);
    }
  });

  it('multi-digit major and minor numbers match (NVMe 259:12, loop 7:130)', () => {
    expect(identityMismatch('block:259:12', blk(259, 12), '/d/b')).toBeUndefined();
    expect(identityMismatch('block:7:130', blk(7, 130), '/d/b')).toBeUndefined();
    expect(identityMismatch('block:259:12', blk(259, 1), '/d/b')).toMatch(/now resolves to block device 259:1$/);
  });

  it('a Block PV whose path is now neither a block device nor a directory is refused as "not a block device"', () => {
    expect(identityMismatch('block:7:3', { kind: 'other' }, '/d/b')).toBe('it was discovered as "block:7:3" but "/d/b" is now not a block device');
  });
});
