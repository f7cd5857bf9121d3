// `npm run bench`: every benchmark in one run, on one control plane and one set
// of mounts (docs/performance.md explains each). Results go to stdout as
// markdown (progress to stderr); --json FILE also writes the raw numbers.
// Needs root (tmpfs mounts). Ctrl-C cleans up.
//
//   npm run bench [-- --volumes 500 --foreign 5000 --swaps 50 --poll-ms 1000 --json out.json]
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { discoveryScale } from './discovery-scale.ts';
import { footprint, footprintArgs, FOOTPRINT_OPTIONS } from './footprint.ts';
import { healthArgs, healthCheckBench, HEALTH_OPTIONS } from './health-check.ts';
import { informerScale } from './informer-scale.ts';
import { controlPlaneTable, log, machine, mountVolumes, printSection, withBench, type Section } from './lib.ts';
import { reloadLatency } from './reload-latency.ts';
import { steadyState } from './steady-state.ts';

const { values } = parseArgs({
  options: {
    volumes: { type: 'string', default: '500' },
    foreign: { type: 'string', default: '5000' },
    swaps: { type: 'string', default: '50' },
    loops: { type: 'string', default: '10' },
    'poll-ms': { type: 'string', default: '1000' },
    json: { type: 'string' },
    only: { type: 'string' },
    ...FOOTPRINT_OPTIONS,
    ...HEALTH_OPTIONS,
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (values.help) {
  process.stdout.write(
    'usage: npm run bench [-- --only LIST --volumes N --foreign N --swaps N --loops N --poll-ms N --json FILE]\n' +
      '                     [-- --footprint-sizes 500,2000 --footprint-foreign N --footprint-idle-s S]\n' +
      '                     [-- --footprint-bundle NAME=PATH/dist/main.js[,cache=warm|cold|off] ... --footprint-repeat N]\n' +
      '                     [-- --footprint-real-node]\n' +
      '  Runs discovery-scale, steady-state, reload-latency and informer-scale on one real control plane, then\n' +
      '  footprint (the built daemon as users run it) on another (needs root).\n' +
      '                     [-- --health-sizes 500,2000 --health-passes N --health-strace-passes K]\n' +
      '  --only: comma-separated subset of: main (the first four), footprint, health (the per-volume health check, own mounts).\n' +
      '  LSP_TESTPLANE_BINARY=path skips the control-plane build check.\n',
  );
  process.exit(0);
}
const volumes = Number(values.volumes);
const only = new Set((values.only ?? 'main,footprint,health').split(',').map((x) => x.trim()));
for (const x of only) if (x !== 'main' && x !== 'footprint' && x !== 'health') throw new Error(`--only: unknown benchmark ${JSON.stringify(x)} (main, footprint, health)`);
const t0 = performance.now();
const sections: Section[] = [];
const emit = (s: Section): void => {
  sections.push(s);
  printSection(s);
};

process.stdout.write(`# local-static-provisioner benchmarks\n\n${new Date().toISOString()}; ${machine()}\n`);
if (only.has('main')) await withBench({ name: 'all' }, async (b) => {
  emit({ title: 'Control plane (start-up)', markdown: controlPlaneTable(b.cpStartStats), data: b.cpStartStats });
  log(`mounting ${volumes} tmpfs volumes`);
  const tm = performance.now();
  mountVolumes(b, volumes);
  log(`mounted in ${((performance.now() - tm) / 1000).toFixed(1)} s`);

  const disc = await discoveryScale(b, volumes);
  emit(disc.section);
  emit(await steadyState(disc.daemon, { volumes, loops: Number(values.loops) }));
  emit(await reloadLatency(b, disc.daemon, { swaps: Number(values.swaps), pollMs: Number(values['poll-ms']) }));
  await disc.daemon.stop();
  emit(await informerScale(b, { foreign: Number(values.foreign), volumes }));
});
if (only.has('footprint')) emit(await footprint(footprintArgs(values)));
if (only.has('health')) emit(await healthCheckBench(healthArgs(values)));
const totalS = (performance.now() - t0) / 1000;
process.stdout.write(`\nTotal bench time: ${totalS.toFixed(0)} s (including control-plane start and cleanup).\n`);
if (values.json !== undefined) {
  writeFileSync(values.json, `${JSON.stringify({ machine: machine(), totalS, sections: sections.map((s) => ({ title: s.title, data: s.data })) }, null, 2)}\n`);
  log(`raw numbers written to ${values.json}`);
}
