// The generation-scoped environment: what every part of one controller
// generation (PV cache, discoverer, deleter, job controller) shares. Built once
// per generation by startController; each part takes it plus only its own
// options.
import type { V1Node } from '@kubernetes/client-node';
import type { ClassConfig, ProvisionerConfig } from '../config/types.ts';
import type { EventRecorder } from '../kube/events.ts';
import type { KubePort } from '../kube/port.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { Logger } from '../util/log.ts';

export interface GenerationEnv {
  readonly config: ProvisionerConfig;
  /** The class's current settings, or the last known ones of a class removed from the config. */
  readonly lookupClass: (className: string) => ClassConfig | undefined;
  readonly node: V1Node;
  /** This node's name and UID (from `node`). */
  readonly nodeId: { readonly name: string; readonly uid: string };
  readonly provisionerName: string;
  /** MY_NAMESPACE (cleanup Jobs). */
  readonly namespace: string;
  /** JOB_CONTAINER_IMAGE (cleanup Jobs). */
  readonly jobImage: string;
  readonly kube: KubePort;
  readonly recorder: EventRecorder;
  readonly metrics: Metrics;
  /** The generation's logger; each part adds its `component`. */
  readonly logger: Logger;
  readonly now: () => number;
  /** Mount table (default /proc/self/mountinfo). */
  readonly mountInfoPath?: string | undefined;
}

/** The keys of GenerationEnv (to tell env fields from a part's own options). */
export const GENERATION_ENV_KEYS = [
  'config',
  'lookupClass',
  'node',
  'nodeId',
  'provisionerName',
  'namespace',
  'jobImage',
  'kube',
  'recorder',
  'metrics',
  'logger',
  'now',
  'mountInfoPath',
] as const satisfies readonly (keyof GenerationEnv)[];

/** This node's name and UID. */
export function nodeIdOf(node: V1Node): { name: string; uid: string } {
  return { name: node.metadata?.name ?? '', uid: node.metadata?.uid ?? '' };
}
