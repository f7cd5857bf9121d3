import { describe, expect, it } from 'vitest';
import { HELP, parseNodeCleanupOptions } from '../../src/node-cleanup/flags.ts';

describe('parseNodeCleanupOptions', () => {
  it('has the Go controller defaults', () => {
    expect(parseNodeCleanupOptions([], {})).toMatchObject({
      storageClassNames: [],
      deletionDelayMs: 60_000,
      scanIntervalMs: 10_000,
      resyncMs: 600_000,
      workers: 10,
      listenAddress: ':8080',
      metricsPath: '/metrics',
      kubeconfig: '',
      kubeApiEndpoint: '',
    });
  });

  it('takes the Go flag names; class names comma-separated and repeatable, blanks dropped', () => {
    const o = parseNodeCleanupOptions(
      ['--storageclass-names=a, b,,', '--storageclass-names', 'c,a', '--pvc-deletion-delay=3s', '--stale-pv-discovery-interval=500ms', '--resync=1m', '--worker-threads=2', '--listen-address='],
      {},
    );
    expect(o).toMatchObject({ storageClassNames: ['a', 'b', 'c'], deletionDelayMs: 3000, scanIntervalMs: 500, resyncMs: 60_000, workers: 2, listenAddress: '' });
  });

  it('takes the log level and format from flags or LOG_LEVEL / LOG_FORMAT', () => {
    expect(parseNodeCleanupOptions([], { LOG_LEVEL: 'debug', LOG_FORMAT: 'text' })).toMatchObject({ logLevel: 'debug', logFormat: 'text' });
    expect(parseNodeCleanupOptions(['--log-level=warn', '--log-format=json'], { LOG_LEVEL: 'debug' })).toMatchObject({ logLevel: 'warn', logFormat: 'json' });
  });

  it("defaults to klog's text format, in a pod too; --logging-format=json|text as Kubernetes components spell it; no positional argument (issue 18)", () => {
    expect(parseNodeCleanupOptions([], { KUBERNETES_SERVICE_HOST: '10.96.0.1' }).logFormat).toBe('text');
    expect(parseNodeCleanupOptions(['--logging-format=json'], {}).logFormat).toBe('json');
    expect(() => parseNodeCleanupOptions(['--logging-format=yaml'], {})).toThrow('invalid value "yaml" for --logging-format: want json or text');
    expect(() => parseNodeCleanupOptions(['stray'], {})).toThrow('unexpected argument "stray": this command takes flags only');
  });

  it('--kubeconfig wins over KUBECONFIG', () => {
    expect(parseNodeCleanupOptions([], { KUBECONFIG: '/env' }).kubeconfig).toBe('/env');
    expect(parseNodeCleanupOptions(['--kubeconfig=/flag'], { KUBECONFIG: '/env' }).kubeconfig).toBe('/flag');
  });

  it('carries the in-cluster variables the API client and the log format read (env is read only here)', () => {
    const env = { KUBECONFIG: '/env', KUBERNETES_SERVICE_HOST: '10.0.0.1', KUBERNETES_SERVICE_PORT: '443', OTHER: 'x' };
    expect(parseNodeCleanupOptions([], env).kubeEnv).toEqual({ KUBECONFIG: '/env', KUBERNETES_SERVICE_HOST: '10.0.0.1', KUBERNETES_SERVICE_PORT: '443' });
  });

  it.each([
    [['--storageclass-names=Bad_Name'], /--storageclass-names/],
    [['--pvc-deletion-delay=0'], /--pvc-deletion-delay/],
    [['--pvc-deletion-delay=60'], /--pvc-deletion-delay/],
    [['--worker-threads=1.5'], /--worker-threads/],
    [['--worker-threads=0'], /--worker-threads/],
    [['--metrics-path=metrics'], /--metrics-path/],
    [['--kube-api-endpoint=ftp://x'], /--kube-api-endpoint/],
    [['--kube-api-endpoint=::'], /--kube-api-endpoint/],
    [['--no-such-flag'], /no-such-flag/],
    [['--log-level=loud'], /--log-level/],
    [['--log-format=xml'], /--log-format/],
  ])('rejects %j with one line naming the flag', (argv, re) => {
    expect(() => parseNodeCleanupOptions(argv, {})).toThrow(re);
  });

  it('documents every flag in --help', () => {
    for (const f of ['storageclass-names', 'pvc-deletion-delay', 'stale-pv-discovery-interval', 'resync', 'worker-threads', 'listen-address', 'metrics-path', 'kubeconfig', 'kube-api-endpoint']) {
      expect(HELP).toContain(`--${f}`);
    }
  });
});
