// The persisted settings of storage classes (src/deleter/class-memory.ts): the
// file is hostile input (the block cleaner of a remembered class runs as
// root), so every field goes through the config parser, anything else is
// dropped, and a dropped class is never looked up with guessed settings.
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ClassConfig } from '../../src/config/types.ts';
import {
  CLASS_STATE_FILE,
  ClassMemory,
  MAX_CLASS_STATE_BYTES,
  MAX_REMEMBERED_CLASSES,
  parseClassState,
  serializeClassState,
  validateStoredClass,
} from '../../src/deleter/class-memory.ts';
import { removalMessage, MAX_NAMED_PVS } from '../../src/controller/class-removal.ts';
import { pino } from 'pino';
import { silentLogger, type Logger } from '../../src/util/log.ts';
import { testConfig } from '../support/config.ts';

const NODE = 'node-1';
const fast: ClassConfig = {
  hostDir: '/mnt/fast',
  mountDir: '/mnt/fast',
  blockCleanerCommand: ['/scripts/shred.sh', '2'],
  volumeMode: 'Block',
  namePattern: 'nvme*',
  fsType: 'ext4',
};
const slow: ClassConfig = { hostDir: '/mnt/slow', mountDir: '/mnt/slow', blockCleanerCommand: ['/scripts/quick_reset.sh'], volumeMode: 'Filesystem', namePattern: '*' };

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'lsp-class-memory-'));
  chmodSync(dir, 0o700);
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** A logger that keeps the messages. */
function recordingLogger(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => lines.push((JSON.parse(s) as { msg: string }).msg) });
  return { logger, lines };
}

const text = (o: unknown): string => JSON.stringify(o);
const state = (classes: Record<string, unknown>, extra: Record<string, unknown> = {}): string =>
  text({ version: 1, node: NODE, configured: Object.keys(classes), classes, ...extra });

