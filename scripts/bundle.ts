// `npm run build` (after `tsc --noEmit`): bundles the two entry points with
// esbuild into dist/ (issue 12). Loading @kubernetes/client-node file by file
// (some 2,000 modules) cost ~0.6 s of CPU and ~40 MiB of RSS at every start; one
// tree-shaken, whitespace-minified bundle loads in a third of that. Layout:
//   dist/main.js                       local-volume-provisioner: the Node.js version check, then
//   dist/provisioner.js                its bundle
//   dist/node-cleanup/main.js          local-volume-node-cleanup: the same check, then
//   dist/node-cleanup/node-cleanup.js  its bundle
//   dist/chunk-<hash>.js               code both share
// The two main.js are tiny plain-JS shims (entryShim below) written for any Node.js: an older
// Node.js (the system's v20, say) stops there with one line naming Node.js 24 instead of dying in
// the bundle's undici with a minified stack (an ES module's imports all run before its body, so a
// check inside the bundle would come too late).
// The version is read from package.json at build time (src/util/version.ts reads it
// relative to its own file, which a bundle does not keep): see bakeVersion below.
// plus linked source maps (*.js.map, no sources inlined): free unless the process
// runs with --enable-source-maps (e.g. NODE_OPTIONS=--enable-source-maps), which
// then maps stack traces back to src/*.ts.
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { build, type Plugin } from 'esbuild';
import { readPackageVersion } from '../src/util/version.ts';

const root = join(import.meta.dirname, '..');
const outdir = process.argv[2] ?? join(root, 'dist');

/**
 * Replaces `readPackageVersion(new URL('<relative path>', import.meta.url))` in src/util/version.ts by the
 * version it reads now: the relative path is right for src/ and for a file-by-file build, not for a
 * bundle chunk. Fails the build when that call is no longer there.
 */
const bakeVersion: Plugin = {
  name: 'bake-version',
  setup(b) {
    b.onLoad({ filter: /[\\/]src[\\/]util[\\/]version\.ts$/ }, (args) => {
      const text = readFileSync(args.path, 'utf8');
      const call = /readPackageVersion\(new URL\('([^']+)', import\.meta\.url\)\)/;
      const rel = call.exec(text)?.[1];
      if (rel === undefined) throw new Error(`${args.path}: no readPackageVersion(new URL('...', import.meta.url)) to bake the version into`);
      const version = readPackageVersion(resolve(dirname(args.path), rel));
      return { contents: text.replace(call, JSON.stringify(version)), loader: 'ts' };
    });
  },
};

/**
 * src/kube loads client-node's KubeConfig (dist/config.js) and sends its requests itself (src/kube/transport.ts).
 * config.js also imports what only client-node's own request path uses: the generated API classes and models
 * (./gen/index.js, for makeApiClient) and undici (for its fetch dispatchers). Those two imports of config.js get
 * stubs that throw when called, so neither is bundled (some 1.4 MiB of JavaScript, ~8 MiB of RSS at start).
 */
const CLIENT_NODE_CONFIG = /[\\/]@kubernetes[\\/]client-node[\\/]dist[\\/]config\.js$/;
const CLIENT_NODE_STUBS: Readonly<Record<string, string>> = {
  './gen/index.js':
    "const no = () => { throw new Error('client-node API classes are not in this bundle (src/kube/transport.ts sends the requests)'); };\n" +
    'export const createConfiguration = no;\nexport class ServerConfiguration { constructor() { no(); } }\n',
  undici:
    "const no = () => { throw new Error('undici is not in this bundle (src/kube/transport.ts sends the requests)'); };\n" +
    'export class Agent { constructor() { no(); } }\nexport class ProxyAgent { constructor() { no(); } }\n',
};
const leanClientNode: Plugin = {
  name: 'lean-client-node',
  setup(b) {
    b.onResolve({ filter: /^(undici|\.\/gen\/index\.js)$/ }, (args) =>
      CLIENT_NODE_CONFIG.test(args.importer) ? { path: args.path, namespace: 'client-node-stub' } : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: 'client-node-stub' }, (args) => ({ contents: CLIENT_NODE_STUBS[args.path] ?? '', loader: 'js' }));
  },
};

/**
 * An ES module import of `node:http` (named or namespace: Node builds the module's whole export list) reads
 * every property of the module, lazy getters included: `http.WebSocket`, `CloseEvent` and `MessageEvent` load
 * Node's own bundled undici, which loads http2, zlib and worker_threads: +14 MiB of RSS in a bare process
 * (docs/performance.md §6, "ESM imports of node:http"). The daemon uses none of them. So every ESM import of
 * `http`/`node:http` in the bundle gets a facade that takes the module from `process.getBuiltinModule` and
 * re-exports its plain properties (the list read here, at build time, from this Node.js), without those three
 * getters. An import of one of them fails the build ("No matching export"), never the daemon at run time.
 * CommonJS `require('http')` reads no getter and is left alone.
 */
