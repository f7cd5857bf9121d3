// What a block cleaner prints reaches the daemon's log through cleaner.ts onLine -> Deleter (`Cleanup pv "<pv>":
// <line>`), and its failure reaches the log, the process table and an Event. None of it may write raw control
// bytes into a terminal (--log-format=text) or grow without bound (issue 17, points 6 and 7).
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { V1Node } from '@kubernetes/client-node';
import { Deleter } from '../../src/deleter/deleter.ts';
import { ProcTable } from '../../src/deleter/proctable.ts';
import { MAX_TEXT_BYTES } from '../../src/util/errors.ts';
import { createLogger, MAX_LINE_BYTES } from '../../src/util/log.ts';
import { generatePVName } from '../../src/volume/naming.ts';
import { testConfig } from '../support/config.ts';
import { testEnv } from '../support/env.ts';
import { FakeKube } from '../support/fake-kube.ts';
import { FakeRecorder, liveStore, makePV, newMetrics, NODE } from './helpers.ts';

const isRoot = process.getuid?.() === 0;
// Every byte a terminal could act on: C0 but the line's own final newline, DEL, C1, and the bidi controls.
// eslint-disable-next-line no-control-regex
const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/u;

let tmp: string;
beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'lsp-cleaner-output-'));
});
afterEach(() => {
  rmSync(tmp, { recursive: true, force: true });
});

describe.skipIf(!isRoot)('a block cleaner\'s output in the daemon log (needs root: mknod)', () => {
  it('text format: ESC, BEL, CR, DEL, C1 and bidi controls are escaped; a 6 KB line and the failure are capped', async () => {
    const mountDir = join(tmp, 'discovery');
    mkdirSync(mountDir);
    execFileSync('mknod', [join(mountDir, 'blk'), 'b', '7', '250']); // never opened: the cleaner only prints
    // printf: ESC sequences (colour, window title), BEL, CR over the line, DEL, C1 CSI (UTF-8 c2 9b), RLO (e2 80 ae);
    // then a line of 2,000 euro signs (6,000 bytes), the last line, which the failure message quotes.
    const script =
      "printf 'wiping \\033[31mRED\\033]0;pwned\\007 \\rOVER \\177 \\302\\2332J \\342\\200\\256exe\\n'; " +
      "printf 'stderr \\033[2J\\a\\n' >&2; printf '%.0s\\342\\202\\254' $(seq 2000) >&2; printf '\\n' >&2; exit 3";
    const cls = { hostDir: '/mnt/disks', mountDir, blockCleanerCommand: ['bash', '-c', script], volumeMode: 'Filesystem' as const, namePattern: '*' };
    const node: V1Node = { metadata: { name: NODE, uid: 'node-uid' } };
    const fake = new FakeKube();
    const name = generatePVName('blk', NODE, 'sc1');
    fake.put('persistentvolumes', makePV(name, { path: '/mnt/disks/blk', uid: 'uid-blk' }));
    const lines: string[] = [];
    const recorder = new FakeRecorder();
    const procTable = new ProcTable();
    const env = testEnv({
      config: testConfig({ sc1: cls }),
      node,
      kube: fake,
      recorder,
      metrics: newMetrics(),
      mountInfoPath: join(tmp, 'mountinfo'),
      logger: createLogger({ format: 'text', level: 'debug', write: (s) => lines.push(s) }),
    });
    const d = new Deleter(env, { pvs: liveStore(fake), procTable, readMountPoints: () => Promise.resolve(new Set<string>()) });
    await d.deletePVs();
    await d.idle();
    const stored = procTable.get(name)?.error ?? '';
    await d.deletePVs(); // reports the failure
    await d.idle();

    const output = lines.filter((l) => l.includes('Cleanup pv'));
    expect(output.length).toBeGreaterThanOrEqual(3);
    for (const l of lines) {
      expect(l.slice(0, -1), l).not.toMatch(RAW_CONTROL);
      expect(l.endsWith('\n')).toBe(true);
      expect(Buffer.byteLength(l)).toBeLessThanOrEqual(MAX_LINE_BYTES);
    }
    expect(output.join('')).toContain(String.raw`wiping \x1b[31mRED\x1b]0;pwned\x07 \rOVER \x7f \x9b2J \u202eexe component="deleter" pv="${name}" stream="stdout"`);
    expect(output.join('')).toContain(String.raw`stderr \x1b[2J\x07 component="deleter" pv="${name}" stream="stderr"`);
    // The 6,000-byte line: logged capped, with the marker.
    const long = output.find((l) => l.includes('€€€')) ?? '';
    expect(long).toMatch(/€\[\.\.\. \d+ bytes cut \.\.\.\] component="deleter" pv="\S+" stream="stderr"\n$/);
    // The failure quoting it: capped in the process table, in the log and in the Event.
    expect(stored).toMatch(/^block cleaner command "bash" exited with code 3: €+\[\.\.\. \d+ bytes cut \.\.\.\]$/);
    expect(Buffer.byteLength(stored)).toBeLessThanOrEqual(MAX_TEXT_BYTES);
    expect(lines.some((l) => /^W\d{4} [^\]]+\] Error cleaning PV .*exited with code 3: €+\[\.\.\. \d+ bytes cut/.test(l))).toBe(true);
    const event = recorder.events.find((e) => e.reason === 'VolumeFailedDelete');
    expect(event?.message).toMatch(/^Error cleaning PV .* exited with code 3: €+/);
  });
});
