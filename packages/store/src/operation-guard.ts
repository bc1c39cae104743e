/**
 * The store's open/closing life: which operations may start, what their failures become, and how `close()` lets
 * the running ones finish before the connections go. `SqlDataPlaneStore` runs every operation through it.
 */
import type { Logger } from '@sluice/core';
import { closedStoreError, toStoreError } from './errors.js';

/** How long `close()` waits for running operations before closing the connections under them. */
const CLOSE_DRAIN_MS = 10_000;

/**
 * Admits operations until closed, maps what they throw to the store's errors (logging the unexpected ones), and
 * drains the admitted ones on close.
 *
 * @example
 * ```ts
 * const guard = new OperationGuard(logger);
 * const record = await guard.run('get', () => readRecord(id)); // STORE_UNAVAILABLE once closing
 * await guard.close(() => db.destroy());
 * ```
 */
export class OperationGuard {
  readonly #logger: Logger;
  #closing: Promise<void> | null = null;
  /** Operations accepted before `close()`, which it lets finish before closing the connections. */
  readonly #inFlight = new Set<Promise<unknown>>();

  constructor(logger: Logger) {
    this.#logger = logger;
  }

  /** True once `close()` was called. */
  get closed(): boolean {
    return this.#closing !== null;
  }

  /** Runs `operation` unless closing (then `STORE_UNAVAILABLE`); its failure leaves as a store error. */
  async run<T>(operation: string, run: () => Promise<T>): Promise<T> {
    if (this.#closing !== null) throw closedStoreError();
    const running = run();
    this.#inFlight.add(running);
    try {
      return await running;
    } catch (err) {
      const mapped = toStoreError(err, operation);
      if (mapped.code === 'INTERNAL')
        this.#logger.error({ err: mapped.message, operation }, 'store: unexpected failure');
      throw mapped;
    } finally {
      this.#inFlight.delete(running);
    }
  }

  /**
   * Stops admitting operations, lets the ones already running finish (for at most `CLOSE_DRAIN_MS`), then calls
   * `destroy` once. Idempotent: later calls wait for the first.
   */
  async close(destroy: () => Promise<void>): Promise<void> {
    if (this.#closing === null) this.#closing = this.#drainThen(destroy);
    await this.#closing;
  }

  async #drainThen(destroy: () => Promise<void>): Promise<void> {
    if (this.#inFlight.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, CLOSE_DRAIN_MS);
        timer.unref();
      });
      await Promise.race([Promise.allSettled([...this.#inFlight]), deadline]);
      clearTimeout(timer);
    }
    await destroy();
  }
}
