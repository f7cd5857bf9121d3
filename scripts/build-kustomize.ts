// Builds (or finds in the cache) the pinned kustomize binary and prints its path.
import { ensureKustomizeBinary } from '../e2e/harness/kustomize.ts';

const bin = await ensureKustomizeBinary({ log: (m: string) => console.error(m) });
console.log(bin);
