// StrykerJS over the safety code: `npm run test:mutation` (not part of `npm test`).
// See docs/cleanup.md, "Mutation testing". Reports and the incremental file go to
// reports/mutation/ (git-ignored), the sandboxes to .stryker-tmp/ (git-ignored).
import { readFileSync } from 'node:fs';
import process from 'node:process';

/**
 * "file:first-last" for the function or class method `name` in `file`: from its
 * declaration (doc comment excluded) to the first "}" at its indentation after
 * it. Computed at each run so the range follows edits of the file.
 */
function fn(file, name) {
  const lines = readFileSync(new globalThis.URL(file, import.meta.url), 'utf8').split('\n');
  const esc = name.replace(/[#$]/g, '\\$&');
  const re = new RegExp(`^( *)(?:export )?(?:async )?(?:function\\*? ?)?${esc}[(<]`);
  const start = lines.findIndex((l) => re.test(l));
  if (start < 0) throw new Error(`stryker.config.mjs: no function ${name} in ${file}`);
  const indent = re.exec(lines[start])[1];
  const end = lines.findIndex((l, i) => i > start && l.startsWith(`${indent}}`));
  if (end < 0) throw new Error(`stryker.config.mjs: no end of function ${name} in ${file}`);
  return `${file}:${start + 1}-${end + 1}`;
}

// The safety checks (docs/cleanup.md, "Mutation testing"): MUTATION_SCOPE=safety.
const SAFETY = [
  // deleter: selection, admission through the guard, delete after clean, the volume check
  ...['#consider', '#resolve', '#admit', '#refuse', '#recheck', '#deletePV', '#deleteAfterClean', '#checkVolume'].map((f) => fn('src/deleter/deleter.ts', f)),
  'src/deleter/guard.ts', // the refusal checks: direct child, path in use, name, claim still exists, volume identity
  'src/identity/identity.ts', // the recorded identity and the mismatch rule
  'src/deleter/fs-cleaner.ts', // the Filesystem cleaner's rules
  'src/deleter/orphans.ts', // state-dir trust rules, kill refusals
  'src/deleter/proctable.ts', // UID binding
  // job controller: which PV a Job stands for, its withdrawal, the re-check before its PV is deleted
  ...['status', 'withdraw', '#process', '#succeeded', '#passesChecks', '#deletePV'].map((f) => fn('src/deleter/jobcontroller.ts', f)),
  ...['jobTarget', 'jobPhase'].map((f) => fn('src/deleter/job.ts', f)),
  'src/host/mountinfo.ts', // the mount table the mount checks read
  'src/host/volume-nesting.ts', // entries inside another volume
  'src/host/block-usage.ts', // block devices in use
  fn('src/host/stat.ts', 'detectVolumeMode'),
  fn('src/volume/pv-cache.ts', 'pvOnThisNode'),
  'src/volume/naming.ts',
];

/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  plugins: ['@stryker-mutator/vitest-runner', './scripts/stryker-ignore-text.mjs'],
  ignorers: ['log-event-metric-text'],
  // The unit project only, as one project (vitest.stryker.config.ts); never e2e.
  vitest: { configFile: 'vitest.stryker.config.ts', pool: 'threads', related: true },
  mutate: [
    ...(process.env['MUTATION_SCOPE'] === 'safety' ? SAFETY : ['src/deleter/**/*.ts', 'src/identity/**/*.ts', 'src/volume/**/*.ts', 'src/host/**/*.ts']),
    // src/config: the path and limit checks only.
    fn('src/config/parse.ts', 'readDirs'), // hostDir/mountDir set, absolute, not "/"
    fn('src/config/parse.ts', 'checkOverlappingDirs'), // no two classes share a directory or nest
    'src/config/paths.ts', // system roots, unprintable characters
    fn('src/config/load.ts', 'readOne'), // --max-config-file-size
    'src/config/yaml-guard.ts', // nesting, node count, forbidden characters
    'src/util/json.ts', // the top-level object of a state-dir file (cleaner records, class settings)
  ],
  coverageAnalysis: 'perTest',
  // Only mutants in changed code (or covered by changed tests) run again.
  incremental: true,
  incrementalFile: `reports/mutation/${process.env['MUTATION_SCOPE'] === 'safety' ? 'safety' : 'full'}-incremental.json`,
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
