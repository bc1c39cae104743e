import type { Logger, SluiceEvent, SluiceEventType } from '@sluice/core';

/**
 * Delivers events to one subscriber's handler in arrival order (an async handler finishes before the next event
 * starts, so an alias switch never overtakes an earlier one). A throwing handler is logged; delivery goes on.
 */
export class OrderedDelivery {
  #tail: Promise<void> = Promise.resolve();
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
    this.#tail = this.#tail.then(async () => {
      try {
        await this.#handler(event);
      } catch (err) {
        this.#logger.error({ err, eventType: event.type }, 'event handler threw; event skipped for it');
      }
    });
  }

  /** Resolves once everything delivered so far has been handled. */
  idle(): Promise<void> {
    return this.#tail;
  }
}
