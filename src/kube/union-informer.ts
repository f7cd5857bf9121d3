// One Informer over several informers of the same kind whose selectors split
// the objects between them (e.g. PVs labelled for this node, and PVs without
// that label). An object may move from one to another (a label added): the
// source it leaves sends `delete`, the one it enters sends `add`, in either
// order. The union hides the move: consumers see one `update`, never a delete
// of an object that still exists. Reads go to the first informer holding the
// key (earlier informers win).
import { objectKey, type Informer, type InformerHandlers } from './informer.ts';

export function unionInformer<T extends { metadata?: { name?: string; namespace?: string } }>(parts: readonly Informer<T>[]): Informer<T> {
  const holder = (key: string, except?: Informer<T>): Informer<T> | undefined => parts.find((p) => p !== except && p.get(key) !== undefined);
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
      // Handlers always get the copy reads return (get), so a stale copy in a later part never wins.
      const offs = parts.map((p) =>
        p.on({
          add: (o) => {
            const key = objectKey(o);
            const other = holder(key, p)?.get(key);
            // Already held by another part: it moved in from there (or is in both for a moment).
            if (other !== undefined) h.update?.(other, get(key) ?? o);
            else h.add?.(o);
          },
          update: (a, b) => h.update?.(a, get(objectKey(b)) ?? b),
          delete: (o) => {
            const other = get(objectKey(o));
            // Still held by another part: it moved there; the consumer sees that copy.
            if (other !== undefined) h.update?.(o, other);
            else h.delete?.(o);
          },
        }),
      );
      return () => {
        for (const off of offs) off();
      };
    },
  };
}
