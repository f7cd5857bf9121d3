// An idle health pass (issue 20, idle CPU): what the previous pass found is reused, without any read or
// allocation per volume, only while nothing it depends on can have changed: the same PV object, the same
// mount table (text), and no device, UUID or capacity behind the answer. A volume on a block device has
// its sysfs facts read again each pass. No root needed: the mount table and sysfs are files of the test.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { createHealthChecker } from '../../src/health/check.ts';
import { MountTableReader } from '../../src/host/mount-snapshot.ts';
import { checkPVs, HealthLedger, HealthMonitor } from '../../src/health/monitor.ts';
import type { HealthCheckInput, HealthChecker, HealthPass } from '../../src/health/types.ts';
import type { ClassConfig } from '../../src/config/types.ts';
import { DEFAULT_VOLUME_HEALTH } from '../../src/config/types.ts';
import { ANN_VOLUME_IDENTITY } from '../../src/identity/identity.ts';
import { FakeKube } from '../support/fake-kube.ts';
import { testConfig } from '../support/config.ts';
import { testEnv } from '../support/env.ts';
import { FakeRecorder, newMetrics } from '../deleter/helpers.ts';

let dir: string;
let mountinfo: string;
let sys: string;

const line = (id: number, point: string, devno = '0:99', fs = 'tmpfs', source = 'tmpfs', opts = 'rw,relatime'): string =>
  `${id} 1 ${devno} / ${point} ${opts} shared:1 - ${fs} ${source} rw,size=1024k`;
const table = (lines: string[]): void => writeFileSync(mountinfo, `1 0 8:2 / / rw - ext4 /dev/sda2 rw\n${lines.join('\n')}\n`);
const fsInput = (path: string, extra: Partial<HealthCheckInput> = {}): HealthCheckInput => ({ pvName: 'pv', path, mode: 'Filesystem', recordedIdentity: 'mount', ...extra });

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'lsp-health-reuse-'));
  mountinfo = join(dir, 'mountinfo');
  sys = join(dir, 'sys');
  const dev = join(sys, 'dev', 'block', '8:1');
  mkdirSync(dev, { recursive: true });
  writeFileSync(join(dev, 'uevent'), 'MAJOR=8\nMINOR=1\nDEVNAME=sda1\nDEVTYPE=partition\n');
  writeFileSync(join(dev, 'size'), '2048\n');
  writeFileSync(join(dev, 'ro'), '0\n');
});

afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('HealthChecker: an answer reused across passes', () => {
  it('tmpfs, table unchanged: the next pass knows the answer without a read (the same object); a changed line or a missing path is checked again', async () => {
    table([line(10, '/v/a'), line(11, '/v/b')]);
    const checker = createHealthChecker({ mountInfoPath: mountinfo, sysfsRoot: sys });
    const a = fsInput('/v/a');
    const gone = fsInput('/v/gone');
    const p1 = await checker.beginPass();
    const h1 = await p1.check(a);
    const g1 = await p1.check(gone);
    expect([...h1.conditions]).toEqual([]);
    expect([...g1.conditions.keys()]).toEqual(['missing']);

    const p2 = await checker.beginPass();
    expect(p2.known?.(a)).toBe(h1);
    expect(p2.known?.(gone)).toBe(g1);
    expect(await p2.check(a)).toBe(h1);

    // The volume's own line changes (remounted read-only): checked again.
    table([line(10, '/v/a', '0:99', 'tmpfs', 'tmpfs', 'ro,relatime'), line(11, '/v/b')]);
    const p3 = await checker.beginPass();
    expect(p3.known?.(a)).toBeUndefined();
    expect([...(await p3.check(a)).conditions.keys()]).toEqual(['read-only']);
    // Unmounted: missing.
    table([line(11, '/v/b')]);
    const p4 = await checker.beginPass();
    expect(p4.known?.(a)).toBeUndefined();
    expect([...(await p4.check(a)).conditions.keys()]).toEqual(['missing']);
  });

  it('a volume on a block device, one with a full threshold or a recorded UUID: read each pass (a device turning read-only with the table unchanged is seen)', async () => {
    table([line(10, '/v/ext', '8:1', 'ext4', '/dev/sda1'), line(11, '/v/t')]);
    const checker = createHealthChecker({ mountInfoPath: mountinfo, sysfsRoot: sys });
    const ext = fsInput('/v/ext');
    const full = fsInput('/v/t', { fullThresholdPercent: 99 });
    const uuid = fsInput('/v/t', { recordedIdentity: 'mount:uuid=0b7c5f6e-6d6a-4f3e-9f0e-1c2d3e4f5a6b' });
    const p1 = await checker.beginPass();
    expect([...(await p1.check(ext)).conditions]).toEqual([]);
    await p1.check(full);
    await p1.check(uuid);
    writeFileSync(join(sys, 'dev', 'block', '8:1', 'ro'), '1\n');
    const p2 = await checker.beginPass();
    expect(p2.known?.(ext)).toBeUndefined();
    expect(p2.known?.(full)).toBeUndefined();
    expect(p2.known?.(uuid)).toBeUndefined();
    expect([...(await p2.check(ext)).conditions.keys()]).toEqual(['read-only']);
  });
});

