// The host facts behind "a block device in use gets no PV" (src/host/block-usage.ts), asserted directly
// (mutation testing, docs/cleanup.md "Mutation testing"); the discoverer tests cover the whole check.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { blockDeviceUsage, heldExclusively, parseSwaps, readBlockHostFacts } from '../../src/host/block-usage.ts';
import type { MountPropagation } from '../../src/host/mountinfo.ts';

const mnt = (mountPoint: string, devno: string, source: string): MountPropagation => ({ mountPoint, devno, source, root: '/', fsType: 'ext4', tags: [] });
const HEADER = 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n';

let tmp: string;
beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'lsp-block-usage-rules-'));
});
afterEach(() => {
  rmSync(tmp, { recursive: true, force: true });
});

describe('parseSwaps', () => {
  it('takes the path of every entry after the header, decoding the kernel\'s \\ooo escapes; not the header, blank lines or relative names', () => {
    const text = `${HEADER}/dev/sdb2                               partition\t8388604\t\t0\t\t-2\n/swap\\040file                           file\t\t1048572\t\t0\t\t-3\n\nzram0 partition 1 0 -1\n/dev/x\n`;
    expect(parseSwaps(text)).toEqual(['/dev/sdb2', '/swap file']);
    expect(parseSwaps('/dev/sda1 partition 1 0 -1\n')).toEqual([]);
    expect(parseSwaps(`${HEADER}/dev/a\\134b\\0 partition 1 0 -1\n`)).toEqual(['/dev/a\\b\\0']);
  });
});

describe.skipIf(process.getuid?.() !== 0)('readBlockHostFacts (needs root: mknod)', () => {
  const node = (name: string, minor: number): string => {
    const p = join(tmp, name);
    execFileSync('mknod', [p, 'b', '250', String(minor)]);
    return p;
  };

  it('a mount whose source is a block device marks that device mounted too (its MAJ:MIN may differ from the filesystem\'s); the first mount point wins', async () => {
    const src = node('nd5', 5);
    const facts = await readBlockHostFacts([mnt('/mnt/a', '0:99', src), mnt('/mnt/b', '0:98', src), mnt('/mnt/c', '0:97', 'tmpfs')], { swapsPath: join(tmp, 'none') });
    expect(facts.mounted).toEqual(
      new Map([
        ['0:99', '/mnt/a'],
        ['0:98', '/mnt/b'],
        ['0:97', '/mnt/c'],
        ['250:5', '/mnt/a'],
      ]),
    );
  });

  it('a source that is not a block device (a file, a missing path) adds nothing; a malformed MAJ:MIN ("") is never a key', async () => {
    writeFileSync(join(tmp, 'file'), 'x');
    const facts = await readBlockHostFacts([mnt('/mnt/a', '', join(tmp, 'file')), mnt('/mnt/b', '', join(tmp, 'gone'))], { swapsPath: join(tmp, 'none') });
    expect(facts.mounted).toEqual(new Map());
  });

  it('the devices holding / and the kubelet root, by MAJ:MIN and by source device; / wins for a device holding both', async () => {
    const rootSrc = node('nd1', 1);
    const kSrc = node('nd2', 2);
    const facts = await readBlockHostFacts([mnt('/', '8:1', rootSrc), mnt('/k', '8:2', kSrc)], { kubeletRoot: '/k/kubelet', swapsPath: join(tmp, 'none') });
    expect(facts.roots).toEqual(
      new Map([
        ['8:1', '/'],
        ['250:1', '/'],
        ['8:2', '/k/kubelet'],
        ['250:2', '/k/kubelet'],
      ]),
    );
    const same = await readBlockHostFacts([mnt('/', '8:1', rootSrc)], { kubeletRoot: '/var/lib/kubelet', swapsPath: join(tmp, 'none') });
    expect(same.roots).toEqual(new Map([['8:1', '/'], ['250:1', '/']]));
  });

  it('active swap: the device numbers of swap devices that exist, and every swap name without /dev/', async () => {
    const sw = node('sw7', 7);
    writeFileSync(join(tmp, 'swaps'), `${HEADER}${sw} partition 1 0 -1\n/dev/zram9 partition 1 0 -2\n`);
    const facts = await readBlockHostFacts([], { swapsPath: join(tmp, 'swaps') });
    expect(facts.swapDevnos).toEqual(new Set(['250:7']));
    expect(facts.swapNames).toEqual(new Set([sw, 'zram9']));
  });

  it('a missing swaps file means no swap; any other read error is thrown (the entry is refused)', async () => {
    const none = await readBlockHostFacts([], { swapsPath: join(tmp, 'none') });
    expect([none.swapDevnos, none.swapNames]).toEqual([new Set(), new Set()]);
    mkdirSync(join(tmp, 'dir'));
    await expect(readBlockHostFacts([], { swapsPath: join(tmp, 'dir') })).rejects.toThrow(/EISDIR/);
  });

  it('heldExclusively: a path it can open and close is not held; an open that fails other than EBUSY is thrown, never "free"', async () => {
    writeFileSync(join(tmp, 'file'), 'x');
    expect(await heldExclusively(join(tmp, 'file'))).toBe(false);
    await expect(heldExclusively(node('nodriver', 200))).rejects.toThrow(/ENXIO|ENODEV/);
  });

  it('blockDeviceUsage: holders that cannot be listed (not ENOENT) are an error, never "no holders"', async () => {
    const dev = node('nd9', 9);
    const sys = join(tmp, 'sys');
    const dir = join(sys, 'devices', 'virtual', 'block', 'nd9');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'holders'), 'not a directory');
    mkdirSync(join(sys, 'dev', 'block'), { recursive: true });
    symlinkSync(dir, join(sys, 'dev', 'block', '250:9'));
    const facts = { mounted: new Map(), roots: new Map(), swapDevnos: new Set<string>(), swapNames: new Set<string>() };
    await expect(blockDeviceUsage(dev, 1024n, facts, { sysRoot: sys, heldExclusively: () => Promise.resolve(false) })).rejects.toThrow(/ENOTDIR/);
  });
});
