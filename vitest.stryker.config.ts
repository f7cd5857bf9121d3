// The vitest config StrykerJS runs (stryker.config.mjs, `npm run test:mutation`):
// the 'unit' project of vitest.config.ts only, as a single project, limited to
// the tests of the mutated code. The e2e project (real control plane, mounts,
// loop devices) is never started by a mutation run.
import { defineConfig, type TestProjectInlineConfiguration } from 'vitest/config';
import base from './vitest.config.ts';

const isInline = (p: unknown): p is TestProjectInlineConfiguration => typeof p === 'object' && p !== null && 'test' in p;
const unit = (base.test?.projects ?? []).filter(isInline).find((p) => p.test?.name === 'unit');
if (!unit?.test) throw new Error("vitest.config.ts has no inline project named 'unit'");

export default defineConfig({
  test: {
    ...unit.test,
    name: 'unit',
    // Instrumented code on a shared 2-core machine is slower than a plain run.
    testTimeout: 30_000,
    include: ['test/{deleter,identity,volume,host,config,discovery}/**/*.test.ts'],
  },
});