const HTTP_LAZY_GETTERS: ReadonlySet<string> = new Set(['WebSocket', 'CloseEvent', 'MessageEvent']);
function httpFacade(): string {
  const names = Object.keys(Object.getOwnPropertyDescriptors(process.getBuiltinModule('node:http'))).filter(
    (k) => !HTTP_LAZY_GETTERS.has(k) && /^[A-Za-z_$][\w$]*$/.test(k),
  );
  return [
    "const http = process.getBuiltinModule('node:http');",
    'export default http;',
    ...names.map((k) => `export const ${k} = http.${k};`),
    '',
  ].join('\n');
}
const noEagerHttpGetters: Plugin = {
  name: 'no-eager-http-getters',
  setup(b) {
    b.onResolve({ filter: /^(node:)?http$/ }, (args) =>
      args.kind === 'import-statement' || args.kind === 'dynamic-import' ? { path: 'node:http', namespace: 'http-facade' } : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: 'http-facade' }, () => ({ contents: httpFacade(), loader: 'js' }));
  },
};

/** Oldest Node.js major the bundles run on (package.json engines). */
const MIN_NODE_MAJOR = 24;

/**
 * A plain-JS entry point that any Node.js can run: checks process.versions before it imports `target` (the
 * bundle, relative to the shim), so an old Node.js exits 1 at once with one line saying what to run instead.
 */
function entryShim(name: string, target: string, cacheDir: string): string {
  return `#!/usr/bin/env node
// ${name}: checks the Node.js version, then loads the bundle (scripts/bundle.ts writes this file).
const major = Number(process.versions.node.split('.')[0]);
if (!(major >= ${MIN_NODE_MAJOR})) {
  process.stderr.write('${name} needs Node.js ${MIN_NODE_MAJOR} or later; this is Node.js ' + process.version + ' (' + process.execPath + ').\\n' +
    'In a checkout: export PATH=$PWD/node_modules/.bin:$PATH (npm ci installs Node.js ${MIN_NODE_MAJOR} there), then run the same command again.\\n');
  process.exit(1);
}
// V8's code cache of the bundle in ${cacheDir} (docs/performance.md §6): compiled once (the image ships it
// filled by warm-compile-cache.js), then read at each start. A directory that is read-only, missing or cannot be
// created costs the cache, never the start. NODE_COMPILE_CACHE=<dir> moves it, NODE_DISABLE_COMPILE_CACHE=1 turns it off.
try {
  (await import('node:module')).enableCompileCache(import.meta.dirname + ${JSON.stringify(`/${cacheDir}`)});
} catch {}
(await import(${JSON.stringify(target)})).cli();
`;
}

/** Where the shims keep V8's code cache, relative to dist/ (shared: the chunk is the bulk of both bundles). */
const COMPILE_CACHE_DIR = '.compile-cache';

/**
 * dist/warm-compile-cache.js: fills dist/.compile-cache by compiling both bundles (imports them: their top level
 * only, nothing starts), so that the first start of a container is warm too. The Dockerfile runs it in the final
 * stage, with the image's NODE_OPTIONS, as the user the pod runs as (V8 rejects a cache made with other flags).
 */
function warmScript(): string {
  return `// Fills ./${COMPILE_CACHE_DIR} with V8's code cache of both bundles (scripts/bundle.ts writes this file; the Dockerfile runs it).
const { enableCompileCache, flushCompileCache, constants } = await import('node:module');
const r = enableCompileCache(import.meta.dirname + '/${COMPILE_CACHE_DIR}');
if (r.status !== constants.compileCacheStatus.ENABLED) {
  process.stderr.write('warm-compile-cache: the compile cache is not enabled: ' + (r.message ?? 'status ' + r.status) + '\\n');
  process.exit(1);
}
await import('./provisioner.js');
await import('./node-cleanup/node-cleanup.js');
flushCompileCache();
process.stderr.write('warm-compile-cache: ' + r.directory + '\\n');
`;
}

rmSync(outdir, { recursive: true, force: true });
const result = await build({
  absWorkingDir: root,
  entryPoints: { provisioner: 'src/main.ts', 'node-cleanup/node-cleanup': 'src/node-cleanup/main.ts' },
  outdir,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node24',
  // Some CommonJS dependencies call require() at run time (optional modules in try/catch).
  banner: { js: "import { createRequire as __lspCreateRequire } from 'node:module'; const require = __lspCreateRequire(import.meta.url);" },
  minifyWhitespace: true,
  minifySyntax: true,
  sourcemap: 'linked',
  sourcesContent: false,
  logLevel: 'warning',
  metafile: true,
  plugins: [bakeVersion, leanClientNode, noEagerHttpGetters],
});
writeFileSync(join(outdir, 'main.js'), entryShim('local-volume-provisioner', './provisioner.js', COMPILE_CACHE_DIR), { mode: 0o755 });
writeFileSync(join(outdir, 'warm-compile-cache.js'), warmScript());
writeFileSync(join(outdir, 'node-cleanup', 'main.js'), entryShim('local-volume-node-cleanup', './node-cleanup.js', `../${COMPILE_CACHE_DIR}`), { mode: 0o755 });
const bytes = Object.entries(result.metafile.outputs)
  .filter(([f]) => f.endsWith('.js'))
  .reduce((n, [, o]) => n + o.bytes, 0);
console.error(`bundled into ${outdir}: ${(bytes / 1024 / 1024).toFixed(1)} MiB of JavaScript`);
