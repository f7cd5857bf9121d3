// Issue 21, point 2 / 4: a device with any signature, partition, holder, mount, swap, root or kubelet disk,
// O_EXCL holder, read-only or removable flag, size 0, virtual kind, or an unread fact is never selected.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { DeviceSelector } from '../../src/config/types.ts';
import { decideDevice, type DeviceState, type ProbeResult } from '../../src/devices/eligibility.ts';
import type { BlockBusy, BlockBusyReason } from '../../src/host/block-usage.ts';

const BUSY: readonly BlockBusyReason[] = ['empty', 'mounted', 'root-device', 'kubelet-device', 'holders', 'swap', 'exclusive-open'];

const probe: fc.Arbitrary<ProbeResult | undefined> = fc.oneof(
  fc.constant<ProbeResult>({ kind: 'blank' }),
  fc.record({ kind: fc.constant('signatures' as const), found: fc.array(fc.constantFrom('TYPE=ext4', 'TYPE=xfs', 'TYPE=LVM2_member', 'TYPE=linux_raid_member', 'USAGE=filesystem', 'PTTYPE=gpt', 'PTTYPE=dos', 'PTUUID=1234'), { maxLength: 4 }) }),
  fc.record({ kind: fc.constant('failed' as const), why: fc.string() }),
  fc.constant(undefined),
);

const busy: fc.Arbitrary<BlockBusy[] | undefined> = fc.option(fc.array(fc.record({ reason: fc.constantFrom(...BUSY), detail: fc.string() }), { maxLength: 3 }), { nil: undefined });

const state: fc.Arbitrary<DeviceState> = fc.record({
  name: fc.constantFrom('sda', 'nvme0n1', 'loop3', 'dm-0', 'sdb1'),
  devno: fc.constantFrom('8:0', '259:0', '7:3'),
  kind: fc.constantFrom('disk', 'partition', 'loop', 'virtual'),
  stableNames: fc.constantFrom([], ['/dev/disk/by-id/nvme-A'], ['/dev/disk/by-id/nvme-A', '/dev/disk/by-path/pci-0']),
  sizeBytes: fc.constantFrom(0, 512, 10 * 1024 ** 3),
  rotational: fc.option(fc.boolean(), { nil: undefined }),
  model: fc.option(fc.constantFrom('Samsung SSD', 'QEMU'), { nil: undefined }),
  vendor: fc.option(fc.constantFrom('ATA', 'NVMe'), { nil: undefined }),
  readOnly: fc.boolean(),
  removable: fc.boolean(),
  partitions: fc.constantFrom([], ['sda1'], ['nvme0n1p1', 'nvme0n1p2']),
  probe,
  busy,
});

const selector: fc.Arbitrary<DeviceSelector> = fc.record({
  paths: fc.constantFrom(['/dev/disk/by-id/*'], ['/dev/*'], ['/dev/disk/by-*/*', '/dev/loop*']),
  allowLoop: fc.boolean(),
});

/** The state holds nothing and nobody uses it, by each fact on its own (not by the decision function). */
function blankAndFree(s: DeviceState, allowLoop: boolean): boolean {
  return (
    (s.kind === 'disk' || (s.kind === 'loop' && allowLoop)) &&
    !s.readOnly &&
    !s.removable &&
    s.sizeBytes > 0 &&
    s.partitions.length === 0 &&
    s.probe?.kind === 'blank' &&
    s.busy !== undefined &&
    s.busy.length === 0
  );
}

