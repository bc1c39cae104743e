/**
 * The event side of the NATS backplane: a subscriber's NATS subscriptions, decoding and checking what arrives,
 * dropping duplicate and stale alias redirects, and handing subscribers the redirects they missed while
 * disconnected. Moved out of nats-backplane.ts; `NatsBackplane.subscribe` checks it is open, then delegates here.
 */
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import {
  type AliasRedirected,
  BackplaneUnavailableError,
  type Logger,
  type Registration,
  type SluiceEvent,
  SluiceEventSchema,
  type SubscribeOptions,
} from '@sluice/core';
import { aliasEventKey, aliasSlot, isOlderAliasEvent } from '../shared/alias-latest.js';
import { OrderedDelivery } from '../shared/delivery.js';
import { checkSubscribeTypes } from '../shared/local-events.js';
import { decodeJson, logDropped } from '../shared/wire.js';
import { within } from '../shared/within.js';
import type { AliasStore } from './alias-store.js';
import type { Subjects } from './subjects.js';

interface EventSubscription {
  delivery: OrderedDelivery;
  subs: Subscription[];
  /** The last redirect handed to this subscriber per host and alias (to drop duplicates and stale ones). */
  delivered: Map<string, AliasRedirected>;
  /** The state in the bucket when the subscription started: the subscriber is assumed to have read it. */
  baseline: Map<string, AliasRedirected>;
}

/** Delays between reads of the alias bucket after a reconnect whose read failed: doubling, capped. */
const REPLAY_RETRY = { initialDelayMs: 100, maxDelayMs: 5_000 };

/** What the fan-out needs of its backplane: the connection, and whether it is usable right now. */
export interface NatsEventFanoutOptions {
  nc: NatsConnection;
  subjects: Subjects;
  aliases: AliasStore;
  logger: Logger;
  maxBytes: number;
  /** Hear only this host's alias events (see `NatsBackplaneOptions.aliasHost`). */
  aliasHost: string | undefined;
  connected: () => boolean;
  /** Waits until the server has processed everything sent so far (false when it could not tell in time). */
  flush: () => Promise<boolean>;
  /**
   * The longest a subscription's close waits for the server to confirm its drain (the operation timeout): a hung
   * server never confirms, and the subscriber is going away.
   */
  timeoutMs: number;
}

/** The subscribers of one NATS backplane. */
export class NatsEventFanout {
  readonly #nc: NatsConnection;
  readonly #subjects: Subjects;
  readonly #aliases: AliasStore;
  readonly #logger: Logger;
  readonly #maxBytes: number;
  readonly #aliasHost: string | undefined;
  readonly #connected: () => boolean;
  readonly #flush: () => Promise<boolean>;
  readonly #timeoutMs: number;
  readonly #subs = new Set<EventSubscription>();
  /** The armed retry of a failed replay (see replayAliasState), and the delay of the one after it. */
  #replayTimer: NodeJS.Timeout | null = null;
  #replayDelayMs = REPLAY_RETRY.initialDelayMs;

  constructor(options: NatsEventFanoutOptions) {
    this.#nc = options.nc;
    this.#subjects = options.subjects;
    this.#aliases = options.aliases;
    this.#logger = options.logger;
    this.#maxBytes = options.maxBytes;
    this.#aliasHost = options.aliasHost;
    this.#connected = options.connected;
    this.#flush = options.flush;
    this.#timeoutMs = options.timeoutMs;
  }

