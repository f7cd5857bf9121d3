import { mkdir, mkdtemp, rm, symlink, writeFile, chmod, rename } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ConfigReadError, DEFAULT_MAX_CONFIG_FILE_BYTES, loadConfig, readConfigDir } from '../../src/config/load.ts';

/** Runs (once) right before src/ next reads a directory: a kubelet swap landing between readlink and readdir. */
const hook = vi.hoisted(() => ({ beforeReaddir: undefined as (() => Promise<void>) | undefined }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const orig = await importOriginal<typeof import('node:fs/promises')>();
  const readdir = (async (...args: Parameters<typeof orig.readdir>) => {
    const h = hook.beforeReaddir;
    hook.beforeReaddir = undefined;
    await h?.();
    return orig.readdir(...args);
  }) as typeof orig.readdir;
  return { ...orig, readdir, default: { ...orig, readdir } };
});

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'lsp-config-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Lays out a kubelet ConfigMap volume generation by hand and points ..data at it. */
async function publish(files: Record<string, string>, gen: string): Promise<void> {
  await mkdir(path.join(dir, gen));
  for (const [k, v] of Object.entries(files)) await writeFile(path.join(dir, gen, k), v);
  await symlink(gen, path.join(dir, '..data_tmp'));
  await rename(path.join(dir, '..data_tmp'), path.join(dir, '..data'));
  for (const k of Object.keys(files)) {
    await symlink(path.join('..data', k), path.join(dir, k)).catch(() => undefined);
  }
}

const CLASS = 'local:\n  hostDir: /mnt/disks\n  mountDir: /mnt/disks\n';

describe('readConfigDir: kubelet ConfigMap layout', () => {
  it('reads every key from the generation ..data points at', async () => {
    await publish({ storageClassMap: CLASS, useJobForCleaning: 'yes' }, '..2026_11_30_10_00_00.123');
    const f = await readConfigDir(dir);
    expect(f).toEqual({ files: { storageClassMap: CLASS, useJobForCleaning: 'yes' }, generation: '..2026_11_30_10_00_00.123' });
  });

  it('reads one generation even when the visible links already point elsewhere', async () => {
    await publish({ storageClassMap: CLASS, useJobForCleaning: 'yes' }, '..2026_11_30_10_00_00.1');
    // a second generation whose keys differ; ..data still points at the first one
    await mkdir(path.join(dir, '..2026_11_30_10_00_01.2'));
    await writeFile(path.join(dir, '..2026_11_30_10_00_01.2', 'useJobForCleaning'), 'no');
    const f = await readConfigDir(dir);
    expect(f.files).toEqual({ storageClassMap: CLASS, useJobForCleaning: 'yes' });
    expect(f.generation).toBe('..2026_11_30_10_00_00.1');
  });

  it('follows a swap and ignores "..*" entries inside a generation', async () => {
    await publish({ storageClassMap: CLASS }, '..g1');
    await writeFile(path.join(dir, '..g1', '..hidden'), 'x');
    await publish({ storageClassMap: CLASS, setPVOwnerRef: 'true' }, '..g2');
    await rm(path.join(dir, '..g1'), { recursive: true });
    const f = await readConfigDir(dir);
    expect(f).toEqual({ files: { storageClassMap: CLASS, setPVOwnerRef: 'true' }, generation: '..g2' });
  });

  it('a swap between resolving ..data and listing the old generation, emptied but not yet removed, is a race, not a config with no keys', async () => {
    await publish({ storageClassMap: CLASS }, '..g1');
    hook.beforeReaddir = async () => {
      // The kubelet (and AtomicWriter) swap ..data, then remove the old generation file by file, then the directory.
      await publish({ storageClassMap: CLASS, setPVOwnerRef: 'true' }, '..g2');
      await rm(path.join(dir, '..g1', 'storageClassMap'));
    };
    const f = await readConfigDir(dir);
    expect(f).toEqual({ files: { storageClassMap: CLASS, setPVOwnerRef: 'true' }, generation: '..g2' });
  });

  it('retries, then reports a transient error, when the generation has vanished', async () => {
    await symlink('..gone', path.join(dir, '..data'));
    const err = await readConfigDir(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigReadError);
    expect((err as ConfigReadError).transient).toBe(true);
    expect((err as ConfigReadError).message).toContain(dir);
  });

  it('succeeds when the generation appears while it retries', async () => {
    await symlink('..late', path.join(dir, '..data'));
    setTimeout(() => {
      void mkdir(path.join(dir, '..late')).then(() => writeFile(path.join(dir, '..late', 'useAlphaAPI'), 'false'));
    }, 5);
    const f = await readConfigDir(dir);
    expect(f).toEqual({ files: { useAlphaAPI: 'false' }, generation: '..late' });
  });

  it('treats a half-written first generation (no ..data yet) as transient', async () => {
    await mkdir(path.join(dir, '..2026_11_30_10_00_00.1'));
    const err = await readConfigDir(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigReadError);
    expect((err as ConfigReadError).transient).toBe(true);
  });
});

