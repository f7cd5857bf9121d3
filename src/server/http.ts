// The daemon's HTTP endpoints, process scope (they survive config reloads):
//   <metrics-path>                 Prometheus metrics
//   /ready, /ready/DiscovererReadyzCheck   readiness, with the Go provisioner's bodies
//   /healthz                       liveness (the process and its event loop are alive)
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Metrics } from '../metrics/metrics.ts';
import type { Logger } from '../util/log.ts';
import type { Readiness } from '../util/readiness.ts';

export interface HttpServerOptions {
  /** Go-style listen address: ":8080", "127.0.0.1:8080", "[::1]:0". */
  listenAddress: string;
  metricsPath: string;
  /** Anything with a prom-client registry: the provisioner's Metrics or the node-cleanup controller's. */
  metrics: Pick<Metrics, 'registry'>;
  readiness: Readiness;
  logger: Logger;
}

export function parseListenAddress(addr: string): { host: string | undefined; port: number } {
  const i = addr.lastIndexOf(':');
  if (i < 0) throw new Error(`invalid --listen-address ${JSON.stringify(addr)}: want host:port or :port`);
  let host = addr.slice(0, i);
  const port = Number(addr.slice(i + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`invalid --listen-address ${JSON.stringify(addr)}: bad port`);
  }
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  return { host: host === '' ? undefined : host, port };
}

export async function startHttpServer(opts: HttpServerOptions): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const { host, port } = parseListenAddress(opts.listenAddress);
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const path = url.pathname;
    if (path === opts.metricsPath) {
      opts.metrics.registry.metrics().then(
        (body) => {
          res.writeHead(200, { 'Content-Type': opts.metrics.registry.contentType });
          res.end(body);
        },
        (err: unknown) => {
          opts.logger.error({ err }, 'failed to collect metrics');
          res.writeHead(500).end('failed to collect metrics\n');
        },
      );
      return;
    }
    if (path === '/ready' || path === '/readyz') {
      if (opts.readiness.ready) {
        res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8' });
        res.end(url.searchParams.has('verbose') ? '[+]DiscovererReadyzCheck ok\nreadyz check passed\n' : 'ok');
      } else {
        res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' });
        const detail = url.searchParams.has('verbose') ? `: ${opts.readiness.reason}` : ': reason withheld';
        res.end(`[-]DiscovererReadyzCheck failed${detail}\nready check failed\n`);
      }
      return;
    }
    if (path === '/ready/DiscovererReadyzCheck') {
      if (opts.readiness.ready) res.writeHead(200).end('ok');
      else res.writeHead(500).end('internal server error: discovererNotReady\n');
      return;
    }
    if (path === '/healthz' || path === '/livez') {
      res.writeHead(200).end('ok');
      return;
    }
    res.writeHead(404).end('not found\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const actual = (server.address() as AddressInfo).port;
  return {
    server,
    port: actual,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
