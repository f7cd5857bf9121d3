// Builds (or reuses) the e2e control-plane binary `testplane` from the Go module in
// e2e/controlplane, showing progress (build-progress.ts) during the long cold build. The binary is cached OUTSIDE the work tree, keyed by a stamp (sha256 of
// go.mod, go.sum and *.go), so a fresh clone on the same machine reuses it:
//   ${LSP_CACHE_DIR:-$HOME/.cache/local-static-provisioner}/testplane/<stamp>/testplane
import { spawn, execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { access, chmod, mkdir, readdir, readFile, rename, rm } from 'node:fs/promises';
import { constants } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BuildProgress, countPackages, isPackageLine, progressSink, STALE_TEMPLATE } from './build-progress.ts';

/** The Go module of the control plane (e2e/controlplane). */
export const controlPlaneSourceDir = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'controlplane');

/** Kubernetes version the binary reports (`testplane version`, `/version`). Matches go.mod. */
export const kubernetesVersion = 'v1.36.3';

/** Oldest Go that builds k8s.io/kubernetes v1.36 (its go.mod says `go 1.26.0`). */
export const minimumGo = { major: 1, minor: 26 } as const;

/** The options every cached Go binary takes. */
export interface GoBuildOptions {
  /** Progress messages (default: console.log). */
  readonly log?: (msg: string) => void;
  /** Cache root (default: $LSP_CACHE_DIR or ~/.cache/local-static-provisioner). */
  readonly cacheDir?: string;
  /** The go command (default: `go` from PATH). */
  readonly goBinary?: string;
}

export interface BuildOptions extends GoBuildOptions {
  /** Go module dir (default: e2e/controlplane). */
  readonly sourceDir?: string;
  /** Show progress as one line rewritten in place (default: stderr is a terminal); otherwise `log` every 30 s. */
  readonly tty?: boolean;
}

export function defaultCacheDir(): string {
  const fromEnv = process.env['LSP_CACHE_DIR'];
  return fromEnv !== undefined && fromEnv !== '' ? fromEnv : join(homedir(), '.cache', 'local-static-provisioner');
}

/** sha256 over the sorted names and contents of go.mod, go.sum and *.go in `sourceDir`. */
export async function sourceStamp(sourceDir: string = controlPlaneSourceDir): Promise<string> {
  const names = (await readdir(sourceDir))
    .filter((n) => n === 'go.mod' || n === 'go.sum' || n.endsWith('.go'))
    .sort();
  if (!names.includes('go.mod')) throw new Error(`no go.mod in ${sourceDir}: not the control-plane Go module`);
  const hash = createHash('sha256');
  for (const name of names) {
    hash.update(name).update('\0');
    hash.update(await readFile(join(sourceDir, name))).update('\0');
  }
  return hash.digest('hex').slice(0, 32);
}

/** Where the binary for `stamp` lives. */
export function binaryPathFor(stamp: string, cacheDir: string = defaultCacheDir()): string {
  return join(cacheDir, 'testplane', stamp, 'testplane');
}

/**
 * Parses `go1.26.8` / `go1.26rc1` / `devel go1.27-abcdef`. Returns undefined when no version
 * can be read.
 */
export function parseGoVersion(text: string): { major: number; minor: number } | undefined {
  const m = /go(\d+)\.(\d+)/.exec(text);
  if (!m) return undefined;
  return { major: Number(m[1]), minor: Number(m[2]) };
}

