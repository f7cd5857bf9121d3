// The product image, built from the repo's Dockerfile by buildah (no Docker engine): `buildah bud` with
// chroot isolation in a storage of its own, FROM a locally built stand-in of node:24-bookworm-slim
// (image-base.ts), pushed to an OCI archive that `ctr -n k8s.io images import` loads. Everything is
// cached OUTSIDE the work tree, keyed by a sha256 of the inputs:
//   ${LSP_CACHE_DIR:-$HOME/.cache/local-static-provisioner}/images/
//     provisioner/<hash>/provisioner.oci.tar   the archive (the cache: present = nothing to build)
//     storage/{root,runroot}                   buildah's storage (base image, layer cache of the last build)
//     downloads/, tmp/, lock/                  npm tarball, scratch, one build at a time
// The image reference is docker.io/library/local-static-provisioner:<first 12 hex of the hash>; the hash
// covers the Dockerfile, .dockerignore, package.json, package-lock.json, tsconfig*.json, src/,
// scripts/bundle.ts, deployment/scripts/ and the base image's hash.
import { createHash } from 'node:crypto';
import { access, mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { formatElapsed, progressSink, type Progress } from './build-progress.ts';
import { defaultCacheDir } from './build.ts';
import { Buildah } from './buildah.ts';
import { baseImageCacheRef, baseImageHash, ensureNodeBaseImage, NODE_BASE_REF, nodePackageBinary } from './image-base.ts';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Repository of the product image; the tag is the first 12 hex digits of the inputs hash. */
export const IMAGE_REPOSITORY = 'docker.io/library/local-static-provisioner';

/** Files and directories (relative to the repo) whose contents make the image. */
export const IMAGE_INPUTS: readonly string[] = Object.freeze([
  'Dockerfile',
  '.dockerignore',
  'package.json',
  'package-lock.json',
  'tsconfig.json',
  'tsconfig.build.json',
  'src',
  'scripts/bundle.ts',
  'deployment/scripts',
]);

/** `buildah bud` options besides the tag and the CA secret (part of the hash). */
const BUD_ARGS = ['bud', '--isolation', 'chroot', '--pull=never', '--layers', '--force-rm'];

export interface ImageOptions {
  /** Progress messages (default: console.error). */
  readonly log?: (msg: string) => void;
  /** Cache root (default: $LSP_CACHE_DIR or ~/.cache/local-static-provisioner). */
  readonly cacheDir?: string;
  /** Repository with the Dockerfile (default: this one). */
  readonly repoDir?: string;
  /** Show progress as one line rewritten in place (default: stderr is a terminal); otherwise `log` every 30 s. */
  readonly tty?: boolean;
}

export interface ProvisionerImage {
  /** OCI archive: `ctr -n k8s.io images import <archive>` or `buildah pull oci-archive:<archive>`. */
  readonly archive: string;
  /** The image reference inside the archive (org.opencontainers.image.ref.name). */
  readonly ref: string;
}

export const imagesDir = (cacheDir: string = defaultCacheDir()): string => join(cacheDir, 'images');

/** The buildah storage the images are built in. */
export const imageStorage = (cacheDir: string = defaultCacheDir()): Buildah => new Buildah(join(imagesDir(cacheDir), 'storage'));

async function listFiles(root: string, rel: string): Promise<string[]> {
  const path = join(root, rel);
  const st = await stat(path).catch(() => undefined);
  if (!st) return []; // a missing optional input (.dockerignore) hashes as absent
  if (!st.isDirectory()) return [rel];
  const out: string[] = [];
  for (const e of await readdir(path, { withFileTypes: true })) out.push(...(await listFiles(root, join(rel, e.name))));
  return out;
}

/** sha256 (32 hex) of the image inputs: sorted paths, file modes and contents, and the base image hash. */
export async function imageInputsHash(repoDir: string = repoRoot, baseHash: string): Promise<string> {
  const files = (await Promise.all(IMAGE_INPUTS.map((p) => listFiles(repoDir, p)))).flat().sort();
  const hash = createHash('sha256').update(JSON.stringify({ base: baseHash, bud: BUD_ARGS })).update('\0');
  for (const f of files) {
    const st = await stat(join(repoDir, f));
    hash.update(relative('.', f)).update('\0').update((st.mode & 0o111 ? 'x' : '-')).update('\0');
    hash.update(await readFile(join(repoDir, f))).update('\0');
  }
  return hash.digest('hex').slice(0, 32);
}

export const imageRefFor = (hash: string): string => `${IMAGE_REPOSITORY}:${hash.slice(0, 12)}`;
export const archivePathFor = (hash: string, cacheDir: string = defaultCacheDir()): string =>
  join(imagesDir(cacheDir), 'provisioner', hash, 'provisioner.oci.tar');

const exists = (p: string): Promise<boolean> => access(p).then(() => true, () => false);
const touch = (p: string): Promise<void> => utimes(p, new Date(), new Date()).catch(() => undefined);

/** Progress of a `buildah bud`: the step it is on ("[2/3] STEP 4/7: RUN npm ci ...") and the time spent. */
export class StepProgress implements Progress {
  readonly #start: number;
  readonly #what: string;
  #step = 'starting';

  constructor(what: string, start: number) {
    this.#what = what;
    this.#start = start;
  }

  /** True when `line` is a STEP line (the shown step changed). */
  line(line: string): boolean {
    if (!/^(\[\d+\/\d+\] )?STEP \d+\/\d+: /.test(line)) return false;
    this.set(line);
    return true;
  }

  /** Shows `what` as the current step (cut at 90 characters). */
  set(what: string): void {
    this.#step = what.length > 90 ? `${what.slice(0, 87)}...` : what;
  }

  format(now: number): string {
    return `${this.#what}: ${this.#step}, ${formatElapsed(now - this.#start)} elapsed`;
  }
}

/** The CA bundle the host trusts (a TLS-intercepting proxy's CA), handed to the npm steps as the build_ca secret. */
async function hostCaBundle(): Promise<string | undefined> {
  for (const p of [process.env['NODE_EXTRA_CA_CERTS'], '/etc/ssl/certs/ca-certificates.crt']) {
    if (p !== undefined && p !== '' && (await exists(p))) return p;
  }
  return undefined;
}

/**
 * One build at a time per cache dir: a lock directory holding the owner's pid. A lock whose owner is gone
 * (killed) is taken over. Waits up to an hour for a live owner.
 */
export async function withLock<T>(dir: string, log: (msg: string) => void, fn: () => Promise<T>): Promise<T> {
  const lock = join(dir, 'lock');
  const deadline = Date.now() + 3_600_000;
  let told = false;
  for (;;) {
    try {
      await mkdir(lock);
      await writeFile(join(lock, 'pid'), String(process.pid));
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const owner = Number(await readFile(join(lock, 'pid'), 'utf8').catch(() => ''));
      if (Number.isInteger(owner) && owner > 0 && !isAlive(owner)) {
        await rm(lock, { recursive: true, force: true });
        continue;
      }
      if (Date.now() > deadline) throw new Error(`${lock}: held by pid ${owner} for over an hour; remove it if no build is running`, { cause: err });
      if (!told) log(`image: waiting for another build (${lock}, pid ${owner || '?'})`);
      told = true;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  try {
    return await fn();
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Returns the OCI archive of the product image for the current sources, building it when missing: the
 * base stand-in first (once per base hash), then `buildah bud` of the Dockerfile, then `buildah push` to
 * the archive (written to a temp name and renamed: a reader sees no archive or a complete one).
 */
export async function ensureProvisionerImage(opts: ImageOptions = {}): Promise<ProvisionerImage> {
  const log = opts.log ?? ((msg: string) => console.error(msg));
  const cacheDir = opts.cacheDir ?? defaultCacheDir();
  const repoDir = opts.repoDir ?? repoRoot;
  const { hash: baseHash } = await baseImageHash(join(repoDir, relative(repoRoot, nodePackageBinary)));
  const hash = await imageInputsHash(repoDir, baseHash);
  const ref = imageRefFor(hash);
  const archive = archivePathFor(hash, cacheDir);
  if (await exists(archive)) {
    await touch(dirname(archive)); // in use: pruneArchives keeps the newest
    return { archive, ref };
  }

  if (process.getuid?.() !== 0) throw new Error(`building the image ${ref} needs root (buildah with chroot isolation, mmdebstrap); no archive at ${archive}`);
  const dir = imagesDir(cacheDir);
  await mkdir(dir, { recursive: true });
  return withLock(dir, log, async () => {
    if (await exists(archive)) return { archive, ref }; // built by the lock's previous owner
    const buildah = imageStorage(cacheDir);
    // Holding the lock, no other build uses this storage: what a killed build left behind goes.
    await rm(join(dir, 'tmp'), { recursive: true, force: true });
    await buildah.run(['rm', '--all']).catch(() => undefined);
    const started = performance.now();
    const progress = new StepProgress('image', started);
    const sink = progressSink({ tty: opts.tty ?? process.stderr.isTTY === true, write: (t) => process.stderr.write(t), log });
    const onLine = (line: string): void => {
      if (progress.line(line)) sink.update(progress);
    };
    const steps = new ReusableSteps();
    try {
      await ensureNodeBaseImage({
        buildah,
        workDir: join(dir, 'tmp'),
        downloadDir: join(dir, 'downloads'),
        log,
        onLine,
        nodeBinary: join(repoDir, relative(repoRoot, nodePackageBinary)),
      });
      log(`image: building ${ref} from ${join(repoDir, 'Dockerfile')} (buildah, chroot isolation; cold: several minutes)`);
      const ca = await hostCaBundle();
      const secret = ca === undefined ? [] : ['--secret', `id=build_ca,src=${ca}`];
      await buildah.run([...BUD_ARGS, ...secret, '-f', join(repoDir, 'Dockerfile'), '-t', ref, repoDir], (line) => {
        onLine(line);
        steps.line(line);
      });
      await mkdir(dirname(archive), { recursive: true });
      const tmp = `${archive}.tmp-${process.pid}`;
      progress.set('writing the OCI archive');
      sink.update(progress);
      try {
        await buildah.run(['push', ref, `oci-archive:${tmp}:${ref}`]);
        await rename(tmp, archive);
      } catch (err) {
        await rm(tmp, { force: true });
        throw err;
      }
    } finally {
      sink.end();
    }
    log(`image: built in ${((performance.now() - started) / 1000).toFixed(1)} s -> ${archive} (${ref})`);
    await pruneStorage(buildah, baseHash, steps.ids, log);
    await pruneArchives(dirname(dirname(archive)), KEEP_ARCHIVES, log);
    return { archive, ref };
  });
}

/** Archives kept in images/provisioner/ (the newest): other checkouts on the machine may still use theirs. */
export const KEEP_ARCHIVES = 3;

/** Removes all but the `keep` newest archive directories under `dir` (images/provisioner). */
export async function pruneArchives(dir: string, keep: number, log: (msg: string) => void): Promise<void> {
  try {
    const dirs = await Promise.all(
      (await readdir(dir, { withFileTypes: true })).filter((e) => e.isDirectory()).map(async (e) => ({ path: join(dir, e.name), mtime: (await stat(join(dir, e.name))).mtimeMs })),
    );
    dirs.sort((a, b) => b.mtime - a.mtime);
    for (const d of dirs.slice(keep)) await rm(d.path, { recursive: true, force: true });
  } catch (err) {
    log(`image: could not prune old archives in ${dir}: ${(err as Error).message}`);
  }
}

/**
 * vfs stores every layer as a full copy, so the storage would grow by GBs per build. Keep only what the
 * next build can reuse: the current base and the reusable layers of the last build (ReusableSteps);
 * remove every other image, the product image included (the archive has it). Failures are logged, not thrown: the archive is already there.
 */
async function pruneStorage(buildah: Buildah, baseHash: string, stepIds: ReadonlySet<string>, log: (msg: string) => void): Promise<void> {
  try {
    // Not the product image itself: it is in the archive now, and its layers hold those of the steps after
    // COPY --from (a removed image's layers stay while a kept image's layer sits on them).
    const keepNames = new Set([baseImageCacheRef(baseHash), NODE_BASE_REF]);
    const listing = await buildah.run(['images', '-a', '--no-trunc', '--format', '{{.ID}} {{.Name}}:{{.Tag}}']);
    const drop = imagesToPrune(listing, keepNames, stepIds);
    if (drop.length > 0) await buildah.run(['rmi', '-f', ...drop]);
  } catch (err) {
    log(`image: could not prune old images from ${buildah.dir}: ${(err as Error).message.split('\n')[0] ?? ''}`);
  }
}

/**
 * The step images of a `buildah bud --layers` run that a later build can reuse: in each stage, the steps
 * before the first one that copies `src` or another stage's output. Those steps and the ones after them
 * change with every source change (and for the same sources the archive exists: no build runs), so
 * keeping them would only hold GBs (vfs: every layer is a full copy). Feed it every output line.
 */
export class ReusableSteps {
  readonly ids = new Set<string>();
  #volatile = false;

  line(line: string): void {
    const step = /^(?:\[\d+\/\d+\] )?STEP (\d+)\/\d+: (.*)$/.exec(line.trim());
    if (step) {
      const instruction = step[2] ?? '';
      if (step[1] === '1') this.#volatile = false; // a new stage
      if (/^COPY\s/i.test(instruction) && (/\s--from=/.test(instruction) || /\ssrc\b/.test(instruction))) this.#volatile = true;
      return;
    }
    const id = stepImageId(line);
    if (id !== undefined && !this.#volatile) this.ids.add(id);
  }
}

/** The image id a `buildah bud --layers` output line reports for a step ("--> 6b6b3d93781", "--> Using cache <id>"). */
export function stepImageId(line: string): string | undefined {
  return /^-->\s+(?:Using cache\s+)?([0-9a-f]{11,64})\b/.exec(line.trim())?.[1];
}

/**
 * The ids in a `buildah images -a --no-trunc --format '{{.ID}} {{.Name}}:{{.Tag}}'` listing to remove: every
 * image with none of `keepNames` whose id does not start with one of `stepIds`.
 */
export function imagesToPrune(listing: string, keepNames: ReadonlySet<string>, stepIds: ReadonlySet<string>): string[] {
  const byId = new Map<string, string[]>();
  for (const line of listing.split('\n')) {
    const [id, name] = line.trim().split(/\s+/);
    if (id === undefined || id === '' || name === undefined) continue;
    const plain = id.replace(/^sha256:/, '');
    byId.set(plain, [...(byId.get(plain) ?? []), name]);
  }
  return [...byId]
    .filter(([id, names]) => !names.some((n) => keepNames.has(n)) && ![...stepIds].some((s) => id.startsWith(s)))
    .map(([id]) => id);
}
