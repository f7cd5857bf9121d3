// Issue 17, points 3(a), 4 (discovery roots) and 8: config rules that keep a careless or hostile ConfigMap
// from turning a tenant's symlink, a system directory or the node's own devices into PVs that get wiped.
// Rules 20-24 of docs/cleanup.md, "Safety rules".
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/parse.ts';
import { configMapData, errors, HELM_CONFIGMAP, ok } from './fixtures.ts';

/** A YAML double-quoted scalar holding `s` exactly: every character outside printable ASCII is escaped. */
function yamlQuote(s: string): string {
  let out = '"';
  for (const ch of s) {
    const cp = ch.codePointAt(0)!;
    if (ch === '"' || ch === '\\') out += `\\${ch}`;
    else if (cp >= 0x20 && cp < 0x7f) out += ch;
    else if (cp <= 0xffff) out += `\\u${cp.toString(16).padStart(4, '0')}`;
    else out += `\\U${cp.toString(16).padStart(8, '0')}`;
  }
  return `${out}"`;
}

/** storageClassMap text for classes given as name -> [hostDir, mountDir]. */
function classes(c: Record<string, readonly [string, string]>): string {
  return Object.entries(c)
    .map(([name, [h, m]]) => `${name}:\n  hostDir: ${yamlQuote(h)}\n  mountDir: ${yamlQuote(m)}\n`)
    .join('');
}

const same = (dir: string): readonly [string, string] => [dir, dir];

