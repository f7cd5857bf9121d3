// The version, read from package.json: the one place it is written down.
// package.json sits one level above both src/ (node src/main.ts) and dist/
// (the image copies it next to dist/), so the same relative URL works for both
// src/util/version.ts and dist/util/version.js.
import { readFileSync } from 'node:fs';
import { errorMessage } from './errors.ts';

/** The "version" field of a package.json file; throws a one-line error naming the file. */
export function readPackageVersion(file: URL | string): string {
  let version: unknown;
  try {
    version = (JSON.parse(readFileSync(file, 'utf8')) as { version?: unknown }).version;
  } catch (err) {
    throw new Error(`cannot read the version from ${String(file)}: ${errorMessage(err)}`, { cause: err });
  }
  if (typeof version !== 'string' || version === '') throw new Error(`no "version" in ${String(file)}`);
  return version;
}

export const VERSION: string = readPackageVersion(new URL('../../package.json', import.meta.url));
