// The request path of src/kube/client.ts (issue 20): JSON over `node:https` (or
// `node:http`) with one keep-alive agent per client, instead of client-node's
// generated API classes and its bundled undici. @kubernetes/client-node still
// loads the kubeconfig and authenticates: KubeConfig.applyToHTTPSOptions runs
// before every request and yields the TLS material (ca, cert, key, server name,
// skip-verify) and the headers (bearer token of a token file, exec or auth
// provider, which it refreshes itself; impersonation), so a rotated token or
// certificate is picked up on the next request.
// Responses are plain JSON; the timestamps the model types declare as Date are
// turned into Dates (reviveDates), so objects look like client-node's.
import http from 'node:http';
import https from 'node:https';
import { StringDecoder } from 'node:string_decoder';
import type { KubeConfig } from '@kubernetes/client-node';
import { KubeError, type KubeStatus } from './port.ts';

export type Query = Record<string, string | number | boolean | undefined>;

export interface TransportOptions {
  readonly userAgent?: string | undefined;
  /** A request (not a watch) whose socket is silent this long fails with a Timeout KubeError (default 300 s). */
  readonly requestTimeoutMs?: number | undefined;
}

export interface Response<T> {
  readonly status: number;
  readonly body: T;
}

export interface WatchStreamOptions {
  /** No byte for this long aborts the stream with a Timeout KubeError. */
  readonly inactivityMs: number;
  /** Called once the response headers arrived (the HTTP status), or with 0 on a network error before them. */
  readonly onStatus?: ((code: number) => void) | undefined;
}

export interface Transport {
  /** One request; a non-2xx answer or a network error rejects with a KubeError. */
  request<T>(method: string, path: string, query?: Query, body?: unknown, contentType?: string): Promise<Response<T>>;
  /**
   * A watch: GET `path` with `query`, each JSON line of the body to `onLine` as parsed. Resolves when the
   * server ends the stream or `signal` aborts; rejects with a KubeError otherwise.
   */
  stream(path: string, query: Query, onLine: (obj: unknown) => void, signal: AbortSignal, opts: WatchStreamOptions): Promise<void>;
  /** The keep-alive agents' sockets (tests): open ones by name. */
  sockets(): number;
  /** Closes idle sockets. */
  close(): void;
}

export const HTTP_REASONS: Readonly<Record<number, string>> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'NotFound',
  405: 'MethodNotAllowed',
  409: 'Conflict',
  410: 'Expired',
  415: 'UnsupportedMediaType',
  422: 'Invalid',
  429: 'TooManyRequests',
  500: 'InternalError',
  503: 'ServiceUnavailable',
  504: 'Timeout',
};

/** The metav1.Status fields of an error body (JSON or text), if any. */
export function parseStatus(body: string): KubeStatus | undefined {
  let b: unknown;
  try {
    b = JSON.parse(body);
  } catch {
    const text = body.trim();
    return text ? { message: text.slice(0, 500) } : undefined;
  }
  if (b && typeof b === 'object') {
    const s = b as Record<string, unknown>;
    const out: { reason?: string; message?: string } = {};
    if (typeof s['reason'] === 'string' && s['reason']) out.reason = s['reason'];
    if (typeof s['message'] === 'string' && s['message']) out.message = s['message'];
    return out;
  }
  return undefined;
}

/** The KubeError of a non-2xx answer: the Status reason and message when the body has them. */
export function statusError(code: number, body: string): KubeError {
  const st = parseStatus(body);
  return new KubeError(code, st?.reason ?? HTTP_REASONS[code] ?? 'Unknown', st?.message ?? `HTTP ${code}`);
}

/** A network-level failure (no HTTP status): code 0. */
export function networkError(e: unknown): KubeError {
  if (e instanceof KubeError) return e;
  if (e instanceof Error) {
    const cause = e.cause instanceof Error ? `: ${e.cause.message}` : '';
    return new KubeError(0, 'NetworkError', `${e.message}${cause}`);
  }
  return new KubeError(0, 'Unknown', String(e));
}