describe('readConfigDir: plain directory', () => {
  it('reads regular files and symlinks to files, skipping dotfiles, directories and broken links', async () => {
    await writeFile(path.join(dir, 'storageClassMap'), CLASS);
    await writeFile(path.join(dir, '.swp'), 'junk');
    await mkdir(path.join(dir, 'sub'));
    await writeFile(path.join(dir, 'sub', 'useAlphaAPI'), 'true');
    await writeFile(path.join(dir, '.real-labels'), 'a: b\n');
    await symlink('.real-labels', path.join(dir, 'labelsForPV'));
    await symlink('missing', path.join(dir, 'broken'));
    const f = await readConfigDir(dir);
    expect(f).toEqual({ files: { labelsForPV: 'a: b\n', storageClassMap: CLASS }, generation: undefined });
  });

  it('reads an empty directory as no files', async () => {
    expect(await readConfigDir(dir)).toEqual({ files: {}, generation: undefined });
  });

  it('fails clearly, and not transiently, on a missing directory or a file', async () => {
    const missing = path.join(dir, 'nope');
    const err = await readConfigDir(missing).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigReadError);
    expect((err as ConfigReadError).transient).toBe(false);
    expect((err as ConfigReadError).message).toBe(`cannot read config directory ${missing}: does not exist`);
    await writeFile(path.join(dir, 'f'), '');
    const err2 = await readConfigDir(path.join(dir, 'f')).catch((e: unknown) => e);
    expect((err2 as ConfigReadError).message).toContain('is not a directory');
    expect((err2 as ConfigReadError).transient).toBe(false);
  });

  it.skipIf(process.getuid?.() === 0)('fails clearly on an unreadable file', async () => {
    await writeFile(path.join(dir, 'storageClassMap'), CLASS);
    await chmod(path.join(dir, 'storageClassMap'), 0o000);
    const err = await readConfigDir(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigReadError);
    expect((err as ConfigReadError).message).toContain('permission denied');
  });
});

describe('loadConfig', () => {
  it('reads and parses one generation', async () => {
    await publish({ storageClassMap: CLASS, useJobForCleaning: 'yes' }, '..g1');
    const { files, result } = await loadConfig(dir);
    expect(files.generation).toBe('..g1');
    expect(result.ok).toBe(true);
    expect(result.ok && result.config.useJobForCleaning).toBe(true);
    expect(result.ok && Object.keys(result.config.storageClassMap)).toEqual(['local']);
  });

  it('returns parse errors in the result instead of throwing', async () => {
    await writeFile(path.join(dir, 'minResyncPeriod'), '300');
    const { result } = await loadConfig(dir);
    expect(result.ok).toBe(false);
    expect(!result.ok && result.errors[0]!.path).toBe('minResyncPeriod');
  });
});

