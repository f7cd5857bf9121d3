// The lean request path of src/kube (src/kube/transport.ts, issue 20 point 1), against local
// HTTP and HTTPS servers: status mapping, paging, watch streams cut anywhere (inside a line,
// inside a UTF-8 character), bookmarks, 410 Gone, keep-alive reuse, token refresh.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubeConfig } from '@kubernetes/client-node/dist/config.js';
import type { V1PersistentVolume } from '@kubernetes/client-node';
import { createKubeClient } from '../../src/kube/client.ts';
import { isAlreadyExists, isConflict, isGone, KubeError, type KubeStatus, type WatchEvent } from '../../src/kube/port.ts';
import { createTransport, jsonLines, reviveDates } from '../../src/kube/transport.ts';
import { kubeRejection } from '../support/fake-kube.ts';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kube-transport-'));
afterAll(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});

const status = (code: number, reason: string, message: string) => ({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason, message });

type Handler = (req: http.IncomingMessage, res: http.ServerResponse, body: string) => void | Promise<void>;

interface Local {
  readonly base: string;
  readonly seen: Array<{ method: string; url: string; auth: string | undefined; body: string }>;
  close(): Promise<void>;
}

function serve(server: http.Server | https.Server, handler: Handler): Promise<Local> {
  const seen: Local['seen'] = [];
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', auth: req.headers.authorization, body });
      void Promise.resolve(handler(req, res, body)).catch((e: unknown) => {
        res.destroy(e instanceof Error ? e : new Error(String(e)));
      });
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const scheme = server instanceof https.Server ? 'https' : 'http';
      resolve({
        base: `${scheme}://127.0.0.1:${(server.address() as AddressInfo).port}`,
        seen,
        close: () =>
          new Promise<void>((r) => {
            server.closeAllConnections();
            server.close(() => r());
          }),
      });
    });
  });
}

const json = (res: http.ServerResponse, code: number, obj: unknown): void => {
  res.writeHead(code, { 'content-type': 'application/json' });
  res.end(JSON.stringify(obj));
};

function kubeConfig(server: string, user: Record<string, unknown> = { token: 'secret' }, cluster: Record<string, unknown> = {}): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server, skipTLSVerify: server.startsWith('http:'), ...cluster }],
    users: [{ name: 'u', ...user }],
    contexts: [{ name: 'ctx', cluster: 'c', user: 'u' }],
    currentContext: 'ctx',
  });
  return kc;
}

describe('jsonLines: a watch body cut anywhere', () => {
  const events = [
    { type: 'ADDED', object: { metadata: { name: 'pv-é', annotations: { note: 'naïve 日本語 🚀' } } } },
    { type: 'BOOKMARK', object: { metadata: { resourceVersion: '44' } } },
    { type: 'MODIFIED', object: { metadata: { name: 'ünïcödé-€' } } },
  ];
  const body = Buffer.from(events.map((e) => `${JSON.stringify(e)}\n`).join(''));

  it('byte by byte: every cut inside a line and inside a multi-byte UTF-8 character', () => {
    const got: unknown[] = [];
    const p = jsonLines((v) => got.push(v));
    for (let i = 0; i < body.length; i++) p.write(body.subarray(i, i + 1));
    p.end();
    expect(got).toEqual(events);
  });

  it('at every single cut point of the body (two chunks)', () => {
    for (let cut = 0; cut <= body.length; cut++) {
      const got: unknown[] = [];
      const p = jsonLines((v) => got.push(v));
      p.write(body.subarray(0, cut));
      p.write(body.subarray(cut));
      p.end();
      expect(got, `cut at byte ${cut}`).toEqual(events);
    }
  });

  it('a last line without a newline, CRLF and blank lines; a line that is not JSON throws', () => {
    const got: unknown[] = [];
    const p = jsonLines((v) => got.push(v));
    p.write(Buffer.from('{"a":1}\r\n\n  \n{"b":'));
    expect(got).toEqual([{ a: 1 }]);
    p.write(Buffer.from('2}'));
    p.end();
    expect(got).toEqual([{ a: 1 }, { b: 2 }]);
    const bad = jsonLines(() => undefined);
    expect(() => {
      bad.write(Buffer.from('{"a":\n'));
    }).toThrow(/a line is not JSON/);
  });
});

