// A test double of the kubelet's AtomicWriter (pkg/volume/util/atomic_writer.go),
// the code that keeps a ConfigMap volume up to date. It reproduces the on-disk
// sequence step by step so the config watcher can be tested against the real
// thing a pod sees:
//
//   dir/
//     ..2026_11_30_10_00_00.123456789/   <- one generation (real files)
//     ..data -> ..2026_11_30_10_00_00.123456789
//     storageClassMap -> ..data/storageClassMap    <- user-visible keys
//
// write(files):
//   1. read the current ..data target (the old generation);
//   2. note the visible keys that are no longer in the payload;
//   3. create a new "..<UTC timestamp>.<random>" directory and write every file in it;
//   4. create the symlink ..data_tmp -> <new dir name>;
//   5. rename ..data_tmp over ..data (the atomic swap);
//   6. create the visible "key -> ..data/key" symlinks that do not exist yet;
//   7. remove the visible symlinks of removed keys;
//   8. remove the old generation directory.
// Keys are plain file names here (the provisioner's ConfigMap has no nested paths),
// must not start with "..", and must not contain "/".
import { randomInt } from 'node:crypto';
import { mkdir, readlink, rename, rm, symlink, utimes, writeFile, lstat } from 'node:fs/promises';
import path from 'node:path';

const DATA = '..data';
const DATA_TMP = '..data_tmp';

function timestampPrefix(d: Date): string {
  const p = (n: number, w = 2): string => String(n).padStart(w, '0');
  return `..${p(d.getUTCFullYear(), 4)}_${p(d.getUTCMonth() + 1)}_${p(d.getUTCDate())}_${p(d.getUTCHours())}_${p(d.getUTCMinutes())}_${p(d.getUTCSeconds())}.`;
}

async function exists(p: string): Promise<boolean> {
  try {
    await lstat(p);
    return true;
  } catch {
    return false;
  }
}

export class AtomicWriter {
  readonly dir: string;
  #current: Record<string, string> | undefined;
  /** Number of generations written so far. */
  generations = 0;

  constructor(dir: string) {
    this.dir = dir;
  }

  /** The payload of the last write (undefined before the first). */
  get current(): Readonly<Record<string, string>> | undefined {
    return this.#current;
  }

  /** Name of the generation directory ..data points at, or undefined. */
  async dataTarget(): Promise<string | undefined> {
    try {
      return await readlink(path.join(this.dir, DATA));
    } catch {
      return undefined;
    }
  }

  /** Publishes `files` as a new generation, exactly in the kubelet's order. */
  async write(files: Record<string, string>): Promise<void> {
    for (const key of Object.keys(files)) {
      if (key === '' || key.startsWith('..') || key.includes('/')) throw new Error(`invalid key ${JSON.stringify(key)}`);
    }
    await mkdir(this.dir, { recursive: true });
    // 1. old generation
    const oldTsDir = await this.dataTarget();
    // 2. visible keys to remove afterwards
    const toRemove = Object.keys(this.#current ?? {}).filter((k) => !(k in files));
    // 3. new generation directory with the payload
    const tsName = await this.#newTimestampDir();
    const tsDir = path.join(this.dir, tsName);
    for (const [key, content] of Object.entries(files)) {
      await writeFile(path.join(tsDir, key), content, { mode: 0o644 });
    }
    // 4. ..data_tmp -> new generation (relative link, like the kubelet)
    const tmp = path.join(this.dir, DATA_TMP);
    await rm(tmp, { force: true });
    await symlink(tsName, tmp);
    // 5. atomic swap
    await rename(tmp, path.join(this.dir, DATA));
    // 6. visible symlinks for new keys
    for (const key of Object.keys(files)) {
      const visible = path.join(this.dir, key);
      if (!(await exists(visible))) await symlink(path.join(DATA, key), visible);
    }
    // 7. visible symlinks of removed keys
    for (const key of toRemove) await rm(path.join(this.dir, key), { force: true });
    // 8. old generation
    if (oldTsDir !== undefined && oldTsDir !== tsName) {
      await rm(path.join(this.dir, oldTsDir), { recursive: true, force: true });
    }
    this.#current = { ...files };
    this.generations++;
  }

  /**
   * What the kubelet does periodically when nothing changed.
   * 'generation' (default): writes the same content again as a new generation (a full swap);
   * 'mtime': only bumps the modification times of the current generation's files.
   */
  async touch(mode: 'generation' | 'mtime' = 'generation'): Promise<void> {
    const cur = this.#current;
    if (!cur) throw new Error('touch() before the first write()');
    if (mode === 'generation') {
      await this.write(cur);
      return;
    }
    const target = await this.dataTarget();
    if (target === undefined) return;
    const now = new Date();
    for (const key of Object.keys(cur)) await utimes(path.join(this.dir, target, key), now, now);
  }

  /** mkdtemp-like: "..<timestamp>.<random digits>", retried on collision. */
  async #newTimestampDir(): Promise<string> {
    const prefix = timestampPrefix(new Date());
    for (;;) {
      const name = `${prefix}${randomInt(0, 2 ** 31 - 1)}`;
      try {
        await mkdir(path.join(this.dir, name), { mode: 0o755 });
        return name;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      }
    }
  }
}
