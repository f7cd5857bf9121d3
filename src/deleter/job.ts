// The cleanup Job, compatible with the Go provisioner's NewCleanupJob (name,
// labels, annotations, container, volumes), plus our additions:
// - label app.kubernetes.io/managed-by=local-volume-provisioner, to find our Jobs;
// - backoffLimit (default 3) so a failing cleaner ends in a Failed Job that the
//   job controller reports and retries with backoff (upstream: API default 6, and
//   a failed Job then blocked the PV forever);
// - ttlSecondsAfterFinished (default 1 h) as a safety net; the job controller
//   deletes finished Jobs itself;
// - Block: mountPropagation HostToContainer on the discovery-dir mount, so the
//   Job sees volumes mounted on the host after it started. Filesystem: none (the
//   upstream default): the container's view of the mounts is a private copy
//   taken when it starts, so a mount made on the host during the clean can never
//   be entered. That is what fsclean.sh's own private mount namespace (unshare)
//   gives a privileged container; unprivileged, unshare is not allowed and the
//   script cleans in the container's namespace, which must then be private;
// - least privilege: a Filesystem clean only unlinks files below a hostPath
//   directory as root, so it runs unprivileged with only CAP_DAC_OVERRIDE and
//   CAP_FOWNER (any file mode, sticky directories), no privilege escalation and
//   the runtime's default seccomp profile. The root file system stays writable:
//   bash puts a here-string of more than 64 KiB (the mount table of a busy
//   node, read by fsclean.sh) in a temp file under /tmp. A Block clean writes to a device node under /dev and stays privileged (as
//   upstream). Neither mode gets a service account token;
// - activeDeadlineSeconds (--clean-timeout, default 1 h) so a hung cleaner ends
//   in a Failed Job, and small resource requests and a memory limit.
//
// Decision: with useJobForCleaning, Filesystem volumes are cleaned by a Job too
// (fsclean.sh, LOCAL_PV_FILESYSTEM), not only Block volumes (upstream #262 ran
// Filesystem cleans in-process whatever the setting). A Job survives a restart
// of the provisioner pod, so a long clean is not started again from scratch.
// The switch stays the same (useJobForCleaning), so behaviour only changes for
// users who asked for Jobs.
import type { V1Job, V1ResourceRequirements, V1SecurityContext, V1Toleration, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import type { VolumeMode } from '../config/types.ts';
import { generateMountName } from '../volume/naming.ts';
import { LABEL_HOSTNAME } from '../volume/pv-spec.ts';

export const JOB_NAME_PREFIX = 'cleanup-';
export const PV_LABEL = 'pv';
export const PV_UID_LABEL = 'pvuuid';
export const DEVICE_ANNOTATION = 'device';
export const START_TIME_ANNOTATION = 'start-time';
export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY_VALUE = 'local-volume-provisioner';
export const BLOCK_DEVICE_ENV = 'LOCAL_PV_BLKDEVICE';
export const FILESYSTEM_ENV = 'LOCAL_PV_FILESYSTEM';
export const FS_CLEAN_COMMAND: readonly string[] = Object.freeze(['/scripts/fsclean.sh']);
export const DEFAULT_JOB_BACKOFF_LIMIT = 3;
export const DEFAULT_JOB_TTL_SECONDS = 3600;
/** activeDeadlineSeconds without --clean-timeout: the flag's default, 1 h. */
export const DEFAULT_JOB_DEADLINE_SECONDS = 3600;
/** What a Filesystem clean (fsclean.sh: find -delete as root) needs beyond an unprivileged root. */
export const FS_CLEAN_CAPABILITIES: readonly string[] = Object.freeze(['DAC_OVERRIDE', 'FOWNER']);
export const JOB_RESOURCES: Readonly<V1ResourceRequirements> = Object.freeze({
  requests: Object.freeze({ cpu: '10m', memory: '32Mi' }),
  limits: Object.freeze({ memory: '256Mi' }),
});

export interface CleanupJobParams {
  readonly pvName: string;
  /** metadata.uid of the PV; written to the pvuuid label. */
  readonly pvUid: string;
  /** The node *name* (labels and nodeSelector). */
  readonly nodeName: string;
  /** MY_NAMESPACE */
  readonly namespace: string;
  /** JOB_CONTAINER_IMAGE */
  readonly image: string;
  /** Detected mode of the volume path: Block runs `blockCleanerCommand`, Filesystem runs fsclean.sh. */
  readonly mode: VolumeMode;
  readonly blockCleanerCommand: readonly string[];
  /** The volume path as seen in the container: <mountDir>/<name>. */
  readonly containerPath: string;
  readonly hostDir: string;
  readonly mountDir: string;
  readonly tolerations: readonly V1Toleration[];
  readonly startTime: Date;
  readonly backoffLimit?: number | undefined;
  readonly ttlSecondsAfterFinished?: number | undefined;
  /** Deadline of the whole Job in ms (--clean-timeout); rounded up to seconds. */
  readonly deadlineMs?: number | undefined;
}

export const cleanupJobName = (pvName: string): string => `${JOB_NAME_PREFIX}${pvName}`;

/** The PV a cleanup Job is for, or why the Job is not one of ours to act on. */
export type JobTarget = { readonly pvName: string; readonly problem?: undefined } | { readonly pvName?: undefined; readonly problem: string };

/**
 * The PV name comes from the Job name (cleanup-<pv>), and the `pv` label must
 * agree with it: a Job whose label names another PV (or none), or whose name
 * lacks the prefix, is not trusted to stand for any PV.
 */
export function jobTarget(job: V1Job): JobTarget {
  const name = job.metadata?.name ?? '';
  if (!name.startsWith(JOB_NAME_PREFIX) || name.length === JOB_NAME_PREFIX.length) {
    return { problem: `its name ${JSON.stringify(name)} is not ${JOB_NAME_PREFIX}<pv name>` };
  }
  const pvName = name.slice(JOB_NAME_PREFIX.length);
  const label = job.metadata?.labels?.[PV_LABEL];
  if (label !== pvName) {
    const shown = label === undefined ? 'is missing' : `is ${JSON.stringify(label)}`;
    return { problem: `its label ${PV_LABEL} ${shown}, but its name is for PV ${JSON.stringify(pvName)}` };
  }
  return { pvName };
}

/** Label selector of the Job informer: this node's cleanup Jobs. */
export const jobLabelSelector = (nodeName: string): string => `${LABEL_HOSTNAME}=${nodeName}`;

/** Go's time.RFC3339Nano for a JS Date (UTC, fraction without trailing zeros). */
export function formatRFC3339Nano(d: Date): string {
  const iso = d.toISOString(); // 2006-01-02T15:04:05.000Z
  const [base, frac] = [iso.slice(0, 19), iso.slice(20, 23).replace(/0+$/, '')];
  return `${base}${frac ? `.${frac}` : ''}Z`;
}

/** The command a cleanup Job runs for this mode. */
export const jobCommand = (mode: VolumeMode, blockCleanerCommand: readonly string[]): string[] =>
  mode === 'Block' ? [...blockCleanerCommand] : [...FS_CLEAN_COMMAND];

/** The cleaner container's securityContext for this mode (see the file comment). */
export function jobSecurityContext(mode: VolumeMode): V1SecurityContext {
  if (mode === 'Block') return { privileged: true };
  return {
    privileged: false,
    allowPrivilegeEscalation: false,
    capabilities: { drop: ['ALL'], add: [...FS_CLEAN_CAPABILITIES] },
    seccompProfile: { type: 'RuntimeDefault' },
  };
}

/** activeDeadlineSeconds for a clean timeout in ms (whole seconds, at least 1). */
export const jobDeadlineSeconds = (deadlineMs: number | undefined): number =>
  deadlineMs === undefined || !Number.isFinite(deadlineMs) || deadlineMs <= 0
    ? DEFAULT_JOB_DEADLINE_SECONDS
    : Math.max(1, Math.ceil(deadlineMs / 1000));

export function buildCleanupJob(p: CleanupJobParams): V1Job {
  const mountName = generateMountName(p.hostDir, p.mountDir);
  const volumes: V1Volume[] = [{ name: mountName, hostPath: { path: p.hostDir } }];
  const mounts: V1VolumeMount[] = [
    p.mode === 'Block' ? { name: mountName, mountPath: p.mountDir, mountPropagation: 'HostToContainer' } : { name: mountName, mountPath: p.mountDir },
  ];
  if (p.mode === 'Block') {
    // The device nodes the symlinks in the discovery dir point to (upstream #55).
    volumes.push({ name: 'dev', hostPath: { path: '/dev' } });
    mounts.push({ name: 'dev', mountPath: '/dev' });
  }
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name: cleanupJobName(p.pvName),
      namespace: p.namespace,
      labels: {
        [LABEL_HOSTNAME]: p.nodeName,
        [PV_LABEL]: p.pvName,
        [PV_UID_LABEL]: p.pvUid,
        [MANAGED_BY_LABEL]: MANAGED_BY_VALUE,
      },
      annotations: {
        [DEVICE_ANNOTATION]: p.containerPath,
        [START_TIME_ANNOTATION]: formatRFC3339Nano(p.startTime),
      },
    },
    spec: {
      backoffLimit: p.backoffLimit ?? DEFAULT_JOB_BACKOFF_LIMIT,
      ttlSecondsAfterFinished: p.ttlSecondsAfterFinished ?? DEFAULT_JOB_TTL_SECONDS,
      activeDeadlineSeconds: jobDeadlineSeconds(p.deadlineMs),
      template: {
        spec: {
          restartPolicy: 'OnFailure',
          automountServiceAccountToken: false,
          nodeSelector: { [LABEL_HOSTNAME]: p.nodeName },
          tolerations: p.tolerations.map((t) => ({ ...t })),
          containers: [
            {
              name: 'cleaner',
              image: p.image,
              command: jobCommand(p.mode, p.blockCleanerCommand),
              env: [{ name: p.mode === 'Block' ? BLOCK_DEVICE_ENV : FILESYSTEM_ENV, value: p.containerPath }],
              securityContext: jobSecurityContext(p.mode),
              resources: { requests: { ...JOB_RESOURCES.requests }, limits: { ...JOB_RESOURCES.limits } },
              volumeMounts: mounts,
            },
          ],
          volumes,
        },
      },
    },
  };
}

/** Job state as the job controller sees it. */
export type JobPhase = 'Running' | 'Succeeded' | 'Failed';

export function jobPhase(job: V1Job): JobPhase {
  const conds = job.status?.conditions ?? [];
  if (conds.some((c) => c.type === 'Complete' && c.status === 'True')) return 'Succeeded';
  // FailureTarget: the Job controller decided the Job failed and is terminating its pods.
  if (conds.some((c) => (c.type === 'Failed' || c.type === 'FailureTarget') && c.status === 'True')) return 'Failed';
  if ((job.status?.succeeded ?? 0) > 0) return 'Succeeded';
  const limit = job.spec?.backoffLimit;
  if (limit !== undefined && (job.status?.failed ?? 0) > limit) return 'Failed';
  return 'Running';
}

/** Start time from the start-time annotation; undefined when absent or unparsable. */
export function jobStartTime(job: V1Job): number | undefined {
  const s = job.metadata?.annotations?.[START_TIME_ANNOTATION];
  if (!s) return undefined;
  const t = Date.parse(s);
  return Number.isNaN(t) ? undefined : t;
}
