// Smoke tests of the e2e control plane itself: each runs against the real etcd, kube-apiserver
// and kube-controller-manager started by e2e/harness/global-setup.ts.
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AuthenticationV1Api, type V1Job, type V1ResourceAttributes } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  ComponentStartError,
  freePort,
  startControlPlane,
  sweepStaleControlPlanes,
  type ControlPlaneOptions,
} from './harness/controlplane.ts';
import { adminClients, apiStatus, clientsFor, provisionerClients, uniqueName, waitFor } from './harness/kube.ts';
import { createNode, startNodeAgent, type NodeAgent } from './harness/node-agent.ts';
import { pgrep, runNodeScript } from './harness/procs.ts';

const admin = adminClients();
const { core, batch, storage } = admin;

async function createNamespace(prefix: string): Promise<string> {
  const name = uniqueName(prefix);
  await core.createNamespace({ body: { metadata: { name } } });
  return name;
}

async function namespaceGone(name: string): Promise<boolean> {
  try {
    await core.readNamespace({ name });
    return false;
  } catch (err) {
    if (apiStatus(err) === 404) return true;
    throw err;
  }
}

describe('PV binder', () => {
  it('binds a local PV with node affinity to a PVC, and deletes both', async () => {
    const node = uniqueName('node');
    await createNode(core, node, { 'topology.kubernetes.io/zone': 'e2e' });
    const sc = uniqueName('local');
    await storage.createStorageClass({
      body: {
        metadata: { name: sc },
        provisioner: 'kubernetes.io/no-provisioner',
        volumeBindingMode: 'Immediate',
        reclaimPolicy: 'Retain',
      },
    });
    const ns = await createNamespace('bind');
    const pv = uniqueName('local-pv');
    await core.createPersistentVolume({
      body: {
        metadata: { name: pv },
        spec: {
          capacity: { storage: '2Gi' },
          accessModes: ['ReadWriteOnce'],
          persistentVolumeReclaimPolicy: 'Retain',
          storageClassName: sc,
          volumeMode: 'Filesystem',
          local: { path: '/mnt/disks/vol1' },
          nodeAffinity: {
            required: {
              nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [node] }] }],
            },
          },
        },
      },
    });
    await core.createNamespacedPersistentVolumeClaim({
      namespace: ns,
      body: {
        metadata: { name: 'claim' },
        spec: { storageClassName: sc, accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
      },
    });

    const claim = await waitFor(
      async () => {
        const c = await core.readNamespacedPersistentVolumeClaim({ namespace: ns, name: 'claim' });
        return c.status?.phase === 'Bound' ? c : undefined;
      },
      { what: `PVC ${ns}/claim to be Bound`, timeoutMs: 60_000 },
    );
    expect(claim.spec?.volumeName).toBe(pv);
    expect(claim.status?.capacity?.['storage']).toBe('2Gi');
    const boundPv = await waitFor(
      async () => {
        const v = await core.readPersistentVolume({ name: pv });
        return v.status?.phase === 'Bound' ? v : undefined;
      },
      { what: `PV ${pv} to be Bound` },
    );
    expect(boundPv.spec?.claimRef).toMatchObject({ namespace: ns, name: 'claim' });
    // StorageObjectInUseProtection admission put the protection finalizers on.
    expect(boundPv.metadata?.finalizers).toContain('kubernetes.io/pv-protection');

    // Retain: deleting the claim releases the PV; the protection controllers let both go.
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: 'claim' });
    await waitFor(async () => (await core.readPersistentVolume({ name: pv })).status?.phase === 'Released', {
      what: `PV ${pv} to be Released`,
    });
    await core.deletePersistentVolume({ name: pv });
    await waitFor(
      async () => {
        try {
          await core.readPersistentVolume({ name: pv });
          return false;
        } catch (err) {
          if (apiStatus(err) === 404) return true;
          throw err;
        }
      },
      { what: `PV ${pv} to be deleted (pv-protection finalizer removed)` },
    );
    await storage.deleteStorageClass({ name: sc });
    await core.deleteNode({ name: node });
    await core.deleteNamespace({ name: ns });
  });
});

