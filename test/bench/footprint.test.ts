// bench/footprint.ts prints issue 20's table (issue 20, point 1 and the Check): the Go column holds the fixed
// figures of the issue, each build is measured, with the ratio to Go and the goal; several builds run
// interleaved; the RSS is broken down by mapping kind (smaps); the real-node row is the cgroup working set.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { GO_REFERENCE, GOALS, issueTable, met, parseBuild, range, ratio, runOrder, smapsRss, smapsTable, type FootprintRun } from '../../bench/footprint.ts';
import { cgroupDirs, parseMemoryStat, workingSet } from '../../bench/footprint-real-node.ts';

const run = (build: string, volumes: number, v: { first: number; cpu: number; rss: number; idleRss: number; idle: number; hwm?: number }): FootprintRun => ({
  build,
  volumes,
  firstPvMs: v.first * 1000,
  lastPvMs: 24_000,
  createsCpuS: v.cpu,
  after: { rssKiB: v.rss * 1024, hwmKiB: (v.hwm ?? v.rss) * 1024 },
  idleWindowS: 60,
  idleCpuSPerMin: v.idle,
  afterIdle: { rssKiB: v.idleRss * 1024, hwmKiB: v.idleRss * 1024 },
  breakdown: undefined,
  smaps: { heap: 10240, anon: 40960, codeNode: 20480, codeOther: 2048, fileNode: 10240, fileOther: 1024, other: 100 },
  sigtermExitMs: 30,
  exitCode: 0,
  load: '1 1 1 -> 1 1 1',
});

