// A stand-in for the `node:24-bookworm-slim` image the Dockerfile starts FROM (no registry is reachable
// here): a Debian bookworm root file system built by mmdebstrap from Debian's packages (minbase, as
// debian:bookworm-slim; apt works inside, docs and man pages excluded like the slim images), plus the
// Node 24 binary of the npm `node` package pinned in package-lock.json and npm from the npm registry
// (pinned, integrity-checked). It is tagged docker.io/library/node:24-bookworm-slim in the buildah
// storage, so the Dockerfile builds unchanged, and localhost/lsp-node-base:<hash>, the cache key: a
// sha256 of the recipe (mmdebstrap options, Containerfile), the node binary and the npm tarball's integrity.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readFile, realpath, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runTool, type Buildah } from './buildah.ts';

/** The tag the Dockerfile's FROM lines resolve to. */
export const NODE_BASE_REF = 'docker.io/library/node:24-bookworm-slim';

/** npm installed into the base (what node:24 images ship: npm 11). */
export const NPM_VERSION = '11.21.2';
const NPM_INTEGRITY = 'sha512-7HPApk+AflMUavSseL1Pm6CnYqMIHk53x+KmuhqmTDqPkjPMgxIpTPcTqsE91EKNw4gFBJV9fnXiSdGm1DXq9A==';

export const DEBIAN_SUITE = 'bookworm';
const DEBIAN_SOURCES = [
  'deb http://deb.debian.org/debian bookworm main',
  'deb http://deb.debian.org/debian bookworm-updates main',
  'deb http://deb.debian.org/debian-security bookworm-security main',
];

/** mmdebstrap options: minbase (Essential + required + apt), merged /usr without the usrmerge package (it pulls perl), no docs. */
const MMDEBSTRAP_ARGS = [
  '--variant=minbase',
  '--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr',
  '--skip=output/dev',
  '--dpkgopt=path-exclude=/usr/share/doc/*',
  '--dpkgopt=path-include=/usr/share/doc/*/copyright',
  '--dpkgopt=path-exclude=/usr/share/man/*',
  '--dpkgopt=path-exclude=/usr/share/info/*',
  '--dpkgopt=path-exclude=/usr/share/locale/*',
  '--dpkgopt=path-include=/usr/share/locale/locale.alias',
];

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The Node binary of the npm `node` package (devDependency pinned in package-lock.json). */
export const nodePackageBinary = join(repoRoot, 'node_modules', 'node', 'bin', 'node');

function containerfile(nodeVersion: string): string {
  return `FROM scratch
ADD rootfs.tar /
COPY node /usr/local/bin/node
COPY npm /usr/local/lib/node_modules/npm
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \\
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \\
 && groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node \\
 && node --version && npm --version
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin NODE_VERSION=${nodeVersion.replace(/^v/, '')}
CMD ["node"]
`;
}

export interface BaseImageOptions {
  readonly buildah: Buildah;
  /** Scratch space on the same disk (the rootfs tarball, npm). */
  readonly workDir: string;
  /** Where downloaded npm tarballs are kept. */
  readonly downloadDir: string;
  readonly log: (msg: string) => void;
  /** Each line of the tools' output (progress). */
  readonly onLine?: (line: string) => void;
  /** The node binary (default: node_modules/node/bin/node). */
  readonly nodeBinary?: string;
}

async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** `vNN.x.y` of the node binary; throws unless it is Node 24. */
export async function nodeBinaryVersion(binary: string): Promise<string> {
  const out = (await runTool(binary, ['--version'])).trim();
  if (!/^v24\.\d+\.\d+$/.test(out)) throw new Error(`${binary} is ${out}, the base image needs Node 24 (npm ci installs the pinned \`node\` package)`);
  return out;
}