describe('checkPVs and the monitor over an unchanged host', () => {
  const CLASS = 'fast';
  const cls: ClassConfig = { hostDir: '/mnt/disks', mountDir: '/v', blockCleanerCommand: ['/scripts/quick_reset.sh'], volumeMode: 'Filesystem', namePattern: '*' };
  const lookup = (n: string): ClassConfig | undefined => (n === CLASS ? cls : undefined);
  const pv = (i: number): V1PersistentVolume => ({
    metadata: { name: `pv-${i}`, uid: `uid-${i}`, annotations: { [ANN_VOLUME_IDENTITY]: 'mount' } },
    spec: { storageClassName: CLASS, local: { path: `/mnt/disks/vol${i}` }, capacity: { storage: '1Gi' } },
    status: { phase: 'Available' },
  });

  /** The checker, counting the checks that were not answered from the previous pass. */
  function counting(inner: HealthChecker): { checker: HealthChecker; checks: () => number } {
    let n = 0;
    return {
      checks: () => n,
      checker: {
        async beginPass(): Promise<HealthPass> {
          const p = await inner.beginPass();
          return {
            check: (i) => {
              n++;
              return p.check(i);
            },
            known: (i) => p.known?.(i),
          };
        },
      },
    };
  }

  it('2,000 tmpfs volumes: the second pass checks none again and returns the very same results; the one that goes missing is then reported', async () => {
    const n = 2000;
    table(Array.from({ length: n }, (_, i) => line(10 + i, `/v/vol${i}`)));
    const pvs = Array.from({ length: n }, (_, i) => pv(i));
    const { checker, checks } = counting(createHealthChecker({ mountInfoPath: mountinfo, sysfsRoot: sys }));
    const first = await checkPVs(checker, pvs, lookup, DEFAULT_VOLUME_HEALTH);
    expect(first).toHaveLength(n);
    expect(checks()).toBe(n);
    const second = await checkPVs(checker, pvs, lookup, DEFAULT_VOLUME_HEALTH);
    expect(checks()).toBe(n);
    expect(second.every((c, i) => c === first[i])).toBe(true);

    // The monitor on top: nothing to say while idle; vol7 unmounted: one Event, after it idle again.
    const kube = new FakeKube();
    const recorder = new FakeRecorder();
    const env = testEnv({ kube, recorder, metrics: newMetrics(), config: testConfig({ [CLASS]: cls }), lookupClass: lookup });
    const m = new HealthMonitor(env, { checker, pvs: { list: () => pvs }, ledger: new HealthLedger() });
    expect(await m.pass()).toMatchObject({ checked: n, changed: 0 });
    expect(await m.pass()).toMatchObject({ checked: n, changed: 0 });
    table(Array.from({ length: n }, (_, i) => line(10 + i, `/v/vol${i}`)).filter((_, i) => i !== 7));
    const before = checks();
    expect(await m.pass()).toMatchObject({ checked: n, changed: 1 });
    expect(recorder.events.map((e) => `${e.ref.name} ${e.reason}`)).toEqual(['pv-7 VolumeConditionAbnormal']);
    expect(checks() - before).toBe(n); // a new table: every volume checked once against it
    expect(await m.pass()).toMatchObject({ checked: n, changed: 0 });
    expect(recorder.events).toHaveLength(1);
  });
});

describe('MountTableReader: one read of the mount table per period for discovery and the health pass', () => {
  it('the first caller of a period reads (until stable), the others share it; an unchanged table: one read per period, parsed by nobody', async () => {
    table([line(10, '/v/a')]);
    const reader = new MountTableReader(mountinfo);
    const checker = createHealthChecker({ mountTable: reader, sysfsRoot: sys });
    let parses = 0;
    const points = (text: string): number => (parses++, text.split('\n').length);

    reader.newPeriod();
    const s1 = await reader.current(); // discovery
    s1.view(points);
    await checker.beginPass(); // the health pass
    expect(reader.reads).toBe(2); // read until two reads agree
    for (let period = 0; period < 5; period++) {
      reader.newPeriod();
      const s = await reader.current();
      expect(s).toBe(s1);
      s.view(points);
      await checker.beginPass();
    }
    expect(reader.reads).toBe(2 + 5);
    expect(parses).toBe(1);

    table([line(10, '/v/a'), line(11, '/v/b')]);
    reader.newPeriod();
    const p = await checker.beginPass(); // the health pass first this time; discovery shares its read
    const s2 = await reader.current();
    expect(s2).not.toBe(s1);
    expect(reader.reads).toBe(7 + 2);
    expect([...(await p.check(fsInput('/v/b'))).conditions]).toEqual([]);
  });

  it('a failed read is not kept for the period: the next caller reads again', async () => {
    const later = join(dir, 'later');
    const reader = new MountTableReader(later);
    await expect(reader.current()).rejects.toThrow(/ENOENT/);
    writeFileSync(later, `${line(10, '/v/a')}\n`);
    const p = await createHealthChecker({ mountTable: reader }).beginPass();
    expect(reader.reads).toBe(1 + 2);
    expect([...(await p.check(fsInput('/v/gone'))).conditions.keys()]).toEqual(['missing']);
  });
});
