import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/**/*.test.ts'],
          environment: 'node',
          // vi.useFakeTimers() also fakes setTimeout from node:timers and node:timers/promises
          // (the cancellable sleeps in src/ use `setTimeout(ms, v, { signal })` from the latter).
          fakeTimers: { fakeNodeBuiltins: true },
        },
      },
      {
        test: {
          name: 'e2e',
          include: ['e2e/**/*.test.ts'],
          environment: 'node',
          globalSetup: ['e2e/harness/global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 180_000,
          // One control plane, real mounts and loop devices: run files one at a time.
          fileParallelism: false,
        },
      },
    ],
  },
});
