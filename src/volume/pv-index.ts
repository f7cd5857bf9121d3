// What discovery needs from the PV cache, and no more: a lookup by name and by
// local path, and a note that a PV was just created (so the next pass sees it
// before the informer delivers it). PVCache implements it; a test can hand the
// Discoverer any other index.
import type { V1PersistentVolume } from '@kubernetes/client-node';

export interface PVIndex {
  /** The PV named `name`, if this provisioner owns it (or just created it). */
  get(name: string): V1PersistentVolume | undefined;
  /** PVs whose spec.local.path is exactly `localPath`. */
  lookupByPath(localPath: string): V1PersistentVolume[];
  /** Records a PV that discovery just created, until the informer delivers it. */
  noteCreated(pv: V1PersistentVolume): void;
}
