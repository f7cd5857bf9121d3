// The patches of src/kube/client-node-patches.ts still apply to the installed
// @kubernetes/client-node: an upgrade that moves any of the internals they rely on
// fails here instead of silently losing connection reuse or the watch timeout.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubeConfig, Watch } from '@kubernetes/client-node';
import {
  clientNodePatchProblems,
  deserializeModel,
  reuseDispatchers,
  setWatchInactivityTimeout,
} from '../../src/kube/client-node-patches.ts';
import { createKubeClient } from '../../src/kube/client.ts';

describe('client-node patches: the internals they rely on are there', () => {
  it('reports no problem', () => {
    expect(clientNodePatchProblems()).toEqual([]);
  });

  it('each patch applies', () => {
    const kc = new KubeConfig();
    expect(reuseDispatchers(kc)).toBe(true);
    const w = new Watch(kc);
    expect(setWatchInactivityTimeout(w, 1234)).toBe(true);
    expect((w as unknown as { requestTimeoutMs: unknown }).requestTimeoutMs).toBe(1234);
    const pv = deserializeModel({ metadata: { creationTimestamp: '2024-01-02T03:04:05Z' } }, 'V1PersistentVolume') as {
      metadata: { creationTimestamp: unknown };
    };
    expect(pv.metadata.creationTimestamp).toBeInstanceOf(Date);
  });

  it('a patch that no longer applies says so instead of failing silently', () => {
    const kc = new KubeConfig();
    (kc as unknown as { createDispatcher: unknown }).createDispatcher = undefined;
    expect(reuseDispatchers(kc)).toBe(false);
    expect(setWatchInactivityTimeout({} as Watch, 1)).toBe(false);
  });
});

describe('dispatcher reuse against a local HTTPS server', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'client-node-patches-'));
  let server: https.Server;
  let connections = 0;
  let base = '';

  beforeAll(async () => {
    const key = path.join(dir, 'key.pem');
    const cert = path.join(dir, 'cert.pem');
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
      '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', key, '-out', cert,
    ], { stdio: 'ignore' });
    server = https.createServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert) }, (req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Node', apiVersion: 'v1', metadata: { name: 'n1', uid: 'u1' } }));
    });
    server.on('secureConnection', () => connections++);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('sequential requests share a TLS connection (client-node alone opens one per request)', async () => {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: base, skipTLSVerify: true }],
      users: [{ name: 'u', token: 'secret' }],
      contexts: [{ name: 'ctx', cluster: 'c', user: 'u' }],
      currentContext: 'ctx',
    });
    const client = createKubeClient(kc, { qps: 100, burst: 100 });
    for (let i = 0; i < 10; i++) expect((await client.getNode('n1')).metadata?.name).toBe('n1');
    expect(client.stats().requests).toBe(10);
    // undici opens a second connection after the first request (as against the real
    // API server, see e2e/kube-client.test.ts), then keeps reusing it.
    expect(connections).toBeGreaterThanOrEqual(1);
    expect(connections).toBeLessThanOrEqual(2);
  });
});
