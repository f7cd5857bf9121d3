// A ProvisionerConfig with the Go provisioner's defaults, for unit tests that
// build configs by hand instead of parsing a ConfigMap.
import type { ClassConfig, ProvisionerConfig } from '../../src/config/types.ts';

export function testConfig(storageClassMap: Record<string, ClassConfig>, over: Partial<ProvisionerConfig> = {}): ProvisionerConfig {
  return {
    storageClassMap,
    nodeLabelsForPV: [],
    useAlphaAPI: false,
    useJobForCleaning: false,
    jobTolerations: [],
    minResyncPeriodMs: 300_000,
    useNodeNameOnly: false,
    labelsForPV: {},
    setPVOwnerRef: false,
    removeNodeNotReadyTaint: false,
    provisionerNotReadyNodeTaintKey: '',
    ...over,
  };
}
