// Scratch files for the harness's own tests (harness.test.ts, helm-build.test.ts, kustomize.test.ts):
// temp dirs removed after each test, also when it fails, and executable stubs (a fake `go`, a cached binary).
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach } from 'vitest';

/** Call at module or describe level: the returned function makes a fresh temp dir; afterEach removes them all. */
export function useTempDirs(prefix: string): () => Promise<string> {
  const dirs: string[] = [];
  afterEach(async () => {
    await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
  });
  return async () => {
    const d = await mkdtemp(join(tmpdir(), prefix));
    dirs.push(d);
    return d;
  };
}

/** Writes an executable file (its directory created if needed); returns its path. */
export async function writeExecutable(path: string, content: string): Promise<string> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, content);
  await chmod(path, 0o755);
  return path;
}