/** The cache key of the base image: sha256 of the recipe, the node binary and npm's integrity. */
export async function baseImageHash(nodeBinary: string = nodePackageBinary): Promise<{ hash: string; nodeVersion: string }> {
  const nodeVersion = await nodeBinaryVersion(nodeBinary);
  const recipe = JSON.stringify({
    suite: DEBIAN_SUITE,
    sources: DEBIAN_SOURCES,
    mmdebstrap: MMDEBSTRAP_ARGS,
    containerfile: containerfile(nodeVersion),
    node: await sha256File(nodeBinary),
    npm: [NPM_VERSION, NPM_INTEGRITY],
  });
  return { hash: createHash('sha256').update(recipe).digest('hex').slice(0, 32), nodeVersion };
}

export const baseImageCacheRef = (hash: string): string => `localhost/lsp-node-base:${hash}`;

/** The npm tarball, downloaded once into downloadDir and checked against the pinned integrity. */
async function npmTarball(downloadDir: string): Promise<string> {
  const target = join(downloadDir, `npm-${NPM_VERSION}.tgz`);
  const [algo, expected] = NPM_INTEGRITY.split('-', 2) as [string, string];
  const matches = (data: Buffer): boolean => createHash(algo).update(data).digest('base64') === expected;
  const cached = await readFile(target).catch(() => undefined);
  if (cached && matches(cached)) return target;
  const url = `https://registry.npmjs.org/npm/-/npm-${NPM_VERSION}.tgz`;
  const resp = await fetch(url);
  if (!resp.ok) throw new Error(`downloading ${url} failed: HTTP ${resp.status}`);
  const data = Buffer.from(await resp.arrayBuffer());
  if (!matches(data)) throw new Error(`${url} does not match the pinned integrity ${NPM_INTEGRITY}`);
  await mkdir(downloadDir, { recursive: true });
  await writeFile(`${target}.tmp-${process.pid}`, data);
  await rename(`${target}.tmp-${process.pid}`, target);
  return target;
}

/**
 * Makes NODE_BASE_REF in `opts.buildah`'s storage the base image of the current inputs, building it when
 * its cache tag is missing (mmdebstrap: about a minute; the buildah step: seconds). Returns the hash.
 */
export async function ensureNodeBaseImage(opts: BaseImageOptions): Promise<string> {
  const nodeBinary = await realpath(opts.nodeBinary ?? nodePackageBinary).catch(() => {
    throw new Error(`${opts.nodeBinary ?? nodePackageBinary} is missing: run npm ci (the \`node\` devDependency provides Node 24 for the base image)`);
  });
  const { hash, nodeVersion } = await baseImageHash(nodeBinary);
  const cacheRef = baseImageCacheRef(hash);
  const { buildah, log } = opts;
  if (!(await buildah.hasImage(cacheRef))) {
    const started = performance.now();
    log(`base image: building ${NODE_BASE_REF} (${DEBIAN_SUITE} minbase by mmdebstrap + node ${nodeVersion} + npm ${NPM_VERSION}; hash ${hash})`);
    await mkdir(opts.workDir, { recursive: true });
    const ctx = await mkdtemp(join(opts.workDir, 'base-'));
    try {
      const onLine = opts.onLine;
      await runTool('mmdebstrap', [...MMDEBSTRAP_ARGS, DEBIAN_SUITE, join(ctx, 'rootfs.tar'), ...DEBIAN_SOURCES], { onLine });
      await copyFile(nodeBinary, join(ctx, 'node'));
      await mkdir(join(ctx, 'npm'));
      await runTool('tar', ['-xzf', await npmTarball(opts.downloadDir), '-C', join(ctx, 'npm'), '--strip-components=1', '--no-same-owner']);
      await writeFile(join(ctx, 'Containerfile'), containerfile(nodeVersion));
      await buildah.run(['bud', '--isolation', 'chroot', '--pull=never', '-f', join(ctx, 'Containerfile'), '-t', cacheRef, ctx], onLine);
    } finally {
      await rm(ctx, { recursive: true, force: true });
    }
    log(`base image: built in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  }
  await buildah.run(['tag', cacheRef, NODE_BASE_REF]);
  return hash;
}
