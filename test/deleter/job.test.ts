import { describe, expect, it } from 'vitest';
import type { V1Job } from '@kubernetes/client-node';
import { buildCleanupJob, formatRFC3339Nano, jobDeadlineSeconds, jobLabelSelector, jobPhase, jobStartTime } from '../../src/deleter/job.ts';
import { generateMountName } from '../../src/volume/naming.ts';

const base = {
  pvName: 'local-pv-1a2b3c4d',
  pvUid: '0b9c5f1e-uid',
  nodeName: 'somehost.acme.com',
  namespace: 'kubesystem',
  image: 'registry.k8s.io/sig-storage/local-volume-provisioner:v2.9.0',
  blockCleanerCommand: ['/scripts/shred.sh', '2'],
  hostDir: '/mnt/disks',
  mountDir: '/discoveryPath',
  containerPath: '/discoveryPath/vol1',
  tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'storage', effect: 'NoSchedule' }],
  startTime: new Date('2026-01-02T03:04:05.120Z'),
};

/** The pod fields every cleanup Job has, whatever the mode. */
const podCommon = {
  restartPolicy: 'OnFailure',
  automountServiceAccountToken: false,
  nodeSelector: { 'kubernetes.io/hostname': 'somehost.acme.com' },
  tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'storage', effect: 'NoSchedule' }],
};

const containerCommon = {
  name: 'cleaner',
  image: base.image,
  resources: { requests: { cpu: '10m', memory: '32Mi' }, limits: { memory: '256Mi' } },
};

describe('buildCleanupJob', () => {
  it('builds the Block Job with every upstream field and our additions', () => {
    const mountName = generateMountName('/mnt/disks', '/discoveryPath');
    const job = buildCleanupJob({ ...base, mode: 'Block' });
    expect(job).toEqual({
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: {
        name: 'cleanup-local-pv-1a2b3c4d',
        namespace: 'kubesystem',
        labels: {
          'kubernetes.io/hostname': 'somehost.acme.com',
          pv: 'local-pv-1a2b3c4d',
          pvuuid: '0b9c5f1e-uid',
          'app.kubernetes.io/managed-by': 'local-volume-provisioner',
        },
        annotations: { device: '/discoveryPath/vol1', 'start-time': '2026-01-02T03:04:05.12Z' },
      },
      spec: {
        backoffLimit: 3,
        ttlSecondsAfterFinished: 3600,
        activeDeadlineSeconds: 3600,
        template: {
          spec: {
            ...podCommon,
            containers: [
              {
                ...containerCommon,
                command: ['/scripts/shred.sh', '2'],
                env: [{ name: 'LOCAL_PV_BLKDEVICE', value: '/discoveryPath/vol1' }],
                securityContext: { privileged: true },
                volumeMounts: [
                  { name: mountName, mountPath: '/discoveryPath', mountPropagation: 'HostToContainer' },
                  { name: 'dev', mountPath: '/dev' },
                ],
              },
            ],
            volumes: [
              { name: mountName, hostPath: { path: '/mnt/disks' } },
              { name: 'dev', hostPath: { path: '/dev' } },
            ],
          },
        },
      },
    });
    expect(mountName).toMatch(/^mount-[0-9a-f]+$/);
  });

  it('builds the Filesystem Job unprivileged: two capabilities, no escalation, no token, no /dev', () => {
    const mountName = generateMountName('/mnt/disks', '/discoveryPath');
    const job = buildCleanupJob({ ...base, mode: 'Filesystem', backoffLimit: 1, ttlSecondsAfterFinished: 60, deadlineMs: 90_500 });
    expect(job.spec).toEqual({
      backoffLimit: 1,
      ttlSecondsAfterFinished: 60,
      activeDeadlineSeconds: 91,
      template: {
        spec: {
          ...podCommon,
          containers: [
            {
              ...containerCommon,
              command: ['/scripts/fsclean.sh'],
              env: [{ name: 'LOCAL_PV_FILESYSTEM', value: '/discoveryPath/vol1' }],
              securityContext: {
                privileged: false,
                allowPrivilegeEscalation: false,
                capabilities: { drop: ['ALL'], add: ['DAC_OVERRIDE', 'FOWNER'] },
                seccompProfile: { type: 'RuntimeDefault' },
              },
              // No mountPropagation: a private view of the mounts, fixed when the container starts.
              volumeMounts: [{ name: mountName, mountPath: '/discoveryPath' }],
            },
          ],
          volumes: [{ name: mountName, hostPath: { path: '/mnt/disks' } }],
        },
      },
    });
  });

  it('derives activeDeadlineSeconds from --clean-timeout (whole seconds, rounded up), 1 h without it', () => {
    expect(jobDeadlineSeconds(undefined)).toBe(3600);
    expect(jobDeadlineSeconds(7_200_000)).toBe(7200);
    expect(jobDeadlineSeconds(1)).toBe(1);
    expect(jobDeadlineSeconds(0)).toBe(3600);
    expect(jobDeadlineSeconds(Number.POSITIVE_INFINITY)).toBe(3600);
  });

  it('does not share the resources object between Jobs', () => {
    const a = buildCleanupJob({ ...base, mode: 'Block' });
    a.spec!.template.spec!.containers[0]!.resources!.limits!['memory'] = '1Gi';
    const b = buildCleanupJob({ ...base, mode: 'Block' });
    expect(b.spec?.template.spec?.containers[0]?.resources?.limits).toEqual({ memory: '256Mi' });
  });

  it('does not share the configured command or tolerations arrays', () => {
    const cmd = ['/scripts/quick_reset.sh'];
    const job = buildCleanupJob({ ...base, blockCleanerCommand: cmd, mode: 'Block' });
    job.spec?.template.spec?.containers[0]?.command?.push('x');
    expect(cmd).toEqual(['/scripts/quick_reset.sh']);
  });

  it('selects this node by name', () => {
    expect(jobLabelSelector('node-a')).toBe('kubernetes.io/hostname=node-a');
  });
});

