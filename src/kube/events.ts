// The event-recording seam. src/kube/recorder.ts implements it against the API
// (client-go style names, de-duplication, rate limiting); tests use a fake that
// collects events. Recording never throws and never blocks the caller.
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

// C0 controls, DEL, C1 controls, the Unicode line/paragraph separators and the
// bidirectional overrides/isolates: anything that can break a line, move the
// cursor, recolour a terminal or reorder the text a reader sees.
// eslint-disable-next-line no-control-regex
const UNSAFE_CHARS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const NAMED_ESCAPES: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** Replaces control characters with visible escapes (\n, \r, \t, \xHH, \uHHHH). */
export function escapeControlChars(text: string): string {
  return text.replace(UNSAFE_CHARS, (c) => {
    const named = NAMED_ESCAPES[c];
    if (named) return named;
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}

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
