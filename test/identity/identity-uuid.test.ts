// The filesystem-UUID form of the identity (mount:uuid=<uuid>, issue 19): the superblock
// parser, the string form, and the one mismatch rule (the deleter's refusal and
// the health check's `replaced`), with properties over the whole input space.
import { execFileSync } from 'node:child_process';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { HostFixtures, isRoot } from '../../e2e/support/host.ts';
import { formatUuid, parseSuperblock } from '../../src/host/fs-uuid.ts';
import { discoveredIdentity, identityMismatch, identityUuid, mountIdentity, pathKind, type PathKind } from '../../src/identity/identity.ts';

const dirWith = (uuid: string | undefined): PathKind => ({ kind: 'directory', fs: { uuid } });
const uuidArb = fc.uint8Array({ minLength: 16, maxLength: 16 }).filter((b) => b.some((x) => x !== 0)).map(formatUuid);

describe('superblocks', () => {
  const bytes = (n: number): Buffer => Buffer.alloc(n);
  const U = Buffer.from('0123456789abcdef0123456789abcdef', 'hex');

  it('ext2/3/4: magic 0xEF53 at 1024+56, UUID at 1024+104', () => {
    const b = bytes(4096);
    b.writeUInt16LE(0xef53, 1024 + 56);
    U.copy(b, 1024 + 104);
    expect(parseSuperblock(b)).toEqual({ type: 'ext', uuid: '01234567-89ab-cdef-0123-456789abcdef' });
    b.writeUInt16LE(0xef52, 1024 + 56);
    expect(parseSuperblock(b)).toBeUndefined();
  });

  it('xfs: "XFSB" at 0, UUID at 32; btrfs: "_BHRfS_M" at 65536+64, fsid at 65536+32 (only read when the head is neither)', () => {
    const x = bytes(4096);
    x.write('XFSB', 0, 'latin1');
    U.copy(x, 32);
    expect(parseSuperblock(x)).toEqual({ type: 'xfs', uuid: '01234567-89ab-cdef-0123-456789abcdef' });
    const tail = bytes(4096);
    tail.write('_BHRfS_M', 64, 'latin1');
    U.copy(tail, 32);
    expect(parseSuperblock(bytes(4096), tail)).toEqual({ type: 'btrfs', uuid: '01234567-89ab-cdef-0123-456789abcdef' });
    expect(parseSuperblock(bytes(4096))).toBeUndefined();
  });

  it('an all-zero UUID is none; a short read is none, never a throw', () => {
    const b = bytes(4096);
    b.writeUInt16LE(0xef53, 1024 + 56);
    expect(parseSuperblock(b)).toBeUndefined();
    fc.assert(fc.property(fc.uint8Array({ maxLength: 1200 }), fc.option(fc.uint8Array({ maxLength: 80 }), { nil: undefined }), (h, t) => {
      const r = parseSuperblock(h, t);
      expect(r === undefined || /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(r.uuid)).toBe(true);
    }));
  });
});

