// OCI image archives written by hand (no registry, no builder): one uncompressed layer of given
// files, a config with the entrypoint, and an index naming the image, packed as a tar that
// `ctr -n k8s.io images import` reads. Used for the node's sandbox ("pause") image, built from
// e2e/pause (a static Go binary), cached by a hash of its sources like the control plane.
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { access, chmod, copyFile, mkdir, mkdtemp, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { checkGo, defaultCacheDir, goEnv, isExecutable, sourceStamp } from './build.ts';

const execFileP = promisify(execFile);

/** The Go module of the pause binary. */
export const pauseSourceDir = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'pause');

/** The sandbox image's name, as containerd's sandbox_image and the import name. */
export const pauseImage = 'localhost/lsp-pause:e2e';

export interface OciImageSpec {
  /** Full image reference, e.g. localhost/name:tag. */
  readonly name: string;
  /** Files of the single layer: path in the image (no leading slash) → file on this host (mode kept). */
  readonly files: Readonly<Record<string, string>>;
  /** Symlinks of the layer: path in the image → link target (e.g. busybox applets → busybox). */
  readonly symlinks?: Readonly<Record<string, string>>;
  readonly entrypoint: readonly string[];
  readonly cmd?: readonly string[];
  readonly env?: readonly string[];
}

const sha256 = (b: Buffer | string): string => createHash('sha256').update(b).digest('hex');

/** A reproducible tar of `names` under `dir` (root-owned, mtime 0, sorted). */
async function tarOf(dir: string, names: readonly string[], out: string): Promise<void> {
  await execFileP('tar', ['-C', dir, '--sort=name', '--owner=0', '--group=0', '--numeric-owner', '--mtime=@0', '--format=gnu', '-cf', out, ...names]);
}

/** Writes the image as an OCI archive (oci-layout, index.json, blobs/sha256/…) to `out`. */
export async function writeOciArchive(spec: OciImageSpec, out: string): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), 'lsp-oci-'));
  try {
    const rootfs = join(work, 'rootfs');
    const layout = join(work, 'layout');
    const blobs = join(layout, 'blobs', 'sha256');
    await mkdir(blobs, { recursive: true });
    for (const [path, source] of Object.entries(spec.files)) {
      await mkdir(dirname(join(rootfs, path)), { recursive: true });
      await copyFile(source, join(rootfs, path));
    }
    for (const [path, target] of Object.entries(spec.symlinks ?? {})) {
      await mkdir(dirname(join(rootfs, path)), { recursive: true });
      await symlink(target, join(rootfs, path));
    }
    const layerTar = join(work, 'layer.tar');
    await tarOf(rootfs, [...Object.keys(spec.files), ...Object.keys(spec.symlinks ?? {})], layerTar);
    const layer = await readFile(layerTar);
    const blob = async (data: Buffer | string): Promise<{ digest: string; size: number }> => {
      const hex = sha256(data);
      await writeFile(join(blobs, hex), data);
      return { digest: `sha256:${hex}`, size: Buffer.byteLength(data) };
    };
    const layerDesc = await blob(layer);
    const config = await blob(
      JSON.stringify({
        architecture: process.arch === 'arm64' ? 'arm64' : 'amd64',
        os: 'linux',
        config: { Entrypoint: spec.entrypoint, ...(spec.cmd ? { Cmd: spec.cmd } : {}), ...(spec.env ? { Env: spec.env } : {}) },
        rootfs: { type: 'layers', diff_ids: [layerDesc.digest] }, // uncompressed: diff id = digest
      }),
    );
    const manifest = await blob(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
        layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar', ...layerDesc }],
      }),
    );
    const tag = spec.name.slice(spec.name.lastIndexOf(':') + 1);
    await writeFile(
      join(layout, 'index.json'),
      JSON.stringify({
        schemaVersion: 2,
        manifests: [
          {
            mediaType: 'application/vnd.oci.image.manifest.v1+json',
            ...manifest,
            annotations: { 'io.containerd.image.name': spec.name, 'org.opencontainers.image.ref.name': tag },
          },
        ],
      }),
    );
    await writeFile(join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    const tmpOut = `${out}.tmp-${randomBytes(4).toString('hex')}`;
    await tarOf(layout, ['oci-layout', 'index.json', 'blobs'], tmpOut);
    await rename(tmpOut, out);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/**
 * The pause image archive, built once per source stamp into
 * $LSP_CACHE_DIR/pause/<stamp>/pause.oci.tar (static Go binary, a few seconds with a warm cache).
 */
export async function ensurePauseImage(cacheDir: string = defaultCacheDir()): Promise<{ name: string; archive: string }> {
  const stamp = await sourceStamp(pauseSourceDir);
  const dir = join(cacheDir, 'pause', stamp);
  const archive = join(dir, 'pause.oci.tar');
  try {
    await access(archive);
    return { name: pauseImage, archive }; // written last: its presence means the binary is there too
  } catch {
    /* build below */
  }
  if (!(await isExecutable(join(dir, 'pause')))) {
    await checkGo('go', 'the pause image of the e2e node (e2e/pause)');
    await mkdir(dir, { recursive: true });
    const tmp = join(dir, `pause.tmp-${randomBytes(4).toString('hex')}`);
    await execFileP('go', ['build', '-trimpath', '-ldflags', '-s -w', '-o', tmp, '.'], { cwd: pauseSourceDir, env: goEnv() });
    await chmod(tmp, 0o755);
    await rename(tmp, join(dir, 'pause'));
  }
  await writeOciArchive({ name: pauseImage, files: { pause: join(dir, 'pause') }, entrypoint: ['/pause'] }, archive);
  return { name: pauseImage, archive };
}

/** The host's busybox (Debian: busybox-static), from which the examples' image is made. */
export const hostBusybox = '/bin/busybox';

/**
 * Docker Hub's `busybox:<major.minor>` for a node without a registry, made of the host's static busybox
 * (Debian's busybox-static; same upstream version, so the same name): /bin/busybox, a symlink per applet,
 * Cmd sh, as the original. The examples in examples/ use it, and the demo's and the e2e real node import
 * it so that they run there as written. Cached in $LSP_CACHE_DIR/busybox/<binary hash>/busybox.oci.tar.
 */
export async function ensureBusyboxImage(cacheDir: string = defaultCacheDir()): Promise<{ name: string; archive: string }> {
  const binary = await readFile(hostBusybox);
  const banner = (await execFileP(hostBusybox, [])).stdout;
  const version = /^BusyBox v(\d+)\.(\d+)\./.exec(banner);
  if (!version) throw new Error(`cannot read the version of ${hostBusybox}: ${banner.split('\n')[0] ?? ''}`);
  const name = `docker.io/library/busybox:${version[1] ?? ''}.${version[2] ?? ''}`;
  const dir = join(cacheDir, 'busybox', sha256(binary).slice(0, 32));
  const archive = join(dir, 'busybox.oci.tar');
  try {
    await access(archive);
    return { name, archive };
  } catch {
    /* build below */
  }
  const applets = (await execFileP(hostBusybox, ['--list'])).stdout.split('\n').filter((a) => /^[\w.[-]+$/.test(a) && a !== 'busybox');
  await mkdir(dir, { recursive: true });
  await writeOciArchive(
    {
      name,
      files: { 'bin/busybox': hostBusybox },
      symlinks: Object.fromEntries(applets.map((a) => [`bin/${a}`, 'busybox'])),
      entrypoint: [],
      cmd: ['sh'],
      env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'],
    },
    archive,
  );
  return { name, archive };
}
