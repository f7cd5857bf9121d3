// The rules of the mount table parser and reader, one boundary at a time
// (issue 17 point 9: mutation testing of the safety code). Every mount check of
// the deleter and of discovery reads this table: a line accepted that should be
// skipped, or the reverse, makes a mount point invisible or invents one.
//
// readFile of node:fs/promises is replaced in this file by a scripted reader
// (one Buffer per call, calls counted) so the re-read loop can be driven through
// reads that agree, agree late or never agree; without a script it reads the
// real file.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { formatDev, makeDev, parseMountDetails, parseMountEntries, parseMountInfo, parseMountPropagation, readMountDetails, readMountPoints, readMountPropagation, readMountTable } from '../../src/host/mountinfo.ts';

const reads = vi.hoisted(() => ({ script: undefined as string[] | undefined, paths: [] as unknown[] }));

vi.mock('node:fs/promises', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:fs/promises')>();
  const readFile = (async (path: unknown, ...rest: unknown[]) => {
    const script = reads.script;
    if (!script) return (actual.readFile as (...a: unknown[]) => Promise<unknown>)(path, ...rest);
    reads.paths.push(path);
    const i = reads.paths.length - 1;
    // A loop that does not stop after its 3rd read fails here at once instead of hanging.
    if (i >= script.length) throw new Error(`mountinfo read ${i + 1} times; the script has ${script.length} reads`);
    return Buffer.from(script[i] as string, 'latin1');
  }) as typeof actual.readFile;
  return { ...actual, readFile };
});

afterEach(() => {
  reads.script = undefined;
  reads.paths = [];
});

/** A well-formed line mounting a tmpfs on `mp`. */
const line = (mp: string): string => `40 22 0:35 / ${mp} rw,relatime - tmpfs tmpfs rw\n`;

describe('mountinfo line rules (splitLine)', () => {
  it('accepts a line of exactly 9 fields: 6 fixed fields, "-" at field 7, fstype and source, no super options', () => {
    const nine = '40 22 0:35 / /mnt/nine rw - tmpfs tmpfs';
    expect(nine.split(' ')).toHaveLength(9);
    expect(parseMountInfo(nine)).toEqual({ mountPoints: new Set(['/mnt/nine']), malformed: 0 });
    expect(parseMountEntries(nine)).toEqual({ entries: [{ id: 40, parentId: 22, major: 0, minor: 35, mountPointBytes: '/mnt/nine' }], malformed: 0 });
    expect(parseMountPropagation(nine)).toEqual([{ mountPoint: '/mnt/nine', fsType: 'tmpfs', tags: [], devno: '0:35', root: '/', source: 'tmpfs' }]);
  });

  it('accepts a line that ends exactly at the source after optional fields (fields = separator index + 3)', () => {
    const text = '40 22 0:35 / /mnt/tagged rw shared:1 master:2 - tmpfs src';
    const fields = text.split(' ');
    expect(fields.length).toBe(fields.indexOf('-') + 3);
    expect(parseMountInfo(text)).toEqual({ mountPoints: new Set(['/mnt/tagged']), malformed: 0 });
    expect(parseMountPropagation(text)).toEqual([{ mountPoint: '/mnt/tagged', fsType: 'tmpfs', tags: ['shared:1', 'master:2'], devno: '0:35', root: '/', source: 'src' }]);
  });

  it('rejects a line of 9 or more fields that has no source after the separator (fields = separator index + 2)', () => {
    const text = '40 22 0:35 / /mnt/nosource rw shared:1 master:2 - tmpfs';
    const fields = text.split(' ');
    expect(fields.length).toBeGreaterThanOrEqual(9);
    expect(fields.length).toBe(fields.indexOf('-') + 2);
    expect(parseMountInfo(text)).toEqual({ mountPoints: new Set(), malformed: 1 });
    expect(parseMountEntries(text)).toEqual({ entries: [], malformed: 1 });
    expect(parseMountPropagation(text)).toEqual([]);
  });

  it('rejects a line of 9 or more fields without a "-" separator', () => {
    const text = '40 22 0:35 / /mnt/nosep rw shared:1 tmpfs tmpfs rw';
    expect(text.split(' ').length).toBeGreaterThanOrEqual(9);
    expect(parseMountInfo(text)).toEqual({ mountPoints: new Set(), malformed: 1 });
    expect(parseMountPropagation(text)).toEqual([]);
  });

  it('looks for the separator from field 7 on only: a "-" root or options field is not it', () => {
    // "-" as the root (field 4) and as the options (field 6): no separator from field 7 on.
    const text = ['40 22 0:35 - /mnt/dashroot rw tmpfs tmpfs rw x', '40 22 0:35 / /mnt/dashopts - tmpfs tmpfs rw'].join('\n');
    expect(parseMountInfo(text)).toEqual({ mountPoints: new Set(), malformed: 2 });
    // The same lines with the separator at field 7 are fine.
    expect(parseMountInfo(['40 22 0:35 - /mnt/dashroot rw - tmpfs tmpfs rw', '40 22 0:35 / /mnt/dashopts rw - tmpfs tmpfs rw'].join('\n'))).toEqual({
      mountPoints: new Set(['/mnt/dashroot', '/mnt/dashopts']),
      malformed: 0,
    });
  });

  it('rejects a relative mount point and a line shorter than 9 fields', () => {
    const text = ['40 22 0:35 / mnt/rel rw - tmpfs tmpfs rw', '40 22 0:35 / /mnt/eight rw - tmpfs'].join('\n');
    expect(parseMountInfo(text)).toEqual({ mountPoints: new Set(), malformed: 2 });
  });

  it('counts each bad line once among good ones, and skips blank lines without counting them', () => {
    const text = ['', line('/a').trimEnd(), 'junk', '   ', line('/b').trimEnd(), '40 22 0:35 / /c rw -', ''].join('\n');
    expect(parseMountInfo(text)).toEqual({ mountPoints: new Set(['/a', '/b']), malformed: 2 });
  });
});

