// The product image as built from the Dockerfile (e2e/harness/image.ts): the OCI archive is pulled into
// a buildah storage of the test's own (a temp dir, removed at the end), and checked from the inside with
// `buildah run` (chroot isolation): Node 24, both entry points, the cleaner scripts the Job spec names,
// the tools they call, production dependencies only, tini as the entrypoint. No control plane needed.
import { execFileSync } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { Buildah, runTool, type OciImageConfig } from './harness/buildah.ts';
import { ensureProvisionerImage, IMAGE_REPOSITORY, repoRoot, type ProvisionerImage } from './harness/image.ts';
import { DEFAULT_BLOCK_CLEANER_COMMAND } from '../src/config/types.ts';
import { jobCommand } from '../src/deleter/job.ts';

/** Why the test cannot run here, or undefined. */
function missingPrerequisite(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (buildah with chroot isolation, mmdebstrap)';
  for (const tool of ['buildah', 'mmdebstrap']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    } catch {
      return `${tool} is not installed (apt-get install buildah mmdebstrap)`;
    }
  }
  return undefined;
}

const missing = missingPrerequisite();
if (missing !== undefined) console.warn(`[image.test] skipped: ${missing}`);

const pkg = JSON.parse(await readFile(join(repoRoot, 'package.json'), 'utf8')) as {
  version: string;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};