describe('Job controller with the node agent', () => {
  const node = uniqueName('job-node');
  let ns = '';
  let agent: NodeAgent | undefined;
  const ran: string[] = [];

  beforeAll(async () => {
    await createNode(core, node);
    ns = await createNamespace('jobs');
    agent = startNodeAgent({
      core,
      nodeName: node,
      namespace: ns,
      intervalMs: 200,
      run: (pod) => {
        ran.push(pod.metadata?.name ?? '');
        // The "command" decides the exit code, as a real container would.
        const cmd = pod.spec?.containers[0]?.command ?? [];
        return Promise.resolve({ exitCode: cmd.includes('fail') ? 3 : 0 });
      },
    });
  });
  afterAll(async () => {
    await agent?.stop();
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    await core.deleteNode({ name: node }).catch(() => undefined);
  });

  const job = (name: string, command: string[]): V1Job => ({
    metadata: { name },
    spec: {
      backoffLimit: 0,
      template: {
        spec: {
          restartPolicy: 'Never',
          nodeSelector: { 'kubernetes.io/hostname': node },
          containers: [{ name: 'cleaner', image: 'registry.k8s.io/e2e-test-images/busybox:1.36', command }],
        },
      },
    },
  });

  it('creates the pod through the job controller; the node agent completes it and the Job completes', async () => {
    await batch.createNamespacedJob({ namespace: ns, body: job('ok', ['sh', '-c', 'true']) });
    const done = await waitFor(
      async () => {
        const j = await batch.readNamespacedJob({ namespace: ns, name: 'ok' });
        return j.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True') ? j : undefined;
      },
      { what: `Job ${ns}/ok to complete`, timeoutMs: 90_000 },
    );
    expect(done.status?.succeeded).toBe(1);

    const pods = await core.listNamespacedPod({ namespace: ns, labelSelector: 'job-name=ok' });
    expect(pods.items).toHaveLength(1);
    const pod = pods.items[0]!;
    expect(pod.metadata?.ownerReferences?.[0]).toMatchObject({ kind: 'Job', name: 'ok', controller: true });
    expect(pod.spec?.nodeName).toBe(node); // bound by the agent, as the scheduler would
    expect(pod.status?.phase).toBe('Succeeded');
    expect(pod.status?.containerStatuses?.[0]?.state?.terminated?.exitCode).toBe(0);
    expect(ran).toContain(pod.metadata?.name);
    expect(agent?.handled.map((h) => h.name)).toContain(pod.metadata?.name);
  });

  it('a pod the agent reports as exit code 3 makes the Job fail', async () => {
    await batch.createNamespacedJob({ namespace: ns, body: job('bad', ['sh', '-c', 'fail']) });
    const failed = await waitFor(
      async () => {
        const j = await batch.readNamespacedJob({ namespace: ns, name: 'bad' });
        return j.status?.conditions?.find((c) => c.type === 'Failed' && c.status === 'True');
      },
      { what: `Job ${ns}/bad to fail`, timeoutMs: 90_000 },
    );
    expect(failed.reason).toBe('BackoffLimitExceeded');
    const pods = await core.listNamespacedPod({ namespace: ns, labelSelector: 'job-name=bad' });
    expect(pods.items[0]?.status?.containerStatuses?.[0]?.state?.terminated?.exitCode).toBe(3);
  });
});

describe('namespace controller', () => {
  it('finishes deleting a namespace with content (config map, PVC, service account)', async () => {
    const ns = await createNamespace('doomed');
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'cm' }, data: { a: 'b' } } });
    await core.createNamespacedPersistentVolumeClaim({
      namespace: ns,
      body: {
        metadata: { name: 'pending' },
        spec: { storageClassName: 'none', accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
      },
    });
    // The serviceaccount controller creates `default` in every new namespace.
    await waitFor(() => core.readNamespacedServiceAccount({ namespace: ns, name: 'default' }), {
      what: `ServiceAccount ${ns}/default`,
    });

    await core.deleteNamespace({ name: ns });
    const ts = (await core.readNamespace({ name: ns })).metadata?.deletionTimestamp;
    expect(ts).toBeDefined();
    await waitFor(() => namespaceGone(ns), { what: `namespace ${ns} to be deleted`, timeoutMs: 90_000 });
  });
});

