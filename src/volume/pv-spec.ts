// The PersistentVolume object discovery creates, field for field what the Go
// provisioner's createPV/CreateLocalPVSpec produce (keys are also laid out in
// Go's JSON field order, so a serialized PV reads the same).
import type {
  V1Node,
  V1NodeSelectorRequirement,
  V1NodeSelectorTerm,
  V1OwnerReference,
  V1PersistentVolume,
} from '@kubernetes/client-node';
import type { ClassConfig, ProvisionerConfig } from '../config/types.ts';
import { roundDownCapacityPretty } from './capacity.ts';
import { formatQuantity } from '../util/quantity.ts';
import { ANN_VOLUME_IDENTITY } from '../identity/identity.ts';

export const ANN_PROVISIONED_BY = 'pv.kubernetes.io/provisioned-by';
export const ANN_ALPHA_NODE_AFFINITY = 'volume.alpha.kubernetes.io/node-affinity';
/** The well-known node label naming the host; the one copy of this string in src/. */
export const LABEL_HOSTNAME = 'kubernetes.io/hostname';

/** `kubernetes.io/hostname In [<the node's hostname label>]`; throws the Go errors when the label is missing. */
export function nodeHostnameTerm(node: V1Node): V1NodeSelectorTerm {
  const labels = node.metadata?.labels;
  if (!labels) throw new Error('Node does not have labels');
  const hostname = labels[LABEL_HOSTNAME];
  if (hostname === undefined) throw new Error(`Node does not have expected label ${LABEL_HOSTNAME}`);
  return { matchExpressions: [{ key: LABEL_HOSTNAME, operator: 'In', values: [hostname] }] };
}

/** `{apiVersion: v1, kind: Node, name, uid}`; throws the Go errors for a node without name or UID. */
export function nodeOwnerReference(node: V1Node): V1OwnerReference {
  const name = node.metadata?.name;
  const uid = node.metadata?.uid;
  if (!name) throw new Error('Node does not have name');
  if (!uid) throw new Error('Node does not have UID');
  return { apiVersion: 'v1', kind: 'Node', name, uid };
}

/** nodeLabelsForPV keys the node has (copied with their values), then labelsForPV on top. */
export function buildPVLabels(
  node: V1Node,
  config: Pick<ProvisionerConfig, 'nodeLabelsForPV' | 'labelsForPV'>,
): Record<string, string> {
  const nodeLabels = node.metadata?.labels ?? {};
  const out: Record<string, string> = {};
  for (const key of config.nodeLabelsForPV) {
    const v = nodeLabels[key];
    if (v !== undefined) out[key] = v;
  }
  for (const [k, v] of Object.entries(config.labelsForPV)) out[k] = v;
  return sortedRecord(out);
}

function sortedRecord(r: Record<string, string>): Record<string, string> {
  // Go marshals maps with sorted keys.
  const out: Record<string, string> = {};
  for (const k of Object.keys(r).sort()) out[k] = r[k] as string;
  return out;
}

function cleanRequirement(r: V1NodeSelectorRequirement): V1NodeSelectorRequirement {
  const out: V1NodeSelectorRequirement = { key: r.key, operator: r.operator };
  if (r.values && r.values.length > 0) out.values = [...r.values];
  return out;
}

/**
 * A copy of a term as Go would serialize it: key order matchExpressions,
 * matchFields; key, operator, values; empty lists dropped (omitempty).
 */
export function cleanNodeSelectorTerm(t: V1NodeSelectorTerm): V1NodeSelectorTerm {
  const out: V1NodeSelectorTerm = {};
  if (t.matchExpressions && t.matchExpressions.length > 0) out.matchExpressions = t.matchExpressions.map(cleanRequirement);
  if (t.matchFields && t.matchFields.length > 0) out.matchFields = t.matchFields.map(cleanRequirement);
  return out;
}

