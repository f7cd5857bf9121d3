import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { DEFAULT_BURST, DEFAULT_QPS, HELP, LOG_LEVELS, parseOptions } from '../src/flags.ts';
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

  it('--pv-node-label is off by default and parses like the other booleans (Go-style spelling too)', () => {
    expect(parseOptions([], {}).pvNodeLabel).toBe(false);
    expect(parseOptions(['--pv-node-label=true'], {}).pvNodeLabel).toBe(true);
    expect(parseOptions(['-pv-node-label=yes'], {}).pvNodeLabel).toBe(true);
    expect(() => parseOptions(['--pv-node-label=sometimes'], {})).toThrow('invalid value "sometimes" for --pv-node-label: want true or false');
  });

  it.each([
    [['--discovery-period', '10'], /discovery-period/],
    [['--discovery-period=-5s'], /--discovery-period: negative/],
    [['--kube-api-qps', 'x'], /kube-api-qps/],
    [['--hot-reload=maybe'], /hot-reload/],
    [['--metrics-path', 'metrics'], /must start with/],
    [['--no-such-flag'], /no-such-flag/],
  ])('rejects bad input %j with a clear message', (argv, msg) => {
    expect(() => parseOptions(argv, {})).toThrow(msg);
  });

  it('documents every flag and env var in --help', () => {
    for (const w of ['--listen-address', '--metrics-path', '--discovery-period', '--config-sync-period', '--config-dir', '--max-config-file-size', '--kube-api-qps', '--kube-api-burst', '--hot-reload', '--pv-node-label', '--dry-run', 'MY_NODE_NAME', 'MY_NAMESPACE', 'JOB_CONTAINER_IMAGE', 'KUBECONFIG', 'SIGHUP']) {
      expect(HELP).toContain(w);
    }
  });
});

describe('parseOptions: durations must fit a timer', () => {
  const range = 'want from 1ms to 596h31m23.647s';
  it.each([
    ['--discovery-period=1000000h', `invalid value "1000000h" for --discovery-period: longer than 596h31m23.647s, the longest timer Node.js supports; ${range}`],
    ['--clean-timeout=1000000h', `invalid value "1000000h" for --clean-timeout: longer than 596h31m23.647s, the longest timer Node.js supports; ${range}`],
    ['--config-sync-period=596h31m23.648s', `invalid value "596h31m23.648s" for --config-sync-period: longer than 596h31m23.647s, the longest timer Node.js supports; ${range}`],
    ['--discovery-period=0', `invalid value "0" for --discovery-period: zero; ${range}`],
    ['--clean-timeout=0s', `invalid value "0s" for --clean-timeout: zero; ${range}`],
    ['--config-sync-period=1ns', `invalid value "1ns" for --config-sync-period: shorter than 1ms; ${range}`],
    ['--clean-timeout=-1h', `invalid value "-1h" for --clean-timeout: negative; ${range}`],
    ['--discovery-period=9999999999h', 'invalid value for --discovery-period: invalid duration "9999999999h": out of range'],
  ])('%s is a one-line error naming the flag', (arg, message) => {
    expect(() => parseOptions([arg], {})).toThrow(new Error(message));
  });

  it('accepts the longest timer', () => {
    expect(parseOptions(['--clean-timeout=596h31m23.647s'], {}).cleanTimeoutMs).toBe(2 ** 31 - 1);
  });

  it('rounds up to whole milliseconds (execa refuses a fractional timeout, failing every clean)', () => {
    const o = parseOptions(['--clean-timeout=1500us', '--discovery-period=1.0001s', '--config-sync-period=2.5ms'], {});
    expect([o.cleanTimeoutMs, o.discoveryPeriodMs, o.configSyncPeriodMs]).toEqual([2, 1001, 3]);
  });
});

describe('parseOptions: --log-level', () => {
  it('offers exactly the pino levels and silent', () => {
    expect([...LOG_LEVELS].sort()).toEqual([...Object.keys(pino.levels.values), 'silent'].sort());
  });

  it('rejects an unknown level from the flag or LOG_LEVEL, naming the flag', () => {
    const message = 'invalid value "bogus" for --log-level (or LOG_LEVEL): want one of trace, debug, info, warn, error, fatal, silent';
    expect(() => parseOptions(['--log-level=bogus'], {})).toThrow(new Error(message));
    expect(() => parseOptions([], { LOG_LEVEL: 'bogus' })).toThrow(new Error(message));
    expect(parseOptions(['--log-level=debug'], { LOG_LEVEL: 'bogus' }).logLevel).toBe('debug');
    expect(parseOptions([], { LOG_LEVEL: '' }).logLevel).toBe('info');
  });
});

