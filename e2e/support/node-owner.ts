// Child process of e2e/node-host.test.ts: starts a real node against the given control plane,
// runs one pod on it (bridge network, a volume), prints `READY <json>` and waits to be killed.
//   node e2e/support/node-owner.ts <admin kubeconfig> <testplane binary> <node name> <namespace>
import { startNode } from '../harness/node.ts';
import { runPausePod } from './node-pods.ts';

const [kubeconfig, binary, name, namespace] = process.argv.slice(2);
if (kubeconfig === undefined || binary === undefined || name === undefined || namespace === undefined) {
  throw new Error('usage: node-owner.ts <kubeconfig> <binary> <node name> <namespace>');
}
const node = await startNode({ adminKubeconfig: kubeconfig, binary }, { name, log: (m) => console.error(m) });
await runPausePod(kubeconfig, namespace, name, `pod-${name}`);
console.log(`READY ${JSON.stringify({ dir: node.dir, pids: node.pids })}`);
setInterval(() => undefined, 1 << 30); // until killed