/** JSON.stringify plus Go encoding/json's HTML-safe escaping of <, >, &, U+2028 and U+2029. */
export function goJSON(value: unknown): string {
  return JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** The alpha annotation value: json.Marshal(v1.NodeAffinity{RequiredDuringScheduling...: {NodeSelectorTerms: terms}}). */
export function alphaNodeAffinityAnnotation(terms: readonly V1NodeSelectorTerm[]): string {
  return goJSON({ requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: terms.map(cleanNodeSelectorTerm) } });
}

export interface LocalPVInput {
  /** PV name (generatePVName). */
  readonly name: string;
  readonly provisionerName: string;
  /** From buildPVLabels; omitted from the PV when empty. */
  readonly labels: Readonly<Record<string, string>>;
  /** From nodeHostnameTerm. */
  readonly hostnameTerm: V1NodeSelectorTerm;
  /** Set only when config.setPVOwnerRef (from nodeOwnerReference). */
  readonly ownerReference?: V1OwnerReference | undefined;
  readonly config: Pick<ProvisionerConfig, 'useAlphaAPI' | 'setPVOwnerRef'>;
  readonly className: string;
  readonly classConfig: ClassConfig;
  /** spec.local.path: the entry's path under hostDir. */
  readonly hostPath: string;
  /** Raw size in bytes; rounded with roundDownCapacityPretty here. */
  readonly capacityBytes: bigint;
  /** From the StorageClass (nil means Delete; resolved by the caller). */
  readonly reclaimPolicy: string;
  /** StorageClass mountOptions; set on the PV only when non-empty. */
  readonly mountOptions?: readonly string[] | undefined;
  /**
   * What discovery found at the path (src/identity/identity.ts), recorded in
   * the annotation ANN_VOLUME_IDENTITY: our only addition to the Go
   * provisioner's PV (metadata; the spec is unchanged). Omitted when undefined.
   */
  readonly identity?: string | undefined;
}

/**
 * Builds the PV. With useAlphaAPI the affinity goes into the alpha annotation
 * and holds the hostname term only: the Go provisioner renders that annotation
 * once per discoverer from the node, so a class `selector` is not part of it
 * (we keep that); otherwise spec.nodeAffinity is [hostname term] ++ class.selector.
 */
export function buildLocalPV(input: LocalPVInput): V1PersistentVolume {
  // Go marshals the annotation map with sorted keys; ours sorts first.
  const annotations: Record<string, string> = {};
  if (input.identity !== undefined) annotations[ANN_VOLUME_IDENTITY] = input.identity;
  annotations[ANN_PROVISIONED_BY] = input.provisionerName;
  if (input.config.useAlphaAPI) annotations[ANN_ALPHA_NODE_AFFINITY] = alphaNodeAffinityAnnotation([input.hostnameTerm]);

  const metadata: NonNullable<V1PersistentVolume['metadata']> = { name: input.name };
  if (Object.keys(input.labels).length > 0) metadata.labels = sortedRecord({ ...input.labels });
  metadata.annotations = annotations;
  if (input.config.setPVOwnerRef && input.ownerReference) {
    const { apiVersion, kind, name, uid } = input.ownerReference;
    metadata.ownerReferences = [{ apiVersion, kind, name, uid }];
  }

  const cls = input.classConfig;
  const local: { path: string; fsType?: string } = { path: input.hostPath };
  if (cls.fsType) local.fsType = cls.fsType;

  const spec: NonNullable<V1PersistentVolume['spec']> = {
    capacity: { storage: formatQuantity(roundDownCapacityPretty(input.capacityBytes)) },
    local,
    accessModes: [cls.accessMode || 'ReadWriteOnce'],
    persistentVolumeReclaimPolicy: input.reclaimPolicy,
    storageClassName: input.className,
  };
  if (input.mountOptions && input.mountOptions.length > 0) spec.mountOptions = [...input.mountOptions];
  spec.volumeMode = cls.volumeMode;
  if (!input.config.useAlphaAPI) {
    spec.nodeAffinity = {
      required: { nodeSelectorTerms: [input.hostnameTerm, ...(cls.selector ?? [])].map(cleanNodeSelectorTerm) },
    };
  }
  return { apiVersion: 'v1', kind: 'PersistentVolume', metadata, spec };
}