describe('restricted provisioner identity', () => {
  const prov = provisionerClients();
  const can = async (attrs: V1ResourceAttributes): Promise<boolean> => {
    const r = await prov.authz.createSelfSubjectAccessReview({ body: { spec: { resourceAttributes: attrs } } });
    return r.status?.allowed === true;
  };

  it('authenticates as system:serviceaccount:kube-system:local-volume-provisioner', async () => {
    const review = await prov.kc.makeApiClient(AuthenticationV1Api).createSelfSubjectReview({ body: {} });
    expect(review.status?.userInfo?.username).toBe('system:serviceaccount:kube-system:local-volume-provisioner');
    expect(review.status?.userInfo?.groups).toContain('system:serviceaccounts:kube-system');
  });

  it('is allowed exactly what deployment/kubernetes/rbac.yaml and its two components grant', async () => {
    const allowed: V1ResourceAttributes[] = [
      ...['get', 'list', 'watch', 'create', 'delete'].map((verb) => ({ verb, resource: 'persistentvolumes' })),
      ...['get', 'list', 'watch'].map((verb) => ({ verb, group: 'storage.k8s.io', resource: 'storageclasses' })),
      ...['create', 'update', 'patch'].map((verb) => ({ verb, resource: 'events', namespace: 'default' })),
      { verb: 'create', group: 'events.k8s.io', resource: 'events', namespace: 'kube-system' },
      // get: base; update: components/taint-removal.
      ...['get', 'update'].map((verb) => ({ verb, resource: 'nodes' })),
      // components/job-cleaning
      ...['get', 'list', 'watch', 'create', 'delete'].map((verb) => ({
        verb,
        group: 'batch',
        resource: 'jobs',
        namespace: 'kube-system',
      })),
    ];
    const denied: V1ResourceAttributes[] = [
      { verb: 'get', resource: 'secrets', namespace: 'kube-system' },
      { verb: 'list', resource: 'secrets' },
      { verb: 'get', resource: 'pods', namespace: 'kube-system' },
      { verb: 'create', resource: 'pods', namespace: 'kube-system' },
      { verb: 'update', resource: 'persistentvolumes' },
      { verb: 'patch', resource: 'persistentvolumes' },
      { verb: 'delete', resource: 'nodes' },
      { verb: 'list', resource: 'nodes' },
      { verb: 'watch', resource: 'nodes' },
      { verb: 'create', resource: 'storageclasses', group: 'storage.k8s.io' },
      { verb: 'create', group: 'batch', resource: 'jobs', namespace: 'default' },
      { verb: 'create', resource: 'persistentvolumeclaims', namespace: 'default' },
    ];
    const show = (a: V1ResourceAttributes): string => `${a.verb} ${a.group ? `${a.group}/` : ''}${a.resource} ns=${a.namespace ?? '*'}`;
    const results = await Promise.all([...allowed, ...denied].map(async (a) => `${show(a)}: ${(await can(a)) ? 'yes' : 'no'}`));
    expect(results).toEqual([...allowed.map((a) => `${show(a)}: yes`), ...denied.map((a) => `${show(a)}: no`)]);
  });

  it('real requests: listing PVs works, reading a secret is 403', async () => {
    await expect(prov.core.listPersistentVolume({})).resolves.toHaveProperty('items');
    await core.createNamespacedSecret({
      namespace: 'kube-system',
      body: { metadata: { name: 'not-for-the-provisioner' }, stringData: { k: 'v' } },
    });
    const err: unknown = await prov.core
      .readNamespacedSecret({ namespace: 'kube-system', name: 'not-for-the-provisioner' })
      .then(() => undefined, (e: unknown) => e);
    expect(apiStatus(err)).toBe(403);
    await core.deleteNamespacedSecret({ namespace: 'kube-system', name: 'not-for-the-provisioner' });
  });
});