describe('rule 20: the discovery directories of two classes may not overlap (issue 17, 3a)', () => {
  it('rejects class b whose hostDir lies inside class a\'s hostDir (/mnt/d and /mnt/d/vol1), with one error naming both', () => {
    expect(errors({ storageClassMap: classes({ a: same('/mnt/d'), b: same('/mnt/d/vol1') }) })).toEqual([
      {
        path: 'storageClassMap.b.hostDir',
        file: 'storageClassMap',
        line: 5,
        message:
          'hostDir "/mnt/d/vol1" of storage class b lies inside hostDir "/mnt/d" of storage class a: the directories of two classes may not overlap (one inside the other): entries inside one class\'s volumes, such as a tenant\'s symlink to a disk, would become volumes of the other and be wiped when released',
      },
    ]);
  });

  it('rejects it whichever class comes first, and whichever key nests (mountDir only, hostDir in the other\'s mountDir)', () => {
    const cases: [Record<string, readonly [string, string]>, string, string][] = [
      [{ inner: same('/mnt/d/vol1'), outer: same('/mnt/d') }, 'storageClassMap.inner.hostDir', 'hostDir "/mnt/d/vol1" of storage class inner lies inside hostDir "/mnt/d" of storage class outer'],
      [{ a: ['/host/a', '/mnt/d'], b: ['/host/b', '/mnt/d/x/y'] }, 'storageClassMap.b.mountDir', 'mountDir "/mnt/d/x/y" of storage class b lies inside mountDir "/mnt/d" of storage class a'],
      [{ a: ['/mnt/d', '/c/a'], b: ['/h/b', '/mnt/d/vol1'] }, 'storageClassMap.b.mountDir', 'mountDir "/mnt/d/vol1" of storage class b lies inside hostDir "/mnt/d" of storage class a'],
      [{ a: ['/mnt/d', '/c/a'], b: ['/h/b', '/mnt/d'] }, 'storageClassMap.b.mountDir', 'mountDir "/mnt/d" of storage class b is hostDir "/mnt/d" of storage class a'],
    ];
    for (const [c, path, start] of cases) {
      const errs = errors({ storageClassMap: classes(c) });
      expect(errs.map((e) => e.path)).toEqual([path]);
      expect(errs[0]!.message.startsWith(`${start}: `)).toBe(true);
    }
  });

  it('compares normalised paths: trailing slashes, "//", "." and ".." do not hide the nesting', () => {
    for (const [outer, inner] of [
      ['/mnt/d/', '/mnt/d/vol1/'],
      ['//mnt//d', '/mnt/d/vol1'],
      ['/mnt/./d', '/mnt/x/../d/./vol1'],
      ['/mnt/d', '/mnt/d/a/b/c/../../b'],
    ]) {
      const errs = errors({ storageClassMap: classes({ a: same(outer!), b: same(inner!) }) });
      expect(errs).toHaveLength(1);
      expect(errs[0]!.message).toContain('of storage class a');
    }
  });

  it('keeps the existing rule for the same hostDir or mountDir in two classes ("already used", one error per key), and adds no overlap error to it', () => {
    const errs = errors({ storageClassMap: classes({ a: same('/mnt/d'), b: same('/mnt/d/') }) });
    expect(errs.map((e) => [e.path, e.message])).toEqual([
      ['storageClassMap.b.hostDir', 'hostDir "/mnt/d/" is already used by storage class a'],
      ['storageClassMap.b.mountDir', 'mountDir "/mnt/d/" is already used by storage class a'],
    ]);
    const one = errors({ storageClassMap: classes({ a: ['/mnt/d', '/c/a'], b: ['/mnt/d', '/c/a/b'] }) });
    expect(one.map((e) => e.path)).toEqual(['storageClassMap.b.hostDir']);
  });

  it('accepts siblings, including names that share a prefix (/mnt/d and /mnt/d2), and the shipped layouts', () => {
    ok({ storageClassMap: classes({ a: same('/mnt/d'), b: same('/mnt/d2'), c: same('/mnt/disks/a'), d: same('/mnt/disks/b'), e: same('/mnt/disks/a-b') }) });
    ok({ storageClassMap: classes({ a: ['/tmp/ns1', '/mnt/local-storage'], b: ['/tmp/ns2', '/mnt/local-storage2'] }) });
  });

  // Paths built from a few segments, "." and ".." included; the oracle resolves them with a stack, independently of
  // posix.normalize, and says whether one contains (or equals) the other.
  const segment = fc.constantFrom('a', 'b', 'ab', '.', '..', '');
  const pathArb = fc.array(segment, { minLength: 1, maxLength: 5 }).map((s) => `/${s.join('/')}`);
  const resolve = (p: string): string[] => {
    const out: string[] = [];
    for (const s of p.split('/')) {
      if (s === '' || s === '.') continue;
      if (s === '..') out.pop();
      else out.push(s);
    }
    return out;
  };
  const within = (inner: string[], outer: string[]): boolean => outer.length <= inner.length && outer.every((s, i) => inner[i] === s);

  it('property: two classes load exactly when neither directory contains the other, and an overlap is one error naming both', () => {
    fc.assert(
      fc.property(pathArb, pathArb, fc.boolean(), (p, q, crossed) => {
        const rp = resolve(p);
        const rq = resolve(q);
        // crossed: the paths are hostDir of one class and mountDir of the other (the other keys disjoint)
        const c = crossed ? { one: [p, '/other/x'] as const, two: ['/other/y', q] as const } : { one: same(p), two: same(q) };
        const r = parseConfig({ storageClassMap: classes(c) });
        if (rp.length === 0 || rq.length === 0) {
          expect(r.ok).toBe(false); // the root directory: its own rule
          return;
        }
        const overlap = within(rp, rq) || within(rq, rp);
        expect(r.ok).toBe(!overlap);
        if (!r.ok) {
          expect(r.errors).toHaveLength(crossed || !(within(rp, rq) && within(rq, rp)) ? 1 : 2);
          // both classes named: in the message, or one of them in the key path ("already used by storage class one")
          const e = r.errors[0]!;
          const text = `${e.path} ${e.message}`;
          expect(text).toMatch(/\bone\b/);
          expect(text).toMatch(/\btwo\b/);
        }
      }),
      { numRuns: 400 },
    );
  });
});

