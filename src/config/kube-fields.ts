// Decoding and validation of the Kubernetes types embedded in the config:
// storageClassMap.<class>.selector ([]NodeSelectorTerm) and jobTolerations
// ([]Toleration). Keys match case-insensitively as in Go; the objects built
// carry only the fields that were set, as Go's omitempty JSON would, so they
// can go into PV and Job specs unchanged.
import type { V1NodeSelectorRequirement, V1NodeSelectorTerm, V1Toleration } from '@kubernetes/client-node';
import { Issues, joinPath, readString, readStringList, readStruct } from './decode.ts';
import { describe } from './goyaml.ts';
import type { GoValue } from './goyaml.ts';
import { isQualifiedName } from './names.ts';

const SELECTOR_OPERATORS = ['In', 'NotIn', 'Exists', 'DoesNotExist', 'Gt', 'Lt'];
const TOLERATION_OPERATORS = ['Equal', 'Exists', 'Lt', 'Gt'];
const TAINT_EFFECTS = ['NoSchedule', 'PreferNoSchedule', 'NoExecute'];
const INTEGER = /^-?[0-9]+$/;

function readList(issues: Issues, v: GoValue, path: string, what: string): readonly GoValue[] | undefined {
  if (v.kind === 'null') return undefined;
  if (v.kind === 'seq') return v.items;
  issues.error(path, v.line, `expected a list of ${what}, got ${describe(v)}`);
  return undefined;
}

function readRequirement(
  issues: Issues,
  v: GoValue,
  path: string,
  fieldSelector: boolean,
): V1NodeSelectorRequirement | undefined {
  if (v.kind === 'null') {
    issues.error(path, v.line, 'empty node selector requirement');
    return undefined;
  }
  const fields = readStruct(issues, v, path, ['key', 'operator', 'values'], 'a node selector requirement (map)');
  if (fields === undefined) return undefined;
  const errorsBefore = issues.errors.length;
  const get = (name: string): GoValue => fields.get(name)?.value ?? { kind: 'null', line: v.line };
  const key = readString(issues, get('key'), joinPath(path, 'key')) ?? '';
  const operator = readString(issues, get('operator'), joinPath(path, 'operator')) ?? '';
  const values = readStringList(issues, get('values'), joinPath(path, 'values')) ?? [];
  if (issues.errors.length > errorsBefore) return undefined;

  const keyLine = fields.get('key')?.value.line ?? v.line;
  const opLine = fields.get('operator')?.value.line ?? v.line;
  const valuesLine = fields.get('values')?.value.line ?? v.line;
  if (fieldSelector) {
    if (key !== 'metadata.name') {
      issues.error(joinPath(path, 'key'), keyLine, `unsupported field selector key ${JSON.stringify(key)}: only "metadata.name" is supported`);
    }
    if (operator !== 'In' && operator !== 'NotIn') {
      issues.error(joinPath(path, 'operator'), opLine, `unsupported field selector operator ${JSON.stringify(operator)}: use In or NotIn`);
    } else if (values.length !== 1) {
      issues.error(joinPath(path, 'values'), valuesLine, `operator ${operator} on a field selector needs exactly one value`);
    }
  } else {
    if (!isQualifiedName(key)) {
      issues.error(joinPath(path, 'key'), keyLine, `invalid label key ${JSON.stringify(key)}`);
    }
    if (!SELECTOR_OPERATORS.includes(operator)) {
      issues.error(
        joinPath(path, 'operator'),
        opLine,
        `unsupported operator ${JSON.stringify(operator)}: use one of ${SELECTOR_OPERATORS.join(', ')}`,
      );
    } else if ((operator === 'In' || operator === 'NotIn') && values.length === 0) {
      issues.error(joinPath(path, 'values'), valuesLine, `operator ${operator} needs at least one value`);
    } else if ((operator === 'Exists' || operator === 'DoesNotExist') && values.length > 0) {
      issues.error(joinPath(path, 'values'), valuesLine, `operator ${operator} takes no values`);
    } else if ((operator === 'Gt' || operator === 'Lt') && (values.length !== 1 || !INTEGER.test(values[0]!))) {
      issues.error(joinPath(path, 'values'), valuesLine, `operator ${operator} needs exactly one integer value`);
    }
  }
  if (issues.errors.length > errorsBefore) return undefined;
  const req: V1NodeSelectorRequirement = { key, operator };
  if (values.length > 0) req.values = values;
  return req;
}

function readRequirements(
  issues: Issues,
  v: GoValue | undefined,
  path: string,
  fieldSelector: boolean,
): V1NodeSelectorRequirement[] | undefined {
  if (v === undefined) return undefined;
  const items = readList(issues, v, path, 'node selector requirements');
  if (items === undefined) return undefined;
  const out: V1NodeSelectorRequirement[] = [];
  items.forEach((item, i) => {
    const r = readRequirement(issues, item, `${path}[${i}]`, fieldSelector);
    if (r !== undefined) out.push(r);
  });
  return out;
}

