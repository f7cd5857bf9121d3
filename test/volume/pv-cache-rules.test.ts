// pvOnThisNode, the selection every clean starts from (mutation testing,
// docs/cleanup.md "Mutation testing").
import { describe, expect, it } from 'vitest';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { pvOnThisNode } from '../../src/volume/pv-cache.ts';

const node = { name: 'node-1', uid: 'uid-1' };
const pv = (by: string, labels?: Record<string, string>): V1PersistentVolume => ({
  metadata: { name: 'pv', annotations: { 'pv.kubernetes.io/provisioned-by': by }, ...(labels ? { labels } : {}) },
});

describe('pvOnThisNode', () => {
  it('a PV of another UID of this node name without labels is not ours (and does not throw)', () => {
    expect(pvOnThisNode(pv('local-volume-provisioner-node-1-old-uid'), node)).toBe(false);
  });

  it('a PV of another UID of this node name is ours only with this node hostname label', () => {
    expect(pvOnThisNode(pv('local-volume-provisioner-node-1-old-uid', { 'kubernetes.io/hostname': 'node-1' }), node)).toBe(true);
    expect(pvOnThisNode(pv('local-volume-provisioner-node-1-old-uid', { 'kubernetes.io/hostname': 'node-10' }), node)).toBe(false);
  });
});
