import { InternalError } from '@sluice/core';

/**
 * Bounded concurrency with a bounded FIFO queue: at most `concurrency` jobs run, at most `queueSize` wait.
 * `tryReserve` is the admission check (a reservation holds a place until the job is started or dropped), so
 * a node can refuse work (429) before it writes anything.
 *
 * @example
 * ```ts
 * const scheduler = new Scheduler({ concurrency: 4, queueSize: 100 });
 * const ticket = scheduler.tryReserve();
 * if (!ticket) throw new QueueFullError(1);
 * scheduler.start(ticket, async () => runIt());
 * ```
 */
export class Scheduler {
  readonly #concurrency: number;
  readonly #queueSize: number;
  #running = 0;
  #reserved = 0;
  /** Provisional reservations not yet used or dropped: each settles when it is. */
  readonly #provisional = new Set<Promise<void>>();
  readonly #queue: Array<() => void> = [];
  #idleWaiters: Array<() => void> = [];

  constructor(options: { concurrency: number; queueSize: number }) {
    this.#concurrency = options.concurrency;
    this.#queueSize = options.queueSize;
  }

  /** Jobs running now. */
  get running(): number {
    return this.#running;
  }

  /** Jobs that may run at once. */
  get concurrency(): number {
    return this.#concurrency;
  }

  /** The work this node has taken on: jobs running, waiting and reserved. */
  get load(): number {
    return this.#running + this.#queue.length + this.#reserved;
  }

  /** Jobs waiting for a slot. */
  get queued(): number {
    return this.#queue.length;
  }

  /** Places left for new work (running + waiting + reserved below capacity). */
  get free(): number {
    return Math.max(
      0,
      this.#concurrency + this.#queueSize - this.#running - this.#queue.length - this.#reserved,
    );
  }

  /**
   * Reserves a place, or returns null when full. Release it with `start` or `cancel`. A `provisional` reservation
   * is for work that may turn out not to exist — a submit that inserts first and may find a duplicate — and
   * {@link reserve} waits for it instead of refusing.
   */
  tryReserve(options?: { provisional?: boolean }): Ticket | null {
    if (this.free <= 0) return null;
    this.#reserved++;
    let used = false;
    let settled: (() => void) | null = null;
    if (options?.provisional) {
      const pending = new Promise<void>((resolve) => {
        settled = () => {
          this.#provisional.delete(pending);
          resolve();
        };
      });
      this.#provisional.add(pending);
    }
    return {
      use: () => {
        if (used) return false;
        used = true;
        this.#reserved--;
        settled?.();
        return true;
      },
    };
  }

  /**
   * Reserves a place; when none is free but provisional reservations hold some, waits until those held now are
   * used or dropped and tries once more. So work is refused only for places taken by work that exists, never
   * for one a duplicate held for the length of a statement.
   */
  async reserve(): Promise<Ticket | null> {
    const ticket = this.tryReserve();
    if (ticket || this.#provisional.size === 0) return ticket;
    await Promise.all([...this.#provisional]);
    return this.tryReserve();
  }

  /** Drops a reservation that will not be used. */
  cancel(ticket: Ticket): void {
    ticket.use();
  }

  /**
   * Runs `job` on the reservation: now if a slot is free, else when one frees up. Returns `withdraw`, which
   * takes a job that is still waiting out of the queue (true) — its place is free at once — and does nothing
   * to one that started (false): a queued transfer stopped before it ran must not hold a place until a slot
   * frees up, or the node refuses new work (429) with nothing waiting.
   */
  start(ticket: Ticket, job: () => Promise<void>): () => boolean {
    if (!ticket.use()) throw new InternalError('scheduler: ticket already used');
    const run = () => {
      this.#running++;
      void job()
        .catch(() => {})
        .finally(() => {
          this.#running--;
          const next = this.#queue.shift();
          if (next) next();
          else if (this.#running === 0) this.#notifyIdle();
        });
    };
    if (this.#running < this.#concurrency) {
      run();
      return () => false;
    }
    this.#queue.push(run);
    return () => {
      const at = this.#queue.indexOf(run);
      if (at < 0) return false;
      this.#queue.splice(at, 1);
      return true;
    };
  }

  /** Removes queued (not yet started) jobs, returning how many; their owners must be told separately. */
  clearQueue(): number {
    const count = this.#queue.length;
    this.#queue.length = 0;
    if (this.#running === 0) this.#notifyIdle();
    return count;
  }

  /** Resolves once nothing runs. */
  idle(): Promise<void> {
    if (this.#running === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  #notifyIdle(): void {
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}

/** A place reserved in a {@link Scheduler}. */
export interface Ticket {
  /** Consumes the reservation; false if it was already consumed. */
  use(): boolean;
}
