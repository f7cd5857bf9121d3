import { describe, expect, it } from 'vitest';
import { fnv1a32, generateMountName, generatePVName, provisionerName } from '../../src/volume/naming.ts';

describe('generatePVName', () => {
  // Vectors of the Go provisioner's discovery_test.go (node "test-node").
  const vectors: [string, string, string][] = [
    ['mount1', 'sc1', 'local-pv-aaaafef5'],
    ['symlink2', 'sc1', 'local-pv-23645a36'],
    ['symlink1', 'sc2', 'local-pv-55d5adba'],
    ['symlink2', 'sc2', 'local-pv-226458a3'],
    ['mount3', 'sc1', 'local-pv-f34b8003'],
    ['symlink3', 'sc1', 'local-pv-4d24d329'],
    ['mount2', 'sc1', 'local-pv-79412c38'],
    ['mount1', 'sc2', 'local-pv-a7aafa3c'],
  ];
  it.each(vectors)('%s in %s -> %s', (file, cls, want) => {
    expect(generatePVName(file, 'test-node', cls)).toBe(want);
  });

  it('hashes the concatenation with no separator', () => {
    expect(generatePVName('ab', 'c', 'd')).toBe(generatePVName('a', 'bc', 'd'));
    expect(generatePVName('ab', 'c', 'd')).not.toBe(generatePVName('ab', 'd', 'c'));
  });

  it('does not zero-pad the hex', () => {
    // FNV-1a of the empty input is the offset basis; "a" is the published FNV-1a test vector.
    expect(fnv1a32()).toBe(0x811c9dc5);
    expect(fnv1a32('a')).toBe(0xe40c292c);
    // Hash 0x0033a1f9 (computed independently with Python) is printed with 6 digits.
    expect(generatePVName('disk357', 'test-node', 'sc1')).toBe('local-pv-33a1f9');
  });

  it('hashes UTF-8 bytes, not UTF-16 code units', () => {
    // "é" is 0xC3 0xA9 in UTF-8.
    let h = 0x811c9dc5;
    for (const b of [0xc3, 0xa9]) h = Math.imul(h ^ b, 0x01000193) >>> 0;
    expect(fnv1a32('é')).toBe(h);
  });
});

describe('generateMountName', () => {
  it('hashes hostDir ++ mountDir with the mount- prefix', () => {
    expect(generateMountName('/mnt/disks', '/discoveryPath')).toBe(`mount-${fnv1a32('/mnt/disks/discoveryPath').toString(16)}`);
    expect(generateMountName('/mnt/disks', '/discoveryPath')).toMatch(/^mount-[0-9a-f]{1,8}$/);
  });
});

describe('provisionerName', () => {
  it('uses name only or name-uid', () => {
    expect(provisionerName({ name: 'n1', uid: 'u-1' }, true)).toBe('local-volume-provisioner-n1');
    expect(provisionerName({ name: 'n1', uid: 'u-1' }, false)).toBe('local-volume-provisioner-n1-u-1');
  });
});
