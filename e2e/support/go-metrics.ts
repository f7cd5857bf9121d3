// The Go provisioner's metrics (upstream pkg/metrics/metrics.go and the
// proctable collector, as listed in the reference inventory §5.1), kept as data:
// name, type, label names and histogram buckets. test/metrics and
// e2e/metrics.test.ts compare what we export with this list.

/** prometheus.DefBuckets. */
export const GO_DEF_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] as const;

export interface GoMetric {
  readonly name: string;
  readonly type: 'counter' | 'gauge' | 'histogram';
  readonly labels: readonly string[];
  readonly buckets?: readonly number[];
}

const P = 'local_volume_provisioner_';

export const GO_METRICS: readonly GoMetric[] = [
  { name: `${P}persistentvolume_capacity_bytes`, type: 'gauge', labels: ['mode'] },
  { name: `${P}persistentvolume_discovery_total`, type: 'counter', labels: ['mode'] },
  { name: `${P}persistentvolume_discovery_duration_seconds`, type: 'histogram', labels: ['mode'], buckets: GO_DEF_BUCKETS },
  { name: `${P}persistentvolume_delete_total`, type: 'counter', labels: ['mode', 'type'] },
  { name: `${P}persistentvolume_delete_failed_total`, type: 'counter', labels: ['mode', 'type'] },
  {
    name: `${P}persistentvolume_delete_duration_seconds`,
    type: 'histogram',
    labels: ['mode', 'type', 'capacity', 'cleanup_command'],
    buckets: GO_DEF_BUCKETS,
  },
  { name: `${P}apiserver_requests_total`, type: 'counter', labels: ['method'] },
  { name: `${P}apiserver_requests_failed_total`, type: 'counter', labels: ['method'] },
  { name: `${P}apiserver_requests_duration_seconds`, type: 'histogram', labels: ['method'], buckets: GO_DEF_BUCKETS },
  { name: `${P}proctable_running`, type: 'gauge', labels: [] },
  { name: `${P}proctable_succeeded`, type: 'gauge', labels: [] },
  { name: `${P}proctable_failed`, type: 'gauge', labels: [] },
];

export interface ScrapedMetric {
  type: string | undefined;
  /** Label names seen on the samples (without "le" for histogram buckets). */
  labels: Set<string>;
  /** Histogram "le" bounds, without +Inf, in order of first appearance. */
  buckets: number[];
  samples: number;
}

/** Parses a Prometheus text exposition into name -> type, label names, buckets. */
export function parseExposition(text: string): Map<string, ScrapedMetric> {
  const out = new Map<string, ScrapedMetric>();
  const get = (name: string): ScrapedMetric => {
    let m = out.get(name);
    if (!m) out.set(name, (m = { type: undefined, labels: new Set(), buckets: [], samples: 0 }));
    return m;
  };
  for (const line of text.split('\n')) {
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) {
      get(t[1]!).type = t[2];
      continue;
    }
    const s = /^([a-zA-Z_:][\w:]*?)(_bucket|_sum|_count)?(?:\{(.*)\})?\s+\S+$/.exec(line);
    if (!s || line.startsWith('#')) continue;
    const base = s[2] !== undefined && out.get(s[1]!)?.type === 'histogram' ? s[1]! : `${s[1]!}${s[2] ?? ''}`;
    const m = get(base);
    m.samples++;
    for (const pair of (s[3] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      if (pair[1] === 'le') {
        if (s[2] === '_bucket' && pair[2] !== '+Inf' && !m.buckets.includes(Number(pair[2]))) m.buckets.push(Number(pair[2]));
      } else {
        m.labels.add(pair[1]!);
      }
    }
  }
  return out;
}