describe('readConfigDir: size limit', () => {
  /** A valid storageClassMap of `n` classes with every class key set (about 200 bytes each). */
  function bigClassMap(n: number): string {
    let text = '';
    for (let i = 0; i < n; i++) {
      const name = `class-${String(i).padStart(5, '0')}`;
      text += `${name}:\n  hostDir: /mnt/disks/${name}\n  mountDir: /mnt/disks/${name}\n  volumeMode: Filesystem\n  fsType: ext4\n  namePattern: "nvme*,sd?"\n  accessMode: ReadWriteOnce\n`;
    }
    return text;
  }

  it('rejects a file over the default limit of 256 KiB, naming it and both sizes, without reading it', async () => {
    const size = DEFAULT_MAX_CONFIG_FILE_BYTES + 1;
    await publish({ storageClassMap: 'x'.repeat(size) }, '..g1');
    const err = await readConfigDir(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigReadError);
    expect((err as ConfigReadError).transient).toBe(false);
    const file = path.join(dir, '..g1', 'storageClassMap');
    expect((err as ConfigReadError).message).toBe(
      `config file ${file} is ${size} bytes, over the limit of 262144 bytes (--max-config-file-size)`,
    );
  });

  it('applies a configured limit, to plain directories too, and accepts a file of exactly the limit', async () => {
    await writeFile(path.join(dir, 'storageClassMap'), CLASS);
    const limit = Buffer.byteLength(CLASS);
    expect((await readConfigDir(dir, { maxFileBytes: limit })).files).toEqual({ storageClassMap: CLASS });
    const err = await readConfigDir(dir, { maxFileBytes: limit - 1 }).catch((e: unknown) => e);
    expect((err as ConfigReadError).message).toContain(`is ${limit} bytes, over the limit of ${limit - 1} bytes`);
  });

  it('accepts a big legitimate config just under the limit', async () => {
    const text = bigClassMap(1200);
    expect(Buffer.byteLength(text)).toBeGreaterThan(200 * 1024);
    expect(Buffer.byteLength(text)).toBeLessThan(DEFAULT_MAX_CONFIG_FILE_BYTES);
    await publish({ storageClassMap: text }, '..g1');
    const { result } = await loadConfig(dir);
    if (!result.ok) throw new Error(JSON.stringify(result.errors.slice(0, 3)));
    expect(Object.keys(result.config.storageClassMap)).toHaveLength(1200);
    expect(result.config.storageClassMap['class-01199']).toMatchObject({ hostDir: '/mnt/disks/class-01199', fsType: 'ext4' });
  }, 60_000);
});

describe('readConfigDir: number of entries (rule 24, issue 17)', () => {
  const MAX_CONFIG_KEYS = 128; // docs/configuration.md#limits
  const many = (n: number): Record<string, string> => Object.fromEntries(Array.from({ length: n }, (_, i) => [`junk${i}`, 'x']));

  it(`rejects a kubelet generation of more than ${MAX_CONFIG_KEYS} keys, not transiently and without reading them`, async () => {
    await publish({ storageClassMap: CLASS, ...many(MAX_CONFIG_KEYS) }, '..g1');
    const err = await readConfigDir(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigReadError);
    expect((err as ConfigReadError).transient).toBe(false);
    expect((err as ConfigReadError).message).toBe(
      `config directory ${path.join(dir, '..g1')} has ${MAX_CONFIG_KEYS + 1} entries (ConfigMap keys), over the limit of ${MAX_CONFIG_KEYS}; none was read`,
    );
  });

  it(`rejects a plain directory of more than ${MAX_CONFIG_KEYS} entries (dotfiles not counted), accepts ${MAX_CONFIG_KEYS}`, async () => {
    await writeFile(path.join(dir, '.hidden'), 'x');
    for (const [k, v] of Object.entries({ storageClassMap: CLASS, ...many(MAX_CONFIG_KEYS - 1) })) await writeFile(path.join(dir, k), v);
    expect(Object.keys((await readConfigDir(dir)).files)).toHaveLength(MAX_CONFIG_KEYS);
    await mkdir(path.join(dir, 'a-directory'));
    const err = await readConfigDir(dir).catch((e: unknown) => e);
    expect((err as ConfigReadError).message).toBe(
      `config directory ${dir} has ${MAX_CONFIG_KEYS + 1} entries (ConfigMap keys), over the limit of ${MAX_CONFIG_KEYS}; none was read`,
    );
  });
});
