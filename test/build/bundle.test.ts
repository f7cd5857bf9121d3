// `npm run build` bundles the two daemons with esbuild (scripts/bundle.ts, issue 12).
// The bundle must behave like the sources: same --version (package.json found from
// the shared chunk), same --help, and the dry run works for the provisioner.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { imageCommand } from '../../bench/footprint.ts';

const repo = join(import.meta.dirname, '..', '..');
const run = (script: string, args: readonly string[]): string => execFileSync(process.execPath, [script, ...args], { cwd: repo, encoding: 'utf8' });

describe('the esbuild bundle (scripts/bundle.ts)', () => {
  // One level below the repo root, like dist/: '../package.json' must resolve from the bundle.
  let out = '';
  beforeAll(() => {
    out = mkdtempSync(join(repo, '.bundle-test-'));
    execFileSync(process.execPath, [join(repo, 'scripts', 'bundle.ts'), out], { cwd: repo, stdio: ['ignore', 'ignore', 'pipe'] });
  }, 120_000);
  afterAll(() => {
    if (out !== '') rmSync(out, { recursive: true, force: true });
  });

  it('writes the two entry points, one shared chunk and linked source maps', () => {
    expect(existsSync(join(out, 'main.js'))).toBe(true);
    expect(existsSync(join(out, 'node-cleanup', 'main.js'))).toBe(true);
    const files = readdirSync(out);
    expect(files.filter((f) => /^chunk-\w+\.js$/.test(f)).length).toBeGreaterThanOrEqual(1);
    expect(files).toContain('provisioner.js.map');
  });

  it("carries none of client-node's generated API classes or models, nor undici (issue 20: src/kube sends its own requests)", () => {
    const sources = new Set<string>();
    for (const dir of [out, join(out, 'node-cleanup')]) {
      for (const f of readdirSync(dir).filter((n) => n.endsWith('.js.map'))) {
        for (const s of (JSON.parse(readFileSync(join(dir, f), 'utf8')) as { sources: string[] }).sources) sources.add(s);
      }
    }
    const all = [...sources];
    // Paths as client-node's own source maps name them (src/*.ts). KubeConfig stays:
    expect(all.some((s) => /@kubernetes\/client-node\/(dist|src)\/config\.[jt]s$/.test(s))).toBe(true);
    expect(all.filter((s) => /@kubernetes\/client-node\/(dist|src)\/gen\//.test(s) && !/\/rxjsStub\.[jt]s$/.test(s))).toEqual([]);
    expect(all.filter((s) => /node_modules\/undici\//.test(s))).toEqual([]);
  });

  // Start-up CPU (issue 20): what Node does with the bundle before the daemon runs a line of it.
  it('is plain ASCII: one other character makes Node decode a whole chunk as UTF-16 at every start', () => {
    for (const dir of [out, join(out, 'node-cleanup')]) {
      for (const f of readdirSync(dir).filter((n) => n.endsWith('.js'))) {
        const text = readFileSync(join(dir, f), 'latin1');
        const at = text.search(/[\u0080-\uffff]/);
        expect(at === -1 ? '' : `${f}: ${JSON.stringify(text.slice(Math.max(0, at - 40), at + 10))}`).toBe('');
      }
    }
  });

  it("takes Node's built-in modules with process.getBuiltinModule: loading it loads neither Node's undici, http2 nor node:assert", () => {
    // An ES import of a built-in makes Node read every export of it: node:http's WebSocket getter loads undici.
    for (const dir of [out, join(out, 'node-cleanup')]) {
      for (const f of readdirSync(dir).filter((n) => n.endsWith('.js') && n !== 'main.js' && n !== 'warm-compile-cache.js')) {
        expect(readFileSync(join(dir, f), 'utf8').match(/\bfrom\s*"(node:[\w/]+|http|https|tls|net|dns|url|vm)"/g) ?? [], f).toEqual([]);
      }
    }
    for (const bundle of ['provisioner.js', 'node-cleanup/node-cleanup.js']) {
      const loaded = execFileSync(
        process.execPath,
        ['--input-type=module', '-e', `await import(${JSON.stringify(join(out, bundle))}); console.log(process.moduleLoadList.join('\\n'))`],
        { cwd: repo, encoding: 'utf8' },
      ).split('\n');
      expect(loaded.filter((m) => /undici|rootCertificates|root_certificates|NativeModule http2\b/i.test(m)), bundle).toEqual([]);
      // node:assert, required at the top of pino's sonic-boom and thread-stream, is loaded at its first call.
      expect(loaded.filter((m) => /^NativeModule assert\b/.test(m)), bundle).toEqual([]);
      expect(loaded.some((m) => /NativeModule https\b/.test(m)), `${bundle} loads https (the check itself works)`).toBe(true);
    }
  }, 60_000);

  it('prints the same --version and --help as the sources, for both daemons', () => {
    for (const [bundled, source] of [
      [join(out, 'main.js'), join(repo, 'src', 'main.ts')],
      [join(out, 'node-cleanup', 'main.js'), join(repo, 'src', 'node-cleanup', 'main.ts')],
    ] as const) {
      expect(run(bundled, ['--version'])).toBe(run(source, ['--version']));
      expect(run(bundled, ['--help'])).toBe(run(source, ['--help']));
    }
  }, 120_000);

  // Issue 20, point 2: the shims turn on Node's compile cache (V8 code cache of the bundles) in dist/.compile-cache.
  describe('the compile cache', () => {
    const cache = (): string => join(out, '.compile-cache');
    /** Runs an entry point with the compile cache's debug log; env without NODE_COMPILE_CACHE / NODE_DISABLE_COMPILE_CACHE. */
    const start = (entry: string): { status: number | null; stdout: string; stderr: string } =>
      spawnSync(process.execPath, [join(out, entry), '--version'], {
        cwd: repo,
        encoding: 'utf8',
        env: { PATH: process.env['PATH'] ?? '', NODE_DEBUG_NATIVE: 'COMPILE_CACHE' },
      });
    const accepted = (stderr: string): string[] => [...stderr.matchAll(/V8 code cache for ESM file:\/\/\S+\/([\w.-]+\.js) was accepted/g)].map((m) => m[1]!);
    /** The file names an entry loads at start: itself and the chunks it imports statically, transitively (not import()). */
    const loadedAtStart = (entry: string): string[] => {
      const seen = new Set<string>();
      const visit = (file: string): void => {
        const name = file.slice(file.lastIndexOf('/') + 1);
        if (seen.has(name)) return;
        seen.add(name);
        for (const m of readFileSync(join(out, file), 'utf8').matchAll(/\bfrom\s*"((?:\.\.?\/)+)(chunk-\w+\.js)"/g)) visit(m[2]!);
      };
      visit(entry);
      return [...seen].sort();
    };

    it('main.js writes the cache on its first start and reads it on the next', () => {
      rmSync(cache(), { recursive: true, force: true });
      const first = start('main.js');
      expect(first.status).toBe(0);
      expect(first.stdout).toMatch(/^local-volume-provisioner /);
      expect(accepted(first.stderr)).toEqual([]);
      const files = readdirSync(cache(), { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
      expect(files.length).toBeGreaterThanOrEqual(2);
      const second = start('main.js');
      expect(second.status).toBe(0);
      expect(accepted(second.stderr).sort()).toEqual(loadedAtStart('provisioner.js'));
    }, 60_000);

    it('warm-compile-cache.js (the Dockerfile runs it) fills the cache both entry points read on their first start', () => {
      rmSync(cache(), { recursive: true, force: true });
      execFileSync(process.execPath, [join(out, 'warm-compile-cache.js')], { cwd: repo, stdio: ['ignore', 'ignore', 'pipe'] });
      expect(accepted(start('main.js').stderr).sort()).toEqual(loadedAtStart('provisioner.js'));
      expect(accepted(start('node-cleanup/main.js').stderr).sort()).toEqual(loadedAtStart('node-cleanup/node-cleanup.js'));
      // The Dockerfile warms it after its NODE_OPTIONS, once with the ENTRYPOINT's node flags (the daemon) and once
      // with none (a `command` such as node-cleanup's): V8 keys the cache by its flags.
      const warm = /ENV [^\n]*NODE_OPTIONS=[^\n]*\n(?:#[^\n]*\n)*RUN ([^\n]*)\n/.exec(readFileSync(join(repo, 'Dockerfile'), 'utf8'))?.[1];
      const { nodeArgs } = imageCommand();
      expect(warm).toBe(`node ${[...nodeArgs, '/app/dist/warm-compile-cache.js'].join(' ')} && node /app/dist/warm-compile-cache.js`);
    }, 60_000);

    it('a cache directory that cannot be created costs the cache, not the start', () => {
      rmSync(cache(), { recursive: true, force: true });
      writeFileSync(cache(), 'not a directory\n'); // mkdir fails (ENOTDIR), for root too
      try {
        for (const entry of ['main.js', 'node-cleanup/main.js']) {
          const r = start(entry);
          expect(r.status, r.stderr).toBe(0);
          expect(r.stdout).toMatch(/^local-volume-(provisioner|node-cleanup) \d/);
          expect(accepted(r.stderr)).toEqual([]);
        }
      } finally {
        rmSync(cache(), { force: true });
      }
    }, 60_000);
  });

  it("logs klog's header with the caller's file:line from the bundle too (issue 18, point 0)", () => {
    const cfg = join(out, 'cfg');
    mkdirSync(cfg);
    writeFileSync(join(cfg, 'storageClassMap'), `fast:\n  hostDir: /mnt/fast\n  mountDir: ${cfg}\n`);
    const r = spawnSync(process.execPath, [join(out, 'main.js'), '--dry-run', '--node-name=n1', `--config-dir=${cfg}`], {
      cwd: repo,
      encoding: 'utf8',
      env: { PATH: process.env['PATH'] ?? '', KUBECONFIG: join(out, 'no-kubeconfig') },
    });
    expect(r.status).toBe(0);
    const line = r.stderr.split('\n').find((l) => l.includes('working offline'));
    expect(line).toMatch(/^W\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ [\w.-]+\.js:\d+\] dry run: could not read the cluster; working offline err="/);
  }, 60_000);
});
