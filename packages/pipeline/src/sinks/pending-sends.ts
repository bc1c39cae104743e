/**
 * Events handed to the backplane that the data path does not wait for. The backplane coordinates; it must never stop
 * data from flowing (DESIGN.md § Endpoints): a publish waits for NATS to confirm it (a flush, the alias state stored in
 * its KV bucket), and a NATS that hangs — a paused server, a partition without resets — would hold a generation's
 * commits for as long as it hangs. Readers do not need the wait either: api-servers follow the alias table too, and
 * the backplane keeps an unpublished redirect (its outbox) until NATS takes it.
 */

/** How long closing a sink (or stopping an endpoint) waits for its sends still under way before leaving them. */
export const SEND_WAIT_ON_CLOSE_MS = 1_000;

/**
 * Sends started and not yet settled. Each starts at once — the publisher is called before {@link PendingSends.start}
 * returns, so one alias's redirects reach the backplane in the order the alias moved — and none is waited for but by
 * {@link PendingSends.settle}, bounded, when their owner closes.
 *
 * @example
 * ```ts
 * const sends = new PendingSends();
 * sends.start(() => events.publish(event), (err) => logger.warn({ err }, 'could not publish'));
 * // … on close:
 * const left = await sends.settle(SEND_WAIT_ON_CLOSE_MS);
 * ```
 */
export class PendingSends {
  readonly #pending = new Set<Promise<void>>();

  /** How many sends are still under way. */
  get size(): number {
    return this.#pending.size;
  }

  /**
   * Calls `send` now and returns without waiting for it; a failure (thrown or rejected) goes to `onFailure`, never to
   * the caller.
   */
  start(send: () => Promise<void>, onFailure: (err: unknown) => void): void {
    let sent: Promise<void>;
    try {
      sent = send();
    } catch (err) {
      sent = Promise.reject(err);
    }
    const settled: Promise<void> = sent
      .then(undefined, (err: unknown) => {
        try {
          onFailure(err);
        } catch {
          // A failing log of a failed send must not become an unhandled rejection.
        }
      })
      .finally(() => {
        this.#pending.delete(settled);
      });
    this.#pending.add(settled);
  }

  /** Waits until every send started so far settled, or `timeoutMs` passed; resolves with how many are still under way. */
  async settle(timeoutMs: number): Promise<number> {
    if (this.#pending.size === 0) return 0;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(this.#pending),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
      }),
    ]).finally(() => clearTimeout(timer));
    return this.#pending.size;
  }
}
