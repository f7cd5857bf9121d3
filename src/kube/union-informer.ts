// One Informer over several informers of the same kind whose selectors split
// the objects between them (e.g. PVs labelled for this node, and PVs without
// that label). An object may move from one to another (a label added): the
// part it leaves sends `delete` (with the object as it is now), the part it
// enters sends `add`, in either order, on two independent watches. The union
// hides the move: consumers see an `update`, never a delete of an object that
// still exists. `route` says which part an object belongs in now (undefined:
// none, it left the union's view); a delete whose object routes to another part
// is a move. Reads go to the first part holding the key.
import { objectKey, type Informer, type InformerHandlers } from './informer.ts';

type Obj = { metadata?: { name?: string; namespace?: string } };

export function unionInformer<T extends Obj>(parts: readonly Informer<T>[], route: (obj: T) => number | undefined): Informer<T> {
  const get = (key: string): T | undefined => {
    for (const p of parts) {
      const o = p.get(key);
      if (o !== undefined) return o;
    }
    return undefined;
  };
  return {
    get,
    list(): T[] {
      const seen = new Set<string>();
      const out: T[] = [];
      for (const p of parts) {
        for (const o of p.list()) {
          const k = objectKey(o);
          if (seen.has(k)) continue;
          seen.add(k);
          out.push(o);
        }
      }
      return out;
    },
    start(): void {
      for (const p of parts) p.start();
    },
    async stop(): Promise<void> {
      await Promise.all(parts.map((p) => p.stop()));
    },
    hasSynced: () => parts.every((p) => p.hasSynced()),
    async waitForSync(signal?: AbortSignal): Promise<void> {
      await Promise.all(parts.map((p) => p.waitForSync(signal)));
    },
    on(h: InformerHandlers<T>): () => void {
      // Objects that left a part for another one that has not delivered them yet: the consumer still holds the old copy.
      const moving = new Map<string, T>();
      const offs = parts.map((p, i) =>
        p.on({
          add: (o) => {
            const key = objectKey(o);
            const before = moving.get(key) ?? parts.find((q) => q !== p && q.get(key) !== undefined)?.get(key);
            moving.delete(key);
            // Consumers always get the copy reads return (get), so a stale copy in another part never wins.
            if (before !== undefined) h.update?.(before, get(key) ?? o);
            else h.add?.(o);
          },
          update: (a, b) => h.update?.(a, get(objectKey(b)) ?? b),
          delete: (o) => {
            const key = objectKey(o);
            const now = get(key);
            if (now !== undefined) {
              h.update?.(o, now); // it moved and the other part already has it
              return;
            }
            const to = route(o);
            if (to !== undefined && to !== i && to >= 0 && to < parts.length) {
              moving.set(key, o); // it moved; the other part's add follows
              return;
            }
            h.delete?.(o);
          },
        }),
      );
      return () => {
        for (const off of offs) off();
      };
    },
  };
}