describe('the footprint table (issue 20)', () => {
  it('holds the Go figures and the goals of issue 20', () => {
    // As issue 20 prints them: spawn → first PV, CPU to the 500th PV, VmRSS after the creates / after the idle
    // period, idle CPU; the 2,000-volume row's CPU / VmHWM / idle.
    const go = Object.values(GO_REFERENCE).map(([lo, hi]) => (lo === hi ? `${lo}` : `${lo}–${hi}`));
    expect(go.join(' | ')).toBe('0.22–0.29 | 1.5–1.63 | 44.5–45.4 | 47–48 | 0.125–0.15 | 6.48 | 60.8 | 0.42');
    expect(GOALS).toEqual({ firstPvS: 0.45, createsCpuS500: 2.3, rssMiB500: 70, hwmMiB2000: 85, idleCpuSPerMin500: 0.2 });
  });

  it('ranges, ratios to Go (midpoints) and goal checks', () => {
    expect(range([1.234], 2)).toBe('1.23');
    expect(range([3.94, 4.04], 2)).toBe('3.94–4.04');
    expect(range([], 2)).toBe('n/a');
    expect(ratio([120.8, 120.9], [44.5, 45.4])).toBe('2.69×');
    expect(ratio([0.63, 1.3], [0.22, 0.29])).toBe('3.78×');
    expect(met([60, 65], 70)).toBe('met');
    expect(met([60, 75], 70)).toBe('met in 1 of 2');
    expect(met([80], 70)).toBe('not met');
    expect(met([80], undefined)).toBe('');
  });

  it("prints issue 20's rows for each build: ours, ×Go and the goal, the Go column fixed, the working-set row", () => {
    const runs = [
      run('before', 500, { first: 0.63, cpu: 3.94, rss: 120.8, idleRss: 107, idle: 0.21 }),
      run('after', 500, { first: 0.4, cpu: 2.2, rss: 65, idleRss: 66, idle: 0.15 }),
      run('before', 500, { first: 1.3, cpu: 4.04, rss: 120.9, idleRss: 107, idle: 0.21 }),
      run('after', 500, { first: 0.5, cpu: 2.1, rss: 66, idleRss: 67, idle: 0.14 }),
      run('before', 2000, { first: 1, cpu: 11.12, rss: 140, idleRss: 140, idle: 0.3, hwm: 148.7 }),
      run('after', 2000, { first: 1, cpu: 8, rss: 80, idleRss: 80, idle: 0.3, hwm: 84 }),
    ];
    const t = issueTable(['before', 'after'], runs, 120, { volumes: 500, afterCreatesMiB: 90, afterIdleMiB: 88, vmRssAfterIdleMiB: 100, cgroup: 'cgroup v1' });
    const lines = t.split('\n');
    const row = (label: string): string[] => {
      const l = lines.find((x) => x.startsWith(`| ${label}`));
      expect(l, label).toBeDefined();
      return (l ?? '').split('|').slice(1, -1).map((c) => c.trim());
    };
    expect(lines[0]?.split('|').slice(1, -1).map((c) => c.trim())).toEqual(['row', 'Go (issue 20)', 'goal', 'before', '×Go', 'goal?', 'after', '×Go', 'goal?']);
    expect(row('spawn → first PV')).toEqual(['spawn → first PV (s)', '0.22–0.29', '≤ 0.45 s', '0.63–1.30', '3.78×', 'not met', '0.40–0.50', '1.76×', 'met in 1 of 2']);
    expect(row('CPU spawn → 500th PV')).toEqual(['CPU spawn → 500th PV (s)', '1.5–1.63', '≤ 2.3 s', '3.94–4.04', '2.55×', 'not met', '2.10–2.20', '1.37×', 'met']);
    expect(row('VmRSS after the creates')).toEqual(['VmRSS after the creates (MiB)', '44.5–45.4', '≤ 70 MiB', '120.8–120.9', '2.69×', 'not met', '65.0–66.0', '1.46×', 'met']);
    expect(row('VmRSS after the idle period, 120 s')[1]).toBe('47–48');
    expect(row('idle CPU, 10 s period')).toEqual(['idle CPU, 10 s period (s/min)', '0.125–0.15', '≤ 0.2 s/min', '0.21', '1.53×', 'not met', '0.14–0.15', '1.05×', 'met']);
    expect(row('2,000 volumes: CPU')).toEqual(['2,000 volumes: CPU spawn → 2,000th PV (s)', '6.48', '—', '11.12', '1.72×', '', '8.00', '1.23×', '']);
    expect(row('2,000 volumes: VmHWM')).toEqual(['2,000 volumes: VmHWM (MiB)', '60.8', '≤ 85 MiB', '148.7', '2.45×', 'not met', '84.0', '1.38×', 'met']);
    expect(row('2,000 volumes: idle CPU').slice(1, 4)).toEqual(['0.42', '—', '0.30']);
    const ws = row('working set, kubectl top (cgroup v1: usage − inactive_file), real node, 500 volumes');
    expect(ws.slice(2, 6)).toEqual(['≤ 70 MiB', '90.0 / 88.0 (VmRSS 100.0)', '1.92×', 'not met']);
  });

  it('breaks the RSS down by mapping kind (smaps): heap, anonymous, code and file of the node binary and of other files', () => {
    const smaps = [
      '00400000-00500000 r--p 00000000 08:01 1234 /usr/bin/node',
      'Size: 1024 kB',
      'Rss: 1000 kB',
      '00500000-00600000 r-xp 00100000 08:01 1234 /usr/bin/node',
      'Rss: 2000 kB',
      '01000000-02000000 rw-p 00000000 00:00 0 [heap]',
      'Rss: 300 kB',
      '7f0000000000-7f0000100000 rw-p 00000000 00:00 0 ',
      'Rss: 4000 kB',
      '7f0000100000-7f0000200000 ---p 00000000 00:00 0',
      'Rss: 0 kB',
      '7f1000000000-7f1000100000 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6',
      'Rss: 500 kB',
      '7f1000100000-7f1000200000 r--p 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6',
      'Rss: 60 kB',
      '7ffd00000000-7ffd00100000 rw-p 00000000 00:00 0 [stack]',
      'Rss: 7 kB',
      '7ffd10000000-7ffd10001000 r-xp 00000000 00:00 0 [vdso]',
      'Rss: 4 kB',
    ].join('\n');
    expect(smapsRss(smaps, '/usr/bin/node')).toEqual({ heap: 300, anon: 4000, codeNode: 2000, codeOther: 500, fileNode: 1000, fileOther: 60, other: 11 });
    // A live process: the kinds add up to its VmRSS (to within what changed between the two reads).
    const real = smapsRss(readFileSync('/proc/self/smaps', 'utf8'), process.execPath);
    const rssKiB = Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]);
    const sum = Object.values(real).reduce((a: number, b: number) => a + b, 0);
    expect(Math.abs(sum - rssKiB)).toBeLessThan(rssKiB * 0.1);
    expect(real.codeNode).toBeGreaterThan(0);
    expect(real.anon).toBeGreaterThan(0);
    const t = smapsTable(['before'], [run('before', 500, { first: 1, cpu: 1, rss: 1, idleRss: 1, idle: 0 })]);
    expect(t).toContain('| Rss by mapping (MiB)');
    expect(t).toMatch(/\| total +\| 83\.1 +\|/);
  });

  it('takes several builds (NAME=PATH[,cache=...]) and runs them interleaved', () => {
    expect(parseBuild('before=/a/dist/main.js')).toEqual({ name: 'before', main: '/a/dist/main.js', cache: 'warm' });
    expect(parseBuild('cold=/b/dist/main.js,cache=cold')).toEqual({ name: 'cold', main: '/b/dist/main.js', cache: 'cold' });
    expect(() => parseBuild('/a/dist/main.js')).toThrow(/expected NAME=PATH/);
    expect(() => parseBuild('x=/a,cache=hot')).toThrow(/unknown option/);
    expect(parseBuild('arena=/a/dist/main.js,env.MALLOC_ARENA_MAX=2,env.NODE_OPTIONS=--max-semi-space-size=1 --max-old-space-size=64')).toEqual({
      name: 'arena',
      main: '/a/dist/main.js',
      cache: 'warm',
      env: { MALLOC_ARENA_MAX: '2', NODE_OPTIONS: '--max-semi-space-size=1 --max-old-space-size=64' },
    });
    expect(parseBuild('o=/a/dist/main.js,arg=--optimize-for-size,arg=--no-opt')).toEqual({ name: 'o', main: '/a/dist/main.js', cache: 'warm', nodeArgs: ['--optimize-for-size', '--no-opt'] });
    expect([0, 1, 2].map((i) => runOrder(['before', 'after'], i))).toEqual([
      ['before', 'after'],
      ['after', 'before'],
      ['before', 'after'],
    ]);
  });
});

