// The event-recording seam. src/kube/recorder.ts implements it against the API
// (client-go style names, de-duplication, rate limiting); tests use a fake that
// collects events. Recording never throws and never blocks the caller.
import { escapeControlChars } from '../util/errors.ts';

export interface ObjectRef {
  readonly kind: string;
  readonly name: string;
  readonly apiVersion?: string | undefined;
  readonly namespace?: string | undefined;
  readonly uid?: string | undefined;
}

export type EventType = 'Normal' | 'Warning';

export interface EventRecorder {
  event(ref: ObjectRef, type: EventType, reason: string, message: string): void;
}

export const pvRef = (pv: { metadata?: { name?: string; uid?: string } }): ObjectRef => ({
  kind: 'PersistentVolume',
  apiVersion: 'v1',
  name: pv.metadata?.name ?? '',
  uid: pv.metadata?.uid,
});

/** The API limit of an Event note/message (events.k8s.io `note`: 1 kB, counted in UTF-8 bytes). */
export const MAX_EVENT_MESSAGE_BYTES = 1024;

/** At most `maxBytes` UTF-8 bytes, cut at a character boundary and ending in "..." when cut. */
export function truncateUtf8(text: string, maxBytes: number): string {
  if (Buffer.byteLength(text, 'utf8') <= maxBytes) return text;
  const budget = Math.max(0, maxBytes - 3);
  let used = 0;
  let out = '';
  for (const ch of text) {
    const n = Buffer.byteLength(ch, 'utf8');
    if (used + n > budget) break;
    used += n;
    out += ch;
  }
  return `${out}...`;
}

/** What every recorded Event message goes through: control characters escaped, then bounded to the API limit. */
export const eventMessage = (message: string): string => truncateUtf8(escapeControlChars(message), MAX_EVENT_MESSAGE_BYTES);
