import { describe, expect, it } from 'vitest';
import { isAlreadyExists, isConflict, isNotFound, KubeError } from '../../src/kube/port.ts';

describe('KubeError predicates', () => {
  const alreadyExists = new KubeError(409, 'AlreadyExists', 'persistentvolumes "pv1" already exists');
  const conflict = new KubeError(409, 'Conflict', 'Precondition failed: UID in precondition: a, UID in object meta: b');

  it('isAlreadyExists: a 409 with reason AlreadyExists only', () => {
    expect(isAlreadyExists(alreadyExists)).toBe(true);
    expect(isAlreadyExists(conflict)).toBe(false);
    expect(isAlreadyExists(new KubeError(409, 'Unknown', 'HTTP 409'))).toBe(false);
    expect(isAlreadyExists(new KubeError(404, 'AlreadyExists', 'odd'))).toBe(false);
    expect(isAlreadyExists(new Error('409'))).toBe(false);
  });

  it('isConflict: a 409 of any reason but AlreadyExists (a bare 409 counts, as in apimachinery)', () => {
    expect(isConflict(conflict)).toBe(true);
    expect(isConflict(alreadyExists)).toBe(false);
    expect(isConflict(new KubeError(409, 'Unknown', 'HTTP 409'))).toBe(true);
    expect(isConflict(new KubeError(500, 'Conflict', 'odd'))).toBe(false);
    expect(isConflict(undefined)).toBe(false);
  });

  it('isNotFound is unchanged', () => {
    expect(isNotFound(new KubeError(404, 'NotFound', 'x'))).toBe(true);
    expect(isNotFound(conflict)).toBe(false);
  });
});
