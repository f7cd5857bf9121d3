// Builds (or finds in the cache) the product image from the Dockerfile with buildah (no Docker engine)
// and prints the path of its OCI archive; progress and the image reference go to stderr.
// Load it into containerd with `ctr -n k8s.io images import <archive>`.
import { ensureProvisionerImage } from '../e2e/harness/image.ts';

try {
  const { archive, ref } = await ensureProvisionerImage({ log: (m: string) => console.error(m) });
  console.error(`image: ${ref}`);
  console.log(archive);
} catch (err) {
  console.error(`build-image: ${(err as Error).message}`);
  process.exitCode = 1;
}