describe('mount:uuid=<uuid>', () => {
  it('written by mountIdentity, read back by identityUuid; no UUID is the old "mount"', () => {
    fc.assert(fc.property(uuidArb, (u) => {
      expect(mountIdentity(u)).toBe(`mount:uuid=${u}`);
      expect(identityUuid(mountIdentity(u))).toBe(u);
    }));
    expect(mountIdentity(undefined)).toBe('mount');
    expect(identityUuid('mount')).toBeUndefined();
  });

  it('the same UUID matches; any other UUID, a filesystem without one, or an unreadable one is a mismatch', () => {
    fc.assert(fc.property(uuidArb, uuidArb, (a, b) => {
      const rec = mountIdentity(a);
      expect(identityMismatch(rec, dirWith(a), '/d/v')).toBeUndefined();
      if (a !== b) expect(identityMismatch(rec, dirWith(b), '/d/v')).toBe(`it was discovered as ${JSON.stringify(rec)} but "/d/v" now holds filesystem UUID ${b}`);
      expect(identityMismatch(rec, dirWith(undefined), '/d/v')).toBe(`it was discovered as ${JSON.stringify(rec)} but "/d/v" now holds a filesystem without a UUID`);
      expect(identityMismatch(rec, { kind: 'directory', fs: { error: 'EPERM' } }, '/d/v')).toBe(`it was discovered as ${JSON.stringify(rec)} but the filesystem UUID at "/d/v" cannot be read: EPERM`);
      expect(identityMismatch(rec, { kind: 'block', major: 8, minor: 1 }, '/d/v')).toMatch(/now resolves to block device 8:1$/);
      expect(identityMismatch(rec, { kind: 'other' }, '/d/v')).toMatch(/is now neither a directory nor a block device$/);
      expect(identityMismatch(rec, { kind: 'missing', error: new Error('ENOENT') }, '/d/v')).toBeUndefined();
    }));
  });

  it('"mount" (tmpfs, PVs made before UUIDs) accepts any directory: a remounted tmpfs or an ext4 is the same volume for it', () => {
    fc.assert(fc.property(fc.option(uuidArb, { nil: undefined }), (u) => {
      expect(identityMismatch('mount', dirWith(u), '/d/v')).toBeUndefined();
    }));
  });

  it('any other string is not a form this provisioner writes (upper case, braces, short, trailing text)', () => {
    for (const bad of ['mount:uuid=', 'mount:uuid=01234567-89AB-cdef-0123-456789abcdef', 'mount:uuid=0123456789abcdef0123456789abcdef', 'mount:uuid=01234567-89ab-cdef-0123-456789abcdef\n', 'mount:', 'mount:uuid=01234567-89ab-cdef-0123-456789abcde']) {
      expect(identityMismatch(bad, dirWith(undefined), '/d/v'), bad).toBe(`its identity annotation ${JSON.stringify(bad)} is not one this provisioner writes`);
    }
    const known = /^(mount|mount:uuid=[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|block:\d+:\d+)$/;
    fc.assert(fc.property(fc.string(), uuidArb, (s, u) => {
      fc.pre(!known.test(s));
      expect(identityMismatch(s, dirWith(u), '/d/v')).toBe(`its identity annotation ${JSON.stringify(s)} is not one this provisioner writes`);
    }));
  });
});

describe.skipIf(!isRoot())('on a real ext4 (loop device)', () => {
  const host = new HostFixtures('lsp-ident-uuid-');
  afterEach(() => {
    host.cleanup();
  });
  const sh = (cmd: string, args: string[]): string => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();

  it('discovery records the UUID blkid sees; the same device made anew (mkfs: new UUID) is a mismatch for the deleter\'s rule', async () => {
    const dev = host.loopDevice(16, 'x');
    sh('mkfs.ext4', ['-q', '-F', dev]);
    const v = host.mountDevice(dev, [], 'v');
    const recorded = await discoveredIdentity(v, 'Filesystem');
    expect(recorded).toBe(`mount:uuid=${sh('blkid', ['-o', 'value', '-s', 'UUID', dev])}`);
    expect(identityMismatch(recorded, await pathKind(v), v)).toBeUndefined();
    host.unmount(v);
    sh('mkfs.ext4', ['-q', '-F', dev]);
    const uuid2 = sh('blkid', ['-o', 'value', '-s', 'UUID', dev]);
    host.mountDevice(dev, [], 'v');
    expect(identityMismatch(recorded, await pathKind(v), v)).toBe(`it was discovered as ${JSON.stringify(recorded)} but ${JSON.stringify(v)} now holds filesystem UUID ${uuid2}`);
    // A tmpfs has none: discovery records the old form.
    expect(await discoveredIdentity(host.tmpfs(1, 't'), 'Filesystem')).toBe('mount');
  });
});
