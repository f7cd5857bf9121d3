// Values the e2e globalSetup (global-setup.ts) provides to test files via `inject(...)`.
import 'vitest';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Path of the admin (system:masters) kubeconfig. */
    kubeconfig: string;
    /** Path of the restricted kubeconfig for system:serviceaccount:kube-system:local-volume-provisioner. */
    provisionerKubeconfig: string;
    /** https://127.0.0.1:<port> of the kube-apiserver. */
    server: string;
    /** The control plane's temp dir (logs, certs, kubeconfigs). */
    dir: string;
    /** The testplane binary the control plane runs from. */
    binary: string;
  }
}
