import type { BackplaneStatus, Logger } from '@sluice/core';

/** Holds a backplane's status and tells listeners about every change (a throwing listener is logged, not fatal). */
export class StatusTracker {
  #status: BackplaneStatus;
  readonly #listeners = new Set<(status: BackplaneStatus) => void>();
  readonly #logger: Logger;

  constructor(initial: BackplaneStatus, logger: Logger) {
    this.#status = initial;
    this.#logger = logger;
  }

  get(): BackplaneStatus {
    return this.#status;
  }

  set(next: BackplaneStatus): void {
    if (next === this.#status || this.#status === 'closed') return;
    this.#status = next;
    for (const listener of [...this.#listeners]) {
      try {
        listener(next);
      } catch (err) {
        this.#logger.error({ err, status: next }, 'backplane status listener threw');
      }
    }
  }

  /** Adds a listener; returns the function that removes it. */
  on(listener: (status: BackplaneStatus) => void): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }
}
