import type { V1NodeSelectorRequirement, V1PersistentVolume } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { isClaimOf, nodeHostnames, pinnedHostnames, pvDeletable } from '../../src/node-cleanup/pv.ts';

const HOST = 'kubernetes.io/hostname';
const host = (...values: string[]): V1NodeSelectorRequirement => ({ key: HOST, operator: 'In', values });
const zone: V1NodeSelectorRequirement = { key: 'topology.kubernetes.io/zone', operator: 'In', values: ['z'] };
const pv = (...terms: V1NodeSelectorRequirement[][]): V1PersistentVolume => ({
  metadata: { name: 'pv' },
  spec: { nodeAffinity: { required: { nodeSelectorTerms: terms.map((matchExpressions) => ({ matchExpressions })) } } },
});

describe('pinnedHostnames', () => {
  it('unions terms and intersects the hostname expressions within a term', () => {
    expect(pinnedHostnames(pv([host('b')], [host('a')]))).toEqual(['a', 'b']);
    expect(pinnedHostnames(pv([host('a', 'b'), host('b', 'c')]))).toEqual(['b']);
    expect(pinnedHostnames(pv([host('a'), zone]))).toEqual(['a']);
  });

  it('is undefined (never act) when any term is not pinned to hostnames', () => {
    expect(pinnedHostnames(pv([zone]))).toBeUndefined();
    expect(pinnedHostnames(pv([host('a')], [zone]))).toBeUndefined();
    expect(pinnedHostnames(pv([{ key: HOST, operator: 'NotIn', values: ['a'] }]))).toBeUndefined();
    expect(pinnedHostnames(pv([{ key: HOST, operator: 'Exists' }]))).toBeUndefined();
    expect(pinnedHostnames(pv([]))).toBeUndefined();
    expect(pinnedHostnames(pv())).toBeUndefined();
    expect(pinnedHostnames({ spec: {} })).toBeUndefined();
    expect(pinnedHostnames({ spec: { nodeAffinity: {} } })).toBeUndefined();
    expect(pinnedHostnames({ spec: { nodeAffinity: { required: { nodeSelectorTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: ['a'] }] }] } } } })).toBeUndefined();
  });

  it('is undefined when no name is left', () => {
    expect(pinnedHostnames(pv([host('a'), host('b')]))).toBeUndefined();
    expect(pinnedHostnames(pv([host()]))).toBeUndefined();
    expect(pinnedHostnames(pv([host('')]))).toBeUndefined();
  });
});

describe('nodeHostnames', () => {
  it('is the name and the hostname label', () => {
    expect(nodeHostnames({ metadata: { name: 'n1', labels: { [HOST]: 'h1' } } })).toEqual(['n1', 'h1']);
    expect(nodeHostnames({ metadata: { name: 'n1', labels: { [HOST]: 'n1' } } })).toEqual(['n1']);
    expect(nodeHostnames({ metadata: { name: 'n1' } })).toEqual(['n1']);
  });
});

describe('isClaimOf', () => {
  const bound: V1PersistentVolume = { metadata: { name: 'pv' }, spec: { claimRef: { namespace: 'ns', name: 'c', uid: 'u1' } } };
  const claim = (uid: string, volumeName?: string) => ({ metadata: { namespace: 'ns', name: 'c', uid }, spec: volumeName ? { volumeName } : {} });
  it('needs the claimRef UID and volumeName both to match', () => {
    expect(isClaimOf(claim('u1', 'pv'), bound)).toBe(true);
    expect(isClaimOf(claim('u2', 'pv'), bound)).toBe(false);
    expect(isClaimOf(claim('u1', 'other'), bound)).toBe(false);
    expect(isClaimOf(claim('u1'), bound)).toBe(false);
    expect(isClaimOf(claim('u1', 'pv'), { metadata: { name: 'pv' }, spec: { claimRef: { namespace: 'ns', name: 'c' } } })).toBe(false);
  });
});

describe('pvDeletable', () => {
  const p = (phase: string, policy: string): V1PersistentVolume => ({ spec: { persistentVolumeReclaimPolicy: policy }, status: { phase } });
  it('Available (any policy) or Released with Delete', () => {
    expect(pvDeletable(p('Available', 'Retain'))).toBe(true);
    expect(pvDeletable(p('Available', 'Delete'))).toBe(true);
    expect(pvDeletable(p('Released', 'Delete'))).toBe(true);
    expect(pvDeletable(p('Released', 'Retain'))).toBe(false);
    expect(pvDeletable(p('Bound', 'Delete'))).toBe(false);
    expect(pvDeletable(p('Failed', 'Delete'))).toBe(false);
    expect(pvDeletable({})).toBe(false);
  });
});