// Fields the model types of the kinds the daemon reads declare as Date (metav1.Time), collected from
// client-node's attribute maps of PersistentVolume(Claim), StorageClass, Job, Node, Pod and Event; no kind
// uses one of these names for anything else. Maps of user strings are not entered.
const DATE_FIELDS = new Set([
  'creationTimestamp',
  'deletionTimestamp',
  'time',
  'lastPhaseTransitionTime',
  'lastProbeTime',
  'lastTransitionTime',
  'lastHeartbeatTime',
  'completionTime',
  'startTime',
  'timeAdded',
  'startedAt',
  'finishedAt',
  'firstTimestamp',
  'lastTimestamp',
]);
const MAP_FIELDS = new Set(['labels', 'annotations', 'fieldsV1', 'parameters', 'capacity', 'allocatable', 'volumeAttributes', 'matchLabels', 'nodeSelector', 'limits', 'requests', 'data']);

/** Turns the timestamp strings of a parsed API object into Dates, in place; returns it. */
export function reviveDates<T>(obj: T): T {
  walk(obj);
  return obj;
}

function walk(v: unknown): void {
  if (v === null || typeof v !== 'object') return;
  if (Array.isArray(v)) {
    for (const x of v) walk(x);
    return;
  }
  const o = v as Record<string, unknown>;
  for (const k in o) {
    const x = o[k];
    if (typeof x === 'string') {
      if (DATE_FIELDS.has(k)) {
        const d = new Date(x);
        if (!Number.isNaN(d.getTime())) o[k] = d;
      }
    } else if (x !== null && typeof x === 'object' && !MAP_FIELDS.has(k)) walk(x);
  }
}

export interface JsonLines {
  write(chunk: Buffer): void;
  /** The last line, when the stream did not end with a newline. */
  end(): void;
}

/**
 * Splits a byte stream into newline-terminated JSON values (a watch body): a chunk may end inside a
 * line or inside a UTF-8 character. Throws on a line that is not JSON; blank lines are skipped.
 */
export function jsonLines(onValue: (v: unknown) => void): JsonLines {
  const decoder = new StringDecoder('utf8');
  let rest = '';
  const lines = (text: string): void => {
    let start = 0;
    for (let nl = text.indexOf('\n'); nl !== -1; nl = text.indexOf('\n', start)) {
      const line = text.slice(start, nl);
      start = nl + 1;
      if (line.trim() === '') continue;
      let v: unknown;
      try {
        v = JSON.parse(line);
      } catch (e) {
        rest = '';
        throw new Error(`a line is not JSON: ${(e as Error).message}`, { cause: e });
      }
      onValue(v);
    }
    rest = text.slice(start);
  };
  return {
    write(chunk) {
      lines(rest + decoder.write(chunk));
    },
    end() {
      lines(`${rest}${decoder.end()}\n`);
    },
  };
}

function queryString(q: Query | undefined): string {
  if (!q) return '';
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== '') p.append(k, String(v));
  const s = p.toString();
  return s ? `?${s}` : '';
}

interface Prepared {
  readonly mod: typeof http | typeof https;
  readonly options: https.RequestOptions;
}

