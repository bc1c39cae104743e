import type { Logger, QueueFullError } from '@sluice/core';
import { StreamAdmission, StreamBound } from '@sluice/http';
import { type Counter, Gauge, Counter as PromCounter, type Registry } from 'prom-client';
import type { PositionSeal } from '../position-seal.js';
import type { EndpointRegistry } from '../registry.js';
import type { FeedFilter } from './feed-filter.js';
import { GenerationFollower } from './follower.js';
import { entryFrame, HEARTBEAT_FRAME } from './frames.js';
import { type FeedContext, FeedSubscriber, type HeldGeneration } from './subscriber.js';

/** Settings of the change feeds (`api.changes`). */
export interface ChangeFeedSettings {
  heartbeatMs: number;
  bufferBytes: number;
  pollMs: number;
  maxSubscribers: number;
  maxPerClient: number;
}

/** Seconds a refused subscriber is told to wait (`retry-after`): feeds close at the pace of their clients. */
const RETRY_AFTER_SECONDS = 5;

/**
 * Every change-feed subscriber of one api-server, the followers they share (one per generation with live
 * subscribers) and the heartbeat. Subscribers never wait on each other: the follower writes to each socket and
 * cuts off the one whose unread bytes pass `bufferBytes`.
 */
export class ChangeFeedHub {
  private readonly subscribers = new Set<FeedSubscriber>();
  private readonly admission: StreamAdmission;
  private readonly followers = new Map<string, GenerationFollower>();
  private readonly heartbeat: NodeJS.Timeout;
  private readonly gauge: Gauge;
  private readonly cutoffs: Counter;
  private readonly refusals: Counter<'limit'>;
  private closed = false;

  constructor(
    private readonly registry: EndpointRegistry,
    readonly settings: ChangeFeedSettings,
    private readonly logger: Logger,
    metrics: Registry,
    /** Seals the tokens of row-filtered feeds (token.ts); null when auth is off (no row filters then). */
    private readonly seal: PositionSeal | null = null,
  ) {
    this.heartbeat = setInterval(() => {
      for (const subscriber of this.subscribers) subscriber.send(HEARTBEAT_FRAME);
    }, settings.heartbeatMs);
    this.heartbeat.unref();
    this.gauge = new Gauge({
      name: 'sluice_api_change_subscribers',
      help: 'Open change-feed connections',
      registers: [metrics],
      collect: () => this.gauge.set(this.subscribers.size),
    });
    this.cutoffs = new PromCounter({
      name: 'sluice_api_change_cutoffs_total',
      help: 'Change-feed subscribers disconnected because they left too much unread',
      registers: [metrics],
    });
    this.refusals = new PromCounter({
      name: 'sluice_api_change_refusals_total',
      help: 'Change-feed requests refused 429: the api-server had maxSubscribers feeds (limit="server") or the client maxPerClient (limit="client")',
      labelNames: ['limit'],
      registers: [metrics],
    });
    for (const limit of Object.values(StreamBound)) this.refusals.inc({ limit }, 0);
    this.admission = new StreamAdmission({
      streams: 'change feeds',
      process: 'api-server',
      max: { value: settings.maxSubscribers, setting: 'api.changes.maxSubscribers' },
      perClient: { value: settings.maxPerClient, setting: 'api.changes.maxPerClient' },
      retryAfterSeconds: RETRY_AFTER_SECONDS,
      onRefusal: (limit) => this.refusals.inc({ limit }),
    });
  }

  get size(): number {
    return this.subscribers.size;
  }

  /** Subscribers currently attached to a generation's follower (live). */
  liveCount(): number {
    let live = 0;
    for (const follower of this.followers.values()) live += follower.size;
    return live;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * Why a new feed of `client` would be refused now (429 `QUEUE_FULL` with `retry-after`, counted), or null when it
   * may open: the process at `maxSubscribers` (or shutting down), else the client at `maxPerClient`.
   *
   * @example
   * ```ts
   * const refused = hub.refusal(grant.client);
   * if (refused) throw refused;
   * ```
   */
  refusal(client: string): QueueFullError | null {
    return this.admission.refusal(client, this.subscribers.size, this.closed);
  }

  /** Clients with at least one feed open. */
  get clients(): number {
    return this.admission.clients;
  }

  /**
   * A new subscriber of `alias` for `client` writing to `res`; it holds one of the client's slots until it closes.
   * Ask {@link ChangeFeedHub.refusal} first.
   */
  subscribe(
    alias: string,
    client: string,
    res: import('node:http').ServerResponse,
    /** Its `filter=` and token row filter, checked and compiled per generation (null: none). */
    filters: FeedFilter | null,
    /** When the subscriber's bearer token expires (epoch ms; the feed ends then), or null. */
    expiresAt: number | null = null,
  ): FeedSubscriber {
    this.admission.take(client);
    const subscriber = new FeedSubscriber(this.contextOf(alias, client), res, filters, expiresAt);
    this.subscribers.add(subscriber);
    return subscriber;
  }

  private contextOf(alias: string, client: string): FeedContext {
    const registry = this.registry;
    const drainTimeoutMs = Math.max(5_000, this.settings.heartbeatMs * 4);
    return {
      alias,
      registry,
      logger: this.logger,
      seal: this.seal,
      bufferBytes: this.settings.bufferBytes,
      drainTimeoutMs,
      current: (): HeldGeneration => {
        const lease = registry.acquire(alias);
        return { name: lease.generation.name, cache: lease.cache, release: lease.release };
      },
      follower: (generation) => {
        let follower = this.followers.get(generation.name);
        if (!follower) {
          const name = generation.name;
          const created = new GenerationFollower(
            name,
            generation.cache,
            (entry) => entryFrame(alias, name, entry),
            () => registry.current(alias)?.name === name,
            this.settings.pollMs,
            this.logger,
            () => {
              if (this.followers.get(name) === created) this.followers.delete(name);
            },
          );
          follower = created;
          this.followers.set(name, follower);
        }
        return follower;
      },
      detach: (generation, feed) => this.followers.get(generation)?.remove(feed),
      onCutOff: () => {
        this.cutoffs.inc();
        this.logger.info({ alias }, 'change-feed subscriber cut off: it left too much unread');
      },
      // Called once per subscriber (its close is idempotent): the client's slot is given back exactly once.
      onClose: (feed) => {
        if (this.subscribers.delete(feed)) this.admission.give(client);
      },
    };
  }

  /** Ends every subscription (shutdown: clients reconnect elsewhere and resume by token). */
  close(): void {
    this.closed = true;
    clearInterval(this.heartbeat);
    for (const follower of [...this.followers.values()]) follower.stop();
    for (const subscriber of [...this.subscribers]) subscriber.end();
  }
}
