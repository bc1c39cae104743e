/**
 * The NATS backplane's view of its own connection: its status (from the client's status stream), whether it is
 * *settled* (not within a settle window after a drop, reconnect or stale connection, when owners may not have
 * re-subscribed yet), and whether the server still answers. "Who runs X?" trusts "no responders" only while settled.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { BackplaneStatus, Logger } from '@sluice/core';
import { StatusTracker } from '../shared/status.js';
import { TIMED_OUT, within } from '../shared/within.js';
import type { Backoff } from './connection-options.js';

/** What {@link ConnectionHealth} needs besides the connection. */
export interface ConnectionHealthOptions {
  logger: Logger;
  /** The reconnect backoff: failures grow it, a reconnect resets it. */
  backoff: Backoff;
  /** How long the connection counts as unsettled after a drop, reconnect or stale connection. */
  settleMs: number;
  /** The longest a flush waits by default (the operation timeout). */
  timeoutMs: number;
}

/**
 * Tracks one NATS connection's health for the backplane.
 *
 * @example
 * ```ts
 * const health = new ConnectionHealth(nc, { logger, backoff, settleMs: 2_500, timeoutMs: 5_000 });
 * const loop = health.watch({ reconnected: () => replay(), closing: () => false });
 * if (health.settled() && (await health.flush())) { … } // the server has everything sent so far
 * ```
 */
export class ConnectionHealth {
  readonly #nc: NatsConnection;
  readonly #logger: Logger;
  readonly #backoff: Backoff;
  readonly #settleMs: number;
  readonly #timeoutMs: number;
  readonly #status: StatusTracker;
  /** Until when this node's own connection counts as unsettled (it dropped, reconnected or went stale). */
  #unsettledUntil = Number.NEGATIVE_INFINITY;
  /**
   * The last moment (`performance.now()`) the connection was interrupted: it dropped, reconnected, went stale or
   * closed. The server forgets this node's subscriptions with the connection, so peers could be told "no
   * responders" from then on ({@link reachableSince}).
   */
  #interruptedAt = Number.NEGATIVE_INFINITY;
  /** The shared ping on the wire, and the one that follows it for callers that arrived meanwhile ({@link flush}). */
  #inFlight: Promise<boolean> | null = null;
  #next: Promise<boolean> | null = null;

  constructor(nc: NatsConnection, options: ConnectionHealthOptions) {
    this.#nc = nc;
    this.#logger = options.logger;
    this.#backoff = options.backoff;
    this.#settleMs = options.settleMs;
    this.#timeoutMs = options.timeoutMs;
    this.#status = new StatusTracker('connected', this.#logger);
  }

  /**
   * Follows the client's status stream until the connection closes, then marks the status closed. `reconnected`
   * runs after each reconnect; `closing` tells an expected close (logged quietly) from an unexpected one.
   */
  async watch(hooks: { reconnected: () => void; closing: () => boolean }): Promise<void> {
    try {
      for await (const s of this.#nc.status()) {
        switch (s.type) {
          case 'disconnect':
            this.unsettle();
            this.#interrupted();
            this.#logger.warn({ server: s.server }, 'backplane lost its NATS connection; reconnecting');
            this.#status.set('reconnecting');
            break;
          case 'reconnecting':
            this.unsettle();
            this.#interrupted();
            this.#backoff.failure();
            this.#status.set('reconnecting');
            break;
          case 'reconnect':
            this.#backoff.reset();
            // Owners that have not reconnected yet cannot answer: "no responders" means nothing for a while.
            this.unsettle();
            this.#interrupted();
            this.#logger.info({ server: s.server }, 'backplane reconnected to NATS');
            this.#status.set('connected');
            hooks.reconnected();
            break;
          case 'staleConnection':
            this.unsettle();
            this.#interrupted();
            break;
          case 'error':
            this.#logger.warn({ err: s.error }, 'NATS reported an error');
            break;
          case 'close':
            this.#interrupted();
            this.#status.set('closed');
            break;
          default:
            break;
        }
      }
    } catch (err) {
      this.#logger.error({ err }, 'backplane status loop failed');
    }
    await this.#nc.closed().catch(() => undefined);
    if (!hooks.closing()) this.#logger.error({}, 'NATS connection closed unexpectedly; backplane is closed');
    this.#status.set('closed');
  }

  status(): BackplaneStatus {
    return this.#status.get();
  }

  onStatus(listener: (status: BackplaneStatus) => void): () => void {
    return this.#status.on(listener);
  }

  /** Marks the status closed for good (the backplane shut down). */
  markClosed(): void {
    this.#interrupted();
    this.#status.set('closed');
  }

  /** Starts (or extends) the settle window from now. */
  unsettle(): void {
    this.#unsettledUntil = Math.max(this.#unsettledUntil, Date.now() + this.#settleMs);
  }

  /**
   * Whether the connection has been up without interruption from `since` (a `performance.now()` instant) until
   * now: the server kept this node's subscriptions all along, so a peer's request for one of them was routed here,
   * never answered "no responders". A drop, a reconnect, a stale connection or a close at or after `since` — or a
   * connection not up now — says no.
   */
  reachableSince(since: number): boolean {
    return this.connected() && this.#interruptedAt < since;
  }

  #interrupted(): void {
    this.#interruptedAt = performance.now();
  }

  /** Connected, and not within the settle window of a drop, reconnect or stale connection. */
  settled(): boolean {
    return this.connected() && Date.now() >= this.#unsettledUntil;
  }

  connected(): boolean {
    return this.#status.get() === 'connected' && !this.#nc.isClosed() && !this.#nc.isDraining();
  }

  /**
   * Whether the server answers a ping within `timeoutMs`: after a request timed out, this tells an owner that
   * did not answer (server fine → `silent`) from a server or connection that is itself stalled (e.g. a paused
   * nats-server, where the owner may be fine). Always a ping of its own, sent now.
   */
  serverAnswers(timeoutMs: number): Promise<boolean> {
    return this.#ping(timeoutMs);
  }

  /**
   * Waits until the server has processed everything sent so far, at most the operation timeout per ping (twice
   * that when a ping was already in flight); false when it did not answer or the connection is down.
   *
   * Concurrent callers share pings: one ping is in flight at a time, and every caller that arrives meanwhile
   * waits for the next one, sent as soon as it returns. That one is written after each of their commands, so its
   * answer covers them all, as a ping of their own would have — but a node claiming hundreds of transfers a
   * second (a `SUB` and a flush to serve each, an `UNSUB` and a flush to close it) no longer writes a ping, arms
   * a timer and takes a `PONG` per call (a quarter of the node's socket writes under the submit benchmark).
   */
  flush(): Promise<boolean> {
    if (!this.connected()) return Promise.resolve(false);
    if (this.#inFlight === null) {
      this.#inFlight = this.#ping(this.#timeoutMs).finally(() => {
        this.#inFlight = null;
      });
      return this.#inFlight;
    }
    // The ping in flight may have been written before this caller's commands: it proves nothing for them.
    this.#next ??= this.#inFlight.then(() => {
      this.#next = null;
      return this.flush();
    });
    return this.#next;
  }

  async #ping(timeoutMs: number): Promise<boolean> {
    if (!this.connected()) return false;
    try {
      return (await within(this.#nc.flush(), timeoutMs)) !== TIMED_OUT;
    } catch {
      return false;
    }
  }
}
