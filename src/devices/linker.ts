// The device linker (issue 21): per pass, before discovery, for each class
// with a deviceSelector, links each matching, blank and unused whole disk into
// the class's mountDir under its stable name (a symlink to /dev/disk/by-id/...,
// what the Go provisioner's docs have admins make by hand); discovery then
// makes the PV as for a hand-made link.
//
// Rules:
// - A disk is linked only when decideDevice (eligibility.ts) says so, and that
//   decision is taken twice: once to choose, once again from freshly read facts
//   right before the symlink is made.
// - A disk already present in any class's mountDir (a hand-made link, or ours)
//   is never linked again.
// - Only links recorded in the link store (ours) are ever removed, and only
//   while no PV uses their path and no clean is running for it: when they no
//   longer match the selector, or the disk is no longer blank and free (someone
//   else wrote to it; a disk with our PV is never probed, the kubelet formats it).
// - maxCount counts the class's links that stay.
// - One Warning per disk and reason (RawDeviceRefused) while the refusal lasts;
//   a Normal Event per link made or removed. A pass where nothing changes makes
//   no API request. Classes without a deviceSelector cost nothing.
import { lstat, readdir, readlink, stat, symlink, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { ClassConfig, DeviceSelector } from '../config/types.ts';
import type { ObjectRef } from '../kube/events.ts';
import { REASON_DEVICE_LINKED, REASON_DEVICE_REFUSED, REASON_DEVICE_UNLINKED } from '../kube/reasons.ts';
import { readBlockHostFacts, type BlockHostFacts, type BlockHostFactsOptions } from '../host/block-usage.ts';
import { DEFAULT_MOUNTINFO_PATH, readMountPropagation } from '../host/mountinfo.ts';
import { deviceNumbers } from '../host/stat.ts';
import { describeFsError, errnoCode } from '../util/errors.ts';
import { matchesNamePattern } from '../util/glob.ts';
import type { Logger } from '../util/log.ts';
import type { GenerationEnv } from '../volume/env.ts';
import { generatePVName } from '../volume/naming.ts';
import type { PVIndex } from '../volume/pv-index.ts';
import { decideDevice, matchDevice, type DeviceState } from './eligibility.ts';
import { listDevices, probeDevice, readDevice, stableNames, type DeviceHostOptions } from './enumerate.ts';
import type { DeviceLinkStore, LinkRecord } from './link-store.ts';

/** What the linker did (or, dry, would do) with one device for one class. */
export interface DeviceLine {
  /** Kernel name and MAJ:MIN. */
  readonly device: string;
  readonly action: 'link' | 'linked' | 'kept' | 'unlink' | 'unlinked' | 'skip' | 'refuse';
  readonly detail: string;
}

export interface ClassDevices {
  readonly className: string;
  readonly lines: readonly DeviceLine[];
}

export interface DeviceLinkerOptions {
  readonly pvs: PVIndex;
  readonly store: DeviceLinkStore;
  /** Whether a clean of this PV is running (its link must stay). */
  readonly cleaning?: ((pvName: string) => boolean) | undefined;
  /** Decide and report only: no link made or removed, no Event. */
  readonly dryRun?: boolean | undefined;
  readonly host?: (DeviceHostOptions & BlockHostFactsOptions) | undefined;
}

interface PassState {
  facts?: Promise<BlockHostFacts>;
  /** MAJ:MIN -> an entry of some class's mountDir resolving to it. */
  entries?: Promise<Map<string, string>>;
  readonly problems: Set<string>;
}

const deviceText = (d: { name: string; devno: string }): string => `${d.name} (${d.devno})`;

export class DeviceLinker {
  readonly #env: GenerationEnv;
  readonly #o: DeviceLinkerOptions;
  readonly #log: Logger;
  readonly #nodeRef: ObjectRef;
  /** Last reported refusal per key (class, device, reason): its message. */
  readonly #reported = new Map<string, string>();

  constructor(env: GenerationEnv, o: DeviceLinkerOptions) {
    this.#env = env;
    this.#o = o;
    this.#log = env.logger.child({ component: 'devices' });
    const meta = env.node.metadata ?? {};
    this.#nodeRef = { kind: 'Node', apiVersion: 'v1', name: meta.name ?? '', uid: meta.uid };
  }

  /** Classes with a deviceSelector, sorted. */
  #classes(): [string, ClassConfig & { deviceSelector: DeviceSelector }][] {
    return Object.entries(this.#env.config.storageClassMap)
      .filter((e): e is [string, ClassConfig & { deviceSelector: DeviceSelector }] => e[1]?.deviceSelector !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  }

  /** One pass. Never throws: a failure is logged and reported, and nothing is linked. */
  async sync(): Promise<ClassDevices[]> {
    const classes = this.#classes();
    if (classes.length === 0) return [];
    const pass: PassState = { problems: new Set() };
    const out: ClassDevices[] = [];
    try {
      const devices = await listDevices(this.#o.host);
      await this.#dropStale();
      for (const [className, cls] of classes) out.push({ className, lines: await this.#syncClass(pass, className, cls, devices) });
    } catch (err) {
      const msg = `cannot select raw disks: ${describeFsError(err)}`;
      this.#report(pass, 'list', msg);
      out.push({ className: '', lines: [{ device: '', action: 'refuse', detail: msg }] });
    }
    for (const k of [...this.#reported.keys()]) if (!pass.problems.has(k)) this.#reported.delete(k);
    const count = (a: DeviceLine['action']): number => out.reduce((n, c) => n + c.lines.filter((l) => l.action === a).length, 0);
    this.#log.debug({ classes: classes.length, linked: count('linked'), kept: count('kept'), unlinked: count('unlinked'), refused: count('refuse') }, 'device selection pass');
    return out;
  }

  /** Forgets records whose link is gone or no longer ours (replaced by someone): never touched again. */
  async #dropStale(): Promise<void> {
    for (const r of this.#o.store.list()) {
      if (!(await this.#stillOurs(r))) {
        this.#log.info({ link: r.link }, `device link ${JSON.stringify(r.link)} is gone or was replaced; no longer tracked`);
        if (!this.#o.dryRun) this.#o.store.remove(r.link);
      }
    }
  }

  async #stillOurs(r: LinkRecord): Promise<boolean> {
    try {
      return (await lstat(r.link)).isSymbolicLink() && (await readlink(r.link)) === r.target;
    } catch {
      return false;
    }
  }

  async #syncClass(pass: PassState, className: string, cls: ClassConfig & { deviceSelector: DeviceSelector }, devices: DeviceState[]): Promise<DeviceLine[]> {
    const sel = cls.deviceSelector;
    const lines: DeviceLine[] = [];
    const byDevno = new Map(devices.map((d) => [d.devno, d]));
    const records = this.#o.store.list();
    const linked = new Set(records.map((r) => r.devno));
    let count = 0;

    // This class's links: keep or remove.
    for (const r of records.filter((x) => x.className === className)) {
      const dev = byDevno.get(r.devno);
      const what = dev ? deviceText(dev) : r.devno;
      const name = basename(r.link);
      const hostPath = join(cls.hostDir, name);
      const pvName = generatePVName(name, this.#env.nodeId.name, className);
      const users = this.#o.pvs.lookupByPath(hostPath).map((p) => p.metadata?.name ?? '');
      if (this.#o.pvs.get(pvName)) users.push(pvName);
      if (users.length > 0 || this.#o.cleaning?.(pvName)) {
        count++;
        lines.push({ device: what, action: 'kept', detail: `${r.link} -> ${r.target}: PV ${[...new Set(users)].join(', ') || pvName} uses it (or is being cleaned)` });
        continue;
      }
      let why: string | undefined;
      if (dirname(r.link) !== cls.mountDir) why = `the class's mountDir is now ${JSON.stringify(cls.mountDir)}`;
      else if (!dev) why = `device ${r.devno} is gone`;
      else {
        const m = matchDevice(dev, sel);
        if (!m.matches) why = m.why;
        else if (m.target !== r.target) why = `its selected name is now ${m.target}`;
        else {
          const d = decideDevice(await probeDevice(dev, r.target, await this.#facts(pass), this.#o.host), sel);
          if (d.kind === 'refuse') why = `it no longer may be linked: ${d.refusals.map((x) => x.detail).join('; ')}`;
          else if (d.kind === 'skip') why = d.why;
        }
      }
      if (why === undefined) {
        count++;
        lines.push({ device: what, action: 'kept', detail: `${r.link} -> ${r.target} (no PV yet)` });
        continue;
      }
      lines.push(await this.#unlink(r, what, why));
    }

    // Other devices: link the ones that match and may be linked.
    for (const dev of devices) {
      const what = deviceText(dev);
      if (linked.has(dev.devno)) {
        const r = records.find((x) => x.devno === dev.devno);
        if (r && r.className !== className) lines.push({ device: what, action: 'skip', detail: `linked for class ${r.className} (${r.link})` });
        continue;
      }
      const m = matchDevice(dev, sel);
      if (!m.matches) {
        lines.push({ device: what, action: 'skip', detail: m.why });
        continue;
      }
      const entry = (await this.#entries(pass)).get(dev.devno);
      if (entry !== undefined) {
        lines.push({ device: what, action: 'skip', detail: `already a volume entry: ${entry}` });
        continue;
      }
      if (sel.maxCount !== undefined && count >= sel.maxCount) {
        lines.push({ device: what, action: 'skip', detail: `maxCount ${sel.maxCount} reached` });
        continue;
      }
      const line = await this.#link(pass, className, cls, dev);
      if (line.action === 'link' || line.action === 'linked') {
        count++;
        linked.add(dev.devno);
      }
      lines.push(line);
    }
    return lines;
  }

  async #unlink(r: LinkRecord, what: string, why: string): Promise<DeviceLine> {
    if (this.#o.dryRun) return { device: what, action: 'unlink', detail: `${r.link} -> ${r.target}: ${why}` };
    try {
      // Only our own symlink, checked right before.
      if (await this.#stillOurs(r)) await unlink(r.link);
    } catch (err) {
      if (errnoCode(err) !== 'ENOENT') {
        this.#log.warn({ link: r.link }, `cannot remove device link ${JSON.stringify(r.link)}: ${describeFsError(err)}`);
        return { device: what, action: 'kept', detail: `${r.link}: removing it failed: ${describeFsError(err, 'short')}` };
      }
    }
    this.#o.store.remove(r.link);
    const msg = `removed device link ${r.link} -> ${r.target} (class ${r.className}), which no PV uses: ${why}`;
    this.#log.info({ link: r.link, class: r.className }, msg);
    this.#env.recorder.event(this.#nodeRef, 'Normal', REASON_DEVICE_UNLINKED, msg);
    return { device: what, action: 'unlinked', detail: `${r.link}: ${why}` };
  }

  async #link(pass: PassState, className: string, cls: ClassConfig & { deviceSelector: DeviceSelector }, dev: DeviceState): Promise<DeviceLine> {
    const sel = cls.deviceSelector;
    const what = deviceText(dev);
    const refuse = (reason: string, detail: string): DeviceLine => {
      const msg = `not linking disk ${what} into storage class ${className}: ${detail}`;
      if (!this.#o.dryRun) this.#report(pass, `${className}\0${dev.devno}\0${reason}`, msg);
      return { device: what, action: 'refuse', detail: `${reason}: ${detail}` };
    };
    const m = matchDevice(dev, sel);
    if (!m.matches) return { device: what, action: 'skip', detail: m.why };
    const first = decideDevice(await probeDevice(dev, m.target, await this.#facts(pass), this.#o.host), sel);
    if (first.kind === 'skip') return { device: what, action: 'skip', detail: first.why };
    if (first.kind === 'refuse') {
      for (const r of first.refusals) refuse(r.reason, r.detail);
      return { device: what, action: 'refuse', detail: first.refusals.map((r) => `${r.reason}: ${r.detail}`).join('; ') };
    }
    const name = basename(first.target);
    const link = join(cls.mountDir, name);
    if (!matchesNamePattern(cls.namePattern, name)) {
      return refuse('name-pattern', `its link name ${JSON.stringify(name)} does not match the class's namePattern ${JSON.stringify(cls.namePattern)}: discovery would not see it`);
    }
    if (this.#o.dryRun) return { device: what, action: 'link', detail: `${link} -> ${first.target} (discovery then makes its PV)` };

    // Right before the link: every fact read again.
    const fresh = await readDevice(dev.name, await stableNames(this.#o.host?.devRoot), this.#o.host);
    if (!fresh || fresh.devno !== dev.devno) return refuse('gone', `${dev.name} changed while it was checked`);
    const again = decideDevice(await probeDevice(fresh, first.target, await readBlockHostFacts(await this.#mounts(), this.#o.host), this.#o.host), sel);
    if (again.kind !== 'link' || again.target !== first.target) {
      const detail = again.kind === 'refuse' ? again.refusals.map((r) => `${r.reason}: ${r.detail}`).join('; ') : again.kind === 'skip' ? again.why : `its name changed to ${again.target}`;
      return refuse('changed', `the check right before linking failed: ${detail}`);
    }
    const record: LinkRecord = { className, link, target: first.target, devno: dev.devno };
    this.#o.store.add(record); // recorded first: a crash after the symlink leaves it ours
    try {
      await symlink(first.target, link);
    } catch (err) {
      this.#o.store.remove(link);
      if (errnoCode(err) === 'EEXIST') return refuse('name-taken', `${JSON.stringify(link)} already exists and was not made by this daemon`);
      return refuse('link-failed', `cannot create ${JSON.stringify(link)}: ${describeFsError(err, 'short')}`);
    }
    const msg = `linked disk ${what} into storage class ${className}: ${link} -> ${first.target} (blank: no signature or partition table; not mounted, held, swap or opened exclusively)`;
    this.#log.info({ link, class: className }, msg);
    this.#env.recorder.event(this.#nodeRef, 'Normal', REASON_DEVICE_LINKED, msg);
    return { device: what, action: 'linked', detail: `${link} -> ${first.target}` };
  }

  #mounts(): Promise<Awaited<ReturnType<typeof readMountPropagation>>> {
    return readMountPropagation(this.#env.mountInfoPath ?? DEFAULT_MOUNTINFO_PATH);
  }

  #facts(pass: PassState): Promise<BlockHostFacts> {
    pass.facts ??= this.#mounts().then((m) => readBlockHostFacts(m, this.#o.host));
    return pass.facts;
  }

  /** Every non-directory entry of every class's mountDir that is a block device, by MAJ:MIN. */
  #entries(pass: PassState): Promise<Map<string, string>> {
    pass.entries ??= (async () => {
      const out = new Map<string, string>();
      for (const cls of Object.values(this.#env.config.storageClassMap)) {
        if (!cls) continue;
        let names;
        try {
          names = await readdir(cls.mountDir, { withFileTypes: true });
        } catch {
          continue;
        }
        for (const e of names) {
          if (e.isDirectory()) continue;
          const p = join(cls.mountDir, e.name);
          try {
            const st = await stat(p, { bigint: true });
            if (!st.isBlockDevice()) continue;
            const { major, minor } = deviceNumbers(st.rdev);
            if (!out.has(`${major}:${minor}`)) out.set(`${major}:${minor}`, p);
          } catch {
            // dangling: not a device
          }
        }
      }
      return out;
    })();
    return pass.entries;
  }

  /** A Warning on the Node once per key while the problem lasts (and again if its text changes). */
  #report(pass: PassState, key: string, msg: string): void {
    pass.problems.add(key);
    if (this.#reported.get(key) === msg) return;
    this.#reported.set(key, msg);
    this.#log.warn({}, msg);
    this.#env.recorder.event(this.#nodeRef, 'Warning', REASON_DEVICE_REFUSED, msg);
  }
}
