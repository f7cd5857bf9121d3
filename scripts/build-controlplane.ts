// Builds (or finds in the cache) the e2e control-plane binary and prints its path.
import { ensureControlPlaneBinary } from '../e2e/harness/build.ts';

const bin = await ensureControlPlaneBinary({ log: (m: string) => console.error(m) });
console.log(bin);
