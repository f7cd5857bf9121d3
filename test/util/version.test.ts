import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readPackageVersion, VERSION } from '../../src/util/version.ts';
import { useTempDir } from '../support/tmp.ts';

const repo = join(import.meta.dirname, '../..');
const pkgVersion = (JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { version: string }).version;

describe('version', () => {
  const tempDir = useTempDir('lsp-version-');

  it('is read from package.json', () => {
    expect(VERSION).toBe(pkgVersion);
    const dir = tempDir();
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'x', version: '9.8.7-rc.1' }));
    expect(readPackageVersion(join(dir, 'package.json'))).toBe('9.8.7-rc.1');
    writeFileSync(join(dir, 'bad.json'), JSON.stringify({ name: 'x' }));
    expect(() => readPackageVersion(join(dir, 'bad.json'))).toThrow(/no "version" in .*bad\.json/);
    expect(() => readPackageVersion(join(dir, 'missing.json'))).toThrow(/cannot read the version from .*missing\.json/);
  });

  it('--version prints the package.json version (no second copy in main.ts)', () => {
    const out = execFileSync(process.execPath, [join(repo, 'src', 'main.ts'), '--version'], { encoding: 'utf8' });
    expect(out).toBe(`local-volume-provisioner ${pkgVersion}\n`);
    expect(readFileSync(join(repo, 'src', 'main.ts'), 'utf8')).not.toMatch(/VERSION\s*=\s*['"]/);
  });
});
