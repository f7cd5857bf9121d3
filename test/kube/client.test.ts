import http from 'node:http';
import type { AddressInfo } from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubeConfig, type V1PersistentVolume } from '@kubernetes/client-node';
import { createKubeClient, loadKubeConfig, toKubeError, type KubeClient } from '../../src/kube/client.ts';
import { KubeError, type WatchEvent } from '../../src/kube/port.ts';
import { kubeRejection } from '../support/fake-kube.ts';
import { Metrics } from '../../src/metrics/metrics.ts';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kube-client-'));


describe('loadKubeConfig', () => {
  it('names the KUBECONFIG file when it is missing', () => {
    const file = path.join(tmp, 'nope.yaml');
    expect(() => loadKubeConfig({ KUBECONFIG: file })).toThrow(`KUBECONFIG=${file}: cannot read the kubeconfig file (ENOENT)`);
  });

  it('rejects a kubeconfig without a current context', () => {
    const file = path.join(tmp, 'no-context.yaml');
    fs.writeFileSync(file, 'apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n');
    expect(() => loadKubeConfig({ KUBECONFIG: file })).toThrow(/has no current-context/);
  });

  it('loads a valid kubeconfig', () => {
    const file = path.join(tmp, 'ok.yaml');
    fs.writeFileSync(file, kubeconfigYaml('http://127.0.0.1:1'));
    expect(loadKubeConfig({ KUBECONFIG: file }).getCurrentCluster()?.server).toBe('http://127.0.0.1:1');
  });

  it('in-cluster: says exactly what is missing and never falls back to localhost', () => {
    const saDir = path.join(tmp, 'sa-empty');
    fs.mkdirSync(saDir, { recursive: true });
    let msg = '';
    try {
      loadKubeConfig({}, { serviceAccountDir: saDir });
    } catch (e) {
      msg = (e as Error).message;
    }
    expect(msg).toContain('KUBERNETES_SERVICE_HOST');
    expect(msg).toContain('KUBERNETES_SERVICE_PORT');
    expect(msg).toContain(`service account token file ${path.join(saDir, 'token')}`);
    expect(() => loadKubeConfig({ KUBERNETES_SERVICE_HOST: '10.0.0.1', KUBERNETES_SERVICE_PORT: '443' }, { serviceAccountDir: saDir })).toThrow(
      /missing service account token file/,
    );
  });

  it('in-cluster: builds an https server URL (IPv6 in brackets) with a token-file user', () => {
    const saDir = path.join(tmp, 'sa');
    fs.mkdirSync(saDir, { recursive: true });
    fs.writeFileSync(path.join(saDir, 'token'), 'tok');
    fs.writeFileSync(path.join(saDir, 'namespace'), 'kube-system\n');
    const kc = loadKubeConfig({ KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '6443' }, { serviceAccountDir: saDir });
    expect(kc.getCurrentCluster()?.server).toBe('https://[fd00::1]:6443');
    expect(kc.getCurrentUser()?.authProvider).toMatchObject({ name: 'tokenFile', config: { tokenFile: path.join(saDir, 'token') } });
    expect(kc.getContextObject(kc.getCurrentContext())?.namespace).toBe('kube-system');
  });
});

function kubeconfigYaml(server: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: c',
    '  cluster:',
    `    server: ${server}`,
    '    insecure-skip-tls-verify: true',
    'users:',
    '- name: u',
    '  user:',
    '    token: secret',
    'contexts:',
    '- name: ctx',
    '  context: {cluster: c, user: u}',
    'current-context: ctx',
    '',
  ].join('\n');
}

interface Seen {
  method: string;
  url: string;
  contentType: string | undefined;
  userAgent: string | undefined;
  body: string;
}

const status = (code: number, reason: string, message: string) => ({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason, message });

