// Content hashes used to tell a real config change from a kubelet touch.
import { createHash } from 'node:crypto';
import type { ConfigError } from '../config/types.ts';

/**
 * sha256 over the raw ConfigMap files, independent of key order and of which
 * `..data` generation they came from. Each entry is length-prefixed so that no
 * two different file sets can produce the same byte stream.
 */
export function rawFilesHash(files: Readonly<Record<string, string>>): string {
  const h = createHash('sha256');
  for (const key of Object.keys(files).sort()) {
    const value = files[key] ?? '';
    h.update(`${Buffer.byteLength(key)}:${key}\n${Buffer.byteLength(value)}:`);
    h.update(value);
    h.update('\n');
  }
  return h.digest('hex');
}

/**
 * sha256 over the paths and messages of parse warnings ("" when there are none).
 * Lines are left out: moving a misspelt key around is not a new warning.
 */
export function warningsHash(warnings: readonly ConfigError[] | undefined): string {
  if (!warnings?.length) return '';
  return createHash('sha256')
    .update(JSON.stringify(warnings.map((w) => [w.path, w.message])))
    .digest('hex');
}
