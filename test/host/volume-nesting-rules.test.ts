// Where a path lies relative to the discovered volumes (src/host/volume-nesting.ts), asserted on made-up
// mount tables (mutation testing, docs/cleanup.md "Mutation testing"); the discoverer tests cover it with
// real directories.
import { describe, expect, it } from 'vitest';
import type { MountPropagation } from '../../src/host/mountinfo.ts';
import { discoveredVolumes, fsPosition, mountPosition, volumeHolding, volumeHoldingMount } from '../../src/host/volume-nesting.ts';

const mnt = (mountPoint: string, devno: string, root = '/'): MountPropagation => ({ mountPoint, devno, root, fsType: 'ext4', source: '/dev/x', tags: [] });
const ROOT = mnt('/', '8:1');

describe('fsPosition', () => {
  it('a path on the root filesystem keeps its whole path; below a mount, the part after the mount point, under its root', () => {
    const sub = mnt('/mnt/b', '0:50', '/vol1/sub');
    expect(fsPosition([ROOT], '/mnt/x/')).toEqual({ devno: '8:1', root: '/mnt/x', mount: ROOT });
    expect(fsPosition([ROOT, sub], '/mnt/b/deep/f')).toEqual({ devno: '0:50', root: '/vol1/sub/deep/f', mount: sub });
    expect(fsPosition([ROOT, sub], '/mnt/b')?.root).toBe('/vol1/sub');
  });

  it('a mount without a root is its filesystem\'s "/"', () => {
    expect(fsPosition([ROOT, mnt('/mnt/v', '0:51', '')], '/mnt/v')?.root).toBe('/');
    expect(fsPosition([ROOT, mnt('/mnt/v', '0:51', '')], '/mnt/v/a')?.root).toBe('/a');
  });

  it('has no position on a mount without MAJ:MIN (a malformed line), nor outside every mount', () => {
    expect(fsPosition([mnt('/', '')], '/mnt/x')).toBeUndefined();
    expect(fsPosition([mnt('/mnt', '0:9')], '/srv/x')).toBeUndefined();
  });
});

describe('discoveredVolumes', () => {
  it('takes mounts directly in a mountDir (trailing slash or not), never the root mount', () => {
    const vol = mnt('/mnt/d/vol1', '0:50');
    expect(discoveredVolumes([ROOT, vol, mnt('/mnt/d/vol1/deep', '0:51'), mnt('/mnt/e', '0:52')], ['/mnt/d/'])).toEqual([vol]);
    expect(discoveredVolumes([ROOT, mnt('/mnt', '0:53')], ['/'])).toEqual([mnt('/mnt', '0:53')]);
  });
});

describe('volumeHolding', () => {
  const vol1 = mnt('/mnt/d/vol1', '0:50', '/');
  it('a path inside a volume by its path string, even on another filesystem mounted inside it', () => {
    const inner = mnt('/mnt/d/vol1/sub', '0:60');
    expect(volumeHolding([ROOT, vol1, inner], [vol1], '/mnt/d/vol1/sub/x')).toBe(vol1);
  });

  it('the volume\'s own mount point is inside it, except for the volume itself (`self`)', () => {
    const bind = mnt('/mnt/d/vol2', '0:70', '/sub');
    expect(volumeHolding([ROOT, bind], [bind], '/mnt/d/vol2')).toBe(bind);
    expect(volumeHolding([ROOT, bind], [bind], '/mnt/d/vol2', '/mnt/d/vol2')).toBeUndefined();
  });

  it('a path elsewhere on the same filesystem, inside the volume\'s root, is inside it; outside that root it is not', () => {
    const vol = mnt('/mnt/d/vol3', '0:80', '/data/vol3');
    const other = (root: string): MountPropagation => mnt('/srv/b', '0:80', root);
    expect(volumeHolding([ROOT, vol, other('/data/vol3/x')], [vol], '/srv/b/y')).toBe(vol);
    expect(volumeHolding([ROOT, vol, other('/data/vol3')], [vol], '/srv/b')).toBe(vol);
    expect(volumeHolding([ROOT, vol, other('/data/vol30')], [vol], '/srv/b')).toBeUndefined();
    // a volume without a root is its whole filesystem
    const whole = mnt('/mnt/d/vol4', '0:81', '');
    expect(volumeHolding([ROOT, whole, mnt('/srv/c', '0:81', '/any')], [whole], '/srv/c')).toBe(whole);
  });
});

describe('mountPosition and volumeHoldingMount', () => {
  it('a bind mount\'s position is its root; an empty root is "/"', () => {
    expect(mountPosition(mnt('/mnt/b', '0:50', '/vol1/sub/'))).toEqual({ devno: '0:50', root: '/vol1/sub' });
    expect(mountPosition(mnt('/mnt/b', '0:50', ''))).toEqual({ devno: '0:50', root: '/' });
  });

  it('an entry mounted from inside another volume\'s subtree is held by it; one beside it, or itself, is not', () => {
    const vol = mnt('/mnt/a/vol1', '0:50', '/v1');
    expect(volumeHoldingMount([vol], mnt('/mnt/b/y', '0:50', '/v1/sub'))).toBe(vol);
    expect(volumeHoldingMount([vol], mnt('/mnt/b/y', '0:50', '/v10'))).toBeUndefined();
    expect(volumeHoldingMount([vol], vol)).toBeUndefined();
    const whole = mnt('/mnt/a/vol2', '0:51', '');
    expect(volumeHoldingMount([whole], mnt('/mnt/b/z', '0:51', '/x'))).toBe(whole);
  });

  it('an entry without MAJ:MIN is held by no volume, not even one without MAJ:MIN', () => {
    expect(volumeHoldingMount([mnt('/mnt/a/vol1', '')], mnt('/mnt/b/y', ''))).toBeUndefined();
  });
});
