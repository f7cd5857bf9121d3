import { describe, expect, it } from 'vitest';
import { ProcTable } from '../../src/deleter/proctable.ts';
import { MAX_TEXT_BYTES } from '../../src/util/errors.ts';

describe('ProcTable', () => {
  it('runs through Running -> Succeeded -> consumed once', () => {
    let t = 1000;
    const pt = new ProcTable({ now: () => t });
    pt.markRunning('pv1', 'u1');
    expect(pt.isRunning('pv1')).toBe(true);
    expect(pt.stats()).toEqual({ running: 1, succeeded: 0, failed: 0 });
    expect(() => pt.removeEntry('pv1', 'u1')).toThrow(/still running/);
    t = 5000;
    pt.markSucceeded('pv1', 'u1');
    expect(pt.isRunning('pv1')).toBe(false);
    expect(pt.get('pv1')).toMatchObject({ state: 'Succeeded', startTime: 1000, endTime: 5000 });
    expect(pt.stats()).toEqual({ running: 0, succeeded: 1, failed: 0 });
    expect(pt.removeEntry('pv1', 'u1')).toEqual({ state: 'Succeeded', startTime: 1000, error: undefined, info: undefined });
    expect(pt.removeEntry('pv1', 'u1')).toEqual({ state: 'NotFound' });
    expect(pt.isEmpty()).toBe(true);
  });

  it(`stores a failed cleanup's error capped to ${MAX_TEXT_BYTES} bytes, with a marker`, () => {
    const pt = new ProcTable();
    pt.markRunning('pv1', 'u1');
    pt.markFailed('pv1', 'u1', `remove /mnt/vol/${'d/'.repeat(20_000)}f: EPERM`);
    const error = pt.removeEntry('pv1', 'u1').error ?? '';
    expect(Buffer.byteLength(error)).toBeLessThanOrEqual(MAX_TEXT_BYTES);
    expect(error).toMatch(/^remove \/mnt\/vol\/d\/d\/.*\[\.\.\. \d+ bytes cut \.\.\.\]$/);
  });

  it('keeps the error of a failed cleanup and counts it', () => {
    const pt = new ProcTable({ now: () => 7 });
    pt.markRunning('pv1', 'u1', { mode: 'Block', command: '/scripts/shred.sh' });
    pt.markFailed('pv1', 'u1', 'exit code 3');
    expect(pt.stats()).toEqual({ running: 0, succeeded: 0, failed: 1 });
    expect(pt.removeEntry('pv1', 'u1')).toEqual({
      state: 'Failed',
      startTime: 7,
      error: 'exit code 3',
      info: { mode: 'Block', command: '/scripts/shred.sh' },
    });
  });

  it('refuses a second markRunning while an entry exists', () => {
    const pt = new ProcTable();
    pt.markRunning('pv1', 'u1');
    expect(() => pt.markRunning('pv1', 'u1')).toThrow(/already running/);
    expect(() => pt.markRunning('pv1', 'u2')).toThrow(/already running/);
    pt.markSucceeded('pv1', 'u1');
    // A finished entry of the same UID must be consumed before a new cleanup.
    expect(() => pt.markRunning('pv1', 'u1')).toThrow(/already succeeded/);
  });

  it('counts only real transitions', () => {
    const pt = new ProcTable();
    expect(() => pt.markSucceeded('nope', 'u')).toThrow(/not in the process table/);
    expect(() => pt.markFailed('nope', 'u')).toThrow(/not in the process table/);
    pt.markRunning('pv1', 'u1');
    pt.markSucceeded('pv1', 'u1');
    expect(() => pt.markSucceeded('pv1', 'u1')).toThrow(/already succeeded/);
    expect(() => pt.markFailed('pv1', 'u1')).toThrow(/already succeeded/);
    expect(pt.stats()).toEqual({ running: 0, succeeded: 1, failed: 0 });
  });

  it('refuses to finish an entry of another UID', () => {
    const pt = new ProcTable();
    pt.markRunning('pv1', 'old');
    expect(() => pt.markSucceeded('pv1', 'new')).toThrow(/UID "old"/);
    expect(pt.isRunning('pv1')).toBe(true);
    expect(pt.stats().succeeded).toBe(0);
  });

  it('never lets a stale Succeeded of an old PV stand for a new PV with the same name (#174)', () => {
    const pt = new ProcTable();
    pt.markRunning('local-pv-1', 'old-uid');
    pt.markSucceeded('local-pv-1', 'old-uid');
    // The old PV was deleted elsewhere; a new PV with the same name is Released.
    const r = pt.removeEntry('local-pv-1', 'new-uid');
    expect(r.state).toBe('NotFound');
    expect(r.droppedStale).toBe(true);
    // The stale entry is gone, so a fresh cleanup of the new PV can start.
    expect(pt.get('local-pv-1')).toBeUndefined();
    pt.markRunning('local-pv-1', 'new-uid');
    expect(pt.isRunning('local-pv-1')).toBe(true);
  });

  it('replaces a finished stale entry on markRunning for another UID', () => {
    const pt = new ProcTable();
    pt.markRunning('pv1', 'old');
    pt.markFailed('pv1', 'old', 'boom');
    pt.markRunning('pv1', 'new');
    expect(pt.get('pv1')).toMatchObject({ uid: 'new', state: 'Running' });
    expect(pt.stats()).toEqual({ running: 1, succeeded: 0, failed: 1 });
  });

  it('removeEntry without a UID consumes whatever finished entry there is', () => {
    const pt = new ProcTable();
    pt.markRunning('pv1', 'x');
    pt.markSucceeded('pv1', 'x');
    expect(pt.removeEntry('pv1').state).toBe('Succeeded');
  });
});
