// Builds (or finds in the cache) the helm CLI the chart tests use (e2e/helm/go.mod) and prints its path.
import { ensureHelmBinary } from '../e2e/harness/helm.ts';

const bin = await ensureHelmBinary({ log: (m: string) => console.error(m) });
console.log(bin);
