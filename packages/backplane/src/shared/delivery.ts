import type { Logger, SluiceEvent, SluiceEventType } from '@sluice/core';

/**
 * Delivers events to one subscriber's handler in arrival order (an async handler finishes before the next event
 * starts, so an alias switch never overtakes an earlier one). A throwing handler is logged; delivery goes on.
 */
export class OrderedDelivery {
  /** Events waiting for a slow handler beyond this are dropped (and logged) instead of growing without bound. */
  static readonly MAX_PENDING = 10_000;
  #tail: Promise<void> = Promise.resolve();
  #pending = 0;
  readonly #handler: (event: SluiceEvent) => void | Promise<void>;
  readonly #types: ReadonlySet<SluiceEventType> | null;
  readonly #logger: Logger;

  constructor(
    handler: (event: SluiceEvent) => void | Promise<void>,
    types: readonly SluiceEventType[] | undefined,
    logger: Logger,
  ) {
    this.#handler = handler;
    this.#types = types && types.length > 0 ? new Set(types) : null;
    this.#logger = logger;
  }

  wants(type: SluiceEventType): boolean {
    return this.#types === null || this.#types.has(type);
  }

  deliver(event: SluiceEvent): void {
    if (this.#pending >= OrderedDelivery.MAX_PENDING) {
      this.#logger.error(
        { eventType: event.type, pending: this.#pending },
        'event handler is too slow; event dropped for this subscriber',
      );
      return;
    }
    this.#pending += 1;
    this.#tail = this.#tail.then(async () => {
      try {
        await this.#handler(event);
      } catch (err) {
        this.#logger.error({ err, eventType: event.type }, 'event handler threw; event skipped for it');
      } finally {
        this.#pending -= 1;
      }
    });
  }

  /** Resolves once everything delivered so far has been handled. */
  idle(): Promise<void> {
    return this.#tail;
  }
}