export function createTransport(kc: KubeConfig, opts: TransportOptions = {}): Transport {
  const cluster = kc.getCurrentCluster();
  if (!cluster?.server) throw new Error('the kubeconfig names no cluster server');
  const server = new URL(cluster.server);
  const secure = server.protocol === 'https:';
  const basePath = server.pathname.replace(/\/+$/, '');
  // One pool per client; sockets are told apart by host and TLS material (the agent's name). TCP keep-alive
  // probes after 30 s of silence, like client-go (and client-node's dispatchers).
  const agentOptions: http.AgentOptions = { keepAlive: true, keepAliveMsecs: 30_000, scheduling: 'lifo' };
  const agent = secure ? new https.Agent(agentOptions) : new http.Agent(agentOptions);
  const requestTimeoutMs = opts.requestTimeoutMs ?? 300_000;

  async function prepare(method: string, path: string, query: Query | undefined, headers: Record<string, string>): Promise<Prepared> {
    const o: https.RequestOptions = { headers: {} };
    // TLS material and auth headers, re-read per request (token refresh, rotated files). It also sets
    // `agent` to one of its own (no keep-alive) unless a proxy is configured: then its proxy agent is kept.
    await kc.applyToHTTPSOptions(o);
    const proxied = Boolean(kc.getCurrentCluster()?.proxyUrl);
    const h = o.headers as Record<string, string>;
    return {
      mod: secure ? https : http,
      options: {
        ...o,
        agent: proxied ? o.agent : agent,
        protocol: server.protocol,
        hostname: server.hostname.replace(/^\[(.*)\]$/, '$1'),
        port: server.port || (secure ? 443 : 80),
        method,
        path: `${basePath}${path}${queryString(query)}`,
        headers: {
          ...h,
          Accept: 'application/json',
          ...(opts.userAgent ? { 'User-Agent': opts.userAgent } : {}),
          ...headers,
        },
      },
    };
  }

  return {
    async request<T>(method: string, path: string, query?: Query, body?: unknown, contentType = 'application/json'): Promise<Response<T>> {
      const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      let p: Prepared;
      try {
        p = await prepare(method, path, query, payload ? { 'Content-Type': contentType, 'Content-Length': String(payload.length) } : {});
      } catch (e) {
        throw networkError(e);
      }
      return new Promise<Response<T>>((resolve, reject) => {
        const req = p.mod.request(p.options, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', (e) => {
            reject(networkError(e));
          });
          res.on('close', () => {
            if (!res.complete) reject(new KubeError(0, 'NetworkError', `${method} ${path}: the connection was cut`));
          });
          res.on('end', () => {
            const code = res.statusCode ?? 0;
            const text = Buffer.concat(chunks).toString('utf8');
            if (code < 200 || code > 299) {
              reject(statusError(code, text));
              return;
            }
            try {
              resolve({ status: code, body: (text ? reviveDates(JSON.parse(text)) : undefined) as T });
            } catch (e) {
              reject(new KubeError(0, 'BadResponse', `${method} ${path}: the answer (HTTP ${code}) is not JSON: ${(e as Error).message}`));
            }
          });
        });
        req.setTimeout(requestTimeoutMs, () => {
          req.destroy(new KubeError(0, 'Timeout', `request timed out: ${method} ${path}: no answer for ${requestTimeoutMs} ms`));
        });
        req.on('error', (e) => {
          reject(networkError(e));
        });
        req.end(payload);
      });
    },

    async stream(path, query, onLine, signal, so): Promise<void> {
      if (signal.aborted) return;
      let p: Prepared;
      try {
        p = await prepare('GET', path, query, {});
      } catch (e) {
        so.onStatus?.(0);
        throw networkError(e);
      }
      if (signal.aborted) return;
      await new Promise<void>((resolve, reject) => {
        let settled = false;
        let timer: NodeJS.Timeout | undefined;
        let statusSeen = false;
        const status = (code: number): void => {
          if (statusSeen) return;
          statusSeen = true;
          so.onStatus?.(code);
        };
        const settle = (err?: KubeError): void => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
          if (err && !signal.aborted) reject(err);
          else resolve();
        };
        const onAbort = (): void => {
          req.destroy();
          settle();
        };
        const arm = (): void => {
          clearTimeout(timer);
          timer = setTimeout(() => {
            const e = new KubeError(0, 'Timeout', `watch timed out: nothing received for ${so.inactivityMs} ms`);
            status(0);
            req.destroy();
            settle(e);
          }, so.inactivityMs);
        };
        const req = p.mod.request(p.options, (res) => {
          const code = res.statusCode ?? 0;
          status(code);
          if (code !== 200) {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => {
              settle(statusError(code, Buffer.concat(chunks).toString('utf8')));
            });
            res.on('error', (e) => {
              settle(networkError(e));
            });
            return;
          }
          const parser = jsonLines((obj) => {
            if (!settled) onLine(obj);
          });
          const feed = (f: () => void): void => {
            try {
              f();
            } catch (e) {
              req.destroy();
              settle(new KubeError(0, 'BadResponse', `watch ${path}: ${(e as Error).message}`));
            }
          };
          res.on('data', (c: Buffer) => {
            arm();
            feed(() => {
              parser.write(c);
            });
          });
          res.on('end', () => {
            feed(() => {
              parser.end();
            });
            settle();
          });
          res.on('error', (e) => {
            settle(networkError(e));
          });
          res.on('close', () => {
            if (!res.complete) settle(new KubeError(0, 'NetworkError', `watch ${path}: the connection was cut`));
          });
        });
        req.on('error', (e) => {
          if (settled) return; // our own abort or timeout
          status(0);
          settle(networkError(e));
        });
        signal.addEventListener('abort', onAbort, { once: true });
        arm();
        req.end();
      });
    },

    sockets(): number {
      let n = 0;
      for (const list of Object.values(agent.sockets)) n += list?.length ?? 0;
      for (const list of Object.values(agent.freeSockets)) n += list?.length ?? 0;
      return n;
    },

    close(): void {
      for (const list of Object.values(agent.freeSockets)) for (const s of list ?? []) s.destroy();
    },
  };
}
