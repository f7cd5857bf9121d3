// The links the daemon made for deviceSelector classes (issue 21), kept in
// `<stateDir>/device-links.json` across restarts: only a link recorded here,
// still a symlink with the recorded target, is ever removed by the daemon.
// Hand-made links (not recorded) are never touched. When the state dir cannot
// be used, the record lives in memory only: after a restart the daemon's own
// links then look hand-made and are kept (never removed), the safe side.
// The file is read like the other state files (class-memory.ts: ours, private,
// no symlink, bounded); a record that does not parse is dropped, which again
// only means a link is kept.
import { join } from 'node:path';
import { readPrivateFile, writePrivateFileAtomic } from '../deleter/class-memory.ts';
import { stateDirProblem } from '../deleter/orphans.ts';
import { errorMessage, errnoCode } from '../util/errors.ts';
import { parseJsonObject } from '../util/json.ts';
import type { Logger } from '../util/log.ts';

export const DEVICE_LINKS_FILE = 'device-links.json';
export const MAX_DEVICE_LINKS_BYTES = 1024 * 1024;
const VERSION = 1;

export interface LinkRecord {
  readonly className: string;
  /** The symlink's path (in the class's mountDir). */
  readonly link: string;
  /** What it points to (a stable device name). */
  readonly target: string;
  /** MAJ:MIN the target resolved to when the link was made. */
  readonly devno: string;
}

const isRecord = (v: unknown): v is LinkRecord => {
  if (typeof v !== 'object' || v === null) return false;
  const r = v as Record<string, unknown>;
  return ['className', 'link', 'target', 'devno'].every((k) => typeof r[k] === 'string' && r[k] !== '') && (r['link'] as string).startsWith('/');
};

export class DeviceLinkStore {
  readonly #file: string | undefined;
  readonly #node: string;
  readonly #log: Logger | undefined;
  #links = new Map<string, LinkRecord>();

  private constructor(file: string | undefined, node: string, log: Logger | undefined) {
    this.#file = file;
    this.#node = node;
    this.#log = log;
  }

  static inMemory(node: string, log?: Logger): DeviceLinkStore {
    return new DeviceLinkStore(undefined, node, log);
  }

  static open(stateDir: string, node: string, log?: Logger): DeviceLinkStore {
    const problem = stateDirProblem(stateDir);
    if (problem !== undefined) {
      log?.error({ stateDir }, `--state-dir ${JSON.stringify(stateDir)} is not used for device links: ${problem}; links made for deviceSelector classes are kept after a restart, never removed`);
      return DeviceLinkStore.inMemory(node, log);
    }
    const s = new DeviceLinkStore(join(stateDir, DEVICE_LINKS_FILE), node, log);
    s.#load();
    return s;
  }

  list(): LinkRecord[] {
    return [...this.#links.values()].sort((a, b) => (a.link < b.link ? -1 : a.link > b.link ? 1 : 0));
  }

  add(r: LinkRecord): void {
    this.#links.set(r.link, r);
    this.#save();
  }

  remove(link: string): void {
    if (this.#links.delete(link)) this.#save();
  }

  #load(): void {
    const file = this.#file!;
    let text: string;
    try {
      text = readPrivateFile(file, MAX_DEVICE_LINKS_BYTES);
    } catch (err) {
      if (errnoCode(err) !== 'ENOENT') this.#log?.warn({ file }, `ignoring ${JSON.stringify(file)}: ${errorMessage(err)}; the device links it named are kept, never removed`);
      return;
    }
    const obj = parseJsonObject(text);
    if (typeof obj === 'string' || obj['version'] !== VERSION || obj['node'] !== this.#node || !Array.isArray(obj['links'])) {
      this.#log?.warn({ file }, `ignoring ${JSON.stringify(file)}: not a device-link record of this node; the device links it named are kept, never removed`);
      return;
    }
    for (const r of obj['links'] as unknown[]) if (isRecord(r)) this.#links.set(r.link, { className: r.className, link: r.link, target: r.target, devno: r.devno });
  }

  #save(): void {
    if (this.#file === undefined) return;
    try {
      writePrivateFileAtomic(this.#file, `${JSON.stringify({ version: VERSION, node: this.#node, links: this.list() }, null, 1)}\n`);
    } catch (err) {
      this.#log?.warn({ err, file: this.#file }, `cannot write ${JSON.stringify(this.#file)}; after a restart the device links made since are kept, never removed`);
    }
  }
}
