// The values a release of the Go provisioner's chart (helm/provisioner, 2.9.0) holds when it was installed
// with that chart's defaults: every key and default value of its values.yaml, written out here as data (no
// file of that repository is used), from the project's reference notes on the Go provisioner (upstream-inventory.md, §9.4) and the
// chart's documented keys. `helm upgrade --reuse-values` from such a release renders our templates with
// these values only (none of our values.yaml), so every template must cope with them (docs/upgrading.md).
// Newer Go charts add nodeCleanupController.*: included, as this chart must accept (and ignore) it too.
export const GO_CHART_VERSION = '2.9.0';

export function goChartDefaultValues(): Record<string, unknown> {
  return {
    nameOverride: '',
    fullnameOverride: '',
    rbac: { create: true, extraRules: [] },
    serviceAccount: { create: true, name: '' },
    setPVOwnerRef: false,
    useJobForCleaning: false,
    useNodeNameOnly: false,
    additionalVolumes: [],
    mountDevVolume: true,
    additionalVolumeMounts: [],
    enableWindows: false,
    classes: [
      {
        name: 'fast-disks',
        hostDir: '/mnt/fast-disks',
        volumeMode: 'Filesystem',
        accessMode: 'ReadWriteOnce',
        fsType: 'ext4',
        namePattern: '*',
        allowedTopologies: null,
        blockCleanerCommand: ['/scripts/shred.sh', '2'],
      },
    ],
    podAnnotations: {},
    podLabels: {},
    image: 'registry.k8s.io/sig-storage/local-volume-provisioner:v{{ .Chart.AppVersion }}',
    imagePullSecrets: [],
    nodeSelector: {},
    nodeSelectorWindows: {},
    tolerations: [],
    removeNodeNotReadyTaint: false,
    provisionerNotReadyNodeTaintKey: 'sig-storage-local-static-provisioner/agent-not-ready',
    affinity: {},
    resources: {},
    securityContext: {},
    privileged: true,
    hostPID: false,
    initContainers: [],
    livenessProbe: { tcpSocket: { port: 'metrics' }, initialDelaySeconds: 10, periodSeconds: 60, timeoutSeconds: 5, failureThreshold: 3 },
    readinessProbe: {},
    startupProbe: {},
    updateStrategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1 } },
    serviceMonitor: { enabled: false, interval: '10s', namespace: null, additionalLabels: {}, relabelings: [] },
    nodeCleanupController: {
      enabled: false,
      replicas: 1,
      image: 'registry.k8s.io/sig-storage/local-volume-node-cleanup:v{{ .Chart.AppVersion }}',
      imagePullSecrets: [],
      storageClassNames: [],
      pvcDeletionDelay: '60s',
      stalePVDiscoveryInterval: '10s',
      resync: '10m',
      workerThreads: 10,
      listenAddress: ':8080',
      metricsPath: '/metrics',
      resources: {},
      nodeSelector: {},
      tolerations: [],
      affinity: {},
      podAnnotations: {},
      podLabels: {},
      priorityClassName: '',
      serviceAccount: { create: true, name: '' },
      rbac: { create: true },
    },
  };
}
