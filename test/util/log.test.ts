import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MAX_TEXT_BYTES } from '../../src/util/errors.ts';
import { boundJsonLine, createLogger, formatTextLine, klogHeader, MAX_LINE_BYTES, resolveLogFormat } from '../../src/util/log.ts';
import { useTempDir } from '../support/tmp.ts';

const repo = join(import.meta.dirname, '..', '..');

describe('createLogger', () => {
  const tmp = useTempDir('lsp-logcaller-');
  it("names the caller's file:line in a plain Node process too, with and without --enable-source-maps (V8's call sites when nothing maps positions)", () => {
    const dir = tmp();
    const script = join(dir, 'caller-probe.mjs');
    writeFileSync(
      script,
      [
        `import { createLogger } from ${JSON.stringify(join(repo, 'src', 'util', 'log.ts'))};`,
        "const log = createLogger({ format: 'text', write: (s) => process.stdout.write(s) }).child({ component: 'probe' });",
        "log.info('at line 3');",
        "async function later() { await null; log.warn('at line 4'); }",
        'await later();',
        "Error.prepareStackTrace = (e, sites) => `${e}\\n${sites.map((s) => `    at ${s}`).join('\\n')}`;",
        "log.info('at line 7, with a foreign Error.prepareStackTrace');",
        "console.log(typeof Error.prepareStackTrace, Error.stackTraceLimit);",
      ].join('\n'),
    );
    for (const args of [[], ['--enable-source-maps']]) {
      const r = spawnSync(process.execPath, [...args, script], { encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      const out = r.stdout.split('\n');
      expect(out[0]).toMatch(/^I\d{4} [\d:.]{15} +\d+ caller-probe\.mjs:3\] at line 3 component="probe"$/);
      expect(out[1]).toMatch(/^W\d{4} [\d:.]{15} +\d+ caller-probe\.mjs:4\] at line 4 component="probe"$/);
      expect(out[2]).toMatch(/ caller-probe\.mjs:7\] at line 7, with a foreign Error\.prepareStackTrace component="probe"$/);
      expect(out[3]).toBe('function 10'); // both restored
    }
  });

  it('writes level names, not numbers, in JSON', () => {
    const lines: string[] = [];
    const log = createLogger({ level: 'debug', format: 'json', write: (s) => lines.push(s) });
    log.info({ pv: 'local-pv-1' }, 'hello');
    log.debug('dbg');
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(parsed.map((p) => p['level'])).toEqual(['info', 'debug']);
    expect(parsed[0]).toMatchObject({ msg: 'hello', pv: 'local-pv-1', name: 'local-volume-provisioner' });
  });

  it("writes klog's text format: header, message with quotes as written, then key=value pairs (issue 18, point 0)", () => {
    const lines: string[] = [];
    const log = createLogger({ format: 'text', write: (s) => lines.push(s) });
    log.warn({ pv: 'local-pv-1', path: '/mnt/a b', n: 3, ok: true, obj: { a: 1 } }, 'path "/mnt/local-storage/notbindmount" is not a valid mount point');
    const line = `${process.pid} log.test.ts:53] path "/mnt/local-storage/notbindmount" is not a valid mount point pv="local-pv-1" path="/mnt/a b" n=3 ok=true obj={"a":1}\n`;
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^W\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ /);
    expect(lines[0]?.slice(22)).toBe(`${' '.repeat(7 - String(process.pid).length)}${line}`);
    log.error({ err: new Error('boom') }, 'failed');
    expect(lines[1]).toMatch(/^E\d{4} [\d:.]{15} +\d+ log\.test\.ts:\d+\] failed err="boom"\n$/); // no stack at info level
    const child = createLogger({ format: 'text', level: 'debug', write: (s) => lines.push(s) }).child({ component: 'c' });
    child.debug({ err: new Error('boom') }, 'detail');
    expect(lines[2]).toMatch(/^I\d{4} [\d:.]{15} +\d+ log\.test\.ts:\d+\] detail component="c" err="boom"\n {4}at /); // stack at debug
  });

  it('klogHeader: severity letter, MMDD, local time with microseconds, pid in 7 columns, file:line]', () => {
    const t = new Date(2026, 11, 1, 20, 13, 30, 216).getTime() * 1000 + 163;
    expect(klogHeader('info', t, 1, 'file.go:123')).toBe('I1201 20:13:30.216163       1 file.go:123] ');
    expect(klogHeader('warn', t, 1234567, 'x.ts:1')).toBe('W1201 20:13:30.216163 1234567 x.ts:1] ');
    expect(klogHeader('error', t, 42, 'x.ts:1').slice(0, 1)).toBe('E');
    expect(klogHeader('fatal', t, 42, 'x.ts:1').slice(0, 1)).toBe('F');
    expect(klogHeader('debug', t, 42, 'x.ts:1').slice(0, 1)).toBe('I');
  });

  it('formats a line that is not JSON as is', () => {
    expect(formatTextLine('plain')).toBe('plain\n');
  });

  it('auto (the former default) is text, in a pod too; json only when asked', () => {
    expect(resolveLogFormat('auto')).toBe('text');
    expect(resolveLogFormat('text')).toBe('text');
    expect(resolveLogFormat('json')).toBe('json');
  });
});

