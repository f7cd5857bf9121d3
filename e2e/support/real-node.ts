// The shipped kustomize base on a real node (e2e/harness/node.ts), shared by e2e/real-node.test.ts and
// `npm run demo -- --real-node`: why this host cannot do it, the /mnt/disks discovery root made for
// the run, and the e2e overlay (hostNetwork and the apiserver's address for the loopback-only
// control plane, the image name, the daemon's state dir on the host in the overlay's temp dir)
// built with kustomize and applied. The vitest set-up and teardown around it: support/with-real-node.ts.
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import type { ProvisionerImage } from '../harness/image.ts';
import { kustomizeBuild } from '../harness/kustomize.ts';
import { applyObjects, deploymentDir, manifestObjects } from '../harness/manifests.ts';
import { nodeUnsupportedReason, onPath, type RealNode } from '../harness/node.ts';
import { ensureBusyboxImage, hostBusybox } from '../harness/oci.ts';
import { parse as parseYaml } from 'yaml';

/** The base's discovery root (its ConfigMap's fast-disks class lives under it). */
export const discoveryRoot = '/mnt/disks';
/** The DaemonSet of the kustomize base. */
export const baseDaemonSet = 'local-volume-provisioner';

/** Why the shipped DaemonSet cannot run on a real node here (undefined: it can). */
export function realNodeUnsupportedReason(): string | undefined {
  const imageTools = ['buildah', 'mmdebstrap'].filter((t) => !onPath(t));
  return (
    nodeUnsupportedReason() ??
    (imageTools.length > 0 ? `the product image needs ${imageTools.join(', ')} (Debian packages)` : undefined) ??
    (existsSync(hostBusybox) ? undefined : `the examples' image (busybox) needs ${hostBusybox} (Debian: apt-get install busybox-static)`) ??
    (existsSync(discoveryRoot) ? `${discoveryRoot} exists on this host (the base DaemonSet discovers there): not touching it` : undefined)
  );
}

const sh = (cmd: string, args: readonly string[]): string => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

/**
 * /mnt/disks, the base's discovery root, made for this run: a self bind mount made rshared (a
 * hostPath with HostToContainer propagation needs a shared source), tmpfs volumes under it.
 * cleanup() unmounts everything under it and removes what it created (/mnt too if it was absent).
 */
