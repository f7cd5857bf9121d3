import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { discoveredIdentity, identityMismatch, pathKind, recordedIdentity, type PathKind } from '../../src/identity/identity.ts';

const blk = (major: number, minor: number): PathKind => ({ kind: 'block', major, minor });
const dir: PathKind = { kind: 'directory' };

describe('volume identity', () => {
  it('mount: a directory matches (mount point or vanished); a block device or a file do not', () => {
    expect(identityMismatch('mount', dir, '/d/v')).toBeUndefined();
    expect(identityMismatch('mount', blk(8, 0), '/d/v')).toBe('it was discovered as "mount" but "/d/v" now resolves to block device 8:0');
    // A directory that is no longer a mount point is a vanished volume (VolumeMissing), not another volume.
    expect(identityMismatch('mount', dir, '/d/v')).toBeUndefined();
    expect(identityMismatch('mount', { kind: 'other' }, '/d/v')).toMatch(/neither a directory nor a block device/);
  });

  it('block:M:m: the same device number matches; another number, a directory or a malformed value do not', () => {
    expect(identityMismatch('block:7:3', blk(7, 3), '/d/b')).toBeUndefined();
    expect(identityMismatch('block:7:3', blk(7, 4), '/d/b')).toBe('it was discovered as "block:7:3" but "/d/b" now resolves to block device 7:4');
    expect(identityMismatch('block:7:3', dir, '/d/b')).toBe('it was discovered as "block:7:3" but "/d/b" is now a directory');
    expect(identityMismatch('block:7', blk(7, 3), '/d/b')).toMatch(/is not one this provisioner writes/);
  });

  it('a missing path is not a mismatch (the deleter reports it as VolumeMissing)', () => {
    expect(identityMismatch('mount', { kind: 'missing', error: new Error('ENOENT') }, '/d/v')).toBeUndefined();
  });

  it('discovery: mount for Filesystem; pathKind of a directory and of a missing path; no annotation = no identity', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'lsp-ident-'));
    try {
      expect(await discoveredIdentity(tmp, 'Filesystem')).toBe('mount');
      await expect(discoveredIdentity(tmp, 'Block')).rejects.toThrow(/is no longer a block device/);
      expect(await pathKind(tmp)).toMatchObject({ kind: 'directory' });
      expect((await pathKind(join(tmp, 'gone'))).kind).toBe('missing');
      expect(recordedIdentity({ metadata: { annotations: { 'pv.kubernetes.io/provisioned-by': 'x' } } })).toBeUndefined();
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
