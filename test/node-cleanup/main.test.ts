import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { nodeCleanupKubeConfig } from '../../src/node-cleanup/main.ts';
import { silentLogger } from '../../src/util/log.ts';

const dir = mkdtempSync(join(tmpdir(), 'lnc-kubeconfig-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function kubeconfig(name: string, server: string): string {
  const file = join(dir, name);
  writeFileSync(
    file,
    `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "${server}"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`,
  );
  return file;
}

describe('nodeCleanupKubeConfig', () => {
  it('uses --kubeconfig over KUBECONFIG, and --kube-api-endpoint as the server', () => {
    const flag = kubeconfig('flag', 'https://flag:6443');
    const env = kubeconfig('env', 'https://env:6443');
    expect(nodeCleanupKubeConfig({ kubeconfig: flag, kubeApiEndpoint: '' }, silentLogger, { KUBECONFIG: env }).getCurrentCluster()?.server).toBe('https://flag:6443');
    const kc = nodeCleanupKubeConfig({ kubeconfig: flag, kubeApiEndpoint: 'https://other:8443' }, silentLogger, {});
    expect(kc.getCurrentCluster()?.server).toBe('https://other:8443');
    expect(kc.getCurrentUser()?.token).toBe('t');
  });

  it('without a kubeconfig file needs the in-cluster environment, and says so in one line', () => {
    expect(() => nodeCleanupKubeConfig({ kubeconfig: '', kubeApiEndpoint: 'https://x' }, silentLogger, {})).toThrow(/KUBECONFIG is not set/);
  });
});