describe('job helpers', () => {
  it('formats RFC3339Nano like Go', () => {
    expect(formatRFC3339Nano(new Date('2026-01-02T03:04:05.000Z'))).toBe('2026-01-02T03:04:05Z');
    expect(formatRFC3339Nano(new Date('2026-01-02T03:04:05.100Z'))).toBe('2026-01-02T03:04:05.1Z');
    expect(formatRFC3339Nano(new Date('2026-01-02T03:04:05.123Z'))).toBe('2026-01-02T03:04:05.123Z');
  });

  it('reads the start time back, also from Go nanosecond stamps', () => {
    const job = buildCleanupJob({ ...base, mode: 'Block' });
    expect(jobStartTime(job)).toBe(Date.parse('2026-01-02T03:04:05.120Z'));
    expect(jobStartTime({ metadata: { annotations: { 'start-time': '2026-01-02T03:04:05.123456789Z' } } })).toBe(Date.parse('2026-01-02T03:04:05.123Z'));
    expect(jobStartTime({ metadata: { annotations: { 'start-time': 'garbage' } } })).toBeUndefined();
    expect(jobStartTime({ metadata: {} })).toBeUndefined();
  });

  it('derives the phase from conditions and counts', () => {
    const j = (status: V1Job['status'], backoffLimit?: number): V1Job => ({ spec: { backoffLimit, template: {} }, status });
    expect(jobPhase(j(undefined))).toBe('Running');
    expect(jobPhase(j({ active: 1 }))).toBe('Running');
    expect(jobPhase(j({ succeeded: 1 }))).toBe('Succeeded');
    expect(jobPhase(j({ conditions: [{ type: 'Complete', status: 'True' }] }))).toBe('Succeeded');
    expect(jobPhase(j({ conditions: [{ type: 'Failed', status: 'True', reason: 'BackoffLimitExceeded' }] }))).toBe('Failed');
    expect(jobPhase(j({ conditions: [{ type: 'FailureTarget', status: 'True' }] }))).toBe('Failed');
    expect(jobPhase(j({ conditions: [{ type: 'Failed', status: 'False' }] }))).toBe('Running');
    expect(jobPhase(j({ failed: 3 }, 3))).toBe('Running');
    expect(jobPhase(j({ failed: 4 }, 3))).toBe('Failed');
  });
});
