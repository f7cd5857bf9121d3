// `npm run build` bundles the two daemons with esbuild (scripts/bundle.ts, issue 12).
// The bundle must behave like the sources: same --version (package.json found from
// the shared chunk), same --help, and the dry run works for the provisioner.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

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

  it('prints the same --version and --help as the sources, for both daemons', () => {
    for (const [bundled, source] of [
      [join(out, 'main.js'), join(repo, 'src', 'main.ts')],
      [join(out, 'node-cleanup', 'main.js'), join(repo, 'src', 'node-cleanup', 'main.ts')],
    ] as const) {
      expect(run(bundled, ['--version'])).toBe(run(source, ['--version']));
      expect(run(bundled, ['--help'])).toBe(run(source, ['--help']));
    }
  }, 120_000);

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
