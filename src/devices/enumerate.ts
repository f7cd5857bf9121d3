// The block devices of this host, as DeviceState records (eligibility.ts).
//
// - Whole devices: the entries of /sys/block (partitions are never listed
//   there). Kind: a device whose sysfs path lies under /devices/virtual/ is
//   virtual (dm, md, zram, ram, nbd, ...), a loop device when it has a `loop`
//   directory; any other is a disk.
// - Stable names: the symlinks in /dev/disk/by-id and /dev/disk/by-path, by the
//   st_rdev they resolve to (never by name).
// - Cheap facts (read for every device, each pass that needs them): size, ro,
//   removable, rotational, model, vendor, partitions.
// - Costly facts (only for a device that matches a selector and has no PV):
//   libblkid's low-level probe, `blkid -p -o export <dev>` (superblocks and
//   partition tables: filesystems, RAID, LVM, crypto, swap, ...; the same
//   probe `wipefs -n` lists), and the in-use checks of host/block-usage.ts
//   (mounted, holders, swap, `/` and kubelet root, O_EXCL holder, size 0).
import { execFile } from 'node:child_process';
import { readdir, readFile, realpath, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { blockDeviceUsage, exists, type BlockHostFacts, type BlockUsageOptions } from '../host/block-usage.ts';
import { deviceNumbers } from '../host/stat.ts';
import { describeFsError, errnoCode } from '../util/errors.ts';
import type { DeviceKind, DeviceState, ProbeResult } from './eligibility.ts';

export const STABLE_NAME_DIRS = ['disk/by-id', 'disk/by-path'] as const;

export interface DeviceHostOptions {
  /** Root of sysfs (default /sys). */
  readonly sysRoot?: string | undefined;
  /** Root of the device directory holding disk/by-id and disk/by-path (default /dev). */
  readonly devRoot?: string | undefined;
  /** The signature probe (default: blkid -p -o export). */
  readonly probe?: ((path: string) => Promise<ProbeResult>) | undefined;
  readonly heldExclusively?: BlockUsageOptions['heldExclusively'];
}

async function readTrim(path: string): Promise<string | undefined> {
  try {
    return (await readFile(path, 'utf8')).trim();
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return undefined;
    throw err;
  }
}

/** MAJ:MIN -> the stable names (absolute, under devRoot) resolving to that block device, sorted. */
export async function stableNames(devRoot = '/dev'): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>();
  for (const dir of STABLE_NAME_DIRS) {
    const full = join(devRoot, dir);
    let names: string[];
    try {
      names = await readdir(full);
    } catch (err) {
      if (errnoCode(err) === 'ENOENT') continue;
      throw err;
    }
    for (const n of names) {
      const path = join(full, n);
      try {
        const st = await stat(path, { bigint: true });
        if (!st.isBlockDevice()) continue;
        const { major, minor } = deviceNumbers(st.rdev);
        const key = `${major}:${minor}`;
        out.set(key, [...(out.get(key) ?? []), path]);
      } catch {
        // a dangling link: not a device
      }
    }
  }
  for (const list of out.values()) list.sort();
  return out;
}