describe('mount table entries: numeric IDs and MAJ:MIN (parseMountEntries)', () => {
  it('rejects a non-numeric mount ID, parent ID or MAJ:MIN, each on its own', () => {
    const text = [
      '4x 22 8:1 / /bad-id rw - ext4 /dev/sda1 rw',
      '40 -1 8:1 / /bad-parent rw - ext4 /dev/sda1 rw',
      '40 22 8: / /no-minor rw - ext4 /dev/sda1 rw',
      '40 22 :1 / /no-major rw - ext4 /dev/sda1 rw',
      '40 22 8:1:2 / /three-parts rw - ext4 /dev/sda1 rw',
      '40 22 8:1 / /good rw - ext4 /dev/sda1 rw',
    ].join('\n');
    const { entries, malformed } = parseMountEntries(text);
    expect(entries).toEqual([{ id: 40, parentId: 22, major: 8, minor: 1, mountPointBytes: '/good' }]);
    expect(malformed).toBe(5);
  });

  it('keeps the mount point of a line with a bad MAJ:MIN in the mount point set and in the propagation view (devno "")', () => {
    const text = '40 22 8:x / /mnt/odd rw - ext4 /dev/sda1 rw';
    expect(parseMountInfo(text).mountPoints).toEqual(new Set(['/mnt/odd']));
    expect(parseMountPropagation(text)).toEqual([{ mountPoint: '/mnt/odd', fsType: 'ext4', tags: [], devno: '', root: '/', source: '/dev/sda1' }]);
  });
});

describe('st_dev <-> MAJ:MIN (glibc makedev encoding)', () => {
  // Values of glibc's makedev (Python: os.makedev(4096, 5) == 17592186044421 == 0x100000000005,
  // os.makedev(0x12345, 0x6789a) == 0x120006783459a): the high major bits sit above bit 32.
  it('encodes and decodes a major above 12 bits and a minor above 20 bits', () => {
    expect(makeDev(4096, 5)).toBe(0x100000000005);
    expect(formatDev(0x100000000005)).toBe('4096:5');
    expect(makeDev(0x12345, 0x6789a)).toBe(0x120006783459a);
    expect(formatDev(0x120006783459a)).toBe(`${0x12345}:${0x6789a}`);
  });

  it('decodes the st_dev of real files to the MAJ:MIN the mount table lists for their mount', async () => {
    const { statSync } = await import('node:fs');
    const { entries } = await readMountTable();
    const root = entries.findLast((e) => e.mountPointBytes === '/');
    expect(root).toBeDefined();
    expect(formatDev(statSync('/').dev)).toBe(`${root?.major}:${root?.minor}`);
  });
});

