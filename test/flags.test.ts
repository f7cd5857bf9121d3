import { describe, expect, it } from 'vitest';
import { DEFAULT_BURST, DEFAULT_QPS, HELP, parseOptions } from '../src/flags.ts';
import { extractKlogFlags, klogLevel } from '../src/klog-flags.ts';

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

describe('klog flags of the Go provisioner', () => {
  const GO_ARGS = ['-v=2', '--v=4', '-v', '3', '-logtostderr', '--alsologtostderr', '-stderrthreshold=INFO', '--logtostderr=true'];

  it('accepts the args of a Go provisioner DaemonSet; the last -v sets the level; the rest are named once', () => {
    const o = parseOptions([...GO_ARGS, '--discovery-period=2s'], {});
    expect(o.logLevel).toBe('debug'); // -v 3 is the last one
    expect(o.ignoredKlogFlags).toEqual(['-logtostderr', '-alsologtostderr', '-stderrthreshold']);
    expect(o.discoveryPeriodMs).toBe(2000);
  });

  it.each([
    [['-v=0'], 'info'],
    [['-v=1'], 'info'],
    [['--v=2'], 'debug'],
    [['-v', '3'], 'debug'],
    [['-v=4'], 'trace'],
    [['--v', '9'], 'trace'],
  ])('maps %j to %s', (argv, level) => {
    expect(parseOptions(argv, {}).logLevel).toBe(level);
  });

  it('lets --log-level and LOG_LEVEL win over -v', () => {
    expect(parseOptions(['-v=4', '--log-level=warn'], {}).logLevel).toBe('warn');
    expect(parseOptions(['--log-level', 'error', '-v=4'], {}).logLevel).toBe('error');
    expect(parseOptions(['-v=4'], { LOG_LEVEL: 'info' }).logLevel).toBe('info');
    expect(parseOptions([], {}).ignoredKlogFlags).toEqual([]);
  });

  it('accepts the other klog flags, with a value where klog takes one', () => {
    const o = parseOptions(['-vmodule=foo=2', '-log_dir', '/tmp/x', '--log_file=/x.log', '-skip_headers', '-one_output=false'], {});
    expect(o.ignoredKlogFlags).toEqual(['-vmodule', '-log_dir', '-log_file', '-skip_headers', '-one_output']);
    expect(o.logLevel).toBe('info');
  });

  it.each([
    [['-v=x'], /-v: want a verbosity level/],
    [['-v'], /flag needs an argument: -v/],
    [['-logtostderr=maybe'], /-logtostderr: want true or false/],
  ])('rejects %j with a clear message', (argv, msg) => {
    expect(() => parseOptions(argv, {})).toThrow(msg);
  });

  it('maps verbosity to levels', () => {
    expect([0, 1, 2, 3, 4, 10].map(klogLevel)).toEqual(['info', 'info', 'debug', 'debug', 'trace', 'trace']);
    expect(extractKlogFlags(['--', '-v=2'])).toEqual({ rest: ['--', '-v=2'], verbosity: undefined, ignored: [] });
  });
});

describe('--log-format', () => {
  it('defaults to auto (or LOG_FORMAT) and accepts json and text', () => {
    expect(parseOptions([], {}).logFormat).toBe('auto');
    expect(parseOptions([], { LOG_FORMAT: 'text' }).logFormat).toBe('text');
    expect(parseOptions(['--log-format=json'], { LOG_FORMAT: 'text' }).logFormat).toBe('json');
    expect(parseOptions(['-log-format', 'text'], {}).logFormat).toBe('text');
    expect(() => parseOptions(['--log-format=xml'], {})).toThrow(/--log-format: want json, text, auto/);
    expect(HELP).toContain('--log-format');
  });
});