describe('reviveDates', () => {
  it('makes Dates of the model timestamps, not of user strings in labels or annotations', () => {
    const pv = reviveDates({
      metadata: {
        creationTimestamp: '2024-01-02T03:04:05Z',
        annotations: { creationTimestamp: '2024-01-02T03:04:05Z' },
        labels: { startTime: 'x' },
        managedFields: [{ time: '2024-01-02T03:04:06Z', fieldsV1: { 'f:metadata': {} } }],
      },
      status: { phase: 'Bound', lastPhaseTransitionTime: '2024-01-02T03:04:07Z', conditions: [{ lastTransitionTime: 'not a date' }] },
    });
    expect(pv.metadata.creationTimestamp).toEqual(new Date('2024-01-02T03:04:05Z'));
    expect(pv.metadata.managedFields[0]?.time).toBeInstanceOf(Date);
    expect(pv.status.lastPhaseTransitionTime).toBeInstanceOf(Date);
    expect(pv.metadata.annotations.creationTimestamp).toBe('2024-01-02T03:04:05Z');
    expect(pv.metadata.labels.startTime).toBe('x');
    expect(pv.status.conditions[0]?.lastTransitionTime).toBe('not a date');
  });
});

describe('requests against a local API server', () => {
  let srv: Local;
  const pvs = Array.from({ length: 5 }, (_, i) => ({ metadata: { name: `pv${i}`, creationTimestamp: '2024-01-02T03:04:05Z' } }));

  beforeAll(async () => {
    srv = await serve(http.createServer(), async (req, res) => {
      const url = new URL(req.url ?? '', 'http://x');
      const p = url.pathname;
      const q = url.searchParams;
      if (p === '/api/v1/nodes/gone') json(res, 404, status(404, 'NotFound', 'nodes "gone" not found'));
      else if (p === '/api/v1/nodes/text') {
        res.writeHead(503, { 'content-type': 'text/plain' });
        res.end('the server is shutting down\n');
      } else if (p === '/api/v1/nodes/teapot') {
        res.writeHead(418);
        res.end();
      } else if (p === '/api/v1/nodes/garbage') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"kind":');
      } else if (p === '/api/v1/nodes/slow') {
        // Never answers: the request timeout cuts it.
      } else if (p === '/api/v1/persistentvolumes' && req.method === 'POST') {
        json(res, 409, status(409, 'AlreadyExists', 'persistentvolumes "pv0" already exists'));
      } else if (p === '/api/v1/persistentvolumes/pv0' && req.method === 'DELETE') {
        json(res, 409, status(409, 'Conflict', 'Precondition failed: UID in precondition: u1, UID in object meta: u2'));
      } else if (p === '/api/v1/persistentvolumes' && q.get('watch') === 'true') {
        if (q.get('resourceVersion') === '1') {
          json(res, 410, status(410, 'Expired', 'too old resource version: 1 (50)'));
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.flushHeaders();
        const lines = [
          { type: 'ADDED', object: { kind: 'PersistentVolume', metadata: { name: 'pv-é日', resourceVersion: '43', creationTimestamp: '2024-01-02T03:04:05Z' } } },
          { type: 'BOOKMARK', object: { kind: 'PersistentVolume', metadata: { resourceVersion: '44', creationTimestamp: null } } },
          { type: 'ERROR', object: status(410, 'Expired', 'too old resource version: 44 (50)') },
        ];
        const bytes = Buffer.from(lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
        // Pieces of 7 bytes, each in its own write: cuts fall inside lines and inside 'é' / '日'.
        for (let i = 0; i < bytes.length; i += 7) {
          res.write(bytes.subarray(i, i + 7));
          await new Promise((r) => setImmediate(r));
        }
        res.end();
      } else if (p === '/api/v1/persistentvolumes') {
        const limit = Number(q.get('limit') ?? '0');
        const token = q.get('continue');
        if (token === 'expired') {
          json(res, 410, status(410, 'Expired', 'The provided continue parameter is too old'));
          return;
        }
        const from = token ? Number(token) : 0;
        const to = limit > 0 ? Math.min(pvs.length, from + limit) : pvs.length;
        json(res, 200, {
          kind: 'PersistentVolumeList',
          metadata: { resourceVersion: '50', ...(to < pvs.length ? { continue: String(to) } : {}) },
          items: pvs.slice(from, to),
        });
      } else if (p === '/api/v1/nodes' && q.get('watch') === 'true') {
        // One event, then the connection is cut in the middle of the next line.
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write(`${JSON.stringify({ type: 'ADDED', object: { metadata: { name: 'n1' } } })}\n{"type":"MODI`);
        setImmediate(() => res.socket?.destroy());
      } else if (p === '/api/v1/nodes/cut') {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' });
        res.write('{"metadata":');
        setImmediate(() => res.socket?.destroy());
      } else if (p === '/prefix/api/v1/nodes/n1') json(res, 200, { metadata: { name: 'n1' } });
      else json(res, 500, status(500, 'InternalError', `unexpected ${req.method ?? ''} ${req.url ?? ''}`));
    });
  });
  afterAll(async () => {
    await srv.close();
  });

  it('maps error answers to KubeError: Status reason and message, text bodies, bare codes, bodies that are not JSON', async () => {
    const client = createKubeClient(kubeConfig(srv.base), { qps: 0, burst: 0 });
    const nf = await kubeRejection(client.getNode('gone'));
    expect([nf.code, nf.reason, nf.message]).toEqual([404, 'NotFound', 'nodes "gone" not found']);
    const text = await kubeRejection(client.getNode('text'));
    expect([text.code, text.reason, text.message]).toEqual([503, 'ServiceUnavailable', 'the server is shutting down']);
    const teapot = await kubeRejection(client.getNode('teapot'));
    expect([teapot.code, teapot.reason, teapot.message]).toEqual([418, 'Unknown', 'HTTP 418']);
    const garbage = await kubeRejection(client.getNode('garbage'));
    expect([garbage.code, garbage.reason]).toEqual([0, 'BadResponse']);
    const exists = await kubeRejection(client.createPersistentVolume({ metadata: { name: 'pv0' } }));
    expect([isAlreadyExists(exists), isConflict(exists)]).toEqual([true, false]);
    const conflict = await kubeRejection(client.deletePersistentVolume('pv0', { uid: 'u1', propagationPolicy: 'Background' }));
    expect([isAlreadyExists(conflict), isConflict(conflict)]).toEqual([false, true]);
    expect(JSON.parse(srv.seen.at(-1)?.body ?? '')).toEqual({ preconditions: { uid: 'u1' }, propagationPolicy: 'Background' });
  });

  it('a request that gets no answer is cut by the request timeout (code 0, Timeout)', async () => {
    const t = createTransport(kubeConfig(srv.base), { requestTimeoutMs: 200 });
    const e = await kubeRejection(t.request('GET', '/api/v1/nodes/slow'));
    expect([e.code, e.reason]).toEqual([0, 'Timeout']);
  });

  it('pages: limit goes out, the continue token is followed to the last page; an expired token is 410', async () => {
    const client = createKubeClient(kubeConfig(srv.base), { qps: 0, burst: 0 });
    const names: string[] = [];
    let token: string | undefined;
    let pages = 0;
    do {
      const page = await client.list('persistentvolumes', { limit: 2, continue: token });
      pages++;
      names.push(...page.items.map((pv) => pv.metadata?.name ?? ''));
      expect(page.resourceVersion).toBe('50');
      expect(page.items[0]?.metadata?.creationTimestamp).toBeInstanceOf(Date);
      token = page.continue;
    } while (token !== undefined);
    expect([pages, names]).toEqual([3, ['pv0', 'pv1', 'pv2', 'pv3', 'pv4']]);
    const lists = srv.seen.filter((s) => s.method === 'GET' && s.url.startsWith('/api/v1/persistentvolumes?')).slice(-3);
    expect(lists.map((s) => Object.fromEntries(new URL(s.url, 'http://x').searchParams))).toEqual([{ limit: '2' }, { limit: '2', continue: '2' }, { limit: '2', continue: '4' }]);
    const gone = await kubeRejection(client.list('persistentvolumes', { limit: 2, continue: 'expired' }));
    expect(isGone(gone)).toBe(true);
  });

  it('watch: a stream cut inside lines and UTF-8 characters; typed objects, the bookmark as sent, the 410 ERROR event as-is', async () => {
    const client = createKubeClient(kubeConfig(srv.base), { qps: 0, burst: 0 });
    const events: Array<WatchEvent<V1PersistentVolume>> = [];
    await client.watch('persistentvolumes', { resourceVersion: '42', allowWatchBookmarks: true, timeoutSeconds: 30 }, (ev) => events.push(ev), new AbortController().signal);
    expect(events.map((e) => e.type)).toEqual(['ADDED', 'BOOKMARK', 'ERROR']);
    const added = events[0]?.object as V1PersistentVolume;
    expect(added.metadata?.name).toBe('pv-é日');
    expect(added.metadata?.creationTimestamp).toEqual(new Date('2024-01-02T03:04:05Z'));
    expect(events[1]?.object).toEqual({ kind: 'PersistentVolume', metadata: { resourceVersion: '44', creationTimestamp: null } });
    expect(events[2]?.object as KubeStatus).toMatchObject({ code: 410, reason: 'Expired' });
    const q = new URL(srv.seen.at(-1)?.url ?? '', 'http://x').searchParams;
    expect(Object.fromEntries(q)).toEqual({ watch: 'true', resourceVersion: '42', timeoutSeconds: '30', allowWatchBookmarks: 'true' });
  });

  it('watch from an expired resourceVersion rejects with 410 Gone', async () => {
    const client = createKubeClient(kubeConfig(srv.base), { qps: 0, burst: 0 });
    const e = await kubeRejection(client.watch('persistentvolumes', { resourceVersion: '1' }, () => undefined, new AbortController().signal));
    expect([isGone(e), e.reason, e.message]).toEqual([true, 'Expired', 'too old resource version: 1 (50)']);
    expect(client.stats().byRequest['watch persistentvolumes']).toBe(1);
  });

  it('a connection cut in the middle of an answer or of a watch line rejects with code 0, after the complete events', async () => {
    const client = createKubeClient(kubeConfig(srv.base), { qps: 0, burst: 0 });
    const cut = await kubeRejection(client.getNode('cut'));
    expect([cut.code, cut.reason]).toEqual([0, 'NetworkError']);
    const names: string[] = [];
    const e = await kubeRejection(client.watch('nodes', { resourceVersion: '5' }, (ev) => names.push(`${ev.type} ${(ev.object as { metadata?: { name?: string } }).metadata?.name ?? ''}`), new AbortController().signal));
    expect([e.code, e.reason, names]).toEqual([0, 'NetworkError', ['ADDED n1']]);
  });

  it('keeps the path of the server URL as a prefix', async () => {
    const client = createKubeClient(kubeConfig(`${srv.base}/prefix/`), { qps: 0, burst: 0 });
    expect((await client.getNode('n1')).metadata?.name).toBe('n1');
    expect(srv.seen.at(-1)?.url).toBe('/prefix/api/v1/nodes/n1');
  });
});

describe('over TLS: keep-alive reuse, the cluster CA, token refresh', () => {
  let srv: Local;
  let connections = 0;
  let caData = '';

  beforeAll(async () => {
    const key = path.join(tmp, 'key.pem');
    const cert = path.join(tmp, 'cert.pem');
    execFileSync(
      'openssl',
      ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', key, '-out', cert],
      { stdio: 'ignore' },
    );
    caData = fs.readFileSync(cert).toString('base64');
    const server = https.createServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert) });
    server.on('secureConnection', () => connections++);
    srv = await serve(server, (req, res) => {
      if (req.url?.includes('watch=true')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(`${JSON.stringify({ type: 'BOOKMARK', object: { metadata: { resourceVersion: '9' } } })}\n`);
      } else json(res, 200, { kind: 'Node', metadata: { name: 'n1' } });
    });
  });
  afterAll(async () => {
    await srv.close();
  });

  it('sequential requests and watches share one TLS connection, verified against the cluster CA', async () => {
    const client = createKubeClient(kubeConfig(srv.base, { token: 'secret' }, { caData }), { qps: 0, burst: 0 });
    const before = connections;
    for (let i = 0; i < 20; i++) {
      expect((await client.getNode('n1')).metadata?.name).toBe('n1');
      if (i % 5 === 0) await client.watch('nodes', { resourceVersion: '1' }, () => undefined, new AbortController().signal);
    }
    expect(client.stats().requests).toBe(24);
    expect(connections - before).toBe(1);
    expect(srv.seen.at(-1)?.auth).toBe('Bearer secret');
  });

  it('a server certificate the cluster CA does not sign is refused (code 0)', async () => {
    const client = createKubeClient(kubeConfig(srv.base), { qps: 0, burst: 0 });
    const e = await kubeRejection(client.getNode('n1'));
    expect([e.code, e.reason]).toEqual([0, 'NetworkError']);
    expect(e.message).toMatch(/self-signed|self signed/);
  });

  it('an exec credential is asked again once it expired: the next request carries the new token', async () => {
    const tokenFile = path.join(tmp, 'token');
    fs.writeFileSync(tokenFile, 'first');
    const credential = (tok: string): string =>
      JSON.stringify({ apiVersion: 'client.authentication.k8s.io/v1', kind: 'ExecCredential', status: { token: tok, expirationTimestamp: '2000-01-01T00:00:00Z' } });
    const script = `printf '%s' "$(sed "s/TOKEN/$(cat ${tokenFile})/" <<'EOF'\n${credential('TOKEN')}\nEOF\n)"`;
    const user = { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: 'bash', args: ['-c', script], interactiveMode: 'Never' } };
    const client = createKubeClient(kubeConfig(srv.base, user, { caData }), { qps: 0, burst: 0 });
    await client.getNode('n1');
    expect(srv.seen.at(-1)?.auth).toBe('Bearer first');
    fs.writeFileSync(tokenFile, 'second');
    await client.getNode('n1');
    expect(srv.seen.at(-1)?.auth).toBe('Bearer second');
  });
});

describe('KubeError of the request path', () => {
  it('network errors carry code 0', async () => {
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const t = createTransport(kubeConfig(`http://127.0.0.1:${port}`));
    const e = await kubeRejection(t.request('GET', '/api/v1/nodes'));
    expect(e).toBeInstanceOf(KubeError);
    expect([e.code, e.reason]).toEqual([0, 'NetworkError']);
    expect(e.message).toContain('ECONNREFUSED');
  });
});
