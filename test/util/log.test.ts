import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createLogger, formatTextLine, resolveLogFormat } from '../../src/util/log.ts';
import { useTempDir } from '../support/tmp.ts';

const repo = join(import.meta.dirname, '..', '..');

describe('createLogger', () => {
  it('writes level names, not numbers, in JSON', () => {
    const lines: string[] = [];
    const log = createLogger({ level: 'debug', format: 'json', write: (s) => lines.push(s) });
    log.info({ pv: 'local-pv-1' }, 'hello');
    log.debug('dbg');
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(parsed.map((p) => p['level'])).toEqual(['info', 'debug']);
    expect(parsed[0]).toMatchObject({ msg: 'hello', pv: 'local-pv-1', name: 'local-volume-provisioner' });
  });

  it('writes one readable line per entry in text format', () => {
    const lines: string[] = [];
    const log = createLogger({ format: 'text', write: (s) => lines.push(s) });
    log.warn({ pv: 'local-pv-1', path: '/mnt/a b', n: 3, obj: { a: 1 } }, 'cleanup failed');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z WARN {2}cleanup failed pv=local-pv-1 path="\/mnt\/a b" n=3 obj=\{"a":1\}\n$/);
    log.error({ err: new Error('boom') }, 'failed');
    expect(lines[1]).toMatch(/ERROR failed err=boom\n {4}at /);
  });

  it('formats a line that is not JSON as is', () => {
    expect(formatTextLine('plain')).toBe('plain\n');
  });

  it('auto is text at a terminal outside a cluster, json otherwise', () => {
    expect(resolveLogFormat('auto', {}, true)).toBe('text');
    expect(resolveLogFormat('auto', {}, false)).toBe('json');
    expect(resolveLogFormat('auto', { KUBERNETES_SERVICE_HOST: '10.0.0.1' }, true)).toBe('json');
    expect(resolveLogFormat('json', {}, true)).toBe('json');
    expect(resolveLogFormat('text', { KUBERNETES_SERVICE_HOST: 'x' }, false)).toBe('text');
  });
});

describe('the daemon keeps stdout for requested output', () => {
  const tempDir = useTempDir('lsp-log-');

  it('--dry-run: logs and config warnings on stderr, only YAML on stdout', () => {
    const dir = tempDir();
    const cfg = join(dir, 'cfg');
    mkdirSync(cfg);
    mkdirSync(join(dir, 'disc'));
    writeFileSync(join(cfg, 'storageClassMap'), `fast:\n  hostDir: /mnt/fast\n  mountDir: ${join(dir, 'disc')}\n`);
    writeFileSync(join(cfg, 'useNodeNameOnIy'), 'true');
    // A KUBECONFIG pointing nowhere: the dry run logs a warning and works offline.
    writeFileSync(
      join(dir, 'kubeconfig'),
      'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n',
    );
    const r = spawnSync(process.execPath, [join(repo, 'src', 'main.ts'), '--dry-run', '--node-name=n1', `--config-dir=${cfg}`, '--log-format=json'], {
      encoding: 'utf8',
      env: { PATH: process.env['PATH'] ?? '', KUBECONFIG: join(dir, 'kubeconfig') },
    });
    expect(r.status).toBe(0);
    expect(r.stdout.split('\n').filter((l) => l !== '' && !l.startsWith('#') && !l.startsWith('---'))).toEqual([]);
    expect(r.stdout).toContain('# 0 PersistentVolume(s) would be created');
    const errLines = r.stderr.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(errLines.some((l) => l['level'] === 'warn' && String(l['msg']).includes('working offline'))).toBe(true);
    expect(r.stderr).toContain('configuration warning: useNodeNameOnIy: unknown key "useNodeNameOnIy" ignored; did you mean "useNodeNameOnly"?');
  });
});

describe('the last lines before an exit are written', { timeout: 60_000 }, () => {
  const tempDir = useTempDir('lsp-logexit-');
  const log = join(repo, 'src', 'util', 'log.ts');
  const daemon = join(repo, 'src', 'util', 'daemon.ts');

  /** Runs a module in a child node; `onStdout` sees its stdout chunks (with the child). */
  function run(code: string, onStdout?: (chunk: string, kill: (sig: NodeJS.Signals) => void) => void): Promise<{ code: number | null; stderr: string }> {
    const file = join(tempDir(), 'child.ts');
    writeFileSync(file, code);
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
      child.stdout.setEncoding('utf8').on('data', (d: string) => onStdout?.(d, (sig) => child.kill(sig)));
      child.on('error', reject);
      child.on('close', (c) => {
        resolve({ code: c, stderr });
      });
    });
  }

  const msgs = (stderr: string): string[] =>
    stderr.split('\n').filter((l) => l.startsWith('{')).map((l) => String((JSON.parse(l) as Record<string, unknown>)['msg']));

  it('on process.exit right after logging', async () => {
    const r = await run(`import { createLogger } from ${JSON.stringify(log)};
const l = createLogger({ format: 'json' });
for (let i = 0; i < 3; i++) l.info('line ' + i);
process.exit(3);
`);
    expect(r.code).toBe(3);
    expect(msgs(r.stderr)).toEqual(['line 0', 'line 1', 'line 2']);
  });

  it('on SIGTERM: what start and stop logged, and the shutdown line', async () => {
    const r = await run(
      `import { createLogger } from ${JSON.stringify(log)};
import { runDaemon } from ${JSON.stringify(daemon)};
const l = createLogger({ format: 'json' });
await runDaemon('t', l, async () => {
  l.info('started');
  const keep = setInterval(() => {}, 60_000);
  return async () => { clearInterval(keep); l.info('stopped cleanly'); };
});
process.stdout.write('ready\\n');
`,
      (chunk, kill) => {
        if (chunk.includes('ready')) kill('SIGTERM');
      },
    );
    expect(r.code).toBe(0);
    expect(msgs(r.stderr)).toEqual(['started', 'shutting down', 'stopped cleanly']);
  });

  it('on a fatal start error (before its plain stderr line) and on an uncaught exception', async () => {
    const fatal = await run(`import { createLogger } from ${JSON.stringify(log)};
import { runCli, runDaemon } from ${JSON.stringify(daemon)};
const l = createLogger({ format: 'json' });
runCli('t', () => runDaemon('t', l, async () => { l.info('starting'); throw new Error('no config'); }));
`);
    expect(fatal.code).toBe(1);
    expect(msgs(fatal.stderr)).toEqual(['starting', 'no config']);
    expect(fatal.stderr.trimEnd().split('\n').at(-1)).toBe('t: no config');

    const crash = await run(`import { createLogger } from ${JSON.stringify(log)};
const l = createLogger({ format: 'json' });
l.warn('about to crash');
setImmediate(() => { throw new Error('boom'); });
`);
    expect(crash.code).toBe(1);
    expect(msgs(crash.stderr)).toEqual(['about to crash']);
    expect(crash.stderr).toContain('Error: boom');
  });
});
