// One read of the mount table per discovery period, shared by discovery and the volume health pass
// (issue 20, idle CPU): /proc/self/mountinfo costs ~7.6 ms of kernel time per read at 2,000 mounts.
// The first of them to ask in a period reads it (mountinfo.ts's readStable, as everywhere else; a first
// read equal to the table already held is taken at once: it is a whole table, the one parsed
// before); the other gets the same snapshot. A parsed view (mount points, propagation, details) is
// made once per distinct text, so an unchanged table is parsed by nobody.
// Not for the deleter: its guard and cleaners read the table afresh right before they act.
import { DEFAULT_MOUNTINFO_PATH, readStable } from './mountinfo.ts';

/** One read of the mount table; views are parsed lazily, once per text. */
export interface MountSnapshot {
  readonly text: string;
  /** `parse(text)`, made once per distinct text and view (the same object while the text is unchanged). */
  view<T>(parse: (text: string) => T): T;
}

class Snapshot implements MountSnapshot {
  readonly bytes: Buffer;
  readonly text: string;
  readonly #views = new Map<(text: string) => unknown, unknown>();
  constructor(bytes: Buffer) {
    this.bytes = bytes;
    this.text = bytes.toString('utf8');
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
    let bytes: Buffer;
    try {
      bytes = await readStable(this.path, { known: this.#last?.bytes, onRead: () => this.#reads++ });
    } catch (e) {
      this.#last = undefined;
      throw e;
    }
    if (this.#last !== undefined && bytes.equals(this.#last.bytes)) return this.#last;
    this.#last = new Snapshot(bytes);
    return this.#last;
  }
}