describe('parseClassState', () => {
  it('round-trips what serializeClassState writes', () => {
    const s = serializeClassState(NODE, { configured: ['fast'], classes: new Map([['fast', fast], ['slow', slow]]) });
    const p = parseClassState(s, NODE);
    expect(p).not.toBeTypeOf('string');
    if (typeof p === 'string') return;
    expect(p.dropped).toEqual([]);
    expect(p.configured).toEqual(['fast']);
    expect(Object.fromEntries(p.classes)).toEqual({ fast, slow });
  });

  it('drops the selector (it plays no part in cleaning)', () => {
    const withSel: ClassConfig = { ...slow, selector: [{ matchExpressions: [{ key: 'k', operator: 'In', values: ['v'] }] }] };
    const p = parseClassState(serializeClassState(NODE, { configured: [], classes: new Map([['slow', withSel]]) }), NODE);
    expect(typeof p !== 'string' && p.classes.get('slow')).toEqual(slow);
  });

  it.each([
    ['not JSON', '{', 'not JSON'],
    ['an array', '[]', 'not a JSON object'],
    ['another version', text({ version: 2, node: NODE, configured: [], classes: {} }), 'version 2 is not 1'],
    ['another node', text({ version: 1, node: 'node-2', configured: [], classes: {} }), 'written for node "node-2", not "node-1"'],
    ['a bad configured list', text({ version: 1, node: NODE, configured: [1], classes: {} }), 'configured is not a list of storage class names'],
    ['a configured name that is no class name', text({ version: 1, node: NODE, configured: ['../x'], classes: {} }), 'configured is not a list of storage class names'],
    ['classes as a list', text({ version: 1, node: NODE, configured: [], classes: [] }), 'classes is not a JSON object'],
    [
      'too many classes',
      text({ version: 1, node: NODE, configured: [], classes: Object.fromEntries(Array.from({ length: MAX_REMEMBERED_CLASSES + 1 }, (_, i) => [`c${i}`, slow])) }),
      `more than ${MAX_REMEMBERED_CLASSES} classes`,
    ],
  ])('refuses the whole file: %s', (_what, input, why) => {
    expect(parseClassState(input, NODE)).toBe(why);
  });

  it.each<[string, unknown, RegExp]>([
    ['a missing hostDir', { ...slow, hostDir: undefined }, /hostDir is missing/],
    ['a missing cleaner', { ...slow, blockCleanerCommand: undefined }, /blockCleanerCommand is missing/],
    ['a missing volumeMode', { ...slow, volumeMode: undefined }, /volumeMode is missing/],
    ['a relative hostDir', { ...slow, hostDir: 'mnt/slow' }, /absolute/],
    ['a system mountDir', { ...slow, hostDir: '/etc', mountDir: '/etc' }, /operating system/],
    ['a hostDir that is /', { ...slow, hostDir: '/', mountDir: '/' }, /./],
    ['a control character in a path', { ...slow, hostDir: '/mnt/sl\u0007ow' }, /./],
    ['an empty cleaner', { ...slow, blockCleanerCommand: [] }, /non-empty list/],
    ['a cleaner that is not argv', { ...slow, blockCleanerCommand: '/bin/sh -c x' }, /non-empty list/],
    ['an empty cleaner program', { ...slow, blockCleanerCommand: [''] }, /program is empty/],
    ['an unknown volumeMode', { ...slow, volumeMode: 'Raw' }, /unsupported volume mode/],
    ['a number as fsType', { ...slow, fsType: 4 }, /fsType is not a string/],
    ['an unknown field', { ...slow, selector: [] }, /unknown field "selector"/],
    ['a non-canonical empty fsType', { ...slow, fsType: '' }, /canonical/],
    ['a non-canonical empty namePattern', { ...slow, namePattern: '' }, /canonical/],
    ['a bad namePattern', { ...slow, namePattern: '[' }, /namePattern/],
    ['a bad access mode', { ...slow, accessMode: 'Everyone' }, /access mode/],
    ['null', null, /not a JSON object/],
  ])('drops one class with %s, keeps the others', (_what, bad, why) => {
    const p = parseClassState(state({ fast, bad }), NODE);
    expect(p).not.toBeTypeOf('string');
    if (typeof p === 'string') return;
    expect([...p.classes.keys()]).toEqual(['fast']);
    expect(p.dropped).toHaveLength(1);
    expect(p.dropped[0]!.name).toBe('bad');
    expect(p.dropped[0]!.why).toMatch(why);
  });

  it('drops a class whose name is not a storage class name (it could never name a PV of ours)', () => {
    const p = parseClassState(state({ fast, 'Bad Name': slow, '': slow }, { configured: ['fast'] }), NODE);
    expect(typeof p !== 'string' && [...p.classes.keys()]).toEqual(['fast']);
  });

  it('property: never throws, and every class it returns is one the config parser accepts as is', () => {
    const anyJson = fc.jsonValue({ maxDepth: 3 });
    const pathish = fc.oneof(fc.constantFrom('/mnt/a', '/mnt/b/', '/', '/etc', '/mnt/../etc', 'rel', '/mnt/a\n', ''), fc.string({ maxLength: 12 }).map((s) => `/mnt/${s}`));
    const classish = fc.record(
      {
        hostDir: fc.oneof(pathish, anyJson),
        mountDir: fc.oneof(pathish, anyJson),
        blockCleanerCommand: fc.oneof(fc.array(fc.string({ maxLength: 8 }), { maxLength: 3 }), anyJson),
        volumeMode: fc.oneof(fc.constantFrom('Block', 'Filesystem', '', 'block'), anyJson),
        fsType: fc.oneof(fc.constantFrom('ext4', '', 'xfs'), anyJson),
        namePattern: fc.oneof(fc.constantFrom('*', '', '[', 'a,b'), anyJson),
        accessMode: fc.oneof(fc.constantFrom('ReadWriteOnce', 'x'), anyJson),
        extra: anyJson,
      },
      { requiredKeys: [] },
    );
    const file = fc.oneof(
      fc.record({
        version: fc.oneof(fc.constant(1), anyJson),
        node: fc.oneof(fc.constant(NODE), fc.string({ maxLength: 6 })),
        configured: fc.oneof(fc.array(fc.string({ maxLength: 6 }), { maxLength: 3 }), anyJson),
        classes: fc.oneof(fc.dictionary(fc.oneof(fc.constantFrom('fast', 'slow', 'A', '..'), fc.string({ maxLength: 6 })), fc.oneof(classish, anyJson), { maxKeys: 4 }), anyJson),
      }).map((o) => JSON.stringify(o)),
      fc.string({ maxLength: 40 }),
    );
    fc.assert(
      fc.property(file, (input) => {
        const p = parseClassState(input, NODE);
        if (typeof p === 'string') return;
        for (const [name, cls] of p.classes) {
          // Exactly what the ConfigMap entry would give, and stable when written and read again.
          expect(validateStoredClass(name, JSON.parse(JSON.stringify(cls)))).toEqual(cls);
          expect(cls.hostDir.startsWith('/')).toBe(true);
          expect(cls.blockCleanerCommand.length).toBeGreaterThan(0);
          expect(['Block', 'Filesystem']).toContain(cls.volumeMode);
          const again = parseClassState(serializeClassState(NODE, { configured: [], classes: new Map([[name, cls]]) }), NODE);
          expect(typeof again !== 'string' && again.classes.get(name)).toEqual(cls);
        }
      }),
      { numRuns: 400 },
    );
  });
});

