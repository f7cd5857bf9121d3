import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { EVENT_REASONS } from '../../src/kube/reasons.ts';

const operations = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');

describe('Event reason catalogue', () => {
  it('has no reason twice', () => {
    expect(new Set(EVENT_REASONS).size).toBe(EVENT_REASONS.length);
  });

  it.each(EVENT_REASONS)('docs/operations.md lists %s in its Events table', (reason) => {
    expect(operations).toContain(`| \`${reason}\` |`);
  });
});
