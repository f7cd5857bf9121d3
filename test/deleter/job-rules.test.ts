// Which PV a cleanup Job stands for, and when it counts as finished: each rule
// asserted on its own (mutation testing, docs/cleanup.md "Mutation testing").
import { describe, expect, it } from 'vitest';
import type { V1Job, V1JobCondition } from '@kubernetes/client-node';
import { jobPhase, jobTarget } from '../../src/deleter/job.ts';

const job = (name: string | undefined, labels?: Record<string, string>): V1Job => ({ metadata: { name, ...(labels ? { labels } : {}) } });
const withStatus = (status: V1Job['status'], backoffLimit?: number): V1Job => ({ spec: { template: {}, ...(backoffLimit !== undefined ? { backoffLimit } : {}) }, status });
const cond = (type: string, status: string): V1JobCondition => ({ type, status });

describe('jobTarget: only a Job named cleanup-<pv> with the same pv label stands for a PV', () => {
  it('a name without the cleanup- prefix never stands for a PV, even with a matching label', () => {
    expect(jobTarget(job('xxxxxxxxpv1', { pv: 'pv1' })).pvName).toBeUndefined();
    expect(jobTarget(job('pv1', { pv: '' })).pvName).toBeUndefined();
    expect(jobTarget(job(undefined, { pv: '' })).pvName).toBeUndefined();
  });

  it('the bare prefix names no PV', () => {
    expect(jobTarget(job('cleanup-', { pv: '' })).problem).toBe('its name "cleanup-" is not cleanup-<pv name>');
  });

  it('a Job without labels is a problem, not an error', () => {
    expect(jobTarget(job('cleanup-pv1'))).toEqual({ problem: 'its label pv is missing, but its name is for PV "pv1"' });
    expect(jobTarget({})).toEqual({ problem: 'its name "" is not cleanup-<pv name>' });
  });

  it('a Job named and labelled for the same PV stands for it', () => {
    expect(jobTarget(job('cleanup-pv1', { pv: 'pv1' }))).toEqual({ pvName: 'pv1' });
  });
});

describe('jobPhase: a Job has succeeded only when Kubernetes says so', () => {
  it('conditions count only with status True', () => {
    expect(jobPhase(withStatus({ conditions: [cond('Complete', 'False')] }))).toBe('Running');
    expect(jobPhase(withStatus({ conditions: [cond('Failed', 'False')] }))).toBe('Running');
    expect(jobPhase(withStatus({ conditions: [cond('FailureTarget', 'Unknown')] }))).toBe('Running');
    expect(jobPhase(withStatus({ conditions: [cond('Complete', 'True')] }))).toBe('Succeeded');
    expect(jobPhase(withStatus({ conditions: [cond('FailureTarget', 'True')] }))).toBe('Failed');
    expect(jobPhase(withStatus({ conditions: [cond('Suspended', 'True')] }))).toBe('Running');
  });

  it('a Job with active pods and no verdict is running, with or without a backoff limit', () => {
    expect(jobPhase(withStatus({ active: 1 }))).toBe('Running');
    expect(jobPhase(withStatus({ active: 1, failed: 2 }, 3))).toBe('Running');
    expect(jobPhase(withStatus({ failed: 3 }, 3))).toBe('Running');
    expect(jobPhase(withStatus({ failed: 4 }, 3))).toBe('Failed');
    expect(jobPhase({})).toBe('Running');
  });
});
