import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cleanBlockDevice, cleanFilesystem } from '../../src/deleter/cleaner.ts';

const isRoot = process.getuid?.() === 0;
const canMount = isRoot && spawnSync('mount', ['--version']).status === 0;

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'lsp-cleaner-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

function populate(vol: string): void {
  mkdirSync(join(vol, 'a/b/c'), { recursive: true });
  writeFileSync(join(vol, 'a/b/c/f.txt'), 'data');
  writeFileSync(join(vol, '.hidden'), 'secret');
  mkdirSync(join(vol, '.dotdir'));
  writeFileSync(join(vol, '.dotdir/x'), 'x');
  writeFileSync(join(vol, 'top'), 'top');
}

describe('cleanFilesystem', () => {
  it('removes every entry, dotfiles included, and keeps the directory', async () => {
    const vol = join(dir, 'vol');
    mkdirSync(vol);
    populate(vol);
    const r = await cleanFilesystem(vol);
    expect(r.ok).toBe(true);
    expect(r.error).toBeUndefined();
    expect(r.removed).toBe(8);
    expect(existsSync(vol)).toBe(true);
    expect(readdirSync(vol)).toEqual([]);
  });

  it('removes symlinks without following them', async () => {
    const vol = join(dir, 'vol');
    const outside = join(dir, 'outside');
    mkdirSync(vol);
    mkdirSync(outside);
    writeFileSync(join(outside, 'keep'), 'keep');
    symlinkSync(outside, join(vol, 'link-to-dir'));
    symlinkSync(join(dir, 'nowhere'), join(vol, 'dangling'));
    const r = await cleanFilesystem(vol);
    expect(r.ok).toBe(true);
    expect(readdirSync(vol)).toEqual([]);
    expect(readdirSync(outside)).toEqual(['keep']);
  });

  it('fails with a clear error for a missing or non-directory path', async () => {
    const r1 = await cleanFilesystem(join(dir, 'missing'));
    expect(r1.ok).toBe(false);
    expect(r1.error).toMatch(/cannot stat .*missing/);
    writeFileSync(join(dir, 'file'), 'x');
    const r2 = await cleanFilesystem(join(dir, 'file'));
    expect(r2.ok).toBe(false);
    expect(r2.error).toMatch(/is not a directory/);
  });

  it('leaves entries named as mount points in place and fails', async () => {
    const vol = join(dir, 'vol');
    mkdirSync(join(vol, 'sub/bind'), { recursive: true });
    writeFileSync(join(vol, 'sub/bind/precious'), 'p');
    writeFileSync(join(vol, 'plain'), 'x');
    const r = await cleanFilesystem(vol, { mountPoints: new Set([join(vol, 'sub/bind')]) });
    expect(r.ok).toBe(false);
    expect(r.skipped).toEqual([join(vol, 'sub/bind')]);
    expect(r.error).toMatch(/1 entries are on another mount.*sub\/bind/);
    expect(existsSync(join(vol, 'sub/bind/precious'))).toBe(true);
    expect(existsSync(join(vol, 'plain'))).toBe(false);
  });

  it.skipIf(!canMount)('does not cross into a nested mount (tmpfs) and reports it', async () => {
    const vol = join(dir, 'vol');
    const nested = join(vol, 'deep/nested');
    mkdirSync(nested, { recursive: true });
    writeFileSync(join(vol, 'f'), 'x');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'lsp-test', nested]);
    try {
      writeFileSync(join(nested, 'other-fs-file'), 'must survive');
      // No mount table given: the st_dev comparison alone must stop it.
      const r = await cleanFilesystem(vol);
      expect(r.ok).toBe(false);
      expect(r.skipped).toEqual([nested]);
      expect(readdirSync(nested)).toEqual(['other-fs-file']);
      expect(existsSync(join(vol, 'f'))).toBe(false);
      expect(readdirSync(vol)).toEqual(['deep']);
    } finally {
      execFileSync('umount', [nested]);
    }
  });

  it('keeps the event loop responsive while removing a large tree', async () => {
    const vol = join(dir, 'vol');
    for (let i = 0; i < 20; i++) {
      mkdirSync(join(vol, `d${i}`), { recursive: true });
      for (let j = 0; j < 100; j++) writeFileSync(join(vol, `d${i}`, `f${j}`), 'x');
    }
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    const r = await cleanFilesystem(vol);
    clearInterval(timer);
    expect(r.ok).toBe(true);
    expect(r.removed).toBe(2020);
    expect(ticks).toBeGreaterThan(0);
  });

  it('stops when aborted', async () => {
    const vol = join(dir, 'vol');
    mkdirSync(vol);
    populate(vol);
    const ac = new AbortController();
    ac.abort();
    const r = await cleanFilesystem(vol, { signal: ac.signal });
    expect(r.ok).toBe(false);
    expect(r.error).toBe('cleanup aborted');
    expect(readdirSync(vol).length).toBeGreaterThan(0);
  });
});

