// vitest globalSetup for the e2e project: build the control plane if needed, start it once for
// the whole run (etcd, kube-apiserver, kube-controller-manager and kube-scheduler), apply the RBAC manifests, hand the kubeconfigs to the tests, stop it at the end.
import type { TestProject } from 'vitest/node';
import { startControlPlane, type ControlPlane } from './controlplane.ts';
import { applyManifests } from './manifests.ts';

const log = (msg: string): void => console.log(`[e2e] ${msg}`);

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const cp: ControlPlane = await startControlPlane({ log, scheduler: true });
  try {
    const applied = await applyManifests(cp.adminKubeconfig);
    log(`applied ${applied.length} manifest objects (${applied.join(', ')})`);
  } catch (err) {
    await cp.stop();
    throw err;
  }
  const s = cp.stats();
  const rss = Object.entries(s.components)
    .map(([name, c]) => `${name} ${Math.round((c.rssKiB ?? 0) / 1024)} MiB`)
    .join(', ');
  log(`control plane up in ${(s.startupMs / 1000).toFixed(1)} s; RSS ${rss}`);

  project.provide('kubeconfig', cp.adminKubeconfig);
  project.provide('provisionerKubeconfig', cp.provisionerKubeconfig);
  project.provide('server', cp.server);
  project.provide('dir', cp.dir);
  project.provide('binary', cp.binary);

  return async () => {
    await cp.stop();
    log('control plane stopped');
  };
}