describe('rule 21: discovery roots in system and pseudo file systems are refused (issue 17, 4)', () => {
  const REFUSED = [
    '/proc', '/proc/1/root', '/sys', '/sys/block', '/dev', '/dev/', '/dev/shm', '/dev/pts', '/dev/mqueue', '/dev/hugepages',
    '/dev/block', '/dev/char', '/etc', '/etc/kubernetes', '/mnt/../etc', '/mnt/disks/../../etc/', '/boot', '/boot/efi', '/usr',
    '/usr/local/disks', '/bin', '/sbin', '/lib', '/lib64', '/lib/modules', '/libx32', '/var', '/var/lib', '/var/lib/',
    '/var/lib/kubelet', '/var/lib/kubelet/pods', '/var/lib/containerd', '/var/lib/docker', '/var/lib/containers/storage',
    '/var/lib/rancher/k3s', '/var/lib/etcd', '/run', '/run/containerd', '/run/netns', '/var/run', '/var/run/netns',
    '/snap', '/var/snap/microk8s',
  ];

  it.each(REFUSED)('refuses %j as hostDir and as mountDir, with one error naming the class and the key', (dir) => {
    for (const k of ['hostDir', 'mountDir'] as const) {
      const c: readonly [string, string] = k === 'hostDir' ? [dir, '/mnt/disks/x'] : ['/mnt/disks/x', dir];
      const errs = errors({ storageClassMap: classes({ x: c }) });
      expect(errs).toHaveLength(1);
      expect(errs[0]!.path).toBe(`storageClassMap.x.${k}`);
      expect(errs[0]!.message).toContain(`${k} ${JSON.stringify(dir)}`);
      expect(errs[0]!.message).toContain('of storage class x ');
    }
  });

  it('says what the normalised path is and why it is refused', () => {
    expect(errors({ storageClassMap: classes({ fast: same('/mnt/../etc') }) })[0]).toEqual({
      path: 'storageClassMap.fast.hostDir',
      file: 'storageClassMap',
      line: 2,
      message:
        'hostDir "/mnt/../etc" ("/etc" once normalised) of storage class fast is /etc, part of the operating system: discovery there would make PVs of what it holds and wipe them when released; use a directory of your own, e.g. /mnt/disks/fast',
    });
    expect(errors({ storageClassMap: classes({ b: same('/var/lib/kubelet/pods') }) })[0]!.message).toBe(
      'hostDir "/var/lib/kubelet/pods" of storage class b lies under /var/lib/kubelet, the kubelet\'s or a container runtime\'s state (pod volumes, container root file systems): discovery there would make PVs of what it holds and wipe them when released; use a directory of your own, e.g. /mnt/disks/b',
    );
  });

  const ALLOWED = [
    '/mnt', '/mnt/disks', '/mnt/disks/fast-disks', '/mnt/fast-disks', '/mnt/local-storage', '/mnt/disks/apps', '/mnt/disks/etc',
    '/data', '/data/pgdata', '/srv', '/srv/disks', '/pv-disks', '/local-disks', '/tmp', '/tmp/lsp-e2e-1/disks', '/var/tmp/disks',
    '/var/local-disks', '/var/lib/local-disks', '/var/openebs/local', '/home/disks', '/opt/local-path-provisioner', '/media/disks',
    '/dev/disk/by-id', '/dev/disk/by-path', '/dev/disk/by-uuid', '/dev/disk/kubernetes', '/dev/mapper', '/dev/vg-local',
    '/usrdata', '/etcd-disks', '/runners', '/mnt/run', '/proc-disks', '/variant',
  ];

  it.each(ALLOWED)('accepts %j (used in the wild, by the shipped configs, or merely close to a refused name)', (dir) => {
    ok({ storageClassMap: classes({ x: same(dir) }) });
  });

  it('accepts every shipped ConfigMap and values file: kustomize base and block component, helm values and examples, the Go chart\'s', () => {
    const root = join(import.meta.dirname, '..', '..');
    const cm = (file: string): Record<string, string> => (parse(readFileSync(join(root, file), 'utf8')) as { data: Record<string, string> }).data;
    ok(cm('deployment/kubernetes/configmap.yaml'));
    const base = cm('deployment/kubernetes/configmap.yaml');
    const block = cm('deployment/kubernetes/components/block-volumes/class.yaml');
    ok({ ...base, storageClassMap: `${base['storageClassMap']!}${block['storageClassMap']!}` });
    ok(configMapData(HELM_CONFIGMAP)); // the Go chart's rendering (block-disks on /dev/disk/by-id)
    for (const file of ['helm/local-static-provisioner/values.yaml', 'helm/examples/block-jobs.yaml', 'helm/examples/upstream-keys.yaml']) {
      const values = parse(readFileSync(join(root, file), 'utf8')) as { classes?: { name: string; hostDir: string; mountDir?: string }[] };
      const cls = values.classes ?? [];
      expect(cls.length, file).toBeGreaterThan(0);
      ok({ storageClassMap: classes(Object.fromEntries(cls.map((c) => [c.name, [c.hostDir, c.mountDir ?? c.hostDir] as const]))) });
    }
  });
});