/** Throws one line saying what is needed when `go` is missing or older than 1.26; returns `go version` output. */
export async function checkGo(goBinary = 'go', what = 'the e2e control plane (e2e/controlplane)'): Promise<string> {
  const need = `Go ${minimumGo.major}.${minimumGo.minor} or newer is needed to build ${what}`;
  const out = await new Promise<string>((res, rej) => {
    execFile(goBinary, ['version'], { env: { ...process.env, GOTOOLCHAIN: 'local' }, timeout: 60_000 }, (err, stdout) => {
      if (!err) return res(stdout.trim());
      const code = (err as NodeJS.ErrnoException).code;
      rej(new Error(`${need}; ${code === 'ENOENT' ? `\`${goBinary}\` was not found${goBinary.includes('/') ? '' : ' on PATH'}` : `\`${goBinary} version\` failed: ${err.message.split('\n')[0] ?? ''}`}`));
    });
  });
  return assertGoVersion(out, need);
}

function assertGoVersion(text: string, need: string): string {
  const v = parseGoVersion(text);
  if (!v) throw new Error(`${need}; could not read the Go version from "${text}"`);
  if (v.major < minimumGo.major || (v.major === minimumGo.major && v.minor < minimumGo.minor)) {
    throw new Error(`${need}; found go${v.major}.${v.minor} (${text})`);
  }
  return text;
}

export async function isExecutable(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The `go build` ldflags: strip symbols, stamp the Kubernetes version. */
export function buildLdflags(version: string = kubernetesVersion): string {
  const [major, minor] = version.replace(/^v/, '').split('.');
  return [
    '-s -w',
    `-X k8s.io/component-base/version.gitVersion=${version}`,
    `-X k8s.io/component-base/version.gitMajor=${major ?? ''}`,
    `-X k8s.io/component-base/version.gitMinor=${minor ?? ''}`,
    '-X k8s.io/component-base/version.gitTreeState=clean',
  ].join(' ');
}

export interface CachedGoBinary {
  /** What is built, the prefix of the log lines ("control plane", "helm", "kustomize"). */
  readonly name: string;
  /** Where the binary lives in the cache (its path names the stamp or version it was built from). */
  readonly target: string;
  /** Checks go, returning `go version` (default: checkGo(goBinary)). */
  readonly checkGo?: (goBinary: string) => Promise<string>;
  /** The "building" log line, given the go version. */
  readonly building: (goVersion: string) => string;
  /** Builds the binary into the (empty, private) dir `tmpDir`; returns the path of the file it wrote there. */
  readonly build: (tmpDir: string, goBinary: string, log: (msg: string) => void) => Promise<string>;
}

/**
 * The one "cached Go binary" routine: returns `target` when it is an executable, else checks go, builds into a
 * private temp dir next to `target`, and renames the result into place (atomic: a concurrent reader sees no
 * binary or a complete one). The temp dir is removed whatever happens, so a failed build leaves nothing behind.
 */
export async function ensureCachedGoBinary(opts: GoBuildOptions, spec: CachedGoBinary): Promise<string> {
  const { target } = spec;
  if (await isExecutable(target)) return target;
  const log = opts.log ?? ((msg: string) => console.log(msg));
  const goBinary = opts.goBinary ?? 'go';
  const goVersion = await (spec.checkGo ?? checkGo)(goBinary);
  await mkdir(dirname(target), { recursive: true });
  const tmpDir = `${target}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  await mkdir(tmpDir);
  log(spec.building(goVersion));
  const started = performance.now();
  try {
    const built = await spec.build(tmpDir, goBinary, log);
    await chmod(built, 0o755);
    await rename(built, target);
  } finally {
    await rm(tmpDir, { recursive: true, force: true });
  }
  log(`${spec.name}: built in ${((performance.now() - started) / 1000).toFixed(1)} s -> ${target}`);
  return target;
}

/**
 * Returns the path of an up-to-date `testplane` binary, building it when missing or stale.
 * A cold build takes tens of minutes; a warm one (Go build cache filled) a few.
 */
export async function ensureControlPlaneBinary(opts: BuildOptions = {}): Promise<string> {
  const sourceDir = opts.sourceDir ?? controlPlaneSourceDir;
  const stamp = await sourceStamp(sourceDir);
  const target = binaryPathFor(stamp, opts.cacheDir ?? defaultCacheDir());
  return ensureCachedGoBinary(opts, {
    name: 'control plane',
    target,
    building: (goVersion) => `control plane: building ${target} with ${goVersion} (stamp ${stamp}; a cold build takes 10-30 min)`,
    build: async (tmpDir, goBinary, log) => {
      const out = join(tmpDir, 'testplane');
      const progress = new BuildProgress(performance.now());
      const sink = progressSink({ tty: opts.tty ?? process.stderr.isTTY === true, write: (t) => process.stderr.write(t), log });
      const lister = countStalePackages(goBinary, sourceDir);
      lister.count.then(
        (n) => {
          progress.total = n;
          sink.update(progress);
        },
        () => undefined, // no total: progress shows the count alone
      );
      try {
        await runGoBuild(goBinary, sourceDir, out, (line) => {
          if (progress.line(line)) sink.update(progress);
        });
      } finally {
        lister.stop();
        sink.end();
      }
      return out;
    },
  });
}

/** Environment of every `go` run: static binary, the installed toolchain only, no go.work. */
export const goEnv = (): NodeJS.ProcessEnv => ({ ...process.env, CGO_ENABLED: '0', GOTOOLCHAIN: 'local', GOWORK: 'off' });

/** How many packages the build has to compile (`go list` of the stale ones); stop() kills the lister. */
function countStalePackages(goBinary: string, sourceDir: string): { count: Promise<number>; stop(): void } {
  const ac = new AbortController();
  const count = new Promise<number>((res, rej) => {
    execFile(
      goBinary,
      ['list', '-trimpath', '-deps', '-f', STALE_TEMPLATE, '.'],
      { cwd: sourceDir, env: goEnv(), signal: ac.signal, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout) => (err ? rej(new Error(`go list failed: ${err.message}`)) : res(countPackages(stdout))),
    );
  });
  return { count, stop: () => ac.abort() };
}

/** `go build -v`: each package path it prints goes to onPackageLine; anything else is kept for the error. */
function runGoBuild(goBinary: string, sourceDir: string, out: string, onPackageLine: (line: string) => void): Promise<void> {
  const args = ['build', '-v', '-trimpath', '-o', out, '-ldflags', buildLdflags(), '.'];
  return new Promise((res, rej) => {
    const child = spawn(goBinary, args, { cwd: sourceDir, env: goEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    const tail: string[] = [];
    let partial = '';
    const keep = (chunk: Buffer): void => {
      const lines = (partial + chunk.toString('utf8')).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        if (line === '') continue;
        if (isPackageLine(line)) onPackageLine(line);
        else tail.push(line);
      }
      if (tail.length > 40) tail.splice(0, tail.length - 40);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.on('error', rej);
    child.on('close', (code, signal) => {
      if (partial !== '') tail.push(partial);
      if (code === 0) return res();
      const how = signal ? `was killed by ${signal}` : `exited with code ${String(code)}`;
      rej(new Error(`go build of the control plane (${sourceDir}) ${how}:\n${tail.join('\n')}`));
    });
  });
}
