// Does a PV's required node affinity select a node? The scheduler's rules for
// a NodeSelector, reduced to what a PV can carry: terms are ORed, the
// requirements of a term ANDed; an empty term selects nothing; matchFields
// knows metadata.name only. Used to find PVs of other owners that use a path
// on this node (the deleter's path-in-use check, docs/cleanup.md).
import type { V1Node, V1NodeSelector, V1NodeSelectorRequirement, V1NodeSelectorTerm } from '@kubernetes/client-node';

const asInt = (s: string | undefined): number | undefined => (s !== undefined && /^-?\d+$/.test(s) ? Number(s) : undefined);

function requirementMatches(r: V1NodeSelectorRequirement, value: string | undefined): boolean {
  const values = r.values ?? [];
  switch (r.operator) {
    case 'In':
      return value !== undefined && values.includes(value);
    case 'NotIn':
      return value === undefined || !values.includes(value);
    case 'Exists':
      return value !== undefined;
    case 'DoesNotExist':
      return value === undefined;
    case 'Gt':
    case 'Lt': {
      const have = asInt(value);
      const want = asInt(values[0]);
      if (have === undefined || want === undefined) return false;
      return r.operator === 'Gt' ? have > want : have < want;
    }
    default:
      return false;
  }
}

function termMatches(t: V1NodeSelectorTerm, node: V1Node): boolean {
  const exprs = t.matchExpressions ?? [];
  const fields = t.matchFields ?? [];
  if (exprs.length === 0 && fields.length === 0) return false;
  const labels = node.metadata?.labels ?? {};
  return (
    exprs.every((r) => requirementMatches(r, Object.hasOwn(labels, r.key) ? labels[r.key] : undefined)) &&
    fields.every((r) => r.key === 'metadata.name' && requirementMatches(r, node.metadata?.name))
  );
}

/** True when the selector selects the node; an absent selector selects every node. */
export function nodeSelectorMatches(selector: V1NodeSelector | undefined, node: V1Node): boolean {
  if (!selector) return true;
  return selector.nodeSelectorTerms.some((t) => termMatches(t, node));
}
