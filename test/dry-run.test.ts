// --dry-run reads and validates the config dir with the same reader and parser as the daemon: a config the
// daemon refuses is refused here too, with exit code 1 and every error on stderr (issue 17: 3a, 4, 8).
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { healthLines, runDryRun } from '../src/dry-run.ts';
import { checkPVs } from '../src/health/monitor.ts';
import type { HealthChecker, HealthCheckInput } from '../src/health/types.ts';
import { parseOptions } from '../src/flags.ts';
import { silentLogger } from '../src/util/log.ts';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'lsp-dry-run-'));
});
afterEach(async () => {
  vi.restoreAllMocks();
  await rm(dir, { recursive: true, force: true });
});

async function dryRun(files: Record<string, string>): Promise<{ code: number; stderr: string; stdout: string }> {
  for (const [k, v] of Object.entries(files)) await writeFile(join(dir, k), v);
  let stderr = '';
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  });
  let stdout = '';
  const opts = parseOptions(['--dry-run', '--node-name=node-1', `--config-dir=${dir}`], {});
  const code = await runDryRun(opts, silentLogger, (s) => (stdout += s));
  return { code, stderr, stdout };
}

describe('--dry-run: the config rules of issue 17', () => {
  it('refuses nested classes, naming both, and prints no PV', async () => {
    const r = await dryRun({ storageClassMap: 'a:\n  hostDir: /mnt/d\n  mountDir: /mnt/d\nb:\n  hostDir: /mnt/d/vol1\n  mountDir: /mnt/d/vol1\n' });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(`invalid configuration in ${dir}:`);
    expect(r.stderr).toContain('storageClassMap.b.hostDir (storageClassMap:5): hostDir "/mnt/d/vol1" of storage class b lies inside hostDir "/mnt/d" of storage class a');
  });

  it('refuses /dev as a Block class root and /mnt/../etc, each naming the class and the key', async () => {
    const r = await dryRun({
      storageClassMap: 'blk:\n  hostDir: /dev\n  mountDir: /dev\n  volumeMode: Block\nfs:\n  hostDir: /mnt/../etc\n  mountDir: /mnt/disks/fs\n',
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('storageClassMap.blk.hostDir (storageClassMap:2): hostDir "/dev" of storage class blk is /dev,');
    expect(r.stderr).toContain('storageClassMap.blk.mountDir (storageClassMap:3): mountDir "/dev" of storage class blk is /dev,');
    expect(r.stderr).toContain('storageClassMap.fs.hostDir (storageClassMap:6): hostDir "/mnt/../etc" ("/etc" once normalised) of storage class fs is /etc,');
  });

  it('refuses a path with an escape sequence and an invalid label key', async () => {
    const r = await dryRun({
      storageClassMap: 'x:\n  hostDir: "/mnt/disks/\\e[2Jx"\n  mountDir: /mnt/disks/x\n',
      labelsForPV: '"team name": storage\n',
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('storageClassMap.x.hostDir (storageClassMap:2): hostDir "/mnt/disks/\\u001b[2Jx" of storage class x contains U+001B at index 11');
    expect(r.stderr).toContain('labelsForPV.team name (labelsForPV:1): "team name" is not a valid label key');
    expect(r.stderr).not.toContain('\x1b');
  });

  it(`refuses a directory of more than 128 keys in one line, reading none`, async () => {
    const files: Record<string, string> = { storageClassMap: 'x:\n  hostDir: /mnt/disks/x\n  mountDir: /mnt/disks/x\n' };
    for (let i = 0; i < 128; i++) files[`junk${i}`] = 'x';
    const r = await dryRun(files);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(`local-volume-provisioner: config directory ${dir} has 129 entries (ConfigMap keys), over the limit of 128; none was read\n`);
  });
});

describe('--dry-run: volume health lines (issue 19)', () => {
  it('a count, then one line per PV with an abnormal condition (phase, claim, conditions)', async () => {
    const cls = { hostDir: '/mnt/d', mountDir: '/mnt/d', blockCleanerCommand: ['/scripts/quick_reset.sh'], volumeMode: 'Filesystem' as const, namePattern: '*' };
    const pv = (name: string, phase: string, claim?: string): V1PersistentVolume => ({
      metadata: { name, uid: name },
      spec: { storageClassName: 'fast', local: { path: `/mnt/d/${name}` }, ...(claim ? { claimRef: { namespace: 'app', name: claim } } : {}) },
      status: { phase },
    });
    const checker: HealthChecker = {
      beginPass: () =>
        Promise.resolve({
          check: (i: HealthCheckInput) =>
            Promise.resolve({ conditions: new Map(i.pvName === 'ok' ? [] : [['missing' as const, `${i.path} is no longer a mount point`]]) }),
        }),
    };
    const checked = await checkPVs(checker, [pv('gone', 'Bound', 'data'), pv('ok', 'Available'), pv('spare', 'Available')], (n) => (n === 'fast' ? cls : undefined), {
      enabled: true,
      annotatePVs: false,
    });
    expect(healthLines(checked)).toEqual([
      '# volume health: 2 of 3 checked PV(s) of this node abnormal',
      '# health: gone (Bound app/data): missing: /mnt/d/gone is no longer a mount point',
      '# health: spare (Available): missing: /mnt/d/spare is no longer a mount point',
    ]);
  });

  it('says when the check is off', async () => {
    await mkdir(join(dir, 'disks'));
    const r = await dryRun({ storageClassMap: `fast:\n  hostDir: ${dir}/disks\n  mountDir: ${dir}/disks\n`, volumeHealth: 'enabled: false' });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('# volume health: not checked (volumeHealth.enabled is false)\n');
  });
});
