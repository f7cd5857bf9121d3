// Readiness of the process, set by whoever runs the work (the controller after
// each discovery pass) and read by the HTTP /ready endpoint.

/** Readiness as reported by /ready: the last discovery pass of the running controller had no error. */
export class Readiness {
  #ready = false;
  #reason = 'no discovery pass has completed yet';
  set(ready: boolean, reason = ''): void {
    this.#ready = ready;
    this.#reason = ready ? '' : reason;
  }
  get ready(): boolean {
    return this.#ready;
  }
  get reason(): string {
    return this.#reason;
  }
}
