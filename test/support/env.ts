// One GenerationEnv for unit tests: the parts every generation-scoped class
// (Deleter, Discoverer, JobController, PVCache) shares, with test defaults, so
// a test lists only what it cares about.
import type { V1Node } from '@kubernetes/client-node';
import { GENERATION_ENV_KEYS, nodeIdOf, type GenerationEnv } from '../../src/volume/env.ts';
import { silentLogger } from '../../src/util/log.ts';
import type { PVCacheEnv } from '../../src/volume/pv-cache.ts';
import { testConfig } from './config.ts';

/** What a test must give: the API port, the recorder and the metrics it inspects. */
export type TestEnvParts = Pick<GenerationEnv, 'kube' | 'recorder' | 'metrics'> & Partial<GenerationEnv>;

/**
 * A GenerationEnv. Defaults: an empty config, lookupClass over that config's
 * classes, node `node-1` (nodeId from `node`), provisioner name derived from
 * the node name, namespace `default`, job image `provisioner:test`, a silent
 * logger, Date.now.
 */
export function testEnv(parts: TestEnvParts): GenerationEnv {
  const config = parts.config ?? testConfig({});
  const node: V1Node = parts.node ?? { metadata: { name: 'node-1', uid: 'node-uid' } };
  const nodeId = parts.nodeId ?? nodeIdOf(node);
  return {
    config,
    lookupClass: (n) => config.storageClassMap[n],
    node,
    nodeId,
    provisionerName: `local-volume-provisioner-${nodeId.name}`,
    namespace: 'default',
    jobImage: 'provisioner:test',
    logger: silentLogger,
    now: Date.now,
    ...parts,
  };
}

/** Splits a test's overrides into the GenerationEnv part and the class's own options. */
export function splitEnv<T extends object>(over: Partial<GenerationEnv> & T): [Partial<GenerationEnv>, T] {
  const env: Record<string, unknown> = {};
  const own: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(over)) ((GENERATION_ENV_KEYS as readonly string[]).includes(k) ? env : own)[k] = v;
  return [env, own as T];
}

/** The part of a GenerationEnv a PVCache needs: this node's name and UID, a silent logger, Date.now. */
export function testCacheEnv(nodeId: { name: string; uid: string }, now: () => number = Date.now): PVCacheEnv {
  return { nodeId, logger: silentLogger, now };
}