describe('ClassMemory', () => {
  const file = (): string => join(dir, CLASS_STATE_FILE);
  const cfg = (classes: Record<string, ClassConfig>) => testConfig(classes);

  it('persists the classes of each config, and reloads them in a new process', () => {
    const m1 = ClassMemory.open(dir, NODE, { logger: silentLogger });
    expect(m1.apply(cfg({ fast, slow }), () => false).removed).toEqual([]);
    expect((lstatSync(file()).mode & 0o777).toString(8)).toBe('600');
    expect(readdirSync(dir)).toEqual([CLASS_STATE_FILE]); // no temporary file left
    // The class is removed while a PV of this node still names it.
    expect(m1.apply(cfg({ slow }), (c) => c === 'fast').removed).toEqual(['fast']);
    expect(m1.get('fast')).toEqual(fast);

    const m2 = ClassMemory.open(dir, NODE, { logger: silentLogger });
    expect(m2.get('fast')).toEqual(fast);
    expect(m2.get('slow')).toEqual(slow);
    // Same config again after the restart: nothing newly removed.
    expect(m2.apply(cfg({ slow }), (c) => c === 'fast').removed).toEqual([]);
    expect(m2.get('fast')).toEqual(fast);
  });

  it('sees a class removed while the daemon was down', () => {
    ClassMemory.open(dir, NODE, { logger: silentLogger }).apply(cfg({ fast, slow }), () => false);
    const m = ClassMemory.open(dir, NODE, { logger: silentLogger });
    expect(m.apply(cfg({ slow }), (c) => c === 'fast').removed).toEqual(['fast']);
    expect(m.get('fast')).toEqual(fast);
  });

  it('forgets a removed class once no PV of this node names it', () => {
    const m = ClassMemory.open(dir, NODE, { logger: silentLogger });
    m.apply(cfg({ fast, slow }), () => false);
    m.apply(cfg({ slow }), () => false);
    expect(m.get('fast')).toBeUndefined();
    expect(ClassMemory.open(dir, NODE, { logger: silentLogger }).get('fast')).toBeUndefined();
  });

  it('a class back in the config takes its new settings', () => {
    const m = ClassMemory.open(dir, NODE, { logger: silentLogger });
    m.apply(cfg({ fast }), () => true);
    m.apply(cfg({ slow }), () => true);
    const fast2 = { ...fast, blockCleanerCommand: ['/scripts/dd_zero.sh'] };
    m.apply(cfg({ fast: fast2 }), () => true);
    expect(m.get('fast')).toEqual(fast2);
  });

  it.each<[string, () => void]>([
    ['a symlink', () => {
      writeFileSync(join(dir, 'elsewhere'), state({ fast }));
      symlinkSync(join(dir, 'elsewhere'), join(dir, CLASS_STATE_FILE));
    }],
    ['writable by others', () => {
      writeFileSync(join(dir, CLASS_STATE_FILE), state({ fast }));
      chmodSync(join(dir, CLASS_STATE_FILE), 0o666);
    }],
    ['a directory', () => mkdirSync(join(dir, CLASS_STATE_FILE))],
    ['too large', () => writeFileSync(join(dir, CLASS_STATE_FILE), `${state({ fast })}${' '.repeat(MAX_CLASS_STATE_BYTES)}`)],
    ['for another node', () => writeFileSync(join(dir, CLASS_STATE_FILE), state({ fast }, { node: 'other' }), { mode: 0o600 })],
  ])('ignores a state file that is %s, with a warning', (_what, make) => {
    make();
    const { logger, lines } = recordingLogger();
    const m = ClassMemory.open(dir, NODE, { logger });
    expect(m.get('fast')).toBeUndefined();
    expect(lines.some((l) => l.includes('ignoring') && l.includes('kept, not cleaned'))).toBe(true);
  });

  it('refuses a state dir writable by others: memory only, one error', () => {
    chmodSync(dir, 0o777);
    const { logger, lines } = recordingLogger();
    const m = ClassMemory.open(dir, NODE, { logger });
    m.apply(cfg({ fast }), () => true);
    expect(m.get('fast')).toEqual(fast);
    expect(readdirSync(dir)).toEqual([]);
    expect(lines.some((l) => l.includes('is not used') && l.includes('not kept across restarts'))).toBe(true);
  });

  it('writes atomically: a stale temporary file does not matter, the old file is replaced whole', () => {
    writeFileSync(join(dir, `${CLASS_STATE_FILE}.${process.pid}.tmp`), 'garbage'); // left by a crash of a process with our pid
    const m = ClassMemory.open(dir, NODE, { logger: silentLogger });
    m.apply(cfg({ fast }), () => false);
    expect(readdirSync(dir)).toEqual([CLASS_STATE_FILE]);
    expect(parseClassState(readFileSync(file(), 'utf8'), NODE)).toMatchObject({ configured: ['fast'] });
  });
});

describe('removalMessage', () => {
  const pv = (name: string, phase: string) => ({ metadata: { name }, status: { phase } });
  it('names the PVs with their phase, at most MAX_NAMED_PVS, then a count', () => {
    const pvs = Array.from({ length: MAX_NAMED_PVS + 3 }, (_, i) => pv(`pv-${String(i).padStart(2, '0')}`, i === 0 ? 'Available' : 'Released'));
    const msg = removalMessage('fast', pvs, true);
    expect(msg).toContain('Storage class "fast" was removed from the configuration but 11 PV(s) of this node name it: pv-00 (Available), pv-01 (Released)');
    expect(msg).toContain(`pv-${String(MAX_NAMED_PVS - 1).padStart(2, '0')} (Released) and 3 more.`);
    expect(msg).not.toContain(`pv-${MAX_NAMED_PVS}`);
    expect(msg).toContain('Released PVs are still cleaned with the settings the class last had');
    expect(msg.length).toBeLessThan(1024);
  });
  it('says when the settings are not known', () => {
    expect(removalMessage('fast', [pv('a', 'Released')], false)).toContain('its settings are not known, so Released PVs are kept, not cleaned');
  });
});
