// `npm run test:mutation [-- stryker args]`: StrykerJS over the safety code (stryker.config.mjs).
//
// StrykerJS kills a vitest worker whose mutant hangs. Some unit tests mount tmpfs (the cleaner's race and
// property tests) and unmount in their `finally`/afterEach, which a killed worker never reaches: mounts were
// left behind under /tmp. As root, the run therefore goes into a private mount namespace of its own
// (`unshare -m --propagation private`): every mount a test makes lives there and goes when the run ends,
// whatever was killed. Without root (or without unshare) the run goes ahead as before, with a warning.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

if (Number(process.versions.node.split('.')[0]) !== 24) {
  console.error(`Node.js 24 is required, found ${process.version}: run "npm ci" (without --ignore-scripts) and use npm scripts`);
  process.exit(1);
}

const root = join(import.meta.dirname, '..');
const stryker = join(root, 'node_modules', '.bin', 'stryker');
const args = ['run', 'stryker.config.mjs', ...process.argv.slice(2)];
const isRoot = process.getuid?.() === 0;
const probe = isRoot ? spawnSync('unshare', ['-m', '--propagation', 'private', 'true'], { stdio: 'ignore' }) : undefined;
const isolated = probe?.status === 0;
if (!isolated) {
  console.warn(
    '[mutation] not isolated in a private mount namespace (needs root and unshare): a mutant that hangs a test which mounts may leave a tmpfs mount under /tmp',
  );
}
const [cmd, argv] = isolated ? ['unshare', ['-m', '--propagation', 'private', stryker, ...args]] : [stryker, args];
const r = spawnSync(cmd, argv, { cwd: root, stdio: 'inherit', env: process.env });
process.exit(r.status ?? 1);
