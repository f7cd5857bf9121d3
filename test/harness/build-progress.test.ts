// The progress of the control-plane build (e2e/harness/build-progress.ts), on
// recorded `go build -v` / `go list` output: no build is run here.
import { describe, expect, it, vi } from 'vitest';
import { BuildProgress, countPackages, formatElapsed, isPackageLine, progressSink } from '../../e2e/harness/build-progress.ts';

// What `go build -v` prints: package paths as they are compiled, errors in other shapes.
const GO_BUILD_V = [
  'internal/goarch',
  'internal/abi',
  'k8s.io/apimachinery/pkg/util/sets',
  'sigs.k8s.io/structured-merge-diff/v6/value',
  'go.etcd.io/etcd/server/v3/etcdserver',
  'gopkg.in/evanphx/json-patch.v4',
  'github.com/google/cel-go/common/types/ref',
  'testplane',
  '# k8s.io/kubernetes/pkg/controller',
  'pkg/controller/x.go:12:2: undefined: foo',
  'note: module requires Go 1.26',
  '',
];

describe('build progress', () => {
  it('recognises package lines of go build -v and go list, and nothing else', () => {
    expect(GO_BUILD_V.filter(isPackageLine)).toEqual(GO_BUILD_V.slice(0, 8));
    expect(countPackages('internal/abi\nk8s.io/api/core/v1\n\ntestplane\n')).toBe(3);
  });

  it('counts each package once and formats done/total, percent, elapsed and an estimate', () => {
    const p = new BuildProgress(0);
    for (const l of GO_BUILD_V) p.line(l);
    p.line('internal/abi'); // printed twice: counted once
    expect(p.done).toBe(8);
    expect(p.format(5_000)).toBe('control plane: 8 packages compiled, 5s elapsed');
    p.total = 100;
    expect(p.format(5_000)).toBe('control plane: 8/100 packages compiled (8%), 5s elapsed');
    for (let i = 0; i < 42; i++) p.line(`k8s.io/kubernetes/pkg/p${i}`);
    // 50 of 100 in 10 min: about 10 min left.
    expect(p.format(600_000)).toBe('control plane: 50/100 packages compiled (50%), 10m00s elapsed, about 10 min left');
    for (let i = 42; i < 92; i++) p.line(`k8s.io/kubernetes/pkg/p${i}`);
    expect(p.format(3_725_000)).toBe('control plane: 100/100 packages compiled (100%), 1h02m elapsed, linking');
  });

  it('formats elapsed time', () => {
    expect([0, 45_400, 252_000, 3_600_000].map(formatElapsed)).toEqual(['0s', '45s', '4m12s', '1h00m']);
  });

  it('on a terminal rewrites one line in place (per package, at most every 200 ms, and every second) and ends it with a newline', () => {
    vi.useFakeTimers();
    try {
      const out: string[] = [];
      let t = 0;
      const sink = progressSink({ tty: true, write: (s) => out.push(s), log: () => undefined, now: () => t });
      const p = new BuildProgress(0, 10);
      p.line('a/b');
      sink.update(p);
      t = 100;
      p.line('a/c');
      sink.update(p); // too soon: skipped
      t = 300;
      sink.update(p);
      t = 2000;
      vi.advanceTimersByTime(1000); // a long compile: the elapsed time still moves
      sink.end();
      vi.advanceTimersByTime(5000);
      expect(out).toEqual([
        '\rcontrol plane: 1/10 packages compiled (10%), 0s elapsed\x1b[K',
        '\rcontrol plane: 2/10 packages compiled (20%), 0s elapsed\x1b[K',
        '\rcontrol plane: 2/10 packages compiled (20%), 2s elapsed\x1b[K',
        '\n',
      ]);
    } finally {
      vi.useRealTimers();
    }
  });

  it('otherwise logs a line every 30 s, and stops at the end', () => {
    vi.useFakeTimers();
    try {
      const logs: string[] = [];
      let t = 0;
      const sink = progressSink({ tty: false, write: () => undefined, log: (m) => logs.push(m), now: () => t });
      const p = new BuildProgress(0, 4);
      p.line('a/b');
      sink.update(p);
      t = 30_000;
      vi.advanceTimersByTime(30_000);
      expect(logs).toEqual(['control plane: 1/4 packages compiled (25%), 30s elapsed']);
      sink.end();
      vi.advanceTimersByTime(120_000);
      expect(logs).toHaveLength(1);
    } finally {
      vi.useRealTimers();
    }
  });
});
