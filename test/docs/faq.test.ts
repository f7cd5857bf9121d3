// Issue 18, point 15: docs/faq.md names the block cleaner users actually get. The shipped ConfigMap and the Helm
// chart's default class set shred.sh 2; quick_reset.sh is only what a class without the key gets.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { parseConfig } from '../../src/config/parse.ts';
import { DEFAULT_BLOCK_CLEANER_COMMAND } from '../../src/config/types.ts';

const repo = join(import.meta.dirname, '..', '..');
const read = (p: string): string => readFileSync(join(repo, p), 'utf8');
const argv = (cmd: readonly string[]): string => `[${cmd.map((a) => JSON.stringify(a)).join(', ')}]`;

describe('docs/faq.md: how a released block volume is wiped', () => {
  const answer = read('docs/faq.md').split('**How is a released volume wiped?')[1]?.split('\n\n')[0]?.replace(/\s+/g, ' ') ?? '';

  it('names the cleaner of the shipped ConfigMap and of the Helm default class as what they ship', () => {
    const cm = parseAllDocuments(read('deployment/kubernetes/configmap.yaml')).map((d) => d.toJS() as { data?: Record<string, string> })[0]!;
    const r = parseConfig(cm.data!);
    if (!r.ok) throw new Error('the shipped ConfigMap does not parse');
    const shipped = [...new Set(Object.values(r.config.storageClassMap).map((c) => argv(c.blockCleanerCommand)))];
    const helm = parse(read('helm/local-static-provisioner/values.yaml')) as { classes: Array<{ blockCleanerCommand?: string[] }> };
    expect(shipped).toEqual([argv(helm.classes[0]!.blockCleanerCommand!)]);
    expect(answer).toMatch(new RegExp(`ConfigMap \\(kustomize base\\) and the Helm chart's default class set \`${shipped[0]!.replace(/[[\]]/g, '\\$&')}\``));
  });

  it('calls quick_reset.sh what a class without the key gets, not the default of the shipped manifests', () => {
    expect(answer).toContain(`A class without the key gets \`${argv(DEFAULT_BLOCK_CLEANER_COMMAND)}\``);
    expect(answer).not.toMatch(/the default `quick_reset\.sh`/);
  });
});
