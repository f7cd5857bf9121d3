// Issue 8 end to end: a PV that names another volume's path is never cleaned.
// Anyone allowed to create PVs can create one with this node's provisioned-by
// annotation, spec.local.path = the path of a volume that is Bound to someone
// else, reclaim Delete and a claimRef to a claim that does not exist. The real
// PV binder marks it Released; the daemon must refuse it (Warning
// VolumeCleanRefused, clean_refused_total) instead of emptying the Bound
// volume. Also: the victim may be a PV made by hand (no annotation; seen through
// the stubs the PV informer keeps of other local PVs of this node), and a PV
// whose name is not the one this node gives to its volume is refused even when
// no other PV uses the path. A legitimate release is still cleaned.
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClients, uniqueName, waitFor } from './harness/kube.ts';
import { createNode } from './harness/node-agent.ts';
import { createImmediateClass, handMadeLocalPV, keepLogs, pvEvents, releaseAndRediscover, startDaemon } from './support/cleanup.ts';
import { HostFixtures, isRoot } from './support/host.ts';
import { bindPV, configFiles, logsWith, metric, readPV, waitPV } from './support/hot-reload.ts';
import type { ProvisionerProcess } from './support/provisioner.ts';
import { generatePVName } from '../src/volume/naming.ts';

const { core, storage } = adminClients();
const M = 'local_volume_provisioner_';
const HOST_DIR = '/mnt/host/fs';