describe('cleanBlockDevice', () => {
  it('runs the argv with LOCAL_PV_BLKDEVICE and no shell interpolation', async () => {
    const evil = `${dir}/$(touch ${dir}/pwned)`;
    const lines: string[] = [];
    const r = await cleanBlockDevice({
      command: ['bash', '-c', 'echo "dev=$LOCAL_PV_BLKDEVICE"; echo warn >&2'],
      devicePath: evil,
      onLine: (s, l) => lines.push(`${s}:${l}`),
    });
    expect(r.ok).toBe(true);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toEqual([`dev=${evil}`]);
    expect(r.stderr).toEqual(['warn']);
    expect(lines).toContain(`stdout:dev=${evil}`);
    expect(existsSync(join(dir, 'pwned'))).toBe(false);
  });

  it('reports a non-zero exit with the last output line', async () => {
    const r = await cleanBlockDevice({ command: ['bash', '-c', 'echo "no device" >&2; exit 10'], devicePath: '/dev/null' });
    expect(r.ok).toBe(false);
    expect(r.exitCode).toBe(10);
    expect(r.error).toBe('block cleaner command "bash" exited with code 10: no device');
  });

  it('reports a command that does not exist or is not executable', async () => {
    const r = await cleanBlockDevice({ command: [join(dir, 'no-such-cleaner.sh')], devicePath: '/dev/null' });
    expect(r.ok).toBe(false);
    expect(r.error).toMatch(/no-such-cleaner\.sh" was not found/);
    writeFileSync(join(dir, 'noexec.sh'), '#!/bin/sh\n');
    const r2 = await cleanBlockDevice({ command: [join(dir, 'noexec.sh')], devicePath: '/dev/null' });
    expect(r2.ok).toBe(false);
    expect(r2.error).toMatch(/is not executable/);
    const r3 = await cleanBlockDevice({ command: [], devicePath: '/dev/null' });
    expect(r3.error).toMatch(/empty/);
  });

  it('keeps only the last lines of a verbose command', async () => {
    const r = await cleanBlockDevice({ command: ['bash', '-c', 'for i in $(seq 1 500); do echo line$i; done'], devicePath: '/dev/null', maxLines: 5 });
    expect(r.ok).toBe(true);
    expect(r.stdout).toEqual(['line496', 'line497', 'line498', 'line499', 'line500']);
  });

  it('kills the whole process group on timeout, even children ignoring SIGTERM', async () => {
    const marker = `lsp-test-hang-${process.pid}-${Date.now()}`;
    const script = `trap "" TERM; (trap "" TERM; exec -a ${marker} sleep 1000) & (exec -a ${marker} sleep 1000) & wait`;
    const t0 = Date.now();
    const r = await cleanBlockDevice({ command: ['bash', '-c', script, marker], devicePath: '/dev/null', timeoutMs: 300, forceKillAfterMs: 300 });
    expect(r.ok).toBe(false);
    expect(r.timedOut).toBe(true);
    expect(r.error).toMatch(/timed out after 300 ms/);
    expect(Date.now() - t0).toBeLessThan(5000);
    const left = spawnSync('pgrep', ['-f', marker], { encoding: 'utf8' });
    expect(left.stdout.trim()).toBe('');
    expect(left.status).toBe(1);
  });

  it('kills the group when cancelled', async () => {
    const marker = `lsp-test-cancel-${process.pid}-${Date.now()}`;
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 200);
    const r = await cleanBlockDevice({ command: ['bash', '-c', `(exec -a ${marker} sleep 1000) & wait`, marker], devicePath: '/dev/null', signal: ac.signal });
    expect(r.ok).toBe(false);
    expect(r.error).toMatch(/cancelled/);
    expect(spawnSync('pgrep', ['-f', marker]).status).toBe(1);
  });
});
