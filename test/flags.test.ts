import { describe, expect, it } from 'vitest';
import { DEFAULT_BURST, DEFAULT_QPS, HELP, parseOptions } from '../src/flags.ts';

describe('parseOptions', () => {
  it('has the Go provisioner defaults', () => {
    const o = parseOptions([], {});
    expect(o.listenAddress).toBe(':8080');
    expect(o.metricsPath).toBe('/metrics');
    expect(o.discoveryPeriodMs).toBe(10_000);
    expect(o.configSyncPeriodMs).toBe(5_000);
    expect(o.configDir).toBe('/etc/provisioner/config');
    expect(o.namespace).toBe('default');
    expect(o.kubeApiQps).toBe(DEFAULT_QPS);
    expect(o.kubeApiBurst).toBe(DEFAULT_BURST);
    expect(o.hotReload).toBe(true);
  });

  it('accepts Go-style single-dash flags and = values', () => {
    const o = parseOptions(['-listen-address=127.0.0.1:9090', '-discovery-period', '1m30s', '--config-sync-period=250ms'], {});
    expect(o.listenAddress).toBe('127.0.0.1:9090');
    expect(o.discoveryPeriodMs).toBe(90_000);
    expect(o.configSyncPeriodMs).toBe(250);
  });

  it('reads the env vars of the Go provisioner', () => {
    const o = parseOptions([], {
      MY_NODE_NAME: 'node-a',
      MY_NAMESPACE: 'storage',
      JOB_CONTAINER_IMAGE: 'img:1',
      KUBECONFIG: '/k',
      MY_POD_NAME: 'lvp-x',
    });
    expect(o).toMatchObject({ nodeName: 'node-a', namespace: 'storage', jobImage: 'img:1', kubeconfig: '/k', podName: 'lvp-x' });
  });

  it('lets --node-name override MY_NODE_NAME and parses --hot-reload=false', () => {
    const o = parseOptions(['--node-name', 'n2', '--hot-reload=false'], { MY_NODE_NAME: 'n1' });
    expect(o.nodeName).toBe('n2');
    expect(o.hotReload).toBe(false);
  });

  it.each([
    [['--discovery-period', '10'], /discovery-period/],
    [['--discovery-period=-5s'], /positive duration/],
    [['--kube-api-qps', 'x'], /kube-api-qps/],
    [['--hot-reload=maybe'], /hot-reload/],
    [['--metrics-path', 'metrics'], /must start with/],
    [['--no-such-flag'], /no-such-flag/],
  ])('rejects bad input %j with a clear message', (argv, msg) => {
    expect(() => parseOptions(argv, {})).toThrow(msg);
  });

  it('documents every flag and env var in --help', () => {
    for (const w of ['--listen-address', '--metrics-path', '--discovery-period', '--config-sync-period', '--config-dir', '--kube-api-qps', '--kube-api-burst', '--hot-reload', '--dry-run', 'MY_NODE_NAME', 'MY_NAMESPACE', 'JOB_CONTAINER_IMAGE', 'KUBECONFIG', 'SIGHUP']) {
      expect(HELP).toContain(w);
    }
  });
});
