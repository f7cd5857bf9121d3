// Property: whatever the tree in a volume (odd names, symlinks in and out, nested mounts, same-device bind mounts
// of siblings and of the disk root, a file bind-mounted over a file), cleaning it changes nothing outside the
// volume, and either empties it or fails with a reason naming every mount it left in place.
import { createHash } from 'node:crypto';
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { cleanFilesystem } from '../../src/deleter/cleaner.ts';
import { displayName } from '../../src/deleter/fs-cleaner.ts';
import { canMount, mount, NEEDS_ROOT, umountAll } from '../support/mountinfo.ts';

type LinkTarget = 'siblingDir' | 'siblingFile' | 'outsideDir' | 'diskRoot' | 'relativeOut' | 'relativeIn' | 'dangling' | 'slash';
type Node =
  | { kind: 'file'; name: Buffer; content: string }
  | { kind: 'dir'; name: Buffer; children: Node[] }
  | { kind: 'link'; name: Buffer; target: LinkTarget };
type MountKind = 'tmpfs' | 'bindSibling' | 'bindDiskRoot' | 'bindOutside' | 'bindSiblingFile';
interface MountSpec {
  readonly kind: MountKind;
  readonly depth: number;
}

const LONG = 'n'.repeat(255);
const nameArb: fc.Arbitrary<Buffer> = fc.oneof(
  fc.constantFrom('a', 'b', '.hidden', '-rf', '--', '-', 'new\nline', '\n', ' sp ', 'back\\slash', LONG, 'é'.repeat(127)).map((s) => Buffer.from(s)),
  fc.constantFrom([0xff], [0xfe, 0xff], [0x2d, 0xff, 0x0a], [0xc3], [0xe2, 0x82]).map((b) => Buffer.from(b)),
  fc
    .uint8Array({ minLength: 1, maxLength: 6, min: 1, max: 255 })
    .map((a) => Buffer.from(a.filter((b) => b !== 0x2f)))
    .filter((b) => b.length > 0 && b.toString('latin1') !== '.' && b.toString('latin1') !== '..'),
);
const targetArb = fc.constantFrom<LinkTarget>('siblingDir', 'siblingFile', 'outsideDir', 'diskRoot', 'relativeOut', 'relativeIn', 'dangling', 'slash');

const { tree: treeArb } = fc.letrec<{ tree: Node[]; node: Node }>((tie) => ({
  tree: fc.uniqueArray(tie('node'), { maxLength: 4, selector: (n) => n.name.toString('latin1') }),
  node: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.record({ kind: fc.constant('file' as const), name: nameArb, content: fc.string({ maxLength: 20 }) }),
    fc.record({ kind: fc.constant('link' as const), name: nameArb, target: targetArb }),
    fc.record({ kind: fc.constant('dir' as const), name: nameArb, children: tie('tree') }),
  ),
}));
const mountsArb = fc.array(
  fc.record({
    kind: fc.constantFrom<MountKind>('tmpfs', 'bindSibling', 'bindDiskRoot', 'bindOutside', 'bindSiblingFile'),
    depth: fc.integer({ min: 0, max: 2 }),
  }),
  { maxLength: 3 },
);

/** The test world: a disk (tmpfs) holding the volume and a sibling, an outside dir on another device. */
interface World {
  readonly base: string;
  readonly disk: string;
  readonly vol: string;
  readonly sibling: string;
  readonly outside: string;
  readonly mounts: string[];
}

function makeWorld(): World {
  const base = mkdtempSync(join(tmpdir(), 'lsp-cleaner-prop-'));
  const w: World = { base, disk: join(base, 'disk'), vol: join(base, 'mnt', 'vol'), sibling: join(base, 'disk', 'sibling'), outside: join(base, 'outside'), mounts: [] };
  mkdirSync(w.disk);
  mount('-t', 'tmpfs', '-o', 'size=8m', 'lsp-prop', w.disk);
  w.mounts.push(w.disk);
  mkdirSync(join(w.disk, 'vol'));
  mkdirSync(join(w.sibling, 'deep'), { recursive: true });
  writeFileSync(join(w.sibling, 'file'), 'sibling file');
  writeFileSync(join(w.sibling, 'deep', 'data'), 'sibling data');
  writeFileSync(join(w.disk, 'disk-root-file'), 'disk root');
  mkdirSync(join(w.outside, 'sub'), { recursive: true });
  writeFileSync(join(w.outside, 'sub', 'f'), 'outside');
  mkdirSync(w.vol, { recursive: true });
  mount('--bind', join(w.disk, 'vol'), w.vol);
  w.mounts.push(w.vol);
  return w;
}

function linkTarget(w: World, t: LinkTarget): string {
  switch (t) {
    case 'siblingDir':
      return w.sibling;
    case 'siblingFile':
      return join(w.sibling, 'file');
    case 'outsideDir':
      return w.outside;
    case 'diskRoot':
      return w.disk;
    case 'relativeOut':
      return '../../../outside';
    case 'relativeIn':
      return '.';
    case 'dangling':
      return join(w.base, 'nowhere');
    case 'slash':
      return '/';
  }
}