describe('parseOptions: --max-config-file-size', () => {
  it.each([
    [[], 262_144],
    [['--max-config-file-size=1Mi'], 1_048_576],
    [['--max-config-file-size=300Ki'], 307_200],
    [['--max-config-file-size', '5000'], 5000],
  ])('%j -> %d bytes', (argv, bytes) => {
    expect(parseOptions(argv, {}).maxConfigFileBytes).toBe(bytes);
  });

  it.each(['0', '-1', '1.5Mi', '1MB', 'lots', ''])('rejects %j', (v) => {
    expect(() => parseOptions([`--max-config-file-size=${v}`], {})).toThrow(
      `invalid value ${JSON.stringify(v)} for --max-config-file-size: want a positive number of bytes, optionally with a Ki or Mi suffix`,
    );
  });
});

describe('the daemon binary on a bad flag', () => {
  const main = fileURLToPath(new URL('../src/main.ts', import.meta.url));
  it.each([
    ['--log-level=bogus', /^local-volume-provisioner: invalid value "bogus" for --log-level \(or LOG_LEVEL\): want one of /],
    ['--discovery-period=1000000h', /^local-volume-provisioner: invalid value "1000000h" for --discovery-period: longer than /],
  ])('%s: exit code 2, one line naming the flag, no stack', (arg, first) => {
    const child = spawnSync(process.execPath, [main, arg], {
      encoding: 'utf8',
      env: { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LOG_LEVEL')), MY_NODE_NAME: 'node-1' },
      timeout: 60_000,
    });
    expect(child.status).toBe(2);
    const lines = child.stderr.trimEnd().split('\n');
    expect(lines[0]).toMatch(first);
    expect(lines.slice(1)).toEqual(['Run with --help for usage.']);
    expect(child.stdout).toBe('');
  }, 90_000);
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

describe('--log-format and --logging-format', () => {
  it("defaults to klog's text format (or LOG_FORMAT) and accepts json and text", () => {
    expect(parseOptions([], {}).logFormat).toBe('text');
    expect(parseOptions([], { KUBERNETES_SERVICE_HOST: '10.0.0.1' }).logFormat).toBe('text');
    expect(parseOptions([], { LOG_FORMAT: 'json' }).logFormat).toBe('json');
    expect(parseOptions(['--log-format=json'], { LOG_FORMAT: 'text' }).logFormat).toBe('json');
    expect(parseOptions(['-log-format', 'text'], {}).logFormat).toBe('text');
    expect(() => parseOptions(['--log-format=xml'], {})).toThrow(/--log-format: want json, text, auto/);
    expect(HELP).toContain('--log-format');
  });

  it('accepts --logging-format=json|text, the flag of the Kubernetes components (it wins over LOG_FORMAT)', () => {
    expect(parseOptions(['--logging-format=json'], {}).logFormat).toBe('json');
    expect(parseOptions(['-logging-format', 'text'], { LOG_FORMAT: 'json' }).logFormat).toBe('text');
    expect(() => parseOptions(['--logging-format=auto'], {})).toThrow('invalid value "auto" for --logging-format: want json or text');
    expect(HELP).toContain('--logging-format');
  });
});

describe('boolean flags follow Go\'s flag package', () => {
  it('a bare boolean flag means true, --flag=false turns it off', () => {
    expect(parseOptions(['--hot-reload'], {}).hotReload).toBe(true);
    expect(parseOptions(['-hot-reload=false', '--config-watch=false'], {})).toMatchObject({ hotReload: false, configWatch: false });
    expect(parseOptions(['--pv-node-label'], {}).pvNodeLabel).toBe(true);
    expect(parseOptions(['-config-watch'], {}).configWatch).toBe(true);
    expect(parseOptions(['--dry-run'], {}).dryRun).toBe(true);
    expect(parseOptions(['--dry-run=false'], {}).dryRun).toBe(false);
  });

  it('"--hot-reload false" is the flag then an argument, which is refused with how to write it', () => {
    expect(() => parseOptions(['--hot-reload', 'false'], {})).toThrow(
      'unexpected argument "false" after --hot-reload: a boolean flag takes its value after "=" (--hot-reload=false); alone it means true',
    );
    expect(() => parseOptions(['-pv-node-label', 'true'], {})).toThrow(/after --pv-node-label/);
    expect(() => parseOptions(['extra'], {})).toThrow('unexpected argument "extra": this command takes flags only');
  });

  it('the daemon exits 2 on "--hot-reload false" and starts its dry run with a bare --hot-reload', () => {
    const main = fileURLToPath(new URL('../src/main.ts', import.meta.url));
    const bad = spawnSync(process.execPath, [main, '--hot-reload', 'false', '--dry-run'], { encoding: 'utf8', env: { ...process.env, MY_NODE_NAME: 'n1' } });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain('unexpected argument "false" after --hot-reload');
    const ok = spawnSync(process.execPath, [main, '--hot-reload', '--help'], { encoding: 'utf8' });
    expect(ok.status).toBe(0);
  }, 60_000);
});
