// Tests of the harness's own logic: Go detection, the source stamp and binary cache, the build
// itself (on a tiny Go module), the node agent's pod matching and status, waitFor.
import { access, copyFile, readdir, writeFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import type { CoreV1Api, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { useTempDirs, writeExecutable } from './test-files.ts';
import {
  binaryPathFor,
  buildLdflags,
  checkGo,
  controlPlaneSourceDir,
  ensureControlPlaneBinary,
  parseGoVersion,
  sourceStamp,
} from './build.ts';
import { freePort, tailFile } from './controlplane.ts';
import { waitFor } from './kube.ts';
import { claimWriter, podTargetsNode, readyNodeStatus, terminatedStatus } from './node-agent.ts';

const tempDir = useTempDirs('lsp-harness-test-');

function fakeGo(dir: string, versionLine: string): Promise<string> {
  return writeExecutable(join(dir, 'go'), `#!/bin/sh\necho "${versionLine}"\n`);
}

describe('Go toolchain check', () => {
  it('parses go version strings', () => {
    expect(parseGoVersion('go version go1.26.8 linux/amd64')).toEqual({ major: 1, minor: 26 });
    expect(parseGoVersion('go version go1.27rc1 linux/amd64')).toEqual({ major: 1, minor: 27 });
    expect(parseGoVersion('go version devel go1.28-abcdef')).toEqual({ major: 1, minor: 28 });
    expect(parseGoVersion('command not found')).toBeUndefined();
  });

  it('rejects a missing go with one line saying what is needed', async () => {
    const err = await checkGo('/nonexistent/bin/go').then(() => undefined, (e: unknown) => e as Error);
    expect(err?.message).toBe(
      'Go 1.26 or newer is needed to build the e2e control plane (e2e/controlplane); `/nonexistent/bin/go` was not found',
    );
    expect(err?.message).not.toContain('\n');
  });

  it('rejects Go 1.19 (Debian golang-go) and accepts 1.26 and 2.0', async () => {
    const d = await tempDir();
    const old = await fakeGo(d, 'go version go1.19.8 linux/amd64');
    await expect(checkGo(old)).rejects.toThrow(/^Go 1\.26 or newer is needed .*; found go1\.19 \(go version go1\.19\.8 linux\/amd64\)$/);
    const d2 = await tempDir();
    await expect(checkGo(await fakeGo(d2, 'go version go1.26.0 linux/amd64'))).resolves.toContain('go1.26.0');
    const d3 = await tempDir();
    await expect(checkGo(await fakeGo(d3, 'go version go2.0 linux/amd64'))).resolves.toContain('go2.0');
  });
});

describe('source stamp and binary cache', () => {
  it('hashes go.mod, go.sum and *.go only, and changes when one of them changes', async () => {
    const d = await tempDir();
    for (const f of ['go.mod', 'go.sum', 'main.go']) await copyFile(join(controlPlaneSourceDir, f), join(d, f));
    const a = await sourceStamp(d);
    expect(a).toBe(await sourceStamp(controlPlaneSourceDir));
    expect(a).toMatch(/^[0-9a-f]{32}$/);
    await writeFile(join(d, 'README.md'), 'not part of the build');
    expect(await sourceStamp(d)).toBe(a);
    await writeFile(join(d, 'extra.go'), 'package main\n');
    const b = await sourceStamp(d);
    expect(b).not.toBe(a);
    await writeFile(join(d, 'extra.go'), 'package main // changed\n');
    expect(await sourceStamp(d)).not.toBe(b);
  });

  it('refuses a directory without go.mod', async () => {
    await expect(sourceStamp(await tempDir())).rejects.toThrow(/no go\.mod in /);
  });

  it('reuses a cached binary without touching go', async () => {
    const cache = await tempDir();
    const target = binaryPathFor(await sourceStamp(), cache);
    await writeExecutable(target, '#!/bin/sh\n');
    const logs: string[] = [];
    const got = await ensureControlPlaneBinary({ cacheDir: cache, goBinary: '/nonexistent/go', log: (m) => logs.push(m) });
    expect(got).toBe(target);
    expect(logs).toEqual([]);
  });

  it('with no cached binary and no go: the one-line toolchain error', async () => {
    const cache = await tempDir();
    await expect(ensureControlPlaneBinary({ cacheDir: cache, goBinary: '/nonexistent/go', log: () => undefined })).rejects.toThrow(
      /^Go 1\.26 or newer is needed/,
    );
    await expect(access(join(cache, 'testplane'))).rejects.toThrow(); // nothing created
  });

  it('builds a Go module into the stamp dir atomically, prints the time, then reuses it', async () => {
    const src = await tempDir();
    await writeFile(join(src, 'go.mod'), 'module example.test/hello\n\ngo 1.26.0\n');
    await writeFile(join(src, 'main.go'), 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello from testplane") }\n');
    const cache = await tempDir();
    const logs: string[] = [];
    const bin = await ensureControlPlaneBinary({ sourceDir: src, cacheDir: cache, log: (m) => logs.push(m) });
    expect(bin).toBe(binaryPathFor(await sourceStamp(src), cache));
    expect(execFileSync(bin, { encoding: 'utf8' })).toBe('hello from testplane\n');
    expect(logs.at(-1)).toMatch(/^control plane: built in \d+\.\d s -> /);
    expect(await readdir(join(bin, '..'))).toEqual(['testplane']); // no temp file left
    const again: string[] = [];
    expect(await ensureControlPlaneBinary({ sourceDir: src, cacheDir: cache, log: (m) => again.push(m) })).toBe(bin);
    expect(again).toEqual([]);
  }, 120_000);

  it('a failing build reports the compiler output and leaves no partial binary', async () => {
    const src = await tempDir();
    await writeFile(join(src, 'go.mod'), 'module example.test/broken\n\ngo 1.26.0\n');
    await writeFile(join(src, 'main.go'), 'package main\n\nfunc main() { undefinedThing() }\n');
    const cache = await tempDir();
    const err = await ensureControlPlaneBinary({ sourceDir: src, cacheDir: cache, log: () => undefined }).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/go build of the control plane .* exited with code 1/);
    expect(err?.message).toContain('undefined: undefinedThing');
    const bin = binaryPathFor(await sourceStamp(src), cache);
    expect(await readdir(join(bin, '..'))).toEqual([]);
    await expect(access(bin)).rejects.toThrow();
  }, 120_000);

  it('stamps the Kubernetes version into the binary', () => {
    expect(buildLdflags('v1.36.3')).toContain('-X k8s.io/component-base/version.gitVersion=v1.36.3');
    expect(buildLdflags('v1.36.3')).toContain('version.gitMinor=36');
    expect(buildLdflags('v1.36.3')).toMatch(/^-s -w /);
  });
});

describe('control plane helpers', () => {
  it('freePort gives distinct usable loopback ports', async () => {
    const ports = await Promise.all([freePort(), freePort(), freePort()]);
    for (const p of ports) expect(p).toBeGreaterThan(1023);
    expect(new Set(ports).size).toBe(3);
  });

  it('tailFile returns the last lines, and nothing for a missing file', async () => {
    const d = await tempDir();
    const f = join(d, 'x.log');
    await writeFile(f, Array.from({ length: 50 }, (_, i) => `line ${i}`).join('\n') + '\n');
    expect((await tailFile(f, 3)).split('\n')).toEqual(['line 47', 'line 48', 'line 49']);
    expect(await tailFile(join(d, 'missing.log'))).toBe('');
  });
});

describe('node agent pieces', () => {
  const pod = (spec: Partial<NonNullable<V1Pod['spec']>>): V1Pod => ({
    metadata: { name: 'p', namespace: 'ns', uid: 'u' },
    spec: { containers: [{ name: 'c', image: 'img' }], ...spec },
  });

  it('matches pods by spec.nodeName, else by the hostname nodeSelector', () => {
    expect(podTargetsNode(pod({ nodeName: 'n1' }), 'n1')).toBe(true);
    expect(podTargetsNode(pod({ nodeName: 'n2', nodeSelector: { 'kubernetes.io/hostname': 'n1' } }), 'n1')).toBe(false);
    expect(podTargetsNode(pod({ nodeSelector: { 'kubernetes.io/hostname': 'n1' } }), 'n1')).toBe(true);
    expect(podTargetsNode(pod({ nodeSelector: { 'kubernetes.io/hostname': 'n2' } }), 'n1')).toBe(false);
    expect(podTargetsNode(pod({}), 'n1')).toBe(false);
  });

  it('builds a terminated status for every container', () => {
    const start = new Date('2026-01-01T00:00:00Z');
    const end = new Date('2026-01-01T00:00:05Z');
    const two = pod({ containers: [{ name: 'a', image: 'i1' }, { name: 'b', image: 'i2' }] });
    const ok = terminatedStatus(two, { exitCode: 0 }, start, end) as { status: Record<string, unknown> };
    expect(ok.status['phase']).toBe('Succeeded');
    expect(ok.status['containerStatuses']).toMatchObject([
      { name: 'a', image: 'i1', state: { terminated: { exitCode: 0, reason: 'Completed', finishedAt: end.toISOString() } } },
      { name: 'b', image: 'i2', state: { terminated: { exitCode: 0, reason: 'Completed' } } },
    ]);
    const bad = terminatedStatus(two, { exitCode: 2, message: 'boom' }, start, end) as { status: Record<string, unknown> };
    expect(bad.status['phase']).toBe('Failed');
    expect(bad.status['containerStatuses']).toMatchObject([{ state: { terminated: { exitCode: 2, reason: 'Error', message: 'boom' } } }, {}]);
  });

  it('reports a node Ready, without pressure, with allocatable = capacity (what the scheduler filters on)', () => {
    const now = new Date('2026-01-01T00:00:00Z');
    const { status } = readyNodeStatus(now) as { status: { capacity: object; allocatable: object; conditions: Array<{ type: string; status: string }> } };
    expect(status.allocatable).toEqual(status.capacity);
    expect(status.allocatable).toMatchObject({ pods: '110', cpu: '4', memory: '8Gi' });
    expect(Object.fromEntries(status.conditions.map((c) => [c.type, c.status]))).toEqual({
      Ready: 'True',
      MemoryPressure: 'False',
      DiskPressure: 'False',
      PIDPressure: 'False',
    });
  });

  it('claimWriter fails a pod without a PersistentVolumeClaim volume, naming it', async () => {
    const run = claimWriter({} as CoreV1Api); // no API call is made for such a pod
    await expect(run(pod({}))).rejects.toThrow('pod ns/p has no PersistentVolumeClaim volume');
  });
});

describe('waitFor', () => {
  it('returns the first truthy value', async () => {
    let n = 0;
    await expect(waitFor(() => (++n >= 3 ? `done after ${n}` : undefined), { what: 'three polls', intervalMs: 1 })).resolves.toBe(
      'done after 3',
    );
  });

  it('times out with what was awaited and the last error', async () => {
    await expect(
      waitFor(
        () => {
          throw new Error('not yet: HTTP 404');
        },
        { what: 'PVC x to be Bound', timeoutMs: 100, intervalMs: 10 },
      ),
    ).rejects.toThrow(/^timed out after 0\.1 s \(\d+ polls\) waiting for PVC x to be Bound; last error: not yet: HTTP 404$/);
  });
});