describe('createKubeClient against a local API server', () => {
  const seen: Seen[] = [];
  let server: http.Server;
  let client: KubeClient;
  let metrics: Metrics;
  let base = '';

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const url = req.url ?? '';
        seen.push({ method: req.method ?? '', url, contentType: req.headers['content-type'], userAgent: req.headers['user-agent'], body });
        const json = (code: number, obj: unknown): void => {
          res.writeHead(code, { 'content-type': 'application/json' });
          res.end(JSON.stringify(obj));
        };
        const p = url.split('?')[0];
        if (req.method === 'GET' && p === '/api/v1/nodes/missing') json(404, status(404, 'NotFound', 'nodes "missing" not found'));
        else if (req.method === 'GET' && p === '/api/v1/nodes/n1')
          json(200, { kind: 'Node', apiVersion: 'v1', metadata: { name: 'n1', uid: 'u1', creationTimestamp: '2024-01-02T03:04:05Z' } });
        else if (req.method === 'POST' && p === '/api/v1/persistentvolumes')
          json(409, status(409, 'AlreadyExists', 'persistentvolumes "pv1" already exists'));
        else if (req.method === 'DELETE' && p === '/api/v1/persistentvolumes/pv1') json(200, { kind: 'Status', status: 'Success' });
        else if (req.method === 'DELETE' && p === '/api/v1/namespaces/ns1/persistentvolumeclaims/c1')
          json(200, { kind: 'PersistentVolumeClaim', metadata: { name: 'c1', namespace: 'ns1' } });
        else if (req.method === 'GET' && p === '/api/v1/persistentvolumeclaims')
          json(200, { kind: 'PersistentVolumeClaimList', metadata: { resourceVersion: '7' }, items: [{ metadata: { name: 'c1', namespace: 'ns1' } }] });
        else if (req.method === 'PATCH' && p === '/api/v1/namespaces/default/events/e1')
          json(200, { metadata: { name: 'e1', namespace: 'default' }, involvedObject: {}, count: 2 });
        else if (req.method === 'GET' && p === '/api/v1/persistentvolumes' && url.includes('watch=true')) {
          res.writeHead(200, { 'content-type': 'application/json' });
          const line = (o: unknown): boolean => res.write(`${JSON.stringify(o)}\n`);
          line({ type: 'ADDED', object: { kind: 'PersistentVolume', metadata: { name: 'a', resourceVersion: '43', creationTimestamp: '2024-01-02T03:04:05Z' } } });
          line({ type: 'BOOKMARK', object: { kind: 'PersistentVolume', metadata: { resourceVersion: '44' } } });
          line({ type: 'ERROR', object: status(410, 'Expired', 'too old resource version') });
          res.end();
        } else if (req.method === 'GET' && p === '/api/v1/persistentvolumes')
          json(200, {
            kind: 'PersistentVolumeList',
            metadata: { resourceVersion: '42', ...(url.includes('limit=') ? { continue: 'next-page' } : {}) },
            items: [{ metadata: { name: 'a' } }],
          });
        else if (req.method === 'GET' && p === '/api/v1/nodes' && url.includes('watch=true')) {
          if (url.includes('hang')) res.writeHead(200, { 'content-type': 'application/json' }).write('');
          else json(403, status(403, 'Forbidden', 'nodes is forbidden'));
        } else json(500, status(500, 'InternalError', `unexpected ${req.method ?? ''} ${url}`));
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const kc = new KubeConfig();
    kc.loadFromString(kubeconfigYaml(base));
    metrics = new Metrics({ defaultMetrics: false });
    client = createKubeClient(kc, { qps: 100, burst: 100, metrics, userAgent: 'lvp-test/1.0' });
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });

  const requestCount = async (verb: string, resource: string, code: string): Promise<number> =>
    (await metrics.kubeRequests.get()).values.find((v) => v.labels.verb === verb && v.labels.resource === resource && v.labels.code === code)?.value ?? 0;

  it('maps 404 and 409 to KubeError with the server reason and message', async () => {
    const nf = await kubeRejection(client.getNode('missing'));
    expect([nf.code, nf.reason, nf.message]).toEqual([404, 'NotFound', 'nodes "missing" not found']);
    const ae = await kubeRejection(client.createPersistentVolume({ metadata: { name: 'pv1' } }));
    expect([ae.code, ae.reason]).toEqual([409, 'AlreadyExists']);
    expect(await requestCount('get', 'nodes', '404')).toBe(1);
    expect(await requestCount('create', 'persistentvolumes', '409')).toBe(1);
  });

  it('returns typed objects and sends the user agent', async () => {
    const n = await client.getNode('n1');
    expect(n.metadata?.creationTimestamp).toBeInstanceOf(Date);
    expect(seen.at(-1)?.userAgent).toBe('lvp-test/1.0');
    expect(await requestCount('get', 'nodes', '200')).toBe(1);
  });

  it('lists with the list resourceVersion', async () => {
    const res = await client.list('persistentvolumes', { labelSelector: 'a=b' });
    expect(res.resourceVersion).toBe('42');
    expect(res.items.map((p) => p.metadata?.name)).toEqual(['a']);
    expect(seen.at(-1)?.url).toContain('labelSelector=a%3Db');
    expect(res.continue).toBeUndefined();
  });

  it('lists a page: limit and continue go out, the next continue token comes back', async () => {
    const res = await client.list('persistentvolumes', { limit: 500, continue: 'tok/1' });
    expect(seen.at(-1)?.url).toMatch(/[?&]limit=500(&|$)/);
    expect(seen.at(-1)?.url).toMatch(/[?&]continue=tok%2F1(&|$)/);
    expect(res.continue).toBe('next-page');
  });

  it('delete sends the uid precondition', async () => {
    await client.deletePersistentVolume('pv1', { uid: 'abc' });
    expect(JSON.parse(seen.at(-1)?.body ?? '{}')).toMatchObject({ preconditions: { uid: 'abc' } });
  });

  it('delete sends the resourceVersion precondition too', async () => {
    await client.deletePersistentVolume('pv1', { uid: 'abc', resourceVersion: '17' });
    expect(JSON.parse(seen.at(-1)?.body ?? '{}')).toMatchObject({ preconditions: { uid: 'abc', resourceVersion: '17' } });
  });

  it('lists PVCs of all namespaces and deletes one with its uid precondition', async () => {
    const res = await client.list('persistentvolumeclaims', {});
    expect([res.resourceVersion, res.items[0]?.metadata?.name]).toEqual(['7', 'c1']);
    await client.deletePersistentVolumeClaim('ns1', 'c1', { uid: 'u9' });
    expect(seen.at(-1)).toMatchObject({ method: 'DELETE', url: '/api/v1/namespaces/ns1/persistentvolumeclaims/c1' });
    expect(JSON.parse(seen.at(-1)?.body ?? '{}')).toMatchObject({ preconditions: { uid: 'u9' } });
    expect(await requestCount('delete', 'persistentvolumeclaims', '200')).toBe(1);
  });

  it('patchEvent uses the merge-patch content type', async () => {
    const ev = await client.patchEvent('default', 'e1', { count: 2 });
    expect(ev.count).toBe(2);
    expect(seen.at(-1)?.contentType).toBe('application/merge-patch+json');
    expect(JSON.parse(seen.at(-1)?.body ?? '{}')).toEqual({ count: 2 });
  });

  it('watch streams events (typed objects, ERROR as-is) with the query parameters, then resolves', async () => {
    const events: Array<WatchEvent<V1PersistentVolume>> = [];
    await client.watch(
      'persistentvolumes',
      { resourceVersion: '42', timeoutSeconds: 300, allowWatchBookmarks: true, labelSelector: 'x=y' },
      (ev) => events.push(ev),
      new AbortController().signal,
    );
    expect(events.map((e) => e.type)).toEqual(['ADDED', 'BOOKMARK', 'ERROR']);
    expect((events[0]?.object as V1PersistentVolume).metadata?.creationTimestamp).toBeInstanceOf(Date);
    expect(events[2]?.object).toMatchObject({ code: 410, reason: 'Expired' });
    const url = new URL(seen.at(-1)?.url ?? '', base);
    expect(Object.fromEntries(url.searchParams)).toMatchObject({
      watch: 'true',
      resourceVersion: '42',
      timeoutSeconds: '300',
      allowWatchBookmarks: 'true',
      labelSelector: 'x=y',
    });
    expect(await requestCount('watch', 'persistentvolumes', '200')).toBe(1);
  });

  it('watch rejects with the HTTP status and resolves promptly when aborted', async () => {
    const e = await kubeRejection(client.watch('nodes', { resourceVersion: '1' }, () => undefined, new AbortController().signal));
    expect([e.code, e.reason]).toEqual([403, 'Forbidden']);
    const ac = new AbortController();
    const w = client.watch('nodes', { resourceVersion: '1', fieldSelector: 'hang=1' }, () => undefined, ac.signal);
    await new Promise((r) => setTimeout(r, 50));
    ac.abort();
    await expect(w).resolves.toBeUndefined();
    expect(client.stats().byRequest['watch nodes']).toBe(2);
  });

  it('a watch that receives nothing for watchInactivityTimeoutMs is cut with a Timeout error', async () => {
    const kc = new KubeConfig();
    kc.loadFromString(kubeconfigYaml(base));
    const quiet = createKubeClient(kc, { qps: 100, burst: 100, watchInactivityTimeoutMs: 200 });
    const e = await kubeRejection(quiet.watch('nodes', { resourceVersion: '1', fieldSelector: 'hang=1' }, () => undefined, new AbortController().signal));
    expect([e.code, e.reason]).toEqual([0, 'Timeout']);
  });

  it('network errors become KubeError code 0', async () => {
    const kc = new KubeConfig();
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    kc.loadFromString(kubeconfigYaml(`http://127.0.0.1:${port}`));
    const dead = createKubeClient(kc, { qps: 0, burst: 0 });
    const e = await kubeRejection(dead.getNode('n1'));
    expect([e.code, e.reason]).toEqual([0, 'NetworkError']);
    const we = await kubeRejection(dead.watch('nodes', { resourceVersion: '1' }, () => undefined, new AbortController().signal));
    expect(we.code).toBe(0);
  });

  it('toKubeError keeps KubeErrors and wraps anything else', () => {
    const k = new KubeError(409, 'Conflict', 'x');
    expect(toKubeError(k)).toBe(k);
    expect(toKubeError('weird')).toMatchObject({ code: 0, reason: 'Unknown' });
  });
});
