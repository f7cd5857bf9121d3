import { beforeEach, describe, expect, it } from 'vitest';
import { NodeTaintRemover } from '../../src/controller/node-taint.ts';
import { KubeError } from '../../src/kube/port.ts';
import { silentLogger } from '../../src/util/log.ts';
import { FakeKube } from '../support/fake-kube.ts';

const KEY = 'example.com/agent-not-ready';
const keep = { key: 'example.com/other', value: 'v', effect: 'NoSchedule' };
let fake: FakeKube;
let now: number;
let remover: NodeTaintRemover;

beforeEach(() => {
  fake = new FakeKube();
  now = 1_000_000;
  fake.put('nodes', { metadata: { name: 'n1' }, spec: { taints: [{ key: KEY, effect: 'NoSchedule' }, keep, { key: KEY, value: 'x', effect: 'NoExecute' }] } });
  remover = new NodeTaintRemover({ kube: fake, nodeName: 'n1', logger: silentLogger, now: () => now });
});

const taints = () => fake.object('nodes', 'n1')?.spec?.taints;

describe('NodeTaintRemover', () => {
  it('does nothing while disabled, without a key, or not ready', async () => {
    await remover.maybeRemove(false, KEY, true);
    await remover.maybeRemove(true, '', true);
    await remover.maybeRemove(true, KEY, false);
    expect(fake.requests).toEqual([]);
  });

  it('removes every taint with the key, keeps the others, once', async () => {
    await remover.maybeRemove(true, KEY, true);
    expect(taints()).toEqual([keep]);
    expect(remover.removed).toBe(true);
    fake.update('nodes', 'n1', (n) => {
      n.spec = { taints: [{ key: KEY, effect: 'NoSchedule' }] };
    });
    await remover.maybeRemove(true, KEY, true);
    expect(fake.count('update', 'nodes')).toBe(1);
  });

  it('backs off after a failed update (e.g. a conflict), then retries', async () => {
    fake.failNext('update', 'nodes', new KubeError(409, 'Conflict', 'the object has been modified'));
    await remover.maybeRemove(true, KEY, true);
    expect(remover.removed).toBe(false);
    await remover.maybeRemove(true, KEY, true);
    expect(fake.count('update', 'nodes')).toBe(1); // still backing off
    now += 60_000;
    await remover.maybeRemove(true, KEY, true);
    expect(taints()).toEqual([keep]);
  });

  it('sends no update when the node has no such taint', async () => {
    await remover.maybeRemove(true, 'example.com/absent', true);
    expect(fake.count('update', 'nodes')).toBe(0);
    expect(taints()).toHaveLength(3);
  });
});
