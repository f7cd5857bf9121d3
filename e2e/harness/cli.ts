// `npm run controlplane [-- flags]`: a real Kubernetes control plane in the foreground for manual
// use (kubectl, running the provisioner against it). Builds the binary if needed, prints the
// kubeconfig exports, stays up until Ctrl-C, then removes every process and the temp dir.
import { parseArgs } from 'node:util';
import { startControlPlane, type ComponentName } from './controlplane.ts';
import { applyManifests } from './manifests.ts';

const usage = `usage: npm run controlplane [-- options]

Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler (built from e2e/controlplane) on free
loopback ports and prints the kubeconfig paths. Ctrl-C stops everything and removes the temp dir.

options:
  --no-controller-manager   do not start the kube-controller-manager
  --no-scheduler            do not start the kube-scheduler
  --no-rbac                 do not apply deployment/kubernetes/{serviceaccount,rbac}.yaml and the
                            RBAC of its components (job-cleaning, taint-removal)
  --timeout <seconds>       per-component readiness timeout (default 120)
  -h, --help                this text

environment:
  LSP_CACHE_DIR             binary cache root (default ~/.cache/local-static-provisioner)`;

async function main(): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        'no-controller-manager': { type: 'boolean', default: false },
        'no-scheduler': { type: 'boolean', default: false },
        'no-rbac': { type: 'boolean', default: false },
        timeout: { type: 'string', default: '120' },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
    }));
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${usage}`);
    return 2;
  }
  if (values.help) {
    console.log(usage);
    return 0;
  }
  const timeoutS = Number(values.timeout);
  if (!Number.isFinite(timeoutS) || timeoutS <= 0) {
    console.error(`--timeout must be a positive number of seconds, got "${values.timeout}"`);
    return 2;
  }

  const log = (msg: string): void => console.error(msg);
  const cp = await startControlPlane({
    log,
    controllerManager: !values['no-controller-manager'],
    scheduler: !values['no-scheduler'],
    readyTimeoutMs: timeoutS * 1000,
  });

  let stopping = false;
  const shutdown = (why: string, code: number): void => {
    if (stopping) {
      console.error('second signal: killing now');
      process.exit(130); // the exit hook SIGKILLs the components and removes the dir
    }
    stopping = true;
    console.error(`${why}: stopping the control plane...`);
    void cp.stop().then(
      () => {
        console.error(`stopped; removed ${cp.dir}`);
        process.exit(code);
      },
      (err: unknown) => {
        console.error(`stop failed: ${(err as Error).message}`);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => shutdown('SIGINT', 0));
  process.on('SIGTERM', () => shutdown('SIGTERM', 0));
  process.on('SIGHUP', () => shutdown('SIGHUP', 0));

  if (!values['no-rbac']) {
    try {
      const applied = await applyManifests(cp.adminKubeconfig);
      log(`applied ${applied.join(', ')}`);
    } catch (err) {
      await cp.stop();
      throw err;
    }
  }

  const s = cp.stats();
  const rss = Object.entries(s.components)
    .map(([name, c]) => `${name} ${Math.round((c.rssKiB ?? 0) / 1024)} MiB (pid ${c.pid})`)
    .join(', ');
  console.log(`# control plane ready in ${(s.startupMs / 1000).toFixed(1)} s at ${cp.server}; ${rss}`);
  console.log(`# logs: ${Object.values(cp.logs).join(' ')}`);
  console.log(`export KUBECONFIG=${cp.adminKubeconfig}`);
  console.log(`# restricted provisioner identity (kube-system:local-volume-provisioner):`);
  console.log(`# export KUBECONFIG=${cp.provisionerKubeconfig}`);
  console.log('# Ctrl-C stops everything.');

  const crash = await cp.crashed;
  if (!stopping) {
    const name: ComponentName = crash.component;
    console.error(`${name} exited unexpectedly (code ${String(crash.code)}, signal ${String(crash.signal)}):\n${crash.logTail}`);
    shutdown(`${name} crashed`, 1);
  }
  return new Promise<number>(() => undefined); // shutdown() exits the process
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(1);
  },
);