describe('decideDevice: safety (issue 21, 2)', () => {
  it('never links a device that holds anything, is used, is not a whole disk, or was not fully checked', () => {
    fc.assert(
      fc.property(state, selector, (s, sel) => {
        const d = decideDevice(s, sel);
        if (d.kind === 'link') expect(blankAndFree(s, sel.allowLoop)).toBe(true);
      }),
      { numRuns: 5000 },
    );
  });

  it('never refuses a blank, free whole disk: it is linked when it matches (the rules are not vacuous)', () => {
    fc.assert(
      fc.property(state, selector, (s, sel) => {
        if (!blankAndFree(s, sel.allowLoop)) return;
        expect(decideDevice(s, sel).kind).not.toBe('refuse');
      }),
      { numRuns: 5000 },
    );
    const disk: DeviceState = {
      name: 'nvme0n1', devno: '259:0', kind: 'disk', stableNames: ['/dev/disk/by-id/nvme-A'], sizeBytes: 1e9, rotational: false,
      model: 'X', vendor: undefined, readOnly: false, removable: false, partitions: [], probe: { kind: 'blank' }, busy: [],
    };
    expect(decideDevice(disk, { paths: ['/dev/disk/by-id/nvme-*'], allowLoop: false })).toEqual({ kind: 'link', target: '/dev/disk/by-id/nvme-A' });
  });

  it.each<[string, Partial<DeviceState>, string]>([
    ['an ext4 signature', { probe: { kind: 'signatures', found: ['TYPE=ext4', 'USAGE=filesystem'] } }, 'signature'],
    ['a GPT', { probe: { kind: 'signatures', found: ['PTTYPE=gpt', 'PTUUID=1'] } }, 'partition-table'],
    ['an ambivalent probe', { probe: { kind: 'failed', why: 'exit 8' } }, 'probe-failed'],
    ['no probe', { probe: undefined }, 'not-probed'],
    ['partitions in sysfs', { partitions: ['nvme0n1p1'] }, 'partition-table'],
    ['a partition', { kind: 'partition' }, 'partition'],
    ['a dm device', { kind: 'virtual' }, 'virtual'],
    ['a loop device without allowLoop', { kind: 'loop' }, 'virtual'],
    ['read-only', { readOnly: true }, 'read-only'],
    ['removable', { removable: true }, 'removable'],
    ['size 0', { sizeBytes: 0 }, 'empty'],
    ['mounted', { busy: [{ reason: 'mounted', detail: 'm' }] }, 'mounted'],
    ['holders', { busy: [{ reason: 'holders', detail: 'h' }] }, 'holders'],
    ['swap', { busy: [{ reason: 'swap', detail: 's' }] }, 'swap'],
    ['the disk of /', { busy: [{ reason: 'root-device', detail: 'r' }] }, 'root-device'],
    ['the kubelet root disk', { busy: [{ reason: 'kubelet-device', detail: 'k' }] }, 'kubelet-device'],
    ['held O_EXCL', { busy: [{ reason: 'exclusive-open', detail: 'x' }] }, 'exclusive-open'],
    ['usage not checked', { busy: undefined }, 'usage-unknown'],
  ])('refuses a matching disk with %s', (_what, patch, reason) => {
    const disk: DeviceState = {
      name: 'nvme0n1', devno: '259:0', kind: 'disk', stableNames: ['/dev/disk/by-id/nvme-A'], sizeBytes: 1e9, rotational: false,
      model: 'X', vendor: undefined, readOnly: false, removable: false, partitions: [], probe: { kind: 'blank' }, busy: [], ...patch,
    };
    const d = decideDevice(disk, { paths: ['/dev/disk/by-id/*'], allowLoop: false });
    expect(d.kind).toBe('refuse');
    if (d.kind === 'refuse') expect(d.refusals.map((r) => r.reason)).toContain(reason);
  });

  it('filters: paths, size range, rotational, models, vendors', () => {
    const disk: DeviceState = {
      name: 'sda', devno: '8:0', kind: 'disk', stableNames: ['/dev/disk/by-id/ata-A', '/dev/disk/by-path/pci-1'], sizeBytes: 100, rotational: true,
      model: 'HDD 9', vendor: 'ATA', readOnly: false, removable: false, partitions: [], probe: { kind: 'blank' }, busy: [],
    };
    const d = (sel: Partial<DeviceSelector>): string => {
      const r = decideDevice(disk, { paths: ['/dev/disk/by-id/*'], allowLoop: false, ...sel });
      return r.kind === 'skip' ? `skip: ${r.why}` : `${r.kind} ${r.target}`;
    };
    expect(d({})).toBe('link /dev/disk/by-id/ata-A');
    expect(d({ paths: ['/dev/disk/by-path/*'] })).toBe('link /dev/disk/by-path/pci-1');
    expect(d({ paths: ['/dev/disk/by-id/nvme-*'] })).toMatch(/^skip: no name of it matches paths/);
    expect(d({ minSizeBytes: 101 })).toMatch(/below minSize/);
    expect(d({ maxSizeBytes: 99 })).toMatch(/above maxSize/);
    expect(d({ rotational: false })).toMatch(/rotational is true/);
    expect(d({ models: ['SSD*'] })).toMatch(/model "HDD 9"/);
    expect(d({ vendors: ['NVMe'] })).toMatch(/vendor "ATA"/);
    expect(d({ models: ['HDD*'], vendors: ['AT?'], rotational: true, minSizeBytes: 100, maxSizeBytes: 100 })).toBe('link /dev/disk/by-id/ata-A');
  });
});
