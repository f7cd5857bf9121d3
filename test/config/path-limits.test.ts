// The config's path and limit rules, each asserted on its own (mutation testing,
// docs/cleanup.md "Mutation testing"): a class is never built without both
// directories, and a config file is never taken in part.
import { mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ConfigReadError, readConfigDir } from '../../src/config/load.ts';
import { parseConfig } from '../../src/config/parse.ts';
import { boundedParse, YamlLimitError } from '../../src/config/yaml-guard.ts';
import { Lexer, LineCounter, Parser } from 'yaml';

/** Replaces src/'s next open() of `file` (once). */
const hook = vi.hoisted(() => ({ file: undefined as string | undefined, open: undefined as (() => Promise<unknown>) | undefined }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const orig = await importOriginal<typeof import('node:fs/promises')>();
  const open = (async (...args: Parameters<typeof orig.open>) => {
    const h = hook.open;
    if (h !== undefined && args[0] === hook.file) {
      hook.open = undefined;
      return h();
    }
    return orig.open(...args);
  }) as typeof orig.open;
  return { ...orig, open, default: { ...orig, open } };
});

describe('hostDir and mountDir must be set', () => {
  // "hostDir:" with no value is a null field: present, but not set.
  it.each([
    ['hostDir', 'local:\n  hostDir:\n  mountDir: /mnt/disks\n'],
    ['hostDir', 'local:\n  hostDir: ~\n  mountDir: /mnt/disks\n'],
    ['hostDir', 'local:\n  hostDir: ""\n  mountDir: /mnt/disks\n'],
    ['mountDir', 'local:\n  hostDir: /mnt/disks\n  mountDir: null\n'],
  ])('a null or empty %s is the missing-directory error, and no class is built (%j)', (key, text) => {
    const r = parseConfig({ storageClassMap: text });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.errors.map((e) => [e.path, e.message])).toEqual([
      [`storageClassMap.local.${key}`, `Storage Class local is misconfigured, missing HostDir or MountDir parameter (${key} is not set)`],
    ]);
  });

  it('a directory of the wrong type is reported once, as a type error, not also as missing', () => {
    const r = parseConfig({ storageClassMap: 'local:\n  hostDir: [/mnt/disks]\n  mountDir: /mnt/disks\n' });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.errors).toHaveLength(1);
    expect(r.errors[0]?.path).toBe('storageClassMap.local.hostDir');
    expect(r.errors[0]?.message).not.toContain('missing HostDir');
  });
});

describe('a config file is read whole or not at all', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'lsp-config-limits-'));
    hook.open = undefined;
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('a file that holds more than its size said when it was opened is a race (transient), never taken in part', async () => {
    // A /proc file has st_size 0 but content: exactly what a file growing during the read looks like.
    await symlink('/proc/self/status', path.join(dir, 'storageClassMap'));
    const err = await readConfigDir(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigReadError);
    expect((err as ConfigReadError).transient).toBe(true);
    expect((err as Error).message).toContain('kept changing while being read');
  });

  it('closes every file it read (a daemon re-reading its config on every change must not leak fds)', async () => {
    for (const k of ['storageClassMap', 'labelsForPV', 'useJobForCleaning']) await writeFile(path.join(dir, k), 'x: y\n');
    const fds = (await readdir('/proc/self/fd')).length;
    for (let i = 0; i < 3; i++) await readConfigDir(dir);
    expect((await readdir('/proc/self/fd')).length).toBe(fds);
  });

  it('a file gone between the listing and the open is a race: the read starts over and gets the whole config', async () => {
    const file = path.join(dir, 'storageClassMap');
    await writeFile(file, 'local:\n  hostDir: /mnt/disks\n  mountDir: /mnt/disks\n');
    hook.file = file;
    hook.open = () => Promise.reject(Object.assign(new Error(`ENOENT: no such file or directory, open '${file}'`), { code: 'ENOENT' }));
    const got = await readConfigDir(dir);
    expect(hook.open).toBeUndefined();
    expect(got.files).toEqual({ storageClassMap: 'local:\n  hostDir: /mnt/disks\n  mountDir: /mnt/disks\n' });
  });

  it('a file that cannot be opened (not ENOENT) is a ConfigReadError that is not transient: the config is invalid, not retried', async () => {
    const file = path.join(dir, 'storageClassMap');
    await writeFile(file, 'x: y\n');
    hook.file = file;
    hook.open = () => Promise.reject(Object.assign(new Error(`EACCES: permission denied, open '${file}'`), { code: 'EACCES' }));
    const err = await readConfigDir(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigReadError);
    expect((err as ConfigReadError).transient).toBe(false);
    expect((err as Error).message).toBe(`cannot read config file ${file}: permission denied`);
  });

  it('any other error while reading is a ConfigReadError that is not transient, naming the file', async () => {
    const file = path.join(dir, 'storageClassMap');
    await writeFile(file, 'x: y\n');
    const { open } = await vi.importActual<typeof import('node:fs/promises')>('node:fs/promises');
    hook.file = file;
    hook.open = async () => {
      const h = await open(file, 'r');
      h.read = () => Promise.reject(Object.assign(new Error('EIO: i/o error, read'), { code: 'EIO' }));
      return h;
    };
    const err = await readConfigDir(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigReadError);
    expect((err as ConfigReadError).transient).toBe(false);
    expect((err as Error).message).toContain(`cannot read config file ${file}`);
  });
});

describe('YAML nesting limit: exactly maxNesting open levels are accepted, one more is not', () => {
  /** The deepest parser stack after any lexical token of `text` (where boundedParse checks it). */
  function deepest(text: string): number {
    const parser = new Parser();
    let max = 0;
    for (const lexeme of new Lexer().lex(text)) {
      for (const _ of parser.next(lexeme)) void _;
      max = Math.max(max, parser.stack.length);
    }
    return max;
  }
  const run = (text: string, maxNesting: number): void => {
    const lines = new LineCounter();
    for (const _ of boundedParse(new Parser(lines.addNewLine), text, lines, { maxNesting })) void _;
  };

  it.each([`${'['.repeat(20)}x${']'.repeat(20)}`, `${'- '.repeat(20)}x`, Array.from({ length: 20 }, (_, i) => `${' '.repeat(i)}k:`).join('\n') + ' v\n'])(
    'the limit is the deepest stack itself (%#)',
    (text) => {
      const d = deepest(text);
      expect(d).toBeGreaterThan(5);
      expect(() => run(text, d)).not.toThrow();
      expect(() => run(text, d - 1)).toThrow(YamlLimitError);
    },
  );
});