describe.skipIf(!isRoot())('deleter: forged PVs naming another volume are refused', () => {
  const host = new HostFixtures('lsp-forged-');
  const node = uniqueName('forged-node');
  const ns = uniqueName('forged-ns');
  const cls = uniqueName('forged-fs');
  const madeHere: string[] = []; // PVs this test creates by hand, deleted in afterAll
  let prov: ProvisionerProcess | undefined;
  let fsDir = '';
  let annotation = '';

  /** Files with known content in a volume; returns a snapshot to compare with later. */
  const fill = (entry: string): Record<string, string> => {
    const vol = join(fsDir, entry);
    mkdirSync(join(vol, 'sub'), { recursive: true });
    writeFileSync(join(vol, 'data.txt'), `data of ${entry}`);
    writeFileSync(join(vol, '.hidden'), 'secret');
    writeFileSync(join(vol, 'sub', 'deep.txt'), 'deep');
    return snapshot(entry);
  };
  const snapshot = (entry: string): Record<string, string> => {
    const vol = join(fsDir, entry);
    const out: Record<string, string> = {};
    for (const f of ['data.txt', '.hidden', join('sub', 'deep.txt')]) out[f] = existsSync(join(vol, f)) ? readFileSync(join(vol, f), 'utf8') : '<missing>';
    return { ...out, entries: readdirSync(vol).sort().join(',') };
  };

  /** A local PV on this node, made by an admin (not by the daemon). */
  const localPV = (name: string, entry: string, over: Partial<V1PersistentVolume['spec']> = {}, annotations?: Record<string, string>): V1PersistentVolume =>
    handMadeLocalPV({ name, node, cls, path: `${HOST_DIR}/${entry}`, meta: annotations ? { annotations } : {}, spec: over });

  /** Creates the forged PV (our annotation, reclaim Delete, claimRef to a claim that does not exist) and waits until the binder releases it. */
  const forge = async (name: string, entry: string): Promise<V1PersistentVolume> => {
    const claimRef = { apiVersion: 'v1', kind: 'PersistentVolumeClaim', namespace: ns, name: `ghost-${name}`.slice(0, 60), uid: randomUUID() };
    madeHere.push(name);
    const created = await core.createPersistentVolume({ body: localPV(name, entry, { claimRef }, { 'pv.kubernetes.io/provisioned-by': annotation }) });
    await waitFor(
      async () => {
        const pv = await readPV(core, name);
        // Released, or already gone (a daemon without the check cleans and deletes it at once).
        return pv === undefined || pv.metadata?.uid !== created.metadata?.uid || pv.status?.phase === 'Released';
      },
      { what: `the binder to mark the forged PV ${name} Released`, timeoutMs: 60_000 },
    );
    return created;
  };

  /**
   * Waits for the refusal Event on the forged PV (or for the damage a daemon without the check does:
   * the volume emptied, the forged PV deleted), then checks: the volume intact, the forged PV still
   * there and Released, and no clean ever started for it. Returns the Event message.
   */
  const expectRefused = async (forged: V1PersistentVolume, entry: string, before: Record<string, string>, match: (msg: string) => boolean): Promise<string> => {
    const name = forged.metadata?.name ?? '';
    const ev = await waitFor(
      async () => {
        const found = (await pvEvents(core, forged)).find((e) => e.reason === 'VolumeCleanRefused' && match(e.message ?? ''));
        if (found) return found;
        const gone = (await readPV(core, name))?.metadata?.uid !== forged.metadata?.uid;
        return gone || JSON.stringify(snapshot(entry)) !== JSON.stringify(before) ? { type: 'damage', message: '' } : undefined;
      },
      { what: `a VolumeCleanRefused event on PV ${name}`, timeoutMs: 60_000 },
    );
    expect(snapshot(entry)).toEqual(before);
    const still = await readPV(core, name);
    expect(still?.metadata?.uid).toBe(forged.metadata?.uid);
    expect(still?.status?.phase).toBe('Released');
    expect(ev.type).toBe('Warning');
    expect(logsWith(prov!, `Start cleanup for pv ${name}`)).toEqual([]);
    return ev.message ?? '';
  };

  beforeAll(async () => {
    await createNode(core, node);
    await core.createNamespace({ body: { metadata: { name: ns } } });
    await createImmediateClass(storage, cls);
    fsDir = host.mkdir('fs');
    for (const v of ['vol-victim', 'vol-legit', 'manual', 'hidden']) host.tmpfs(8, 'fs', v);
    // Discovery makes PVs for vol-* only; "manual" and "hidden" are mounted volumes without a discovered PV.
    const files = configFiles({ classes: { [cls]: { hostDir: HOST_DIR, mountDir: fsDir, namePattern: 'vol-*' } } });
    prov = await startDaemon(host, { nodeName: node, files });
    const victim = await waitPV(core, generatePVName('vol-victim', node, cls));
    annotation = victim.metadata?.annotations?.['pv.kubernetes.io/provisioned-by'] ?? '';
    expect(annotation).toMatch(new RegExp(`^local-volume-provisioner-${node}`));
  });

  afterAll(async () => {
    await prov?.stop();
    for (const name of madeHere) {
      try {
        await core.deletePersistentVolume({ name });
      } catch {
        /* best effort */
      }
    }
    await core.deleteNamespace({ name: ns }).catch(() => undefined); // best effort
    keepLogs(host, node, ['provisioner.log']);
    host.cleanup();
  });

  it('a forged Released PV with the path of a Bound volume: refused, the Bound volume keeps its files', async () => {
    const victimName = generatePVName('vol-victim', node, cls);
    const victim = await waitPV(core, victimName);
    await bindPV(core, victim, ns);
    const before = fill('vol-victim');

    const forged = await forge(uniqueName('forged'), 'vol-victim');
    const msg = await expectRefused(forged, 'vol-victim', before, (m) => m.includes('is also used by PV'));
    expect(msg).toContain(`its volume "${HOST_DIR}/vol-victim" is also used by PV "${victimName}"`);
    expect(msg).toContain(`its name is not "${victimName}"`);

    expect(snapshot('vol-victim')).toEqual(before);
    expect((await readPV(core, victimName))?.status?.phase).toBe('Bound');
    expect(await metric(prov!, `${M}clean_refused_total`, { reason: 'path_in_use' })).toBeGreaterThanOrEqual(1);
    expect(await metric(prov!, `${M}clean_refused_total`, { reason: 'name_mismatch' })).toBeGreaterThanOrEqual(1);
  });

  it('the victim may be a PV made by hand: a forged PV with the generated name is refused (path in use)', async () => {
    const manual = uniqueName('manual-pv');
    madeHere.push(manual);
    const created = await core.createPersistentVolume({ body: localPV(manual, 'manual', { persistentVolumeReclaimPolicy: 'Retain' }) });
    await bindPV(core, created, ns);
    const before = fill('manual');

    const forged = await forge(generatePVName('manual', node, cls), 'manual');
    const msg = await expectRefused(forged, 'manual', before, (m) => m.includes('is also used by PV'));
    expect(msg).toContain(`is also used by PV "${manual}"`);
    expect(msg).not.toContain('its name is not');
    expect(snapshot('manual')).toEqual(before);
  });

  it('a forged PV whose name is not the generated one is refused even when no other PV uses the path', async () => {
    const before = fill('hidden');
    const forged = await forge(uniqueName('forged-hidden'), 'hidden');
    const msg = await expectRefused(forged, 'hidden', before, (m) => m.includes('its name is not'));
    expect(msg).toContain(`its name is not "${generatePVName('hidden', node, cls)}", the name this node gives to volume "hidden" of class "${cls}"`);
    expect(msg).not.toContain('is also used by PV');
    expect(snapshot('hidden')).toEqual(before);
  });

  it('a legitimate release next to the forged PVs is still cleaned and rediscovered', async () => {
    const pv = await waitPV(core, generatePVName('vol-legit', node, cls));
    const claim = await bindPV(core, pv, ns);
    fill('vol-legit');
    const fresh = await releaseAndRediscover(core, ns, pv, claim);
    expect(readdirSync(join(fsDir, 'vol-legit'))).toEqual([]);
    expect(fresh.metadata?.uid).not.toBe(pv.metadata?.uid);
  });
});