describe('rule 22: hostDir and mountDir may not hold control, bidi or format characters (issue 17, 8)', () => {
  const BAD: [string, string][] = [
    ['\n', 'U+000A'], ['\r', 'U+000D'], ['\t', 'U+0009'], ['\x1b', 'U+001B'], ['\x07', 'U+0007'], ['\x7f', 'U+007F'],
    ['\x85', 'U+0085'], ['\x9b', 'U+009B'], ['\u202a', 'U+202A'], ['\u202e', 'U+202E'], ['\u2066', 'U+2066'], ['\u2069', 'U+2069'],
    ['\u200e', 'U+200E'], ['\u200f', 'U+200F'], ['\u061c', 'U+061C'], ['\u200b', 'U+200B'], ['\u2028', 'U+2028'], ['\ufeff', 'U+FEFF'],
  ];

  it.each(BAD)('rejects %j in hostDir and in mountDir, naming the class, the key and the character', (ch, code) => {
    for (const k of ['hostDir', 'mountDir'] as const) {
      const dir = `/mnt/disks/a${ch}b`;
      const c: readonly [string, string] = k === 'hostDir' ? [dir, '/mnt/disks/x'] : ['/mnt/disks/x', dir];
      const errs = errors({ storageClassMap: classes({ x: c }) });
      expect(errs).toHaveLength(1);
      expect(errs[0]!.path).toBe(`storageClassMap.x.${k}`);
      expect(errs[0]!.message).toContain(`of storage class x contains ${code} at index 12: `);
      // the message shows the path escaped, never the raw character
      expect(errs[0]!.message).not.toContain(ch);
    }
  });

  it('gives the exact message for a newline', () => {
    expect(errors({ storageClassMap: classes({ x: same('/mnt/disks/\nevil') }) })[0]).toEqual({
      path: 'storageClassMap.x.hostDir',
      file: 'storageClassMap',
      line: 2,
      message:
        'hostDir "/mnt/disks/\\nevil" of storage class x contains U+000A at index 11: control, bidi and format characters are refused in a path (they hide what the path really is in logs and Events)',
    });
  });

  // The rule's floor, as the issue states it: C0, DEL, C1, and the bidi marks, embeddings, overrides and isolates.
  const required = fc.oneof(
    fc.integer({ min: 0x01, max: 0x1f }),
    fc.integer({ min: 0x7f, max: 0x9f }),
    fc.constantFrom(0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069),
  ).map((cp) => String.fromCodePoint(cp));
  const safeChar = fc.oneof(
    fc.constantFrom(...'abcXYZ019._-~+@ é漢ßдñ'.split('')),
    fc.integer({ min: 0x1f600, max: 0x1f64f }).map((cp) => String.fromCodePoint(cp)),
  );
  // `.` and `..` are path steps, not names: `/mnt/..` is `/` and rightly refused by another rule.
  const safeName = fc.array(safeChar, { minLength: 1, maxLength: 12 }).map((a) => a.join('')).filter((n) => n !== '.' && n !== '..');

  it('property: a path is refused whenever it holds such a character, wherever it is', () => {
    fc.assert(
      fc.property(safeName, required, safeName, fc.boolean(), (before, bad, after, mount) => {
        const dir = `/mnt/${before}${bad}${after}`;
        const c: readonly [string, string] = mount ? ['/mnt/disks/x', dir] : [dir, '/mnt/disks/x'];
        const r = parseConfig({ storageClassMap: classes({ x: c }) });
        expect(r.ok).toBe(false);
        if (!r.ok) {
          expect(r.errors).toHaveLength(1);
          expect(r.errors[0]!.path).toBe(`storageClassMap.x.${mount ? 'mountDir' : 'hostDir'}`);
          expect(r.errors[0]!.message).toContain(`contains U+${bad.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')} at index ${5 + before.length}`);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('property: printable names (letters of any script, emoji, spaces, punctuation) stay accepted', () => {
    fc.assert(
      fc.property(fc.array(safeName, { minLength: 1, maxLength: 3 }), (parts) => {
        ok({ storageClassMap: classes({ x: same(`/mnt/${parts.join('/')}`) }) });
      }),
      { numRuns: 200 },
    );
  });
});

describe('rule 23: labelsForPV keys and values must be valid Kubernetes labels (issue 17, 8)', () => {
  const BAD_KEYS = ['foo bar', '-a', 'a-', '_a', 'a/b/c', 'Example.com/x', '/x', 'x/', 'a'.repeat(64), `${'a'.repeat(254)}/x`, 'é', 'a\u202eb', 'a\nb'];
  const GOOD_KEYS = ['team', 'a.b/c', 'example.com/tier', 'A_b.C-1', 'a'.repeat(63), `${'a'.repeat(253)}/x`, '1.5', 'true', 'local-storage-cr-name'];
  const BAD_VALUES = ['a b', '-x', 'x-', '.x', 'a'.repeat(64), '1e+06', 'é', 'a/b', 'a:b'];
  const GOOD_VALUES = ['', 'x', 'a'.repeat(63), '1.5', 'true', 'A-b_c.d', 'foobar', 'can-be-selected'];

  it.each(BAD_KEYS)('rejects the label key %j, naming it', (key) => {
    const errs = errors({ labelsForPV: `${yamlQuote(key)}: v\n` });
    expect(errs).toHaveLength(1);
    expect(errs[0]!.path).toBe(`labelsForPV.${key}`);
    expect(errs[0]!.file).toBe('labelsForPV');
    expect(errs[0]!.line).toBe(1);
    expect(errs[0]!.message).toMatch(/ is not a valid label key: /);
  });

  it.each(BAD_VALUES)('rejects the label value %j, naming its key', (value) => {
    const errs = errors({ labelsForPV: `k: ${yamlQuote(value)}\n` });
    expect(errs).toEqual([
      {
        path: 'labelsForPV.k',
        file: 'labelsForPV',
        line: 1,
        message: `value ${JSON.stringify(value)} is not a valid label value: empty, or at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit`,
      },
    ]);
  });

  it('rejects a number Go formats into an invalid value (1e6 is "1e+06")', () => {
    expect(errors({ labelsForPV: 'e: 1e6\n' })[0]!.message).toContain('value "1e+06" is not a valid label value');
  });

  it('accepts valid keys and values, as the Go provisioner\'s own test uses (local-storage-cr-name: foobar)', () => {
    const labels = Object.fromEntries(GOOD_KEYS.map((k, i) => [k, GOOD_VALUES[i % GOOD_VALUES.length]!]));
    const text = Object.entries(labels).map(([k, v]) => `${yamlQuote(k)}: ${yamlQuote(v)}\n`).join('');
    expect(ok({ labelsForPV: text }).labelsForPV).toEqual(labels);
  });
});

describe('rule 24: the number of ConfigMap keys and of unknown-key warnings is capped (issue 17, 8)', () => {
  // The documented values (docs/configuration.md#limits).
  const MAX_CONFIG_KEYS = 128;
  const MAX_UNKNOWN_KEY_WARNINGS = 20;
  const unknown = (n: number): Record<string, string> => Object.fromEntries(Array.from({ length: n }, (_, i) => [`junk${i}`, 'x']));

  it(`rejects more than ${MAX_CONFIG_KEYS} keys with one error, without parsing them`, () => {
    const files = { storageClassMap: classes({ x: same('/mnt/disks/x') }), ...unknown(MAX_CONFIG_KEYS) };
    const r = parseConfig(files);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.errors).toEqual([
      { path: '', message: `the configuration has ${MAX_CONFIG_KEYS + 1} keys (ConfigMap keys, files of the config directory), over the limit of ${MAX_CONFIG_KEYS}; this provisioner knows 12` },
    ]);
    expect(r.warnings).toEqual([]);
  });

  it(`accepts ${MAX_CONFIG_KEYS} keys, naming the first ${MAX_UNKNOWN_KEY_WARNINGS} unknown ones and counting the rest in one warning`, () => {
    const files = { storageClassMap: classes({ x: same('/mnt/disks/x') }), ...unknown(MAX_CONFIG_KEYS - 1) };
    const r = parseConfig(files);
    expect(r.ok).toBe(true);
    const w = r.warnings ?? [];
    expect(w).toHaveLength(MAX_UNKNOWN_KEY_WARNINGS + 1);
    expect(w.slice(0, MAX_UNKNOWN_KEY_WARNINGS).every((x) => x.message.startsWith('unknown key "junk'))).toBe(true);
    expect(w.at(-1)).toEqual({ path: '', message: `and ${MAX_CONFIG_KEYS - 1 - MAX_UNKNOWN_KEY_WARNINGS} more unknown keys ignored (only the first ${MAX_UNKNOWN_KEY_WARNINGS} are named)` });
  });

  it('caps unknown keys inside the YAML the same way (class keys), whatever their number', () => {
    const junk = Array.from({ length: 5000 }, (_, i) => `  junk${i}: 1\n`).join('');
    const r = parseConfig({ storageClassMap: `x:\n  hostDir: /mnt/disks/x\n  mountDir: /mnt/disks/x\n${junk}` });
    expect(r.ok).toBe(true);
    expect(r.warnings).toHaveLength(MAX_UNKNOWN_KEY_WARNINGS + 1);
    expect(r.warnings?.at(-1)?.message).toBe(`and ${5000 - MAX_UNKNOWN_KEY_WARNINGS} more unknown keys ignored (only the first ${MAX_UNKNOWN_KEY_WARNINGS} are named)`);
  });
});
