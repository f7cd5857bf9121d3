// Commands shown in the user docs, read back by the tests that run them as written.
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

const docsDir = resolve(import.meta.dirname, '..', '..', 'docs');

/** The fenced sh blocks of docs/<file>. */
export function shBlocks(file: string): string[] {
  return [...readFileSync(join(docsDir, file), 'utf8').matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
}

/** A shell command with its `\` continuations joined, split into words (single quotes honoured, nothing else). */
export function shellWords(cmd: string): string[] {
  return [...cmd.replace(/\\\n\s*/g, ' ').matchAll(/'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2]!);
}

/** The first `helm install <release> <chart> <args...>` of docs/<file>, as words. */
export function helmInstall(file: string): { release: string; chart: string; args: string[] } {
  for (const block of shBlocks(file)) {
    const cmd = /^helm install(?:[^\n]*\\\n)*[^\n]*/m.exec(block)?.[0];
    if (cmd === undefined) continue;
    const [, , release, chart, ...args] = shellWords(cmd);
    if (release === undefined || chart === undefined) throw new Error(`docs/${file}: ${cmd} names no release and chart`);
    return { release, chart, args };
  }
  throw new Error(`no helm install command in docs/${file}`);
}
