// Issue 18, point 14: run as the README says on a machine whose `node` is older than 24 (the system's v20),
// the daemons stop at once with one line naming Node.js 24 and what to run, instead of a minified undici stack;
// and the README's commands run as typed (no `node <file>.ts`, which an old node cannot even load).
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const repo = join(import.meta.dirname, '..', '..');
const SYSTEM_NODE = '/usr/bin/node';
const systemMajor = (): number => {
  if (!existsSync(SYSTEM_NODE)) return 0;
  return Number(execFileSync(SYSTEM_NODE, ['-p', 'process.versions.node.split(".")[0]'], { encoding: 'utf8' }).trim());
};
const oldNode = systemMajor();

describe.skipIf(oldNode === 0 || oldNode >= 24)(`the bundles on the system's Node.js (${SYSTEM_NODE}, v${oldNode})`, () => {
  let out = '';
  beforeAll(() => {
    out = mkdtempSync(join(repo, '.bundle-node-test-'));
    execFileSync(process.execPath, [join(repo, 'scripts', 'bundle.ts'), out], { cwd: repo, stdio: ['ignore', 'ignore', 'pipe'] });
  }, 120_000);
  afterAll(() => {
    if (out !== '') rmSync(out, { recursive: true, force: true });
  });

  it.each([
    ['main.js', 'local-volume-provisioner'],
    ['node-cleanup/main.js', 'local-volume-node-cleanup'],
  ])('%s exits 1 before it loads the bundle, naming Node.js 24 and the PATH to use', (entry, name) => {
    // The entry file alone, without the bundle next to it: the check runs before any import.
    const alone = mkdtempSync(join(out, 'alone-'));
    copyFileSync(join(out, entry), join(alone, 'main.js'));
    for (const file of [join(out, entry), join(alone, 'main.js')]) {
      const r = spawnSync(SYSTEM_NODE, [file, '--version'], { encoding: 'utf8', env: { ...process.env, MY_NODE_NAME: 'n1' } });
      expect(r.status).toBe(1);
      expect(r.stderr).toContain(`${name} needs Node.js 24 or later; this is Node.js v${oldNode}.`);
      expect(r.stderr).toContain('export PATH=$PWD/node_modules/.bin:$PATH');
      expect(r.stderr).not.toMatch(/undici|\n\s+at /);
      expect(r.stdout).toBe('');
    }
  });

  it('the same files run on Node.js 24', () => {
    expect(execFileSync(process.execPath, [join(out, 'main.js'), '--version'], { encoding: 'utf8' })).toMatch(/^local-volume-provisioner /);
  }, 60_000);
});

describe('the README and docs commands run as typed', () => {
  it('no command runs a .ts file with a bare `node` (an older node cannot load it): npm run <script> or node_modules/.bin/node', () => {
    const files = ['README.md', 'e2e/README.md', ...readdirSync(join(repo, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
    const bad: string[] = [];
    for (const f of files) {
      readFileSync(join(repo, f), 'utf8')
        .split('\n')
        .forEach((line, i) => {
          for (const m of line.matchAll(/(?:^|[\s`(])([^\s`(]*)\bnode\s+(?:--\S+\s+)*([\w./-]+\.ts)\b/g)) {
            const cmd = m[1]!;
            if ((cmd === '' || cmd.endsWith('/')) && cmd !== 'node_modules/.bin/') bad.push(`${f}:${i + 1}: ${m[0].trim()}`);
          }
        });
    }
    expect(bad).toEqual([]);
  });

  it('the npm scripts the README names exist', () => {
    const scripts = (JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    const readme = readFileSync(join(repo, 'README.md'), 'utf8');
    for (const m of readme.matchAll(/npm run ([\w:-]+)/g)) expect(Object.keys(scripts)).toContain(m[1]);
  });
});