// Every byte a terminal could act on: C0 but the line's own final newline, DEL, C1, and the bidi controls.
// eslint-disable-next-line no-control-regex
const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/u;
const HOSTILE = 'red \u001b[31mALERT\u001b]0;title\u0007 bell\u0007 cr\rover nl\nnext del\u007f csi\u009b2J rlo\u202etxt.exe tab\t';

describe('log lines are safe for a terminal (issue 17, point 7)', () => {
  it('text format: control characters in the message, in fields, in keys and in an error are escaped', () => {
    const lines: string[] = [];
    const log = createLogger({ format: 'text', level: 'debug', write: (s) => lines.push(s) });
    const err = new Error(`boom ${HOSTILE}`);
    log.warn({ line: HOSTILE, plain: 'a\u001bb', nested: { v: HOSTILE }, [`k\u001b[2J`]: 1, err }, `Cleanup pv "p": ${HOSTILE}`);
    expect(lines).toHaveLength(1);
    const [first, ...stack] = (lines[0] ?? '').split('\n');
    expect(stack.at(-1)).toBe(''); // one trailing newline
    for (const l of [first ?? '', ...stack]) expect(l).not.toMatch(RAW_CONTROL);
    expect(first).toContain(String.raw`Cleanup pv "p": red \x1b[31mALERT\x1b]0;title\x07 bell\x07 cr\rover nl\nnext del\x7f csi\x9b2J rlo\u202etxt.exe tab\t`);
    expect(first).toContain(String.raw` line="red \u001b[31mALERT`);
    expect(first).toContain(String.raw` plain="a\u001bb"`);
    expect(first).toContain(String.raw` k\x1b[2J=1`);
    expect(first).toContain(String.raw`err="boom red \u001b[31mALERT`);
    expect(first).toContain(String.raw`del\x7f csi\x9b2J rlo\u202etxt.exe`);
  });

  it('a line that is not JSON is escaped too', () => {
    expect(formatTextLine('a\u001b[2Jb\rc\n')).toBe('a\\x1b[2Jb\\rc\n');
  });

  it('json format: the same line parses back to the same values, with DEL, C1 and bidi controls escaped', () => {
    const lines: string[] = [];
    const log = createLogger({ format: 'json', write: (s) => lines.push(s) });
    log.info({ line: HOSTILE }, HOSTILE);
    expect(lines[0]?.endsWith('\n')).toBe(true);
    expect(lines[0]?.slice(0, -1)).not.toMatch(RAW_CONTROL);
    const o = JSON.parse(lines[0] ?? '') as Record<string, unknown>;
    expect(o['msg']).toBe(HOSTILE);
    expect(o['line']).toBe(HOSTILE);
  });
});

describe('log lines are bounded (issue 17, point 6)', () => {
  const huge = `start ${'é'.repeat(20_000)} end`; // 40 KB
  const marker = /\[\.\.\. \d+ bytes cut \.\.\.\]/;

  it(`text format: every string at most ${MAX_TEXT_BYTES} bytes, with a marker; the line at most ${MAX_LINE_BYTES}`, () => {
    const lines: string[] = [];
    const log = createLogger({ format: 'text', level: 'debug', write: (s) => lines.push(s) });
    log.warn({ pv: 'p', err: huge, obj: { huge } }, huge);
    log.warn({ a: huge, b: huge, c: huge, d: huge, e: huge }, huge);
    log.error({ err: new Error(huge) }, 'failed');
    for (const l of lines) expect(Buffer.byteLength(l)).toBeLessThanOrEqual(MAX_LINE_BYTES);
    const [msg, ...fields] = (lines[0] ?? '').replace(/^W[^\]]+\] /, '').split(' pv=');
    expect(Buffer.byteLength(msg ?? '')).toBeLessThanOrEqual(MAX_TEXT_BYTES);
    expect(msg).toMatch(marker);
    expect(msg?.startsWith('start éé')).toBe(true);
    expect(fields.join('')).toMatch(/^"p" err="start é+\[\.\.\. \d+ bytes cut \.\.\.\]" obj=\{"huge":"start é+\[\.\.\. \d+ bytes cut \.\.\.\]\}\n$/);
    expect(lines[2]).toMatch(/\] failed err="start é+\[\.\.\. \d+ bytes cut \.\.\.\]"\n {4}at /);
  });

  it('json format: every string capped, the line still valid JSON, a short line untouched', () => {
    const lines: string[] = [];
    const log = createLogger({ format: 'json', write: (s) => lines.push(s) });
    log.warn({ pv: 'p', err: huge, obj: { huge } }, huge);
    log.error({ err: new Error(huge) }, 'failed');
    for (const l of lines) expect(Buffer.byteLength(l)).toBeLessThanOrEqual(MAX_LINE_BYTES);
    const o = JSON.parse(lines[0] ?? '') as { msg: string; err: string; obj: { huge: string }; pv: string };
    for (const v of [o.msg, o.err, o.obj.huge]) {
      expect(Buffer.byteLength(v)).toBeLessThanOrEqual(MAX_TEXT_BYTES);
      expect(v).toMatch(marker);
    }
    expect(o.pv).toBe('p');
    const e = JSON.parse(lines[1] ?? '') as { err: { message: string; stack: string } };
    expect(Buffer.byteLength(e.err.message)).toBeLessThanOrEqual(MAX_TEXT_BYTES);
    const short = '{"level":"info","msg":"hello"}\n';
    expect(boundJsonLine(short)).toBe(short);
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
  }, 60_000);
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
