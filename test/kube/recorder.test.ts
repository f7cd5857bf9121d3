import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { CoreV1Event } from '@kubernetes/client-node';
import { pino } from 'pino';
import { FakeKube } from '../support/fake-kube.ts';
import { createEventRecorder, type EventRecorderOptions, type RunningEventRecorder } from '../../src/kube/recorder.ts';
import { pvRef, type ObjectRef } from '../../src/kube/events.ts';
import { KubeError, type KubePort } from '../../src/kube/port.ts';

const pvA: ObjectRef = pvRef({ metadata: { name: 'pv-a', uid: 'uid-a' } });
const pod: ObjectRef = { kind: 'Pod', apiVersion: 'v1', name: 'lvp-xyz', namespace: 'kube-system', uid: 'uid-p' };

let fake: FakeKube;
let logs: Array<{ level: number; msg: string }>;
let recorders: RunningEventRecorder[];

const make = (opts: Partial<EventRecorderOptions> = {}, port: KubePort = fake): RunningEventRecorder => {
  const logger = pino({ level: 'debug' }, { write: (s: string) => logs.push(JSON.parse(s) as { level: number; msg: string }) });
  const r = createEventRecorder(port, { component: 'local-volume-provisioner', host: 'node-1', logger, ...opts });
  recorders.push(r);
  return r;
};

const events = (): CoreV1Event[] => fake.objects('events');

beforeEach(() => {
  vi.useFakeTimers({ now: new Date('2030-01-01T00:00:00Z') });
  fake = new FakeKube();
  logs = [];
  recorders = [];
});
afterEach(async () => {
  for (const r of recorders) await r.stop();
  vi.useRealTimers();
});