export class DiscoveryRoot {
  readonly root = discoveryRoot;
  readonly #createdTop: string;
  readonly #loops: string[] = [];
  readonly #backing = mkdtempSync(join(tmpdir(), 'lsp-real-node-disks-'));
  constructor() {
    if (existsSync(this.root)) throw new Error(`${this.root} exists on this host: not touching it`);
    this.#createdTop = existsSync('/mnt') ? this.root : '/mnt';
    mkdirSync(this.root, { recursive: true });
    sh('mount', ['--bind', this.root, this.root]);
    sh('mount', ['--make-rshared', this.root]);
  }
  volume(cls: string, name: string): string {
    const p = join(this.root, cls, name);
    mkdirSync(p, { recursive: true });
    sh('mount', ['-t', 'tmpfs', '-o', 'size=16m', 'lsp-e2e', p]);
    return p;
  }
  /** A loop device of `sizeMiB` (sparse file in a temp dir) linked as root/<cls>/<name>, the way disks are set up. */
  blockDevice(cls: string, name: string, sizeMiB: number): string {
    const file = join(this.#backing, `${name}.img`);
    sh('truncate', ['-s', `${sizeMiB}M`, file]);
    const dev = sh('losetup', ['--find', '--show', file]).trim();
    this.#loops.push(dev);
    mkdirSync(join(this.root, cls), { recursive: true });
    symlinkSync(dev, join(this.root, cls, name));
    return dev;
  }
  /** A blank loop device of `sizeMiB` (sparse file in a temp dir), linked nowhere; detached by cleanup(). */
  bareDevice(name: string, sizeMiB: number): string {
    const file = join(this.#backing, `${name}.img`);
    sh('truncate', ['-s', `${sizeMiB}M`, file]);
    const dev = sh('losetup', ['--find', '--show', file]).trim();
    this.#loops.push(dev);
    return dev;
  }
  /** A tmpfs at root/<cls> itself, as one disk under the class's volumes (made after it with volume()); resolves with its path. */
  classDisk(cls: string): string {
    const p = join(this.root, cls);
    mkdirSync(p, { recursive: true });
    sh('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'lsp-e2e', p]);
    return p;
  }
  /** An ext4 filesystem on a loop device of `sizeMiB`, mounted at root/<cls>/<name>; resolves with the loop device. */
  ext4Volume(cls: string, name: string, sizeMiB: number): string {
    const file = join(this.#backing, `${name}.img`);
    sh('truncate', ['-s', `${sizeMiB}M`, file]);
    sh('mkfs.ext4', ['-q', '-F', file]);
    const dev = sh('losetup', ['--find', '--show', file]).trim();
    this.#loops.push(dev);
    const p = join(this.root, cls, name);
    mkdirSync(p, { recursive: true });
    sh('mount', [dev, p]);
    return dev;
  }
  cleanup(): void {
    // Deepest first, until nothing is mounted under the root (propagation may have doubled some).
    for (let i = 0; i < 10; i++) {
      const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
        .split('\n')
        .map((l) => l.split(' ')[4] ?? '')
        .filter((m) => m === this.root || m.startsWith(`${this.root}/`))
        .sort((a, b) => b.length - a.length);
      if (mounts.length === 0) break;
      for (const m of mounts) {
        try {
          sh('umount', [m]);
        } catch {
          sh('umount', ['-l', m]);
        }
      }
    }
    rmSync(this.#createdTop, { recursive: true, force: true });
    for (const d of this.#loops) sh('losetup', ['-d', d]);
    rmSync(this.#backing, { recursive: true, force: true });
  }
}

/** The name of the DaemonSet's volume that holds --state-dir (the base's and the chart's). */
export const stateVolume = 'provisioner-state';

/** The host directory the base's DaemonSet keeps its --state-dir in (the hostPath of its stateVolume). */
export function baseStateHostPath(): string {
  const ds = parseYaml(readFileSync(join(deploymentDir, 'daemonset.yaml'), 'utf8')) as { spec: { template: { spec: { volumes: { name: string; hostPath?: { path: string } }[] } } } };
  const path = ds.spec.template.spec.volumes.find((v) => v.name === stateVolume)?.hostPath?.path;
  if (path === undefined) throw new Error(`deployment/kubernetes/daemonset.yaml has no hostPath volume ${stateVolume}`);
  return path;
}

/**
 * What a host directory looks like, to tell whether a run touched it: 'absent', or one line per
 * entry (itself included, recursively) with its type, mode, size and mtime.
 */
export function dirFingerprint(dir: string): string[] {
  if (!existsSync(dir)) return [`${dir} absent`];
  const out: string[] = [];
  const walk = (p: string): void => {
    const st = lstatSync(p);
    out.push(`${p} ${st.isDirectory() ? 'dir' : st.isFile() ? 'file' : 'other'} ${(st.mode & 0o7777).toString(8)} ${st.size} mtime ${st.mtime.toISOString()}`);
    if (st.isDirectory()) for (const e of readdirSync(p).sort()) walk(join(p, e));
  };
  walk(dir);
  return out;
}

/**
 * What the loopback-only apiserver needs of the DaemonSet `name` (and nothing else), as kustomize
 * patch lines: hostNetwork, and the apiserver's address for the in-cluster config (JSON 6902); the
 * host directory of its state volume moved to `stateDir`, a temp dir of the run, so that no run sees
 * another's state (classes.json, device-links.json, cleaners/) nor leaves its own on the host
 * (strategic merge: the volume by its name; the container's --state-dir is unchanged).
 */
export const e2ePatches = (name: string, port: string, stateDir: string): string[] => [
  'patches:',
  `  - target: { kind: DaemonSet, name: ${name} }`,
  '    patch: |',
  '      - { op: add, path: /spec/template/spec/hostNetwork, value: true }',
  '      - { op: add, path: /spec/template/spec/containers/0/env/-, value: { name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1 } }',
  `      - { op: add, path: /spec/template/spec/containers/0/env/-, value: { name: KUBERNETES_SERVICE_PORT, value: "${port}" } }`,
  `  - target: { kind: DaemonSet, name: ${name} }`,
  '    patch: |',
  `      { apiVersion: apps/v1, kind: DaemonSet, metadata: { name: ${name} }, spec: { template: { spec: { volumes: [{ name: ${stateVolume}, hostPath: { path: ${JSON.stringify(stateDir)} } }] } } } }`,
];

/** The daemon's state dir on the host for the overlay `overlay` (made by applyBaseOverlay, removed with the overlay). */
export const overlayStateDir = (overlay: string): string => join(overlay, 'state');

/**
 * Writes the e2e overlay of the base (the image, e2ePatches) into a new temp dir, builds it with
 * `kustomize` and applies it to the control plane; resolves with the overlay dir (the caller removes
 * it, after the node stopped). The daemon's state dir on the host is overlayStateDir(overlay), in it.
 */
export async function applyBaseOverlay(cp: { readonly adminKubeconfig: string; readonly server: string }, image: ProvisionerImage, kustomize: string): Promise<string> {
  const overlay = mkdtempSync(join(tmpdir(), 'lsp-real-node-overlay-'));
  const stateDir = overlayStateDir(overlay);
  mkdirSync(stateDir, { mode: 0o700 }); // as the daemon would make it (stateDirProblem: ours, not writable by others)
  const at = image.ref.lastIndexOf(':');
  writeFileSync(
    join(overlay, 'kustomization.yaml'),
    [
      'apiVersion: kustomize.config.k8s.io/v1beta1',
      'kind: Kustomization',
      `resources: [${relative(overlay, deploymentDir)}]`,
      'images:',
      `  - { name: local-static-provisioner, newName: ${image.ref.slice(0, at)}, newTag: ${image.ref.slice(at + 1)} }`,
      ...e2ePatches(baseDaemonSet, new URL(cp.server).port, stateDir),
      '',
    ].join('\n'),
  );
  const objects = manifestObjects(await kustomizeBuild(kustomize, overlay));
  // The strategic merge adds a volume where the name does not match: check that it moved the base's.
  const ds = objects.find((o) => o.kind === 'DaemonSet' && o.metadata.name === baseDaemonSet) as { spec?: { template?: { spec?: { volumes?: { name: string; hostPath?: { path?: string } }[] } } } } | undefined;
  const paths = (ds?.spec?.template?.spec?.volumes ?? []).filter((v) => v.hostPath?.path === stateDir || v.name === stateVolume).map((v) => `${v.name}:${v.hostPath?.path ?? ''}`);
  if (paths.join() !== `${stateVolume}:${stateDir}`) throw new Error(`the e2e overlay did not move the state volume to ${stateDir}: ${paths.join(', ') || 'no such volume'}`);
  await applyObjects(cp.adminKubeconfig, objects, `kustomize build ${overlay}`);
  return overlay;
}

/** Prints the end of the logs of the containers of pods whose name starts with one of `podPrefixes` (kubelet podLogsDir), for failures. */
export function logPodTails(node: RealNode, podPrefixes: readonly string[], print: (msg: string) => void = console.log): void {
  const dir = join(node.dir, 'pod-logs');
  for (const pod of readdirSync(dir).filter((d) => podPrefixes.some((p) => d.startsWith(p)))) {
    for (const c of readdirSync(join(dir, pod))) {
      for (const f of readdirSync(join(dir, pod, c))) {
        const lines = readFileSync(join(dir, pod, c, f), 'utf8').split('\n').slice(-15).join('\n');
        print(`--- ${pod}/${c}/${f} (last lines) ---\n${lines}`);
      }
    }
  }
}

/**
 * Imports the image examples/ use (busybox, made of the host's: ensureBusyboxImage) into the node, so that
 * the examples run there as written without a registry; resolves with its name.
 */
export async function importExamplesImage(node: RealNode): Promise<string> {
  const busybox = await ensureBusyboxImage();
  await node.importImage(busybox.archive);
  return busybox.name;
}