/** The cheap facts of one whole device of /sys/block (no probe, no usage); undefined when it is gone. */
export async function readDevice(name: string, names: ReadonlyMap<string, readonly string[]>, o: DeviceHostOptions = {}): Promise<DeviceState | undefined> {
  const dir = join(o.sysRoot ?? '/sys', 'block', name);
  try {
    const devno = (await readTrim(join(dir, 'dev'))) ?? '';
    const real = await realpath(dir);
    const kind: DeviceKind = (await exists(join(dir, 'loop'))) || (name.startsWith('loop') && real.includes('/devices/virtual/'))
      ? 'loop'
      : real.includes('/devices/virtual/')
        ? 'virtual'
        : (await exists(join(dir, 'partition')))
          ? 'partition'
          : 'disk';
    const sectors = Number((await readTrim(join(dir, 'size'))) ?? '0');
    const rot = await readTrim(join(dir, 'queue', 'rotational'));
    const parts: string[] = [];
    for (const e of await readdir(dir, { withFileTypes: true })) {
      if (e.isDirectory() && (await exists(join(dir, e.name, 'partition')))) parts.push(e.name);
    }
    return {
      name,
      devno,
      kind,
      stableNames: [...(names.get(devno) ?? [])],
      sizeBytes: Number.isFinite(sectors) ? sectors * 512 : 0,
      rotational: rot === undefined ? undefined : rot === '1',
      model: (await readTrim(join(dir, 'device', 'model'))) || undefined,
      vendor: (await readTrim(join(dir, 'device', 'vendor'))) || undefined,
      // Unreadable counts as the unsafe answer.
      readOnly: ((await readTrim(join(dir, 'ro'))) ?? '1') !== '0',
      removable: ((await readTrim(join(dir, 'removable'))) ?? '0') !== '0',
      partitions: parts.sort(),
    };
  } catch {
    return undefined; // vanished while being read: not listed this pass
  }
}

/** The cheap facts of every whole device in /sys/block, by kernel name. */
export async function listDevices(o: DeviceHostOptions = {}): Promise<DeviceState[]> {
  const names = await stableNames(o.devRoot);
  const out: DeviceState[] = [];
  for (const name of (await readdir(join(o.sysRoot ?? '/sys', 'block'))).sort()) {
    const d = await readDevice(name, names, o);
    if (d) out.push(d);
  }
  return out;
}

/** libblkid's low-level probe of `path`: `blkid -p -o export` (exit 0: found, 2: nothing, 8: ambivalent). */
export function blkidProbe(path: string): Promise<ProbeResult> {
  return new Promise((resolve) => {
    execFile('blkid', ['-p', '-o', 'export', path], { timeout: 30_000, maxBuffer: 64 * 1024 }, (err, stdout, stderr) => {
      const lines = stdout.split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('DEVNAME='));
      const code = err === null ? 0 : typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : undefined;
      if (code === 0) resolve({ kind: 'signatures', found: lines });
      else if (code === 2 && lines.length === 0) resolve({ kind: 'blank' });
      else if (code === 8) resolve({ kind: 'failed', why: `blkid found more than one signature (ambivalent probe)${lines.length ? `: ${lines.join(', ')}` : ''}` });
      else resolve({ kind: 'failed', why: `blkid -p ${path}: ${code === undefined ? (err?.message ?? 'failed') : `exit ${code}`}${stderr.trim() ? `: ${stderr.trim()}` : ''}` });
    });
  });
}

/**
 * The device with its costly facts read through `path` (the name the link would point to): it must still
 * be the same device (MAJ:MIN), then the signature probe and the in-use checks. Never throws: a fact
 * that cannot be read is left unread, which the decision refuses.
 */
export async function probeDevice(s: DeviceState, path: string, facts: BlockHostFacts, o: DeviceHostOptions = {}): Promise<DeviceState> {
  try {
    const st = await stat(path, { bigint: true });
    const { major, minor } = deviceNumbers(st.rdev);
    if (!st.isBlockDevice() || `${major}:${minor}` !== s.devno) {
      return { ...s, probe: { kind: 'failed', why: `${path} no longer resolves to block device ${s.devno}` }, busy: undefined };
    }
  } catch (err) {
    return { ...s, probe: { kind: 'failed', why: `${path}: ${describeFsError(err, 'short')}` }, busy: undefined };
  }
  let busy: DeviceState['busy'];
  try {
    busy = await blockDeviceUsage(path, BigInt(s.sizeBytes), facts, { sysRoot: o.sysRoot, heldExclusively: o.heldExclusively });
  } catch {
    busy = undefined;
  }
  // Probed after the exclusive-open check: blkid's own open must not be what that check sees.
  const probe = await (o.probe ?? blkidProbe)(path);
  return { ...s, probe, busy };
}