describe('reading the table until two reads agree (readStable)', () => {
  const path = '/test/mountinfo';

  it('reads twice when the first two reads agree, each time from the given path', async () => {
    reads.script = [line('/a'), line('/a')];
    expect(await readMountPoints(path)).toEqual(new Set(['/a']));
    expect(reads.paths).toEqual([path, path]);
  });

  it('uses the later read when the first two differ and the next one agrees with it', async () => {
    reads.script = [line('/torn'), line('/b'), line('/b')];
    expect(await readMountPoints(path)).toEqual(new Set(['/b']));
    expect(reads.paths).toHaveLength(3);
  });

  it('stops after 3 reads that never agree and uses the last one', async () => {
    reads.script = [line('/1'), line('/2'), line('/3')];
    expect(await readMountPoints(path)).toEqual(new Set(['/3']));
    expect(reads.paths).toHaveLength(3);
  });

  it('does the same for the byte-exact table and the propagation view', async () => {
    reads.script = [line('/1'), line('/2'), line('/2')];
    expect((await readMountTable(path)).entries.map((e) => e.mountPointBytes)).toEqual(['/2']);
    expect(reads.paths).toHaveLength(3);
    reads.paths = [];
    reads.script = [line('/1'), line('/2'), line('/3')];
    expect((await readMountPropagation(path)).map((p) => p.mountPoint)).toEqual(['/3']);
    expect(reads.paths).toHaveLength(3);
  });
});

describe('onMalformed', () => {
  const path = '/test/mountinfo';

  it('is not called when no line is malformed', async () => {
    reads.script = [line('/a'), line('/a')];
    const counts: number[] = [];
    await readMountPoints(path, { onMalformed: (n) => counts.push(n) });
    expect(counts).toEqual([]);
  });

  it('is called once with the number of malformed lines', async () => {
    const text = `${line('/a')}junk\n1 2 3\n`;
    reads.script = [text, text];
    const counts: number[] = [];
    expect(await readMountPoints(path, { onMalformed: (n) => counts.push(n) })).toEqual(new Set(['/a']));
    expect(counts).toEqual([2]);
  });

  it('is optional even when lines are malformed', async () => {
    const text = `${line('/a')}junk\n`;
    reads.script = [text, text];
    await expect(readMountPoints(path)).resolves.toEqual(new Set(['/a']));
    reads.paths = [];
    await expect(readMountPoints(path, {})).resolves.toEqual(new Set(['/a']));
  });
});

describe('mount details (the health check)', () => {
  it('per-mount options (field 6) and super options (after the source), with the propagation fields', () => {
    const text = '90 22 8:17 / /mnt/a\\040b ro,nosuid,relatime shared:5 master:2 - ext4 /dev/sdb1 rw,errors=remount-ro\n';
    expect(parseMountDetails(text)).toEqual([
      { mountPoint: '/mnt/a b', fsType: 'ext4', tags: ['shared:5', 'master:2'], devno: '8:17', root: '/', source: '/dev/sdb1', mountOptions: ['ro', 'nosuid', 'relatime'], superOptions: ['rw', 'errors=remount-ro'] },
    ]);
    expect(parseMountDetails('garbage\n')).toEqual([]);
  });

  it('readMountDetails reads until two reads agree, like the others', async () => {
    const line = '1 0 0:5 / /x rw - tmpfs t ro,size=4k\n';
    reads.script = [line, line];
    expect((await readMountDetails('/proc/self/mountinfo'))[0]?.superOptions).toEqual(['ro', 'size=4k']);
    expect(reads.paths).toHaveLength(2);
  });
});
