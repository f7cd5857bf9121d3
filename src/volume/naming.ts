// Names derived from a volume: the PV name (FNV-1a 32-bit, byte-identical to the
// Go provisioner's generatePVName), the Job volume name and the provisioner name.

const FNV32_OFFSET = 0x811c9dc5;
const FNV32_PRIME = 0x01000193;
const encoder = new TextEncoder();

/** FNV-1a 32-bit hash over the UTF-8 bytes of the parts, concatenated with no separator. */
export function fnv1a32(...parts: readonly string[]): number {
  let h = FNV32_OFFSET;
  for (const part of parts) {
    for (const byte of encoder.encode(part)) {
      h ^= byte;
      h = Math.imul(h, FNV32_PRIME) >>> 0;
    }
  }
  return h >>> 0;
}

/** "local-pv-" + unpadded lowercase hex of FNV-1a(fileName ++ nodeName ++ className). */
export function generatePVName(fileName: string, nodeName: string, className: string): string {
  return `local-pv-${fnv1a32(fileName, nodeName, className).toString(16)}`;
}

/** "mount-" + unpadded lowercase hex of FNV-1a(hostDir ++ mountDir); names the cleanup Job's volume. */
export function generateMountName(hostDir: string, mountDir: string): string {
  return `mount-${fnv1a32(hostDir, mountDir).toString(16)}`;
}

export const PROVISIONER_NAME_PREFIX = 'local-volume-provisioner-';

/** `local-volume-provisioner-<node>` or, unless useNodeNameOnly, `local-volume-provisioner-<node>-<uid>`. */
export function provisionerName(node: { readonly name: string; readonly uid: string }, useNodeNameOnly: boolean): string {
  return useNodeNameOnly ? `${PROVISIONER_NAME_PREFIX}${node.name}` : `${PROVISIONER_NAME_PREFIX}${node.name}-${node.uid}`;
}
