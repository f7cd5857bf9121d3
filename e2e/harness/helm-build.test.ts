// The helm CLI the chart tests use (e2e/harness/helm.ts): version pinned by e2e/helm/go.mod,
// cached per version, built with `go build` when missing.
import { execFileSync } from 'node:child_process';
import { access, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useTempDirs, writeExecutable } from './test-files.ts';
import { ensureHelmBinary, helmModuleDir, helmPathFor, helmVersion } from './helm.ts';

const tempDir = useTempDirs('lsp-helm-build-test-');

describe('helm CLI build and cache', () => {
  it('reads the pinned version from e2e/helm/go.mod, and refuses a go.mod without helm', async () => {
    expect(await helmVersion()).toBe('v3.22.0');
    const other = await tempDir();
    await writeFile(join(other, 'go.mod'), 'module example.test/x\n\ngo 1.26.0\n');
    await expect(helmVersion(other)).rejects.toThrow(/go\.mod does not require helm\.sh\/helm\/v3/);
  });

  it('reuses a cached binary of that version without touching go', async () => {
    const cache = await tempDir();
    const target = helmPathFor('v3.22.0', cache);
    expect(target).toBe(join(cache, 'helm', 'v3.22.0', 'helm'));
    await writeExecutable(target, '#!/bin/sh\n');
    const logs: string[] = [];
    expect(await ensureHelmBinary({ cacheDir: cache, goBinary: '/nonexistent/go', log: (m) => logs.push(m) })).toBe(target);
    expect(logs).toEqual([]);
  });

  it('with no cached binary and no go: one line saying Go is needed for helm', async () => {
    const cache = await tempDir();
    await expect(ensureHelmBinary({ cacheDir: cache, goBinary: '/nonexistent/go', log: () => undefined })).rejects.toThrow(
      /^Go 1\.26 or newer is needed to build helm for the chart tests/,
    );
    await expect(access(join(cache, 'helm'))).rejects.toThrow();
  });

  it('builds the pinned helm into <cache>/helm/<version>/helm, stamped with its version, no temp file left', async () => {
    const cache = await tempDir();
    const logs: string[] = [];
    const bin = await ensureHelmBinary({ cacheDir: cache, log: (m) => logs.push(m) });
    expect(bin).toBe(helmPathFor(await helmVersion(helmModuleDir), cache));
    expect(execFileSync(bin, ['version', '--short'], { encoding: 'utf8' })).toMatch(/^v3\.22\.0/);
    expect(logs.at(-1)).toMatch(/^helm: built in \d+\.\d s -> /);
    expect(await readdir(join(bin, '..'))).toEqual(['helm']);
  }, 900_000);
});