describe('event recorder', () => {
  it('creates client-go style Events: name, namespace default for cluster-scoped objects, source, timestamps', async () => {
    const r = make();
    r.event(pvA, 'Warning', 'VolumeFailedDelete', 'Error cleaning PV "pv-a": boom');
    r.event(pod, 'Normal', 'Started', 'hello');
    await r.flush();
    const [pvEv, podEv] = events();
    const nanos = BigInt(Date.parse('2030-01-01T00:00:00Z')) * 1_000_000n;
    expect(pvEv?.metadata?.name).toMatch(/^pv-a\.[0-9a-f]{16}$/);
    expect(BigInt(`0x${pvEv?.metadata?.name?.split('.')[1] ?? ''}`) - nanos).toBeLessThan(1_000_000n);
    expect(pvEv).toMatchObject({
      metadata: { namespace: 'default' },
      involvedObject: { kind: 'PersistentVolume', apiVersion: 'v1', name: 'pv-a', uid: 'uid-a' },
      type: 'Warning',
      reason: 'VolumeFailedDelete',
      message: 'Error cleaning PV "pv-a": boom',
      source: { component: 'local-volume-provisioner', host: 'node-1' },
      count: 1,
    });
    expect(pvEv?.involvedObject.namespace).toBeUndefined();
    expect(pvEv?.firstTimestamp).toEqual(new Date('2030-01-01T00:00:00Z'));
    expect(pvEv?.lastTimestamp).toEqual(pvEv?.firstTimestamp);
    expect(podEv?.metadata?.namespace).toBe('kube-system');
    expect(podEv?.involvedObject.namespace).toBe('kube-system');
    expect(podEv?.metadata?.name).not.toBe(pvEv?.metadata?.name);
  });

  it('event() returns before anything is sent', () => {
    const r = make();
    r.event(pvA, 'Normal', 'R', 'm');
    expect(fake.requests).toEqual([]);
  });

  it('folds repeats into one Event: count and lastTimestamp patched at most once per 30 s', async () => {
    const r = make();
    for (let i = 0; i < 12; i++) {
      r.event(pvA, 'Warning', 'VolumeFailedDelete', 'same');
      await vi.advanceTimersByTimeAsync(5_000);
      await r.flush();
    }
    // 60 s: one create and two patches (at 30 s and 60 s), not 12 creates.
    await vi.advanceTimersByTimeAsync(0);
    await r.flush();
    expect(fake.count('create', 'events')).toBe(1);
    expect(fake.count('patch', 'events')).toBe(2);
    const [ev] = events();
    expect(ev?.count).toBe(12);
    expect(ev?.lastTimestamp).toEqual(new Date('2030-01-01T00:00:55Z'));
    expect(ev?.firstTimestamp).toEqual(new Date('2030-01-01T00:00:00Z'));
  });

  it('a different message, type or object is a different Event; after 10 minutes a repeat starts a new Event', async () => {
    const r = make();
    r.event(pvA, 'Warning', 'R', 'one');
    r.event(pvA, 'Warning', 'R', 'two');
    r.event(pvA, 'Normal', 'R', 'one');
    r.event(pvRef({ metadata: { name: 'pv-b' } }), 'Warning', 'R', 'one');
    await r.flush();
    expect(fake.count('create', 'events')).toBe(4);
    await vi.advanceTimersByTimeAsync(10 * 60_000 + 1);
    r.event(pvA, 'Warning', 'R', 'one');
    await r.flush();
    expect(fake.count('create', 'events')).toBe(5);
    expect(fake.count('patch', 'events')).toBe(0);
  });

  it('stop() sends the pending count and leaves no timers', async () => {
    const r = make();
    r.event(pvA, 'Warning', 'R', 'm');
    r.event(pvA, 'Warning', 'R', 'm');
    r.event(pvA, 'Warning', 'R', 'm');
    await r.flush();
    expect(vi.getTimerCount()).toBe(1);
    await r.stop();
    expect(vi.getTimerCount()).toBe(0);
    expect(events()[0]?.count).toBe(3);
    r.event(pvA, 'Warning', 'R', 'after stop');
    await r.flush();
    expect(fake.count('create', 'events')).toBe(1);
  });

  it('per-object spam filter: 25 at once, then one per 5 minutes', async () => {
    const r = make();
    for (let i = 0; i < 40; i++) r.event(pvA, 'Normal', 'R', `message ${i}`);
    r.event(pod, 'Normal', 'R', 'other object is not limited');
    await r.flush();
    expect(fake.count('create', 'events')).toBe(26);
    await vi.advanceTimersByTimeAsync(5 * 60_000);
    for (let i = 0; i < 5; i++) r.event(pvA, 'Normal', 'R', `later ${i}`);
    await r.flush();
    expect(fake.count('create', 'events')).toBe(27);
  });

  it('never throws when the API fails; a failed create is retried as a new Event next time', async () => {
    const r = make();
    fake.failNext('create', 'events', new KubeError(403, 'Forbidden', 'events is forbidden'));
    expect(() => {
      r.event(pvA, 'Warning', 'R', 'm');
    }).not.toThrow();
    await r.flush();
    expect(events()).toHaveLength(0);
    expect(logs.some((l) => l.level === 40 && l.msg.includes('could not record event'))).toBe(true);
    r.event(pvA, 'Warning', 'R', 'm');
    await r.flush();
    expect(events()).toHaveLength(1);
  });

  it('re-creates the Event when the patch finds it gone (server TTL)', async () => {
    const r = make();
    r.event(pvA, 'Warning', 'R', 'm');
    await r.flush();
    const first = events()[0]?.metadata?.name ?? '';
    fake.remove('events', `default/${first}`);
    await vi.advanceTimersByTimeAsync(31_000);
    r.event(pvA, 'Warning', 'R', 'm');
    await r.flush();
    const [ev] = events();
    expect(ev?.metadata?.name).not.toBe(first);
    expect(ev?.count).toBe(2);
    expect(ev?.firstTimestamp).toEqual(new Date('2030-01-01T00:00:00Z'));
  });

  it('bounds the queue, dropping the oldest with a log line', async () => {
    const sent: string[] = [];
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    const slow = {
      createEvent: async (_ns: string, ev: CoreV1Event) => {
        await gate;
        sent.push(ev.message ?? '');
        return ev;
      },
      patchEvent: () => Promise.reject(new Error('unused')),
    } as unknown as KubePort;
    const r = make({ queueSize: 3 }, slow);
    r.event(pvA, 'Normal', 'R', 'm0');
    await vi.advanceTimersByTimeAsync(0); // m0 is now being sent (and blocked)
    for (let i = 1; i < 6; i++) r.event(pvA, 'Normal', 'R', `m${i}`);
    release();
    await r.flush();
    // m1 and m2 were dropped to make room for m3..m5.
    expect(sent).toEqual(['m0', 'm3', 'm4', 'm5']);
    expect(logs.filter((l) => l.msg.includes('event queue full')).length).toBe(2);
  });

  it('truncates very long messages', async () => {
    const r = make();
    r.event(pvA, 'Warning', 'R', 'x'.repeat(5000));
    await r.flush();
    expect(events()[0]?.message).toHaveLength(1024);
  });

  it('escapes control characters of every message (paths, errno texts) before it is sent', async () => {
    const r = make();
    const path = '/mnt/disks/a\nWarning Forged\r\x1b[31mred\x1b[0m\t\x00\x7f\x9b\u2028\u202e';
    r.event(pvA, 'Warning', 'AnyReason', `cannot stat ${path}: ENOENT`);
    await r.flush();
    const msg = events()[0]?.message ?? '';
    expect(msg).toBe('cannot stat /mnt/disks/a\\nWarning Forged\\r\\x1b[31mred\\x1b[0m\\t\\x00\\x7f\\x9b\\u2028\\u202e: ENOENT');
    // eslint-disable-next-line no-control-regex
    expect(msg).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u2028\u202e]/);
  });

  it('bounds messages to 1024 UTF-8 bytes after escaping, never splitting a character', async () => {
    const r = make();
    r.event(pvA, 'Warning', 'R', '\n'.repeat(600)); // 1200 bytes once escaped
    r.event(pvA, 'Warning', 'R2', 'é'.repeat(1000)); // 2000 bytes
    r.event(pvA, 'Warning', 'R3', '😀'.repeat(300)); // surrogate pairs, 1200 bytes
    await r.flush();
    const byReason = new Map(events().map((e) => [e.reason, e.message ?? '']));
    for (const m of byReason.values()) {
      expect(Buffer.byteLength(m, 'utf8')).toBeLessThanOrEqual(1024);
      expect(m.endsWith('...')).toBe(true);
      expect(m).not.toContain('\ufffd');
    }
    expect(byReason.get('R')).toBe(`${'\\n'.repeat(510)}\\...`);
    expect(byReason.get('R2')).toBe(`${'é'.repeat(510)}...`);
    expect(byReason.get('R3')).toBe(`${'😀'.repeat(255)}...`);
  });
});