/** storageClassMap.<class>.selector: a list of node selector terms (ORed). */
export function readSelector(issues: Issues, v: GoValue, path: string): V1NodeSelectorTerm[] | undefined {
  const items = readList(issues, v, path, 'node selector terms');
  if (items === undefined) return undefined;
  const terms: V1NodeSelectorTerm[] = [];
  items.forEach((item, i) => {
    const p = `${path}[${i}]`;
    if (item.kind === 'null') {
      issues.error(p, item.line, 'empty node selector term: it would match no node');
      return;
    }
    const fields = readStruct(issues, item, p, ['matchExpressions', 'matchFields'], 'a node selector term (map)');
    if (fields === undefined) return;
    const errorsBefore = issues.errors.length;
    const exprs = readRequirements(issues, fields.get('matchExpressions')?.value, joinPath(p, 'matchExpressions'), false);
    const matchFields = readRequirements(issues, fields.get('matchFields')?.value, joinPath(p, 'matchFields'), true);
    if (issues.errors.length > errorsBefore) return;
    const term: V1NodeSelectorTerm = {};
    if (exprs !== undefined && exprs.length > 0) term.matchExpressions = exprs;
    if (matchFields !== undefined && matchFields.length > 0) term.matchFields = matchFields;
    if (term.matchExpressions === undefined && term.matchFields === undefined) {
      issues.error(p, item.line, 'empty node selector term: it would match no node');
      return;
    }
    terms.push(term);
  });
  return terms;
}

function readTolerationSeconds(issues: Issues, v: GoValue, path: string): number | undefined {
  if (v.kind === 'null') return undefined;
  if (v.kind === 'int' && v.value >= -(2n ** 63n) && v.value < 2n ** 63n) return Number(v.value);
  if (v.kind === 'float' && Number.isInteger(v.value)) return v.value;
  issues.error(path, v.line, `expected an integer number of seconds, got ${describe(v)}`);
  return undefined;
}

function readToleration(issues: Issues, v: GoValue, path: string): V1Toleration | undefined {
  const fields = readStruct(
    issues,
    v,
    path,
    ['key', 'operator', 'value', 'effect', 'tolerationSeconds'],
    'a toleration (map)',
  );
  if (v.kind !== 'null' && v.kind !== 'map') return undefined; // wrong type, reported
  const errorsBefore = issues.errors.length;
  const get = (name: string): GoValue => fields?.get(name)?.value ?? { kind: 'null', line: v.line };
  const key = readString(issues, get('key'), joinPath(path, 'key')) ?? '';
  const operator = readString(issues, get('operator'), joinPath(path, 'operator')) ?? '';
  const value = readString(issues, get('value'), joinPath(path, 'value')) ?? '';
  const effect = readString(issues, get('effect'), joinPath(path, 'effect')) ?? '';
  const seconds = readTolerationSeconds(issues, get('tolerationSeconds'), joinPath(path, 'tolerationSeconds'));
  if (issues.errors.length > errorsBefore) return undefined;
  if (fields === undefined) {
    issues.error(path, v.line, 'empty toleration: set a key, or operator Exists to tolerate every taint');
    return undefined;
  }
  const line = (name: string): number | undefined => fields.get(name)?.value.line ?? v.line;
  if (operator !== '' && !TOLERATION_OPERATORS.includes(operator)) {
    issues.error(joinPath(path, 'operator'), line('operator'), `unsupported operator ${JSON.stringify(operator)}: use Equal or Exists`);
  }
  if (key === '' && operator !== 'Exists') {
    issues.error(joinPath(path, 'operator'), line('operator'), 'operator must be Exists when key is empty');
  }
  if (key !== '' && !isQualifiedName(key)) {
    issues.error(joinPath(path, 'key'), line('key'), `invalid taint key ${JSON.stringify(key)}`);
  }
  if (operator === 'Exists' && value !== '') {
    issues.error(joinPath(path, 'value'), line('value'), 'value must be empty when operator is Exists');
  }
  if (effect !== '' && !TAINT_EFFECTS.includes(effect)) {
    issues.error(joinPath(path, 'effect'), line('effect'), `unsupported effect ${JSON.stringify(effect)}: use one of ${TAINT_EFFECTS.join(', ')}`);
  }
  if (seconds !== undefined && effect !== 'NoExecute') {
    issues.error(joinPath(path, 'tolerationSeconds'), line('tolerationSeconds'), "tolerationSeconds needs effect NoExecute");
  }
  if (issues.errors.length > errorsBefore) return undefined;
  const t: V1Toleration = {};
  if (key !== '') t.key = key;
  if (operator !== '') t.operator = operator;
  if (value !== '') t.value = value;
  if (effect !== '') t.effect = effect;
  if (seconds !== undefined) t.tolerationSeconds = seconds;
  return t;
}

/** jobTolerations: the cleanup Job pods' tolerations. */
export function readTolerations(issues: Issues, v: GoValue, path: string): V1Toleration[] | undefined {
  const items = readList(issues, v, path, 'tolerations');
  if (items === undefined) return undefined;
  const out: V1Toleration[] = [];
  items.forEach((item, i) => {
    const t = readToleration(issues, item, `${path}[${i}]`);
    if (t !== undefined) out.push(t);
  });
  return out;
}
