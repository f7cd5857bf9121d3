// buildah (Debian's package) with a storage of its own: vfs driver, chroot isolation, root and runroot
// under the given directory, so nothing lands in /var/lib/containers or /run/containers. Used to build
// the images the e2e tests run (image-base.ts, image.ts) and by image.test.ts to look inside them.
import { spawn } from 'node:child_process';
import { join } from 'node:path';

/** A buildah storage: `--root <dir>/root --runroot <dir>/runroot --storage-driver vfs`. */
export class Buildah {
  readonly dir: string;
  readonly binary: string;

  constructor(dir: string, binary = 'buildah') {
    this.dir = dir;
    this.binary = binary;
  }

  /** The global options that keep buildah in this storage. */
  get globalArgs(): string[] {
    return ['--root', join(this.dir, 'root'), '--runroot', join(this.dir, 'runroot'), '--storage-driver', 'vfs'];
  }

  /** Runs `buildah <args>`; resolves with stdout; each output line (stdout and stderr) goes to onLine. Throws with the output's tail. */
  run(args: readonly string[], onLine?: (line: string) => void): Promise<string> {
    return runTool(this.binary, [...this.globalArgs, ...args], { onLine, env: { BUILDAH_ISOLATION: 'chroot' } });
  }

  /** True when `ref` names an image in this storage. */
  async hasImage(ref: string): Promise<boolean> {
    try {
      await this.run(['inspect', '--type', 'image', '--format', '{{.FromImageID}}', ref]);
      return true;
    } catch {
      return false;
    }
  }

  /** The OCI config of image `ref` (Entrypoint, Cmd, Env, Labels, ...). */
  async imageConfig(ref: string): Promise<OciImageConfig> {
    const out = await this.run(['inspect', '--type', 'image', ref]);
    return (JSON.parse(out) as { OCIv1: { config?: OciImageConfig } }).OCIv1.config ?? {};
  }
}

export interface OciImageConfig {
  readonly Entrypoint?: string[] | null;
  readonly Cmd?: string[] | null;
  readonly Env?: string[] | null;
  readonly WorkingDir?: string;
  readonly Labels?: Record<string, string> | null;
}

export interface RunToolOptions {
  /** Each line of stdout and stderr. */
  readonly onLine?: ((line: string) => void) | undefined;
  readonly cwd?: string | undefined;
  /** Added to this process's environment. */
  readonly env?: Record<string, string> | undefined;
}

/** Runs a command; resolves with its stdout; rejects with one line naming it plus the last 40 lines of output. */
export function runTool(cmd: string, args: readonly string[], opts: RunToolOptions = {}): Promise<string> {
  return new Promise((res, rej) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: { ...process.env, ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const tail: string[] = [];
    const stdout: Buffer[] = [];
    const splitter = (): ((chunk: Buffer) => void) => {
      let partial = '';
      return (chunk) => {
        const lines = (partial + chunk.toString('utf8')).split('\n');
        partial = lines.pop() ?? '';
        for (const line of lines) {
          tail.push(line);
          opts.onLine?.(line);
        }
        if (tail.length > 40) tail.splice(0, tail.length - 40);
      };
    };
    const onErr = splitter();
    const onOut = splitter();
    child.stdout.on('data', (c: Buffer) => {
      stdout.push(c);
      onOut(c);
    });
    child.stderr.on('data', onErr);
    child.on('error', (err: NodeJS.ErrnoException) =>
      rej(new Error(err.code === 'ENOENT' ? `${cmd} was not found on PATH (apt-get install ${cmd})` : `${cmd} could not run: ${err.message}`)),
    );
    child.on('close', (code, signal) => {
      // Decoded once at the end: a chunk boundary may fall inside a multi-byte character.
      if (code === 0) return res(Buffer.concat(stdout).toString('utf8'));
      const how = signal ? `was killed by ${signal}` : `exited with code ${String(code)}`;
      rej(new Error(`${cmd} ${args.join(' ')} ${how}:\n${tail.join('\n')}`));
    });
  });
}
