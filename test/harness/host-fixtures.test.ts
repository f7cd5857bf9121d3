// HostFixtures (e2e/support/host.ts) makes its temp root on first use, not when constructed:
// a describe body that builds one runs even when `-t` filters out all its tests (and with
// them the afterAll that cleans up), so a root made there would be left behind.
import { existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { HostFixtures } from '../../e2e/support/host.ts';

const PREFIX = `lsp-hostfix-${process.pid}-`;
const roots = (): string[] => readdirSync(tmpdir()).filter((n) => n.startsWith(PREFIX));

let host: HostFixtures | undefined;
afterEach(() => {
  host?.cleanup();
  host = undefined;
});

describe('HostFixtures', () => {
  it('creates nothing until first used, then one root that cleanup() removes', () => {
    host = new HostFixtures(PREFIX);
    expect(roots()).toEqual([]);
    const file = host.path('a', 'b.log');
    expect(roots()).toHaveLength(1);
    expect(file.startsWith(host.root)).toBe(true);
    expect(existsSync(host.mkdir('sub'))).toBe(true);
    host.cleanup();
    expect(roots()).toEqual([]);
  });

  it('cleanup() of a fixture never used removes nothing and creates nothing', () => {
    host = new HostFixtures(PREFIX);
    host.cleanup();
    expect(roots()).toEqual([]);
  });
});