  /**
   * Subscribes `handler` to the events of `options.types` (every type by default), starting from the alias state
   * in the bucket now (assumed read by the caller); see `NatsBackplane.subscribe`.
   */
  async subscribe(
    handler: (event: SluiceEvent) => void | Promise<void>,
    options?: SubscribeOptions,
  ): Promise<Registration> {
    const types = checkSubscribeTypes(options);
    const delivery = new OrderedDelivery(handler, types, this.#logger);
    const state: EventSubscription = { delivery, subs: [], delivered: new Map(), baseline: new Map() };
    // With an alias host, that host's alias subject plus the other event types; otherwise everything.
    const subjects =
      this.#aliasHost === undefined
        ? [this.#subjects.eventWildcard()]
        : [this.#subjects.typeWildcard(), this.#subjects.aliasEvents(this.#aliasHost)];
    try {
      for (const subject of subjects) {
        state.subs.push(
          this.#nc.subscribe(subject, {
            callback: (err, msg) => {
              if (err) this.#logger.warn({ err }, 'event subscription error');
              else this.#onEvent(state, msg);
            },
          }),
        );
      }
    } catch (err) {
      for (const sub of state.subs) sub.unsubscribe();
      throw new BackplaneUnavailableError('Cannot subscribe to events on NATS', { cause: err });
    }
    this.#subs.add(state);
    await this.#flush();
    if (delivery.wants('AliasRedirected') && this.#connected()) {
      try {
        for (const event of await this.#aliases.list(this.#aliasHost))
          state.baseline.set(aliasSlot(event), event);
      } catch (err) {
        this.#logger.debug({ err }, 'could not read the alias bucket when subscribing');
      }
    }
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      this.#subs.delete(state);
      // Drained while connected, so events already on their way are still handed over. A hung server (a partition
      // without resets) never confirms the drain, and the subscriber is going away (a process stopping): after the
      // operation timeout the subscriptions are dropped here without the server's word.
      const drained = this.#connected() && (await drainWithin(state.subs, this.#timeoutMs));
      if (!drained) for (const sub of state.subs) unsubscribeQuietly(sub);
      await delivery.idle();
    };
    return { close, [Symbol.asyncDispose]: close };
  }

  #onEvent(state: EventSubscription, msg: Msg): void {
    const decoded = decodeJson(msg.data, SluiceEventSchema, this.#maxBytes);
    if (!decoded.ok) {
      logDropped(this.#logger, msg.subject, decoded.reason, msg.data);
      return;
    }
    const event = decoded.value;
    if (msg.subject !== this.#subjects.eventOf(event)) {
      logDropped(this.#logger, msg.subject, `event of type ${event.type} on the wrong subject`, msg.data);
      return;
    }
    this.#offer(state, event, false);
  }

  /** Hands `event` to a subscriber unless it is a duplicate or an older redirect than one it already has. */
  #offer(state: EventSubscription, event: SluiceEvent, replay: boolean): void {
    if (!state.delivery.wants(event.type)) return;
    if (event.type === 'AliasRedirected') {
      if (this.#aliasHost !== undefined && event.host !== this.#aliasHost) return;
      // Versions count per host: compare only with what this subscriber has of the same host's alias.
      const slot = aliasSlot(event);
      const last = state.delivered.get(slot);
      if (last && (aliasEventKey(last) === aliasEventKey(event) || isOlderAliasEvent(event, last))) return;
      const base = state.baseline.get(slot);
      if (base && isOlderAliasEvent(event, base)) return;
      if (replay && base && aliasEventKey(base) === aliasEventKey(event)) return;
      state.delivered.set(slot, event);
    }
    state.delivery.deliver(event);
  }

  /**
   * After a reconnect, hands subscribers the redirects published while they could not hear them. A read of the
   * bucket that fails while connected (JetStream not ready yet after a server restart, say) is tried again after a
   * growing delay until one succeeds — the reconnect is the only moment those redirects are looked for, so giving
   * up would lose them for good. A reconnect starts the retries over; while disconnected the next reconnect does.
   */
  replayAliasState(): Promise<void> {
    this.#cancelReplayRetry();
    this.#replayDelayMs = REPLAY_RETRY.initialDelayMs;
    return this.#replay();
  }

  async #replay(): Promise<void> {
    const interested = [...this.#subs].filter((s) => s.delivery.wants('AliasRedirected'));
    if (interested.length === 0) return;
    let latest: AliasRedirected[];
    try {
      latest = await this.#aliases.list(this.#aliasHost);
    } catch (err) {
      this.#replayFailed(err);
      return;
    }
    for (const state of interested) {
      if (!this.#subs.has(state)) continue;
      for (const event of latest) this.#offer(state, event, true);
    }
  }

  #replayFailed(err: unknown): void {
    const retrying = this.#connected() && this.#subs.size > 0;
    // Said once per reconnect; the retries after it are debug (a bucket that keeps refusing would flood the log).
    const first = this.#replayDelayMs === REPLAY_RETRY.initialDelayMs;
    const log = first ? this.#logger.warn : this.#logger.debug;
    log.call(
      this.#logger,
      retrying ? { err, retryInMs: this.#replayDelayMs } : { err },
      'could not read the alias bucket after reconnecting',
    );
    if (!retrying) return;
    this.#replayTimer = setTimeout(() => {
      this.#replayTimer = null;
      void this.#replay();
    }, this.#replayDelayMs);
    this.#replayTimer.unref();
    this.#replayDelayMs = Math.min(this.#replayDelayMs * 2, REPLAY_RETRY.maxDelayMs);
  }

  #cancelReplayRetry(): void {
    if (this.#replayTimer) clearTimeout(this.#replayTimer);
    this.#replayTimer = null;
  }

  /** Forgets every subscriber (the connection is closing). */
  clear(): void {
    this.#cancelReplayRetry();
    this.#subs.clear();
  }
}

/**
 * Drains `subs` (the server confirms it has sent them everything), true once done; false when that did not happen
 * within `timeoutMs` (a hung server) or failed (the connection went away).
 */
async function drainWithin(subs: readonly Subscription[], timeoutMs: number): Promise<boolean> {
  const draining = Promise.all(subs.map((sub) => sub.drain())).then(
    () => true,
    () => false,
  );
  return (await within(draining, timeoutMs)) === true;
}

/** Ends `sub` on this side at once (no more deliveries); a closed connection or subscription is fine. */
function unsubscribeQuietly(sub: Subscription): void {
  try {
    if (!sub.isClosed()) sub.unsubscribe();
  } catch {
    // Already gone with the connection.
  }
}
