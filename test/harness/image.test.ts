// The cache key, progress and archive pruning of the image build (e2e/harness/image.ts), on temp dirs:
// no buildah is run here (e2e/image.test.ts builds the real image).
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { archivePathFor, IMAGE_INPUTS, imageInputsHash, imageRefFor, imagesToPrune, pruneArchives, ReusableSteps, StepProgress, stepImageId, withLock } from '../../e2e/harness/image.ts';

const dirs: string[] = [];
const tempDir = async (): Promise<string> => {
  const d = await mkdtemp(join(tmpdir(), 'lsp-image-unit-'));
  dirs.push(d);
  return d;
};
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

/** A repo with one file per image input (and one that is not an input). */
async function fakeRepo(): Promise<string> {
  const repo = await tempDir();
  await writeFile(join(repo, 'Dockerfile'), 'FROM node:24-bookworm-slim\n');
  await writeFile(join(repo, 'package.json'), '{"version":"1.0.0"}');
  await writeFile(join(repo, 'package-lock.json'), '{}');
  await writeFile(join(repo, 'tsconfig.json'), '{}');
  await writeFile(join(repo, 'tsconfig.build.json'), '{}');
  await mkdir(join(repo, 'src', 'deleter'), { recursive: true });
  await writeFile(join(repo, 'src', 'main.ts'), 'export {};\n');
  await writeFile(join(repo, 'src', 'deleter', 'job.ts'), 'export {};\n');
  await mkdir(join(repo, 'deployment', 'scripts'), { recursive: true });
  await writeFile(join(repo, 'deployment', 'scripts', 'fsclean.sh'), '#!/bin/bash\n');
  await writeFile(join(repo, 'README.md'), 'not an input\n');
  return repo;
}

describe('image inputs hash', () => {
  it('changes with the content, the name and the executable bit of an input, and with the base image', async () => {
    const repo = await fakeRepo();
    const h0 = await imageInputsHash(repo, 'base1');
    expect(h0).toMatch(/^[0-9a-f]{32}$/);
    expect(await imageInputsHash(repo, 'base1')).toBe(h0);
    expect(await imageInputsHash(repo, 'base2')).not.toBe(h0);

    await writeFile(join(repo, 'src', 'deleter', 'job.ts'), 'export const x = 1;\n');
    const h1 = await imageInputsHash(repo, 'base1');
    expect(h1).not.toBe(h0);
    await chmod(join(repo, 'deployment', 'scripts', 'fsclean.sh'), 0o755);
    const h2 = await imageInputsHash(repo, 'base1');
    expect(h2).not.toBe(h1);
    await writeFile(join(repo, 'deployment', 'scripts', 'shred.sh'), '');
    const h3 = await imageInputsHash(repo, 'base1');
    expect(h3).not.toBe(h2);
    await writeFile(join(repo, '.dockerignore'), '*\n');
    expect(await imageInputsHash(repo, 'base1')).not.toBe(h3);
  });

  it('ignores files the Dockerfile does not copy', async () => {
    const repo = await fakeRepo();
    const h0 = await imageInputsHash(repo, 'b');
    await writeFile(join(repo, 'README.md'), 'changed\n');
    await mkdir(join(repo, 'e2e'));
    await writeFile(join(repo, 'e2e', 'x.test.ts'), '');
    expect(await imageInputsHash(repo, 'b')).toBe(h0);
    expect(IMAGE_INPUTS).toEqual(expect.arrayContaining(['Dockerfile', 'package-lock.json', 'src', 'deployment/scripts']));
  });

  it('names the archive and the reference after the hash', () => {
    const h = '0123456789abcdef0123456789abcdef';
    expect(imageRefFor(h)).toBe('docker.io/library/local-static-provisioner:0123456789ab');
    expect(archivePathFor(h, '/c')).toBe(`/c/images/provisioner/${h}/provisioner.oci.tar`);
  });
});

describe('image build progress', () => {
  it('shows the STEP line buildah is on and the time spent', () => {
    const p = new StepProgress('image', 0);
    expect(p.format(5_000)).toBe('image: starting, 5s elapsed');
    expect(p.line('Getting image source signatures')).toBe(false);
    expect(p.line('[2/3] STEP 7/7: RUN npx tsc -p tsconfig.build.json')).toBe(true);
    expect(p.format(125_000)).toBe('image: [2/3] STEP 7/7: RUN npx tsc -p tsconfig.build.json, 2m05s elapsed');
    expect(p.line(`STEP 2/4: RUN ${'x'.repeat(200)}`)).toBe(true);
    expect(p.format(0)).toMatch(/^image: STEP 2\/4: RUN x+\.\.\., 0s elapsed$/);
    expect(p.format(0).length).toBeLessThan(120);
  });
});

