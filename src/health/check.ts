// STUB, TO BE REPLACED by the wip/health-check branch's check.ts (issue 19): only the `missing`
// condition, so the monitor (monitor.ts) can be wired and tested end to end. A Filesystem volume is
// missing when its path is not a mount point in the mount table read once per pass; a Block volume
// when its path no longer resolves to a block device.
import { stat } from 'node:fs/promises';
import { DEFAULT_MOUNTINFO_PATH, readMountPoints } from '../host/mountinfo.ts';
import { errorMessage } from '../util/errors.ts';
import type { HealthChecker, HealthCondition, HealthPass, VolumeHealth } from './types.ts';

export interface HealthCheckerOptions {
  /** Mount table (default /proc/self/mountinfo). */
  readonly mountInfoPath?: string | undefined;
}

const healthy: VolumeHealth = { conditions: new Map() };
const only = (condition: HealthCondition, message: string): VolumeHealth => ({ conditions: new Map([[condition, message]]) });

export function createHealthChecker(opts: HealthCheckerOptions = {}): HealthChecker {
  return {
    async beginPass(): Promise<HealthPass> {
      let mounts: ReadonlySet<string> | undefined;
      try {
        mounts = await readMountPoints(opts.mountInfoPath ?? DEFAULT_MOUNTINFO_PATH);
      } catch {
        mounts = undefined; // unreadable: nothing is known this pass (the discovery pass reports it)
      }
      return {
        async check(input): Promise<VolumeHealth> {
          if (input.mode === 'Block') {
            try {
              const st = await stat(input.path);
              return st.isBlockDevice() ? healthy : only('missing', `${input.path} is no longer a block device`);
            } catch (err) {
              return only('missing', `block device ${input.path} is gone: ${errorMessage(err)}`);
            }
          }
          if (mounts === undefined) return healthy; // the mount table could not be read: nothing is known
          return mounts.has(input.path) ? healthy : only('missing', `${input.path} is no longer a mount point`);
        },
      };
    },
  };
}
