// Real host fixtures for e2e tests: tmpfs mounts, loop devices, symlinks, all
// under one temp root. cleanup() undoes exactly what this object created
// (unmount, losetup -d, rm -rf), also after a failed test. The root is made on
// first use, not by the constructor: a describe body runs (to collect its tests)
// even when `-t` filters all of them out, and then its hooks, which clean up, do not.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const sh = (cmd: string, args: string[]): string => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();

export class HostFixtures {
  readonly #prefix: string;
  #root: string | undefined;
  readonly #mounts: string[] = [];
  readonly #loops: string[] = [];

  constructor(prefix = 'lsp-e2e-') {
    this.#prefix = prefix;
  }

  /** The temp root (made by the first call: call it from a hook or a test, not from a describe body). */
  get root(): string {
    return (this.#root ??= mkdtempSync(join(tmpdir(), this.#prefix)));
  }

  path(...parts: string[]): string {
    return join(this.root, ...parts);
  }

  mkdir(...parts: string[]): string {
    const p = this.path(...parts);
    mkdirSync(p, { recursive: true });
    return p;
  }

  /** Mounts a fresh tmpfs of `sizeMiB` at root/<parts> (created if needed). */
  tmpfs(sizeMiB: number, ...parts: string[]): string {
    const p = this.mkdir(...parts);
    sh('mount', ['-t', 'tmpfs', '-o', `size=${sizeMiB}m`, 'lsp-e2e', p]);
    this.#mounts.push(p);
    return p;
  }

  /** Creates a loop device backed by a sparse file of `sizeMiB`; returns the /dev/loopN path. */
  loopDevice(sizeMiB: number, name = `disk-${this.#loops.length}`): string {
    const file = this.path(`${name}.img`);
    sh('truncate', ['-s', `${sizeMiB}M`, file]);
    const dev = sh('losetup', ['--find', '--show', file]);
    this.#loops.push(dev);
    return dev;
  }

  /** Mounts block device `device` (its filesystem) at root/<parts> (created if needed); unmounted by cleanup(). */
  mountDevice(device: string, ...parts: string[]): string {
    const p = this.mkdir(...parts);
    sh('mount', [device, p]);
    this.#mounts.push(p);
    return p;
  }

  symlink(target: string, ...parts: string[]): string {
    const p = this.path(...parts);
    symlinkSync(target, p);
    return p;
  }

  unmount(p: string): void {
    sh('umount', [p]);
    const i = this.#mounts.indexOf(p);
    if (i >= 0) this.#mounts.splice(i, 1);
  }

  cleanup(): void {
    for (const m of this.#mounts.reverse()) {
      try {
        sh('umount', [m]);
      } catch {
        try {
          sh('umount', ['-l', m]);
        } catch {
          /* already gone */
        }
      }
    }
    this.#mounts.length = 0;
    for (const d of this.#loops) {
      try {
        sh('losetup', ['-d', d]);
      } catch {
        /* already detached */
      }
    }
    this.#loops.length = 0;
    if (this.#root !== undefined) rmSync(this.#root, { recursive: true, force: true });
    this.#root = undefined;
  }
}

export const isRoot = (): boolean => process.getuid?.() === 0;
