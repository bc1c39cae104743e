/**
 * Requests the fast routes took (fast-query.ts, fast-lookup.ts). They run below fastify, which cannot wait for them
 * when it closes — and a taken query whose answer is a problem is handed back to fastify (`inject`), which refuses
 * once closing: the shutdown waits for them first, so every request in flight gets its answer.
 */
export class InFlight {
  #count = 0;
  #waiters: Array<() => void> = [];

  /** Counts `response` in until it closes (answered, or its socket gone). */
  track(response: { once(event: 'close', listener: () => void): unknown }): void {
    this.#count++;
    response.once('close', () => {
      this.#count--;
      if (this.#count === 0) for (const wake of this.#waiters.splice(0)) wake();
    });
  }

  /** How many are in flight now. */
  get count(): number {
    return this.#count;
  }

  /**
   * Resolves once none is in flight, or after `timeoutMs` (an upload that never ends must not hold the shutdown).
   *
   * @example
   * ```ts
   * stopping = true; // the fast routes take nothing new
   * await inFlight.drained(10_000);
   * await app.close();
   * ```
   */
  drained(timeoutMs: number): Promise<void> {
    if (this.#count === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      timer.unref();
      this.#waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