function build(w: World, dir: Buffer, nodes: readonly Node[]): void {
  for (const n of nodes) {
    const p = Buffer.concat([dir, Buffer.from('/'), n.name]);
    if (n.kind === 'file') writeFileSync(p, n.content);
    else if (n.kind === 'link') symlinkSync(linkTarget(w, n.target), p);
    else {
      mkdirSync(p);
      build(w, p, n.children);
    }
  }
}

/** Mounts each spec at <vol>/mnt<i>[/d/d]/m; returns the mount points inside the volume. */
function addMounts(w: World, specs: readonly MountSpec[]): string[] {
  return specs.map((s, i) => {
    const parent = join(w.vol, `mnt${i}`, ...Array<string>(s.depth).fill('d'));
    mkdirSync(parent, { recursive: true });
    const at = join(parent, 'm');
    if (s.kind === 'bindSiblingFile') writeFileSync(at, 'tenant file under the bind');
    else mkdirSync(at);
    if (s.kind === 'tmpfs') mount('-t', 'tmpfs', '-o', 'size=1m', 'lsp-prop-nested', at);
    else mount('--bind', { bindSibling: w.sibling, bindDiskRoot: w.disk, bindOutside: w.outside, bindSiblingFile: join(w.sibling, 'file') }[s.kind], at);
    w.mounts.push(at);
    if (s.kind === 'tmpfs') writeFileSync(join(at, 'nested-data'), `nested ${i}`);
    return at;
  });
}

/** Every entry below `root` (not following symlinks, not into `exclude`), with a hash of each file's content. */
function snapshot(root: string, exclude: ReadonlySet<string>, out: Map<string, string> = new Map()): Map<string, string> {
  const stack: Buffer[] = [Buffer.from(root)];
  while (stack.length > 0) {
    const p = stack.pop() as Buffer;
    const key = p.toString('latin1');
    if (exclude.has(key)) continue;
    const st = lstatSync(p);
    if (st.isDirectory()) {
      out.set(key, `dir ${st.mode}`);
      for (const n of readdirSync(p, { encoding: 'buffer' })) stack.push(Buffer.concat([p, Buffer.from('/'), n]));
    } else if (st.isSymbolicLink()) out.set(key, `link ${readlinkSync(p, { encoding: 'buffer' }).toString('latin1')}`);
    else out.set(key, `file ${createHash('sha256').update(readFileSync(p)).digest('hex')}`);
  }
  return out;
}

/**
 * Everything that must not change: the disk but the volume's directory (the siblings, the disk root), the outside
 * dir, the nested tmpfs mounts (bind mounts show data already covered by the first two).
 */
function outsideState(w: World, tmpfsMounts: readonly string[]): Map<string, string> {
  const out = snapshot(w.disk, new Set([join(w.disk, 'vol')]));
  snapshot(w.outside, new Set(), out);
  for (const m of tmpfsMounts) snapshot(m, new Set(), out);
  return out;
}

/** The entries left in the volume, not entering its nested mounts. */
function leftInVolume(w: World, nested: readonly string[]): string[] {
  return [...snapshot(w.vol, new Set(nested)).keys(), ...nested].filter((k) => k !== w.vol).sort();
}

const ancestorsInVolume = (w: World, at: string): string[] => {
  const out: string[] = [];
  for (let p = at; p !== w.vol; p = p.slice(0, p.lastIndexOf('/'))) out.push(p);
  return out;
};

describe.skipIf(!canMount)(`cleanFilesystem property (${NEEDS_ROOT})`, () => {
  it('never changes anything outside the volume; empties it or fails naming what it left', { timeout: 120_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(treeArb, mountsArb, async (tree, specs) => {
        const w = makeWorld();
        try {
          build(w, Buffer.from(w.vol), tree);
          const nested = addMounts(w, specs);
          const tmpfsMounts = nested.filter((_, i) => specs[i]?.kind === 'tmpfs');
          const before = outsideState(w, tmpfsMounts);
          const r = await cleanFilesystem(w.vol);
          expect(outsideState(w, tmpfsMounts)).toEqual(before);
          if (nested.length === 0) {
            expect(r.error).toBeUndefined();
            expect(r.ok).toBe(true);
            expect(readdirSync(w.vol)).toEqual([]);
          } else {
            expect(r.ok).toBe(false);
            expect(r.error).toMatch(/entries are on another mount and were not removed/);
            expect([...r.skipped].sort()).toEqual([...nested].sort());
            // Only the mount points and the directories leading to them are left.
            expect(leftInVolume(w, nested)).toEqual([...new Set(nested.flatMap((m) => ancestorsInVolume(w, m)))].sort());
          }
        } finally {
          umountAll(w.mounts);
          rmSync(w.base, { recursive: true, force: true });
        }
      }),
      { numRuns: 30 },
    );
  });

  it('names entries it cannot decode with \\x escapes', () => {
    expect(displayName(Buffer.from([0x2d, 0xff, 0x0a, 0x5c]))).toBe('-\\xff\\x0a\\x5c');
    expect(displayName(Buffer.from('é ok'))).toBe('é ok');
  });
});
