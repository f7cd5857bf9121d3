// ProcTable rules not covered by proctable.test.ts (issue 17 point 9: mutation
// testing of the safety code): isEmpty sees every entry, running or finished and
// not yet consumed; a PV whose UID is not given is bound to the UID "" and only
// that UID finishes it.
import { describe, expect, it } from 'vitest';
import { ProcTable } from '../../src/deleter/proctable.ts';

describe('ProcTable rules', () => {
  it('is not empty while an entry runs or waits, finished, to be consumed', () => {
    const pt = new ProcTable();
    expect(pt.isEmpty()).toBe(true);
    pt.markRunning('pv1', 'u1');
    expect(pt.isEmpty()).toBe(false);
    pt.markFailed('pv1', 'u1', 'boom');
    expect(pt.isEmpty()).toBe(false);
    pt.removeEntry('pv1', 'u1');
    expect(pt.isEmpty()).toBe(true);
  });

  it('binds an entry started without a UID to the UID "", which finishes it by default', () => {
    const pt = new ProcTable({ now: () => 1 });
    pt.markRunning('pv1');
    expect(pt.get('pv1')).toMatchObject({ uid: '', state: 'Running' });
    pt.markSucceeded('pv1');
    expect(pt.get('pv1')).toMatchObject({ uid: '', state: 'Succeeded' });

    pt.markRunning('pv2', '');
    pt.markFailed('pv2');
    expect(pt.get('pv2')).toMatchObject({ uid: '', state: 'Failed' });
    expect(pt.stats()).toEqual({ running: 0, succeeded: 1, failed: 1 });
  });

  it('does not let a call without a UID finish the entry of a known UID, nor the reverse', () => {
    const pt = new ProcTable();
    pt.markRunning('pv1', 'u1');
    expect(() => pt.markSucceeded('pv1')).toThrow(/UID "u1", not ""/);
    expect(() => pt.markFailed('pv1')).toThrow(/UID "u1", not ""/);
    pt.markRunning('pv2');
    expect(() => pt.markSucceeded('pv2', 'u2')).toThrow(/UID "", not "u2"/);
    expect(pt.stats()).toEqual({ running: 2, succeeded: 0, failed: 0 });
  });
});
