// Builds (or reuses) the kustomize binary from its Go module, pinned and cached by version, and renders
// kustomizations with it (what `kubectl kustomize` / `kubectl apply -k` do). kubectl is not needed.
//   ${LSP_CACHE_DIR:-$HOME/.cache/local-static-provisioner}/kustomize/<version>/kustomize
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { checkGo, defaultCacheDir, ensureCachedGoBinary, goEnv, type GoBuildOptions } from './build.ts';

/** The Go module kustomize is installed from, and its pinned version (the one docs/deployment.md checks with). */
export const kustomizeModule = 'sigs.k8s.io/kustomize/kustomize/v5';
export const kustomizeVersion = 'v5.8.2';

export interface KustomizeBuildOptions extends GoBuildOptions {
  /** Module version (default: kustomizeVersion). */
  readonly version?: string;
}

/** Where the kustomize binary of `version` lives. */
export function kustomizePathFor(version: string = kustomizeVersion, cacheDir: string = defaultCacheDir()): string {
  return join(cacheDir, 'kustomize', version, 'kustomize');
}

/**
 * Returns the path of the pinned kustomize binary, building it with `go install <module>@<version>` (from the
 * module proxy) into a temp dir and renaming it into place when it is missing. A cold build takes a few minutes.
 */
export async function ensureKustomizeBinary(opts: KustomizeBuildOptions = {}): Promise<string> {
  const version = opts.version ?? kustomizeVersion;
  const target = kustomizePathFor(version, opts.cacheDir ?? defaultCacheDir());
  return ensureCachedGoBinary(opts, {
    name: 'kustomize',
    target,
    checkGo: (goBinary) =>
      checkGo(goBinary).catch((err: unknown) => {
        throw new Error(`building kustomize ${version} (${kustomizeModule}) needs the same Go: ${(err as Error).message}`, { cause: err });
      }),
    building: (goVersion) => `kustomize: building ${kustomizeModule}@${version} with ${goVersion} into ${target} (a cold build takes a few minutes)`,
    build: (tmpDir, goBinary) =>
      new Promise<string>((res, rej) => {
        execFile(
          goBinary,
          ['install', '-trimpath', '-ldflags', '-s -w', `${kustomizeModule}@${version}`],
          { cwd: tmpDir, env: { ...goEnv(), GOBIN: tmpDir, GOFLAGS: '-mod=mod' }, maxBuffer: 16 * 1024 * 1024 },
          (err, _stdout, stderr) => (err ? rej(new Error(`go install ${kustomizeModule}@${version} failed: ${stderr.trim() || err.message}`)) : res(join(tmpDir, 'kustomize'))),
        );
      }),
  });
}

/** `kustomize build <dir>`: the rendered multi-document YAML. Throws with kustomize's own message on failure. */
export function kustomizeBuild(binary: string, dir: string): Promise<string> {
  return new Promise((res, rej) => {
    execFile(binary, ['build', dir], { maxBuffer: 64 * 1024 * 1024, timeout: 120_000 }, (err, stdout, stderr) =>
      err ? rej(new Error(`kustomize build ${dir} failed: ${stderr.trim() || err.message}`)) : res(stdout),
    );
  });
}
