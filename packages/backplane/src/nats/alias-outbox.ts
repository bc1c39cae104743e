/**
 * The `AliasRedirected` events a NATS backplane could not get to NATS yet — the connection was down or
 * reconnecting, or the KV write of the alias state failed — kept until they are published. A redirect describes a
 * state (the alias points at that generation now), not a moment, so only the latest per host and alias is owed: a
 * newer one replaces an older one kept for the same alias. Kept redirects are sent in the order they were kept,
 * once the connection is back (the backplane calls {@link AliasOutbox.flush} on reconnect) or, when NATS is
 * connected but refused (JetStream not ready after a restart), on a retry timer with backoff.
 *
 * The switch itself never waits for any of this: the alias table has moved before the redirect is published.
 */
import type { AliasRedirected, Logger } from '@sluice/core';
import { aliasEventKey, aliasSlot, isOlderAliasEvent } from '../shared/alias-latest.js';

/** How the outbox reaches NATS, and whether trying makes sense right now. */
export interface AliasOutboxOptions {
  /** Publishes the redirect and stores it as its alias's latest state; throws when either failed. */
  send: (event: AliasRedirected) => Promise<void>;
  /** True while the connection is up (a flush while it is not waits for the reconnect instead). */
  connected: () => boolean;
  logger: Logger;
  /** Retry delays while connected but refused: doubling from `initialDelayMs` up to `maxDelayMs`. */
  retry: { initialDelayMs: number; maxDelayMs: number };
}

/**
 * The outbox's one phase: `idle` (nothing being sent), `sending` (a flush runs), `waiting` (a retry is armed
 * after a refusal while connected), `closed` (the backplane closed; what is left is dropped).
 */
const OutboxPhase = {
  idle: 'idle',
  sending: 'sending',
  waiting: 'waiting',
  closed: 'closed',
} as const;
type OutboxPhase = (typeof OutboxPhase)[keyof typeof OutboxPhase];

/**
 * Latest-per-alias outbox of redirects for one NATS backplane.
 *
 * @example
 * ```ts
 * const outbox = new AliasOutbox({ send, connected: () => health.connected(), logger, retry: { initialDelayMs: 50, maxDelayMs: 5_000 } });
 * outbox.keep(event);
 * await outbox.flush();
 * if (outbox.holds(event)) throw new BackplaneUnavailableError('kept; published once NATS is back', { details: { deferred: true } });
 * ```
 */
export class AliasOutbox {
  readonly #options: AliasOutboxOptions;
  /** Host + alias → its latest unpublished redirect, in the order they are owed (a replaced one moves last). */
  readonly #pending = new Map<string, AliasRedirected>();
  #phase: OutboxPhase = OutboxPhase.idle;
  #sending: Promise<void> | null = null;
  #retryTimer: NodeJS.Timeout | null = null;
  #retryDelayMs: number;
  /** Why the last send failed (the cause a deferred publish reports). */
  #lastError: unknown = undefined;

  constructor(options: AliasOutboxOptions) {
    this.#options = options;
    this.#retryDelayMs = options.retry.initialDelayMs;
  }

  /** How many redirects are waiting to be published. */
  get size(): number {
    return this.#pending.size;
  }

  /**
   * Owes `event` to NATS, replacing an older redirect kept for the same host and alias (a newer one kept already
   * wins, and the same one is kept once).
   */
  keep(event: AliasRedirected): void {
    if (this.#phase === OutboxPhase.closed) return;
    const slot = aliasSlot(event);
    const kept = this.#pending.get(slot);
    if (kept && (aliasEventKey(kept) === aliasEventKey(event) || isOlderAliasEvent(event, kept))) return;
    this.#pending.delete(slot);
    this.#pending.set(slot, event);
  }

  /** Why the last attempt to publish a kept redirect failed, if one did. */
  get lastError(): unknown {
    return this.#lastError;
  }

  /** Whether `event` (or a newer redirect of its alias that replaced it) is still waiting to be published. */
  holds(event: AliasRedirected): boolean {
    return this.#pending.has(aliasSlot(event));
  }

  /**
   * Publishes every kept redirect, oldest first, while the connection is up; resolves once the outbox is empty or
   * a send failed (the rest stays kept: it is retried on the next reconnect, or after a backoff while connected).
   * Concurrent calls share one run, which also sends what is kept while it runs.
   */
  flush(): Promise<void> {
    if (this.#phase === OutboxPhase.closed) return Promise.resolve();
    if (this.#phase === OutboxPhase.sending && this.#sending) return this.#sending;
    this.#clearRetry();
    this.#phase = OutboxPhase.sending;
    this.#sending = this.#drain();
    return this.#sending;
  }

  async #drain(): Promise<void> {
    try {
      for (;;) {
        const next = this.#pending.entries().next();
        if (next.done || this.#phase === OutboxPhase.closed) return;
        if (!this.#options.connected()) return; // the reconnect flushes again
        const [slot, event] = next.value;
        try {
          await this.#options.send(event);
        } catch (err) {
          this.#refused(event, err);
          return;
        }
        // A newer redirect of the alias kept while this one was on its way is still owed.
        if (this.#pending.get(slot) === event) this.#pending.delete(slot);
        this.#retryDelayMs = this.#options.retry.initialDelayMs;
      }
    } finally {
      // Synchronously with the loop's last look at the map: a redirect kept after it starts a new run.
      if (this.#phase === OutboxPhase.sending) this.#phase = OutboxPhase.idle;
    }
  }

  /** A send failed: wait for the reconnect if the connection is down, else retry after a growing delay. */
  #refused(event: AliasRedirected, err: unknown): void {
    this.#lastError = err;
    const connected = this.#options.connected();
    // Said once per run of failures (a bucket that keeps refusing would otherwise log every few seconds).
    const first = this.#retryDelayMs === this.#options.retry.initialDelayMs;
    const log = first ? this.#options.logger.warn : this.#options.logger.debug;
    log.call(
      this.#options.logger,
      { err, alias: event.alias, host: event.host, to: event.to, kept: this.#pending.size },
      connected
        ? `could not publish AliasRedirected; kept, retrying in ${this.#retryDelayMs} ms`
        : 'could not publish AliasRedirected; kept until NATS is back',
    );
    if (!connected || this.#phase === OutboxPhase.closed) return;
    this.#phase = OutboxPhase.waiting;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      void this.flush();
    }, this.#retryDelayMs);
    this.#retryTimer.unref();
    this.#retryDelayMs = Math.min(this.#retryDelayMs * 2, this.#options.retry.maxDelayMs);
  }

  #clearRetry(): void {
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
  }

  /** Stops publishing (the backplane closes); returns the redirects that were never published. */
  close(): AliasRedirected[] {
    this.#clearRetry();
    this.#phase = OutboxPhase.closed;
    const dropped = [...this.#pending.values()];
    this.#pending.clear();
    return dropped;
  }
}