describe.skipIf(missing !== undefined)(`product image built from the Dockerfile${missing ? ` (skipped: ${missing})` : ''}`, () => {
  let image: ProvisionerImage;
  let dir: string;
  let store: Buildah;
  let container = '';
  let config: OciImageConfig;

  /** Runs argv in the test's container (the image's env and working dir); stdout. */
  const run = (argv: readonly string[]): Promise<string> => store.run(['run', '--isolation', 'chroot', container, '--', ...argv]);
  const sh = (script: string): Promise<string> => run(['sh', '-c', script]);

  beforeAll(async () => {
    image = await ensureProvisionerImage({ log: (m) => console.log(`[image] ${m}`), tty: false });
    dir = await mkdtemp(join(tmpdir(), 'lsp-image-test-'));
    store = new Buildah(join(dir, 'storage'));
    await store.run(['pull', `oci-archive:${image.archive}`]);
    container = (await store.run(['from', '--pull=never', '--name', 'lsp-image-test', image.ref])).trim();
    config = await store.imageConfig(image.ref);
  }, 3_600_000);

  afterAll(async () => {
    if (!dir) return;
    if (container) await store.run(['rm', container]).catch(() => undefined);
    // buildah run leaves no mount behind; make sure, then remove the storage.
    const mounts = (await readFile('/proc/self/mountinfo', 'utf8'))
      .split('\n')
      .map((l) => l.split(' ')[4] ?? '')
      .filter((mp) => mp.startsWith(`${dir}/`))
      .reverse();
    for (const mp of mounts) await runTool('umount', ['-l', mp]).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  }, 120_000);

  it('is an OCI archive whose reference is the content-hashed tag', async () => {
    expect(image.ref).toMatch(new RegExp(`^${IMAGE_REPOSITORY.replaceAll('.', '\\.')}:[0-9a-f]{12}$`));
    const index = JSON.parse(await runTool('tar', ['-xOf', image.archive, 'index.json'])) as {
      manifests: { annotations?: Record<string, string> }[];
    };
    expect(index.manifests.map((m) => m.annotations?.['org.opencontainers.image.ref.name'])).toEqual([image.ref]);
  });

  it('runs under tini: the entrypoint is tini -- node --max-opt=1 main.js, with NODE_ENV=production', () => {
    // --max-opt=1: Sparkplug is V8's highest tier for the daemon (docs/performance.md §6, "V8's tiers").
    expect(config.Entrypoint).toEqual(['/usr/bin/tini', '--', 'node', '--max-opt=1', '/app/dist/main.js']);
    expect(config.Env).toContain('NODE_ENV=production');
  });

  it('runs Node 24', async () => {
    expect((await run(['node', '--version'])).trim()).toMatch(/^v24\.\d+\.\d+$/);
  });

  it('the entrypoint prints the version of package.json and the help', async () => {
    const entry = config.Entrypoint ?? [];
    expect((await run([...entry, '--version'])).trim()).toBe(`local-volume-provisioner ${pkg.version}`);
    expect(await run([...entry, '--help'])).toMatch(/^Usage: local-volume-provisioner \[flags\]/);
    expect((await run(['node', '/app/dist/node-cleanup/main.js', '--version'])).trim()).toBe(`local-volume-node-cleanup ${pkg.version}`);
  });

  it("both entry points start from the V8 code cache the image ships in /app/dist/.compile-cache (issue 20)", async () => {
    const entry = config.Entrypoint ?? [];
    const accepted = async (argv: readonly string[]): Promise<string[]> => {
      const out = await sh(`NODE_DEBUG_NATIVE=COMPILE_CACHE ${argv.map((a) => `'${a}'`).join(' ')} --version 2>&1`);
      return [...out.matchAll(/V8 code cache for ESM file:\/\/\/app\/dist\/(\S+?\.js) was accepted/g)].map((m) => (m[1] ?? '').replace(/chunk-\w+/, 'chunk')).sort();
    };
    /** The entry and the chunks it imports statically, transitively (a lazy import() such as execa's is not loaded at start), named as accepted() names them. */
    const loadedAtStart = async (entryFile: string): Promise<string[]> => {
      const chunks = new Set<string>();
      const queue = [entryFile];
      for (let f = queue.pop(); f !== undefined; f = queue.pop()) {
        const out = await sh(`grep -o 'from *"[./]*chunk-[A-Za-z0-9]*\\.js"' /app/dist/${f} || true`);
        for (const m of out.matchAll(/(chunk-\w+\.js)/g)) {
          if (!chunks.has(m[1] ?? '')) queue.push(m[1] ?? '');
          chunks.add(m[1] ?? '');
        }
      }
      return [entryFile, ...[...chunks].map(() => 'chunk.js')].sort();
    };
    expect(await accepted(entry)).toEqual(await loadedAtStart('provisioner.js'));
    expect(await accepted(['node', '/app/dist/node-cleanup/main.js'])).toEqual(await loadedAtStart('node-cleanup/node-cleanup.js'));
  });

  it('the node-cleanup Deployment (kustomize component and Helm chart) runs its entry point under tini', async () => {
    const manifest = parse(await readFile(join(repoRoot, 'deployment/kubernetes/components/node-cleanup/deployment.yaml'), 'utf8')) as {
      spec: { template: { spec: { containers: { command: string[] }[] } } };
    };
    const command = manifest.spec.template.spec.containers[0]?.command ?? [];
    expect(command.slice(0, 2)).toEqual(['/usr/bin/tini', '--']);
    expect((await run([...command, '--version'])).trim()).toBe(`local-volume-node-cleanup ${pkg.version}`);
    const chart = await readFile(join(repoRoot, 'helm/local-static-provisioner/templates/node-cleanup.yaml'), 'utf8');
    expect(chart).toContain(`command: ${JSON.stringify(command).replaceAll(',', ', ')}`);
  });

  it('tini passes the exit code of its child through', async () => {
    await expect(run(['/usr/bin/tini', '--', 'sh', '-c', 'exit 3'])).rejects.toThrow(/exited with code 3/);
  });

  it('carries every cleaner script, executable, at the paths the cleanup Job spec runs', async () => {
    const shipped = (await readdir(join(repoRoot, 'deployment', 'scripts'))).sort();
    expect((await sh('ls /scripts')).trim().split('\n')).toEqual(shipped);
    // The Job's container command replaces the entrypoint: each script must run on its own (common.sh sourced).
    for (const s of shipped.filter((n) => n !== 'common.sh')) {
      await expect(run([`/scripts/${s}`, '--help']), s).resolves.toMatch(/^Usage: /);
    }
    for (const argv of [jobCommand('Filesystem', []), jobCommand('Block', DEFAULT_BLOCK_CLEANER_COMMAND)]) {
      await expect(sh(`test -f '${argv[0] ?? ''}' && test -x '${argv[0] ?? ''}' && echo ok`), argv.join(' ')).resolves.toBe('ok\n');
    }
  });

  it('has the tools the cleaner scripts and the daemon call', async () => {
    const tools = ['bash', 'wipefs', 'blkdiscard', 'mkfs.ext4', 'shred', 'ionice', 'unshare', 'find', 'mountpoint', 'dd', 'stat', 'readlink'];
    const out = await sh(`for t in ${tools.join(' ')}; do command -v "$t" >/dev/null || echo "missing $t"; done`);
    expect(out).toBe('');
  });

  it('carries no node_modules: the bundles in dist hold the dependencies they use, no devDependency', async () => {
    expect(await sh('test -e /app/node_modules && echo present || echo absent')).toBe('absent\n');
    expect(await sh('test -e /node_modules -o -e /usr/local/lib/node_modules/vitest && echo present || echo absent')).toBe('absent\n');
    const bundles = await sh('cd /app/dist && ls main.js node-cleanup/main.js');
    expect(bundles.trim().split('\n')).toEqual(['main.js', 'node-cleanup/main.js']);
    // The bundles' source maps list every module bundled: production dependencies, never a devDependency.
    const maps = (await sh('find /app/dist -name "*.js.map"')).trim().split('\n');
    expect(maps).toContain('/app/dist/provisioner.js.map');
    // Read from the container's root filesystem, not through `buildah run cat`: a multi-MB stdout of a
    // chroot run was seen cut short (JSON.parse: "Unterminated string … at position 2301952").
    const root = (await store.run(['mount', container])).trim();
    const sources = new Set<string>();
    try {
      for (const m of maps) for (const src of (JSON.parse(await readFile(join(root, m), 'utf8')) as { sources: string[] }).sources) sources.add(src);
    } finally {
      await store.run(['umount', container]);
    }
    const fromPackage = (name: string): boolean => [...sources].some((src) => src.includes(`node_modules/${name}/`));
    expect(fromPackage('@kubernetes/client-node')).toBe(true);
    for (const dev of Object.keys(pkg.devDependencies)) expect(fromPackage(dev), dev).toBe(false);
    const sizes = await sh('du -sk /app/dist /usr/local/bin/node | cut -f1 | tr "\\n" " "');
    console.log(`[image] KiB of /app/dist, node: ${sizes}`);
  });
});
