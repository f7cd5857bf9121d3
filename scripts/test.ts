// `npm test`: type-check, lint, then every vitest project (unit + e2e against the
// real control plane), and a final "N passed, N failed, N skipped" line.
// Extra arguments are passed to vitest (e.g. `npm test -- --project unit`).
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const bin = (name: string): string => join(root, 'node_modules', '.bin', name);
const run = (cmd: string, args: string[]): number =>
  spawnSync(cmd, args, { cwd: root, stdio: 'inherit', env: process.env }).status ?? 1;

if (Number(process.versions.node.split('.')[0]) !== 24) {
  console.error(`Node.js 24 is required, found ${process.version}: run "npm ci" (without --ignore-scripts) and use npm scripts`);
  process.exit(1);
}

const steps: Array<[string, string, string[]]> = [
  ['typecheck', bin('tsc'), ['--noEmit', '-p', 'tsconfig.json']],
  ['lint', bin('eslint'), ['.']],
];
let failedSteps = 0;
for (const [name, cmd, args] of steps) {
  console.log(`\n== ${name} ==`);
  if (run(cmd, args) !== 0) {
    console.error(`${name} failed`);
    failedSteps++;
  }
}

const outDir = join(root, '.cache');
mkdirSync(outDir, { recursive: true });
const report = join(outDir, 'vitest-report.json');
rmSync(report, { force: true });
const extra = process.argv.slice(2);
const projects = extra.some((a) => a.startsWith('--project')) ? [] : ['--project', 'unit', '--project', 'e2e'];
console.log('\n== vitest ==');
const code = run(bin('vitest'), ['run', ...projects, '--reporter=default', '--reporter=json', `--outputFile.json=${report}`, ...extra]);

let passed = 0;
let failed = 0;
let skipped = 0;
try {
  const r = JSON.parse(readFileSync(report, 'utf8')) as {
    numPassedTests: number;
    numFailedTests: number;
    numPendingTests: number;
    numTodoTests: number;
    testResults: Array<{ status: string; assertionResults: unknown[] }>;
  };
  passed = r.numPassedTests;
  failed = r.numFailedTests;
  skipped = r.numPendingTests + r.numTodoTests;
  // A test file that failed to load (or a failing hook) has no assertion results: count it as a failure.
  failed += r.testResults.filter((f) => f.status === 'failed' && f.assertionResults.length === 0).length;
} catch {
  failed += 1;
  console.error('vitest produced no report');
}
if (code !== 0 && failed === 0) failed = 1;
failed += failedSteps;
console.log(`\n${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