describe('harness lifecycle', () => {
  const binary = inject('binary');

  it('a second control plane: picks other ports when one is taken, reports stats and a crash, leaves no process or temp dir behind', async () => {
    // The first port handed out is taken: etcd fails to bind it and is restarted on other ports.
    const busy = createServer();
    await new Promise<void>((res) => busy.listen(0, '127.0.0.1', res));
    const busyPort = (busy.address() as AddressInfo).port;
    let handedOutBusy = false;
    const pickPort = (): Promise<number> => {
      if (handedOutBusy) return freePort();
      handedOutBusy = true;
      return Promise.resolve(busyPort);
    };
    const logs: string[] = [];
    const cp = await startControlPlane({ binary, controllerManager: false, pickPort, log: (m) => logs.push(m) }).finally(
      () => busy.close(),
    );
    let stopped = false;
    try {
      expect(logs).toContain('control plane: etcd: port in use, retrying with other ports');
      const etcdLog = readFileSync(cp.logs.etcd!, 'utf8');
      expect(etcdLog).toContain(`127.0.0.1:${busyPort}: bind: address already in use`);
      expect(etcdLog).toContain('--- retry 2 with new ports ---');

      expect(cp.dir).not.toBe(inject('dir'));
      const running = pgrep(cp.dir);
      expect(running).toEqual(expect.arrayContaining([cp.pids.etcd, cp.pids['kube-apiserver']]));
      const s = cp.stats();
      expect(s.startupMs).toBeGreaterThan(0);
      expect(s.components.etcd?.rssKiB).toBeGreaterThan(1024);
      expect(s.components['kube-apiserver']?.rssKiB).toBeGreaterThan(10 * 1024);
      expect(s.components['kube-controller-manager']).toBeUndefined();

      // Its own admin kubeconfig works.
      const other = clientsFor(cp.adminKubeconfig);
      const nss = await other.core.listNamespace({});
      expect(nss.items.map((n) => n.metadata?.name)).toContain('default');

      // A crash is reported, naming the component.
      process.kill(cp.pids.etcd!, 'SIGKILL');
      const crash = await cp.crashed;
      expect(crash.component).toBe('etcd');
      expect(crash.signal).toBe('SIGKILL');

      await cp.stop();
      stopped = true;
      expect(pgrep(cp.dir)).toEqual([]);
      expect(existsSync(cp.dir)).toBe(false);
    } finally {
      if (!stopped) await cp.stop();
    }
  });

  /** Starts a control plane that must fail, in its own tmp root; checks that nothing is left behind. */
  const failedStart = async (opts: Omit<ControlPlaneOptions, 'binary' | 'tmpRoot' | 'log'>): Promise<ComponentStartError> => {
    const root = mkdtempSync(join(tmpdir(), 'lsp-e2e-fail-'));
    try {
      const err: unknown = await startControlPlane({ ...opts, binary, tmpRoot: root, log: () => undefined }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ComponentStartError);
      expect(readdirSync(root)).toEqual([]);
      expect(pgrep(root)).toEqual([]);
      return err as ComponentStartError;
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  };

  it('a component that fails to start is named in the error with its log tail; nothing is left behind', async () => {
    const e = await failedStart({ controllerManager: false, extraArgs: { 'kube-apiserver': ['--no-such-flag=1'] } });
    expect(e.component).toBe('kube-apiserver');
    expect(e.message).toMatch(/^kube-apiserver exited with code \d+ before it was ready/);
    expect(e.message).toContain('unknown flag: --no-such-flag');
    expect(e.logTail).toContain('unknown flag: --no-such-flag');
  });

  it('a readiness timeout names the component; nothing is left behind', async () => {
    // Usually etcd (its first probe comes before it is up); on a quiet machine etcd can answer that first probe,
    // and then the next component is the one that times out. Either way the error names it.
    const e = await failedStart({ readyTimeoutMs: 1 });
    expect(['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler']).toContain(e.component);
    expect(e.message.startsWith(`${e.component} was not ready after `)).toBe(true);
    expect(e.message).toMatch(/ was not ready after \d+ s \(GET /);
  });
});

describe('npm run controlplane (e2e/harness/cli.ts)', () => {
  const cli = fileURLToPath(new URL('./harness/cli.ts', import.meta.url));

  interface Cli {
    readonly child: ChildProcess;
    readonly exited: Promise<number | null>;
    readonly kubeconfig: string;
    readonly dir: string;
    stderr(): string;
  }

  // A private TMPDIR, so that no other run's stale-dir sweep touches this CLI's temp dir.
  let tmpRoot = '';
  beforeAll(() => {
    tmpRoot = mkdtempSync(join(tmpdir(), 'lsp-e2e-cli-'));
  });
  afterAll(() => rmSync(tmpRoot, { recursive: true, force: true }));

  const startCli = async (): Promise<Cli> => {
    const { child, exited, stdout, stderr } = runNodeScript(cli, ['--no-controller-manager', '--no-rbac'], { TMPDIR: tmpRoot });
    const kubeconfig = await waitFor(
      () => {
        if (child.exitCode !== null) throw new Error(`cli exited with ${child.exitCode}: ${stderr()}`);
        return /^export KUBECONFIG=(.+)$/m.exec(stdout())?.[1];
      },
      { what: 'the CLI to print export KUBECONFIG=...', timeoutMs: 120_000 },
    );
    return { child, exited, kubeconfig, dir: dirname(kubeconfig), stderr };
  };

  const ensureDead = async (c: Cli | undefined): Promise<void> => {
    if (c && c.child.exitCode === null && c.child.signalCode === null) {
      c.child.kill('SIGINT');
      await c.exited;
    }
  };

  it('prints export KUBECONFIG, serves, and on Ctrl-C (SIGINT) removes every process and the temp dir', async () => {
    let c: Cli | undefined;
    try {
      c = await startCli();
      expect(c.kubeconfig).toMatch(/lsp-controlplane-[^/]+\/admin\.kubeconfig$/);
      const nss = await clientsFor(c.kubeconfig).core.listNamespace({});
      expect(nss.items.map((n) => n.metadata?.name)).toContain('kube-system');
      expect(pgrep(c.dir).length).toBeGreaterThanOrEqual(3); // etcd, kube-apiserver and kube-scheduler (on by default)

      c.child.kill('SIGINT');
      expect(await c.exited).toBe(0);
      expect(c.stderr()).toContain(`stopped; removed ${c.dir}`);
      expect(pgrep(c.dir)).toEqual([]);
      expect(existsSync(c.dir)).toBe(false);
    } finally {
      await ensureDead(c);
    }
  });

  it('killed with SIGKILL: its components stop by themselves and the next start sweeps its temp dir', async () => {
    let c: Cli | undefined;
    try {
      c = await startCli();
      const cli = c;
      expect(pgrep(cli.dir).length).toBeGreaterThanOrEqual(3); // the scheduler's parent watchdog is checked too
      cli.child.kill('SIGKILL');
      await cli.exited;
      // testplane watches TESTPLANE_PARENT_PID and shuts down when the harness is gone.
      await waitFor(() => pgrep(cli.dir).length === 0, { what: `the orphaned components of ${cli.dir} to exit`, timeoutMs: 30_000 });
      expect(existsSync(cli.dir)).toBe(true); // nobody could clean up after SIGKILL...
      expect(dirname(cli.dir)).toBe(tmpRoot);
      expect(await sweepStaleControlPlanes(tmpRoot)).toEqual([cli.dir]); // ...until the next start
      expect(existsSync(cli.dir)).toBe(false);
    } finally {
      await ensureDead(c);
    }
  });
});
