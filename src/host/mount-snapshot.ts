// One read of the mount table per discovery period, shared by discovery and the volume health pass
// (issue 20, idle CPU): /proc/self/mountinfo costs ~7.6 ms of kernel time per read at 2,000 mounts.
// The first of them to ask in a period reads it (until two reads agree, as everywhere else; a first
// read equal to the table already held is taken at once: it is a whole table, the one parsed
// before); the other gets the same snapshot. A parsed view (mount points, propagation, details) is
// made once per distinct text, so an unchanged table is parsed by nobody.
// Not for the deleter: its guard and cleaners read the table afresh right before they act.
import { readFile } from 'node:fs/promises';
import { DEFAULT_MOUNTINFO_PATH } from './mountinfo.ts';

/** One read of the mount table; views are parsed lazily, once per text. */
export interface MountSnapshot {
  readonly text: string;
  /** `parse(text)`, made once per distinct text and view (the same object while the text is unchanged). */
  view<T>(parse: (text: string) => T): T;
}

class Snapshot implements MountSnapshot {
  readonly text: string;
  readonly #views = new Map<(text: string) => unknown, unknown>();
  constructor(text: string) {
    this.text = text;
  }
  view<T>(parse: (text: string) => T): T {
    if (this.#views.has(parse)) return this.#views.get(parse) as T;
    const v = parse(this.text);
    this.#views.set(parse, v);
    return v;
  }
}

export class MountTableReader {
  readonly path: string;
  #last: Snapshot | undefined;
  #period: Promise<MountSnapshot> | undefined;
  #reads = 0;

  constructor(path: string = DEFAULT_MOUNTINFO_PATH) {
    this.path = path;
  }

  /** Reads of the file so far (tests, benchmarks). */
  get reads(): number {
    return this.#reads;
  }

  /** Starts a new period: the next current() reads the table again. */
  newPeriod(): void {
    this.#period = undefined;
  }

  /** This period's table: read by the first caller, shared with the others. A failed read is not kept. */
  current(): Promise<MountSnapshot> {
    const p = (this.#period ??= this.#read());
    p.catch(() => {
      if (this.#period === p) this.#period = undefined;
    });
    return p;
  }

  async #read(): Promise<MountSnapshot> {
    const read = async (): Promise<string> => {
      this.#reads++;
      return readFile(this.path, 'utf8');
    };
    let text: string;
    try {
      text = await read();
      if (this.#last !== undefined && text === this.#last.text) return this.#last;
      for (let attempt = 0; attempt < 2; attempt++) {
        const again = await read();
        if (again === text) break;
        text = again;
      }
    } catch (e) {
      this.#last = undefined;
      throw e;
    }
    if (this.#last !== undefined && text === this.#last.text) return this.#last;
    this.#last = new Snapshot(text);
    return this.#last;
  }
}
