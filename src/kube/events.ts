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
