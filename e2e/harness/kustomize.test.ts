// Tests of the kustomize binary cache (e2e/harness/kustomize.ts) with a fake `go`: reuse without go,
// `go install <module>@<version>` into the version dir with nothing left behind, failures in one message.
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useTempDirs, writeExecutable } from './test-files.ts';
import { ensureKustomizeBinary, kustomizeBuild, kustomizeModule, kustomizePathFor, kustomizeVersion } from './kustomize.ts';

const tempDir = useTempDirs('lsp-kustomize-test-');

/** A `go` that reports 1.26 and, for `install`, writes a kustomize script into $GOBIN and logs its args (or fails). */
function fakeGo(dir: string, install: 'ok' | 'fail'): Promise<string> {
  const path = join(dir, 'go');
  const installPart =
    install === 'ok'
      ? `echo "$@" > "${dir}/install-args"; printf '#!/bin/sh\\necho fake kustomize "$@"\\n' > "$GOBIN/kustomize"; chmod 755 "$GOBIN/kustomize"`
      : `echo "go: module lookup disabled by GOPROXY=off" >&2; exit 1`;
  return writeExecutable(path, `#!/bin/sh\nif [ "$1" = version ]; then echo "go version go1.26.8 linux/amd64"; exit 0; fi\n${installPart}\n`);
}

describe('kustomize binary cache', () => {
  it('reuses a cached binary without touching go', async () => {
    const cache = await tempDir();
    const target = kustomizePathFor(kustomizeVersion, cache);
    await writeExecutable(target, '#!/bin/sh\n');
    const logs: string[] = [];
    expect(await ensureKustomizeBinary({ cacheDir: cache, goBinary: '/nonexistent/go', log: (m) => logs.push(m) })).toBe(target);
    expect(logs).toEqual([]);
  });

  it('installs the pinned module into the version dir, leaves no temp dir, then reuses it', async () => {
    const cache = await tempDir();
    const bin = await tempDir();
    const go = await fakeGo(bin, 'ok');
    const logs: string[] = [];
    const got = await ensureKustomizeBinary({ cacheDir: cache, goBinary: go, log: (m) => logs.push(m) });
    expect(got).toBe(join(cache, 'kustomize', kustomizeVersion, 'kustomize'));
    expect(await readFile(join(bin, 'install-args'), 'utf8')).toContain(`install -trimpath -ldflags -s -w ${kustomizeModule}@${kustomizeVersion}`);
    expect(await readdir(join(cache, 'kustomize', kustomizeVersion))).toEqual(['kustomize']);
    expect(logs.at(-1)).toMatch(/^kustomize: built in \d+\.\d s -> /);
    await expect(kustomizeBuild(got, '/some/dir')).resolves.toBe('fake kustomize build /some/dir\n');
    // Second call: cached, go not run again.
    await rm(join(bin, 'install-args'));
    expect(await ensureKustomizeBinary({ cacheDir: cache, goBinary: go, log: () => undefined })).toBe(got);
    await expect(readFile(join(bin, 'install-args'))).rejects.toThrow();
  });

  it('a failed go install: one error with go\'s message, no binary, no temp dir', async () => {
    const cache = await tempDir();
    const go = await fakeGo(await tempDir(), 'fail');
    await expect(ensureKustomizeBinary({ cacheDir: cache, goBinary: go, log: () => undefined })).rejects.toThrow(
      `go install ${kustomizeModule}@${kustomizeVersion} failed: go: module lookup disabled by GOPROXY=off`,
    );
    expect(await readdir(join(cache, 'kustomize', kustomizeVersion))).toEqual([]);
  });

  it('no go: says that kustomize needs it', async () => {
    await expect(ensureKustomizeBinary({ cacheDir: await tempDir(), goBinary: '/nonexistent/go', log: () => undefined })).rejects.toThrow(
      /^building kustomize v[\d.]+ \(sigs\.k8s\.io\/kustomize\/kustomize\/v5\) needs the same Go: Go 1\.26 or newer is needed/,
    );
  });

  it('kustomize build errors carry kustomize\'s message', async () => {
    const bin = await tempDir();
    const k = join(bin, 'kustomize');
    await writeExecutable(k, '#!/bin/sh\necho "Error: no kustomization file in $2" >&2\nexit 1\n');
    await expect(kustomizeBuild(k, '/x')).rejects.toThrow('kustomize build /x failed: Error: no kustomization file in /x');
  });
});
