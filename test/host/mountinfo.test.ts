import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { formatDev, makeDev, parseMountEntries, parseMountInfo, parseMountPropagation, readMountPoints, readMountTable, toBytePath, unescapeMountPath } from '../../src/host/mountinfo.ts';

const SAMPLE = [
  '22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro',
  '36 22 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue',
  '40 22 0:35 / /mnt/disks/vol1 rw,relatime - tmpfs tmpfs rw,size=20480k',
  // Bind mount whose mount point holds a space, a tab and a backslash.
  '41 22 8:1 /src /mnt/disks/with\\040space rw - ext4 /dev/sda1 rw',
  '42 22 8:1 /src /mnt/disks/tab\\011and\\012nl\\134bs rw shared:5 master:2 - ext4 /dev/sda1 rw',
  // No optional fields at all.
  '43 22 0:40 / /mnt/disks/vol2 rw - tmpfs none rw',
  '',
].join('\n');

describe('unescapeMountPath', () => {
  it('decodes octal escapes', () => {
    expect(unescapeMountPath('/a\\040b')).toBe('/a b');
    expect(unescapeMountPath('/a\\011b\\012c\\134d')).toBe('/a\tb\nc\\d');
    expect(unescapeMountPath('/plain')).toBe('/plain');
  });
  it('keeps a backslash not followed by three octal digits', () => {
    expect(unescapeMountPath('/a\\9b')).toBe('/a\\9b');
    expect(unescapeMountPath('/a\\04')).toBe('/a\\04');
  });
});

describe('parseMountInfo', () => {
  it('returns field 5 of every line, decoded', () => {
    const { mountPoints, malformed } = parseMountInfo(SAMPLE);
    expect(malformed).toBe(0);
    expect([...mountPoints].sort()).toEqual(
      ['/', '/mnt/parent', '/mnt/disks/vol1', '/mnt/disks/with space', '/mnt/disks/tab\tand\nnl\\bs', '/mnt/disks/vol2'].sort(),
    );
  });

  it('skips malformed lines and counts them', () => {
    const text = [
      'garbage',
      '1 2 3', // too short
      '40 22 0:35 / /mnt/ok rw,relatime - tmpfs tmpfs rw',
      '40 22 0:35 / /mnt/nosep rw,relatime tmpfs tmpfs rw x', // no "-" separator
      '40 22 0:35 / relative rw - tmpfs tmpfs rw', // mount point not absolute
      '40 22 0:35 / /mnt/short rw -', // nothing after the separator
    ].join('\n');
    const { mountPoints, malformed } = parseMountInfo(text);
    expect([...mountPoints]).toEqual(['/mnt/ok']);
    expect(malformed).toBe(5);
  });
});

describe('parseMountEntries', () => {
  it('returns mount ID, parent ID, MAJ:MIN and the decoded mount point of every line', () => {
    const { entries, malformed } = parseMountEntries(SAMPLE);
    expect(malformed).toBe(0);
    expect(entries[1]).toEqual({ id: 36, parentId: 22, major: 98, minor: 0, mountPointBytes: '/mnt/parent' });
    expect(entries[3]?.mountPointBytes).toBe('/mnt/disks/with space');
    expect(entries.map((e) => e.id)).toEqual([22, 36, 40, 41, 42, 43]);
  });

  it('keeps mount points that are not UTF-8 byte-exact', () => {
    const raw = Buffer.concat([Buffer.from('50 22 0:60 / /mnt/disks/'), Buffer.from([0xff, 0xc3, 0xa9]), Buffer.from('\\040x rw - tmpfs t rw\n')]);
    const { entries } = parseMountEntries(raw.toString('latin1'));
    expect(entries[0]?.mountPointBytes).toBe(toBytePath('/mnt/disks/') + '\xff' + toBytePath('é x'));
    // A UTF-8 decode would have turned 0xff into U+FFFD: that path could never match the directory.
    expect(parseMountInfo(raw.toString('utf8')).mountPoints.has('/mnt/disks/\ufffdé x')).toBe(true);
  });

  it('counts lines without numeric IDs or MAJ:MIN as malformed', () => {
    const { entries, malformed } = parseMountEntries(['x 22 0:35 / /a rw - tmpfs t rw', '40 22 035 / /b rw - tmpfs t rw', '40 22 0:35 / /c rw - tmpfs t rw'].join('\n'));
    expect(entries.map((e) => e.mountPointBytes)).toEqual(['/c']);
    expect(malformed).toBe(2);
  });

  it('converts MAJ:MIN to and from st_dev as Node reports it', () => {
    expect(makeDev(8, 1)).toBe(2049);
    expect(makeDev(0, 38)).toBe(38);
    expect(makeDev(259, 70000)).toBe(Number((70000n & 0xffffff00n) << 12n) + (259 << 8) + (70000 & 0xff));
    expect(formatDev(makeDev(259, 70000))).toBe('259:70000');
  });

  it('reads the real table: the root is listed with the st_dev of /', async () => {
    const { entries } = await readMountTable();
    const root = entries.findLast((e) => e.mountPointBytes === '/');
    expect(root && makeDev(root.major, root.minor)).toBe((await import('node:fs')).statSync('/').dev);
  });
});

describe('readMountPoints', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'mountinfo-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reads a mountinfo file and reports malformed lines', async () => {
    const file = join(dir, 'mountinfo');
    await writeFile(file, `${SAMPLE}not a line\n`);
    const counts: number[] = [];
    const mp = await readMountPoints(file, { onMalformed: (n) => counts.push(n) });
    expect(mp.has('/mnt/disks/with space')).toBe(true);
    expect(mp.has('/mnt/disks/with\\040space')).toBe(false);
    expect(mp.size).toBe(6);
    expect(counts).toEqual([1]);
  });

  it('rejects when the file cannot be read', async () => {
    await expect(readMountPoints(join(dir, 'missing'))).rejects.toThrow(/ENOENT/);
  });

  it('reads the real /proc/self/mountinfo', async () => {
    const mp = await readMountPoints();
    expect(mp.has('/')).toBe(true);
  });
});

describe('parseMountPropagation', () => {
  it('reads mount point, filesystem type, propagation tags (none: private), MAJ:MIN, root and source', () => {
    const text = [
      '1 0 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/l',
      '2 1 8:1 /mnt/disks /mnt/disks rw,relatime master:1 - ext4 /dev/sda1 rw',
      '3 1 8:1 /x /mnt/with\\040space rw shared:4 master:2 - xfs /dev/sdb rw',
      '4 1 8:1 /y /mnt/private rw - ext4 /dev/sda1 rw',
      'garbage',
    ].join('\n');
    expect(parseMountPropagation(text)).toEqual([
      { mountPoint: '/', fsType: 'overlay', tags: [], devno: '0:50', root: '/', source: 'overlay' },
      { mountPoint: '/mnt/disks', fsType: 'ext4', tags: ['master:1'], devno: '8:1', root: '/mnt/disks', source: '/dev/sda1' },
      { mountPoint: '/mnt/with space', fsType: 'xfs', tags: ['shared:4', 'master:2'], devno: '8:1', root: '/x', source: '/dev/sdb' },
      { mountPoint: '/mnt/private', fsType: 'ext4', tags: [], devno: '8:1', root: '/y', source: '/dev/sda1' },
    ]);
  });
});
