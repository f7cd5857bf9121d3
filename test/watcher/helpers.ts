// Helpers shared by the watcher and supervisor tests.

/** storageClassMap YAML for the given classes (mountDir = hostDir). */
export const classYaml = (classes: Record<string, { hostDir: string; namePattern?: string }>): string =>
  Object.entries(classes)
    .map(
      ([name, c]) =>
        `${name}:\n  hostDir: ${c.hostDir}\n  mountDir: ${c.hostDir}\n${c.namePattern ? `  namePattern: "${c.namePattern}"\n` : ''}`,
    )
    .join('');

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls `cond` every few ms; throws when it is still false after `timeoutMs`. */
export async function waitFor(cond: () => boolean, timeoutMs = 3000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(5);
  }
}