describe('the working set as kubectl top shows it (issue 20, point 3)', () => {
  it('is usage minus inactive file pages: cgroup v2 and v1', () => {
    const v2 = parseMemoryStat('anon 60000000\nfile 40000000\ninactive_file 30000000\nactive_file 10000000\n');
    expect(workingSet('v2', 100_000_000, v2)).toEqual({ version: 'v2', usageBytes: 100_000_000, inactiveFileBytes: 30_000_000, workingSetBytes: 70_000_000, anonBytes: 60_000_000, fileBytes: 40_000_000 });
    const v1 = parseMemoryStat('cache 1\nrss 2\ninactive_file 5\ntotal_cache 40000000\ntotal_rss 60000000\ntotal_inactive_file 25000000\n');
    expect(workingSet('v1', 100_000_000, v1).workingSetBytes).toBe(75_000_000);
    expect(workingSet('v1', 10, v1).workingSetBytes).toBe(0);
  });

  it("finds this process's memory and CPU cgroup directories", () => {
    const c = cgroupDirs(process.pid);
    expect(['v1', 'v2']).toContain(c.version);
    const usageFile = c.version === 'v2' ? 'memory.current' : 'memory.usage_in_bytes';
    expect(Number(readFileSync(`${c.memory}/${usageFile}`, 'utf8'))).toBeGreaterThan(0);
  });
});