describe('pruning the buildah storage', () => {
  it('reads the step image ids of buildah bud --layers output, new and cached', () => {
    expect(stepImageId('--> 6b6b3d93781')).toBe('6b6b3d93781');
    expect(stepImageId('--> Using cache 8d7185d90c7a1f0e2d5b2c3a4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071')).toBe(
      '8d7185d90c7a1f0e2d5b2c3a4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071',
    );
    expect(stepImageId('[3/3] STEP 9/9: ENTRYPOINT ["/usr/bin/tini"]')).toBeUndefined();
    expect(stepImageId('Successfully tagged docker.io/library/x:1')).toBeUndefined();
  });

  it('keeps the steps a later build can reuse: in each stage, those before copying src or another stage', () => {
    const steps = new ReusableSteps();
    const output = [
      '[1/2] STEP 1/5: FROM node:24-bookworm-slim AS build',
      '[1/2] STEP 2/5: WORKDIR /app',
      '--> Using cache aaaa00000001',
      '[1/2] STEP 3/5: RUN npm ci',
      '--> aaaa00000002',
      '[1/2] STEP 4/5: COPY src ./src',
      '--> aaaa00000003',
      '[1/2] STEP 5/5: RUN node scripts/bundle.ts',
      '--> aaaa00000004',
      '[2/2] STEP 1/4: FROM node:24-bookworm-slim',
      '[2/2] STEP 2/4: RUN apt-get install -y tini',
      '--> Using cache bbbb00000001',
      '[2/2] STEP 3/4: COPY --from=build /app/dist ./dist',
      '--> bbbb00000002',
      '[2/2] STEP 4/4: ENTRYPOINT ["/usr/bin/tini"]',
      '[2/2] COMMIT docker.io/library/x:1',
      '--> bbbb00000003',
    ];
    for (const l of output) steps.line(l);
    expect([...steps.ids]).toEqual(['aaaa00000001', 'aaaa00000002', 'bbbb00000001']);
  });

  it('keeps the named images and the last build\'s steps, drops the rest (buildah pads the columns)', () => {
    const listing = [
      'sha256:aaaa000000000000000000000000000000000000000000000000000000000001   docker.io/library/local-static-provisioner:new',
      'sha256:bbbb000000000000000000000000000000000000000000000000000000000002   <none>:<none>',
      'sha256:cccc000000000000000000000000000000000000000000000000000000000003   <none>:<none>',
      'sha256:dddd000000000000000000000000000000000000000000000000000000000004   docker.io/library/local-static-provisioner:old',
      'sha256:eeee000000000000000000000000000000000000000000000000000000000005   localhost/lsp-node-base:h1',
      'sha256:eeee000000000000000000000000000000000000000000000000000000000005   docker.io/library/node:24-bookworm-slim',
      'sha256:ffff000000000000000000000000000000000000000000000000000000000006   localhost/lsp-node-base:h0',
      '',
    ].join('\n');
    const keep = new Set(['docker.io/library/local-static-provisioner:new', 'localhost/lsp-node-base:h1', 'docker.io/library/node:24-bookworm-slim']);
    expect(imagesToPrune(listing, keep, new Set(['bbbb0000000']))).toEqual([
      'cccc000000000000000000000000000000000000000000000000000000000003',
      'dddd000000000000000000000000000000000000000000000000000000000004',
      'ffff000000000000000000000000000000000000000000000000000000000006',
    ]);
  });
});

describe('pruneArchives', () => {
  it('keeps the newest archive directories and removes the others', async () => {
    const dir = await tempDir();
    for (const [i, name] of ['a', 'b', 'c', 'd'].entries()) {
      await mkdir(join(dir, name));
      await writeFile(join(dir, name, 'provisioner.oci.tar'), '');
      const t = new Date(Date.UTC(2026, 0, 1 + i));
      await utimes(join(dir, name), t, t);
    }
    const logs: string[] = [];
    await pruneArchives(dir, 2, (m) => logs.push(m));
    expect((await readdir(dir)).sort()).toEqual(['c', 'd']);
    expect(logs).toEqual([]);
  });

  it('logs, and does not throw, when the directory cannot be read', async () => {
    const logs: string[] = [];
    await pruneArchives('/nonexistent/lsp-images', 3, (m) => logs.push(m));
    expect(logs[0]).toMatch(/^image: could not prune old archives in \/nonexistent\/lsp-images: /);
  });
});

describe('the build lock', () => {
  it('runs the build holding a lock with its pid, and removes the lock afterwards, also on failure', async () => {
    const dir = await tempDir();
    const seen = await withLock(dir, () => undefined, async () => readFile(join(dir, 'lock', 'pid'), 'utf8'));
    expect(seen).toBe(String(process.pid));
    await expect(withLock(dir, () => undefined, () => Promise.reject(new Error('build failed')))).rejects.toThrow('build failed');
    expect(await readdir(dir)).toEqual([]);
  });

  it('takes over a lock whose owner is dead (a killed build)', async () => {
    const dir = await tempDir();
    const dead = spawnSync('true').pid ?? 0; // exited and reaped: no such process
    await mkdir(join(dir, 'lock'));
    await writeFile(join(dir, 'lock', 'pid'), String(dead));
    const logs: string[] = [];
    expect(await withLock(dir, (m) => logs.push(m), () => Promise.resolve('built'))).toBe('built');
    expect(logs).toEqual([]);
  });

  it('waits while a live owner holds it, then runs', async () => {
    const dir = await tempDir();
    await mkdir(join(dir, 'lock'));
    await writeFile(join(dir, 'lock', 'pid'), '1'); // init: alive
    const logs: string[] = [];
    let ran = false;
    const done = withLock(
      dir,
      (m) => {
        logs.push(m);
        // The owner finishes once we are seen waiting.
        void rm(join(dir, 'lock'), { recursive: true, force: true });
      },
      () => {
        ran = true;
        return Promise.resolve();
      },
    );
    await done;
    expect(ran).toBe(true);
    expect(logs).toEqual([`image: waiting for another build (${join(dir, 'lock')}, pid 1)`]);
  });
});
