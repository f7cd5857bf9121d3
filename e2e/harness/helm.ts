// The helm CLI for the chart tests (e2e/helm.test.ts): built from the tools module in e2e/helm
// (go.mod pins helm.sh/helm/v3) with `go build`, cached OUTSIDE the work tree keyed by the helm version:
//   ${LSP_CACHE_DIR:-$HOME/.cache/local-static-provisioner}/helm/<version>/helm
// No download of a release binary: the module proxy and the Go build cache are all it needs.
import { execFile, spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkGo, defaultCacheDir, ensureCachedGoBinary, goEnv, type GoBuildOptions } from './build.ts';

/** The tools module that pins helm (e2e/helm/go.mod). */
export const helmModuleDir = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'helm');

const HELM_MODULE = 'helm.sh/helm/v3';

/** The helm version go.mod requires, e.g. "v3.22.0". */
export async function helmVersion(moduleDir: string = helmModuleDir): Promise<string> {
  const gomod = await readFile(join(moduleDir, 'go.mod'), 'utf8');
  const m = new RegExp(`^\\s*${HELM_MODULE.replaceAll('.', '\\.')}\\s+(v\\d+\\.\\d+\\.\\d+\\S*)`, 'm').exec(gomod);
  if (!m?.[1]) throw new Error(`${moduleDir}/go.mod does not require ${HELM_MODULE}`);
  return m[1];
}

export function helmPathFor(version: string, cacheDir: string = defaultCacheDir()): string {
  return join(cacheDir, 'helm', version, 'helm');
}

export interface HelmBuildOptions extends GoBuildOptions {
  /** The tools module (default: e2e/helm). */
  readonly moduleDir?: string;
}

/** Returns the path of the cached helm binary, building it when missing (cold: minutes; warm: seconds). */
export async function ensureHelmBinary(opts: HelmBuildOptions = {}): Promise<string> {
  const moduleDir = opts.moduleDir ?? helmModuleDir;
  const version = await helmVersion(moduleDir);
  const target = helmPathFor(version, opts.cacheDir ?? defaultCacheDir());
  return ensureCachedGoBinary(opts, {
    name: 'helm',
    target,
    checkGo: (goBinary) => checkGo(goBinary, `helm for the chart tests (${moduleDir})`),
    building: (goVersion) => `helm: building ${version} into ${target} with ${goVersion}`,
    build: async (tmpDir, goBinary) => {
      const out = join(tmpDir, 'helm');
      const ldflags = `-s -w -X ${HELM_MODULE}/internal/version.version=${version}`;
      await run(goBinary, ['build', '-trimpath', '-ldflags', ldflags, '-o', out, `${HELM_MODULE}/cmd/helm`], moduleDir);
      return out;
    },
  });
}

function run(cmd: string, args: readonly string[], cwd: string): Promise<void> {
  return new Promise((res, rej) => {
    const child = spawn(cmd, args, { cwd, env: goEnv(), stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (c: Buffer) => {
      err = (err + c.toString('utf8')).slice(-4000);
    });
    child.on('error', rej);
    child.on('close', (code, signal) =>
      code === 0 ? res() : rej(new Error(`${cmd} ${args.join(' ')} (in ${cwd}) ${signal ? `was killed by ${signal}` : `exited with code ${String(code)}`}:\n${err}`)),
    );
  });
}

export interface HelmResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs `helm <args>` with a private environment (no repo config, no plugins; HOME is scratchDir, so the
 * discovery cache of commands that talk to a cluster, $HOME/.kube/cache, lands there and not in the
 * working directory); never throws on exit code.
 */
export function helm(binary: string, args: readonly string[], scratchDir: string): Promise<HelmResult> {
  const env = {
    PATH: process.env['PATH'] ?? '/usr/bin:/bin',
    HOME: scratchDir,
    HELM_CACHE_HOME: join(scratchDir, 'cache'),
    HELM_CONFIG_HOME: join(scratchDir, 'config'),
    HELM_DATA_HOME: join(scratchDir, 'data'),
  };
  return new Promise((res) => {
    execFile(binary, [...args], { env, maxBuffer: 16 * 1024 * 1024, timeout: 120_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : 1;
      res({ code, stdout, stderr });
    });
  });
}
