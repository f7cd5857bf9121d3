// The Filesystem cleanup Job runs unprivileged with only the capabilities of
// jobSecurityContext('Filesystem'). This runs the real fsclean.sh as root
// confined to exactly that capability set (setpriv: bounding set, no inherited
// capabilities, no_new_privs, as the container runtime does) on a tree a user
// could leave behind: directories of other users with mode 000, a sticky
// directory of another user. It must clean everything; without either
// capability it must fail (so the set is both enough and needed).
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { jobSecurityContext } from '../../src/deleter/job.ts';

const FSCLEAN = fileURLToPath(new URL('../../deployment/scripts/fsclean.sh', import.meta.url));

function skipReason(): string | undefined {
  if (process.getuid?.() !== 0) return 'not running as root';
  if (spawnSync('setpriv', ['--version']).status !== 0) return 'setpriv (util-linux) is not available';
  return undefined;
}
const skip = skipReason();
if (skip) console.warn(`skipping the cleanup Job capability test: ${skip}`);

let work: string;
let mounted: string | undefined;
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'lsp-jobcaps-'));
});
afterEach(() => {
  if (mounted !== undefined) spawnSync('umount', [mounted]);
  mounted = undefined;
  rmSync(work, { recursive: true, force: true });
});

/** A volume (a tmpfs: fsclean.sh only cleans mount points) as users leave it: other owners, mode 000, a sticky directory of another user. */
function userTree(): string {
  const vol = join(work, 'vol');
  mkdirSync(vol);
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'lsp-jobcaps', vol]);
  mounted = vol;
  mkdirSync(join(vol, 'private', 'deep'), { recursive: true });
  writeFileSync(join(vol, 'private', 'deep', 'data'), 'x');
  writeFileSync(join(vol, 'private', 'unreadable'), 'y');
  mkdirSync(join(vol, 'shared'));
  writeFileSync(join(vol, 'shared', 'theirs'), 'z');
  writeFileSync(join(vol, '.hidden'), 'h');
  for (const p of ['private', 'private/deep', 'private/deep/data', 'private/unreadable']) chownSync(join(vol, p), 1234, 1234);
  chmodSync(join(vol, 'private', 'unreadable'), 0o000);
  chmodSync(join(vol, 'private', 'deep'), 0o000);
  chmodSync(join(vol, 'private'), 0o000);
  chownSync(join(vol, 'shared'), 3456, 3456);
  chmodSync(join(vol, 'shared'), 0o1777);
  chownSync(join(vol, 'shared', 'theirs'), 2345, 2345);
  return vol;
}

const boundingSet = (caps: readonly string[]): string => ['-all', ...caps.map((c) => `+${c.toLowerCase()}`)].join(',');

/** Runs fsclean.sh as root confined to `caps` (names as in a securityContext, e.g. DAC_OVERRIDE). */
function cleanWith(caps: readonly string[], dir: string): { status: number | null; output: string } {
  const r = spawnSync('setpriv', ['--bounding-set', boundingSet(caps), '--inh-caps', '-all', '--no-new-privs', '--', FSCLEAN], {
    encoding: 'utf8',
    env: { PATH: process.env['PATH'] ?? '/usr/sbin:/usr/bin:/sbin:/bin', LOCAL_PV_FILESYSTEM: dir },
    timeout: 60_000,
  });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

describe.skipIf(skip !== undefined)('Filesystem cleanup Job capabilities', () => {
  const sc = jobSecurityContext('Filesystem');
  const caps = sc.capabilities?.add ?? [];

  it('is unprivileged, drops every other capability and cannot escalate', () => {
    expect(sc.privileged).toBe(false);
    expect(sc.allowPrivilegeEscalation).toBe(false);
    expect(sc.capabilities?.drop).toEqual(['ALL']);
    expect(caps).toEqual(['DAC_OVERRIDE', 'FOWNER']);
  });

  it('fsclean.sh empties a volume of other users\' files with exactly these capabilities', () => {
    const vol = userTree();
    const r = cleanWith(caps, vol);
    expect(r.status).toBe(0);
    expect(r.output).toContain('done');
    // Without CAP_SYS_ADMIN the script cannot make its own private mount namespace: it cleans in
    // the current one, which is why the Filesystem Job mounts hostDir without propagation (job.ts).
    expect(r.output).toContain('cannot create a private mount namespace');
    expect(readdirSync(vol)).toEqual([]);
    // The capability set really was in force in that process tree.
    const status = execFileSync('setpriv', ['--bounding-set', boundingSet(caps), '--', 'grep', 'CapEff', '/proc/self/status'], { encoding: 'utf8' });
    expect(status).toMatch(/CapEff:\s+0*a$/m); // bit 1 CAP_DAC_OVERRIDE + bit 3 CAP_FOWNER
  });

  it.each(caps.map((c) => [c]))('fails without %s (the capability is needed)', (missing) => {
    const vol = userTree();
    const r = cleanWith(caps.filter((c) => c !== missing), vol);
    expect(r.status).not.toBe(0);
    expect(r.output).toMatch(/entries left in/);
    expect(readdirSync(vol).length).toBeGreaterThan(0);
  });
});
