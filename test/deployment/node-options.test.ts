// The image's NODE_OPTIONS (Dockerfile ENV) must be options Node accepts there:
// a V8 flag that is not allowed in NODE_OPTIONS (e.g. --no-opt) makes `node`
// exit at once, so the daemon would never start.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { imageCommand } from '../../bench/footprint.ts';

describe('Dockerfile NODE_OPTIONS', () => {
  it('starts this Node (24) with the image NODE_OPTIONS and node flags', () => {
    const { nodeArgs, env } = imageCommand();
    const r = spawnSync(process.execPath, [...nodeArgs, '-e', 'process.stdout.write("ok")'], {
      encoding: 'utf8',
      env: { PATH: process.env['PATH'] ?? '', ...env },
    });
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('ok');
    expect(r.status).toBe(0);
  });
});
