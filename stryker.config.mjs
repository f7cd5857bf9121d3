// StrykerJS over the safety code: `npm run test:mutation` (not part of `npm test`).
// See docs/cleanup.md, "Mutation testing". Reports and the incremental file go to
// reports/mutation/ (git-ignored), the sandboxes to .stryker-tmp/ (git-ignored).
import { readFileSync } from 'node:fs';

/**
 * "file:first-last" for the top-level function `name` in `file`: from its
 * declaration (doc comment excluded) to the first "}" at column 0 after it.
 * Computed at each run so the range follows edits of the file.
 */
function fn(file, name) {
  const lines = readFileSync(new globalThis.URL(file, import.meta.url), 'utf8').split('\n');
  const re = new RegExp(`^(export )?(async )?function\\*? ?${name}\\b`);
  const start = lines.findIndex((l) => re.test(l));
  if (start < 0) throw new Error(`stryker.config.mjs: no top-level function ${name} in ${file}`);
  const end = lines.findIndex((l, i) => i > start && l.startsWith('}'));
  if (end < 0) throw new Error(`stryker.config.mjs: no end of function ${name} in ${file}`);
  return `${file}:${start + 1}-${end + 1}`;
}

/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  plugins: ['@stryker-mutator/vitest-runner', './scripts/stryker-ignore-text.mjs'],
  ignorers: ['log-event-metric-text'],
  // The unit project only, as one project (vitest.stryker.config.ts); never e2e.
  vitest: { configFile: 'vitest.stryker.config.ts', pool: 'threads', related: true },
  mutate: [
    'src/deleter/**/*.ts',
    'src/volume/**/*.ts',
    'src/host/**/*.ts',
    // src/config: the path and limit checks only.
    fn('src/config/parse.ts', 'readDirs'), // hostDir/mountDir set, absolute, not "/"
    fn('src/config/parse.ts', 'checkSharedDirs'), // no two classes share a hostDir or mountDir
    fn('src/config/load.ts', 'readOne'), // --max-config-file-size
    'src/config/yaml-guard.ts', // nesting, node count, forbidden characters
  ],
  coverageAnalysis: 'perTest',
  // Only mutants in changed code (or covered by changed tests) run again.
  incremental: true,
  incrementalFile: 'reports/mutation/stryker-incremental.json',
  // Module-level constants would need a fresh module graph and every test per mutant.
  ignoreStatic: true,
  // A 2-core machine shared with others.
  concurrency: 2,
  timeoutMS: 20_000,
  timeoutFactor: 2,
  dryRunTimeoutMinutes: 20,
  tempDirName: '.stryker-tmp',
  reporters: ['clear-text', 'progress', 'html', 'json'],
  htmlReporter: { fileName: 'reports/mutation/index.html' },
  jsonReporter: { fileName: 'reports/mutation/mutation.json' },
  clearTextReporter: { allowColor: false, logTests: false, reportScoreTable: true, reportMutants: false },
  thresholds: { high: 90, low: 75, break: null },
};
