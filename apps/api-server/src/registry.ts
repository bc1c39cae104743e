import {
  type AliasRedirected,
  API_DEFAULTS,
  type BackplaneStatus,
  type CacheCatalog,
  EndpointNotReadyError,
  type EventSubscriber,
  type Logger,
  type ReadableCache,
  type Registration,
  type SluiceEvent,
  silentLogger,
  UnknownEndpointError,
} from '@sluice/core';
import { type Generation, type Lease, ServingTable, type Slot } from './serving-table.js';

/** Where alias events come from: a backplane (NATS) or nothing at all (embedded mode). */
export interface AliasEventSource extends EventSubscriber {
  status?(): BackplaneStatus;
  onStatus?(listener: (status: BackplaneStatus) => void): () => void;
}

/**
 * Default of {@link RegistryOptions.eventGraceMs}: an event normally arrives within milliseconds of the move; 1 s
 * plus a watch tick stays inside the default `api.freshnessWaitMs` (2 s).
 */
export const EVENT_GRACE_MS = 1_000;

/** Why a switch happened (a metrics label). */
export type SwitchReason = 'event' | 'reconcile' | 'watch' | 'initial';

export interface RegistryOptions {
  caches: CacheCatalog;
  /**
   * This host (`node.id` of the shared sluice.yaml, i.e. of the app-server owning `dataDir`): alias events of
   * other hosts are ignored — their cache names and alias versions mean nothing in this host's `dataDir`.
   */
  host: string;
  /** Alias events (NATS). Absent → the registry watches the alias table's version instead. */
  events?: AliasEventSource;
  /**
   * The endpoints of this host's configuration (`endpoints[].name` of the shared sluice.yaml). One that nothing
   * serves yet, and whose alias was never retired, is `ENDPOINT_NOT_READY` (503, retry) rather than unknown: its
   * app-server is still building its first generation, or cannot start its pipeline yet.
   */
  configured?: readonly string[];
  logger?: Logger;
  /** Full reconcile with the alias table this often (`api.reconcileMs`). */
  reconcileMs?: number;
  /**
   * How often the alias table version is polled: for every change while no connected event source exists; while
   * one is connected, for retired aliases and for moves whose event has not come within `eventGraceMs`.
   */
  watchMs?: number;
  /**
   * How long a move the alias table shows may wait for its event while the backplane is connected before it is
   * followed from the table (default {@link EVENT_GRACE_MS}): shorter than the default `api.freshnessWaitMs`, so a
   * `sluice-min-position` request still sees the switch when the event never comes.
   */
  eventGraceMs?: number;
  /** Called after every switch (metrics). */
  onSwitch?: (info: { alias: string; from: string | null; to: string; reason: SwitchReason }) => void;
  /** Called when opening a new generation fails (metrics). */
  onSwitchFailure?: (info: { alias: string; to: string; error: unknown }) => void;
}

/**
 * The endpoints this api-server serves: alias → the cache generation currently answering, swapped atomically
 * when the alias moves. Only this host's `AliasRedirected` events count (versions are per host). Subscribes to `AliasRedirected` BEFORE opening anything (an event published while the
 * initial aliases are opened is buffered, not lost), reconciles with the alias table on every backplane
 * reconnect and every `reconcileMs`, and polls `aliasTableVersion()` whenever no event source is connected.
 * A replaced generation stays open until the last request reading it releases its lease, then closes. An alias the
 * table no longer has (retired: its endpoint left the app-server's configuration) stops being served — events
 * never announce that, so the table version is watched for it even while NATS is connected; so is a move whose event
 * has not come within `eventGraceMs` (a connection can look up and deliver nothing).
 *
 * @example
 * ```ts
 * await using registry = await EndpointRegistry.start({ caches, host: 'h1', events: backplane, reconcileMs: 5_000 });
 * const lease = registry.acquire('items');
 * try { return lease.cache.get([42]); } finally { lease.release(); }
 * ```
 */
export class EndpointRegistry implements AsyncDisposable {
  private readonly table: ServingTable;
  private readonly caches: CacheCatalog;
  private events: AliasEventSource | undefined;
  private readonly logger: Logger;
  private readonly options: RegistryOptions;
  private readonly configured: ReadonlySet<string>;
  private registration: Registration | null = null;
  private unsubscribeStatus: (() => void) | null = null;
  private readonly timers: NodeJS.Timeout[] = [];
  private pending: AliasRedirected[] | null = [];
  private seenTableVersion = -1;
  private lastStatus: BackplaneStatus | null = null;
  private closed = false;
  private reconciling: Promise<void> | null = null;
  private started = false;
  private readonly eventGraceMs: number;

  private constructor(options: RegistryOptions) {
    this.options = options;
    this.configured = new Set(options.configured ?? []);
    this.caches = options.caches;
    this.events = options.events;
    this.logger = options.logger ?? silentLogger;
    this.table = new ServingTable(this.logger);
    this.eventGraceMs = options.eventGraceMs ?? EVENT_GRACE_MS;
  }

  /** Subscribes to alias events, then opens every aliased cache, then starts the reconcile timers. */
  static async start(options: RegistryOptions): Promise<EndpointRegistry> {
    const registry = new EndpointRegistry(options);
    try {
      await registry.init();
    } catch (err) {
      await registry.close();
      throw err;
    }
    return registry;
  }

  private async init(): Promise<void> {
    // Subscribe first: an event that arrives while the initial aliases are opened is buffered in `pending`.
    if (this.options.events) await this.subscribe(this.options.events);
    await this.reconcile('initial');
    await this.replayLatest();
    const buffered = this.pending ?? [];
    this.pending = null;
    for (const event of buffered) this.dispatch(event);
    this.started = true;
    const reconcileMs = this.options.reconcileMs ?? API_DEFAULTS.reconcileMs;
    this.timers.push(setInterval(() => void this.reconcile('reconcile'), reconcileMs));
    const watchMs = this.options.watchMs ?? 200;
    this.timers.push(setInterval(() => this.watchTable(), watchMs));
    for (const timer of this.timers) timer.unref();
  }

  private async subscribe(events: AliasEventSource): Promise<void> {
    this.registration = await events.subscribe((event) => this.onEvent(event), {
      types: ['AliasRedirected'],
    });
    this.events = events;
    this.lastStatus = events.status?.() ?? null;
    this.unsubscribeStatus =
      events.onStatus?.((status) => {
        const previous = this.lastStatus;
        this.lastStatus = status;
        if (status === 'connected' && previous !== 'connected') {
          this.logger.info({ previous }, 'backplane reconnected; reconciling aliases');
          void this.reconcile('reconcile');
        }
      }) ?? null;
  }

  /**
   * The latest redirect per alias kept by the backplane (JetStream KV). The table is the truth; these only
   * matter if this process's view of the table lags, and `sync` ignores anything older than what it serves.
   */
  private async replayLatest(): Promise<void> {
    if (!this.events) return;
    try {
      for (const event of await this.events.latestAliasEvents()) this.onEvent(event);
    } catch (err) {
      this.logger.warn({ err }, 'could not read the latest alias events; relying on the alias table');
    }
  }

  /**
   * Attaches an event source after start (the backplane was unreachable when the server started): subscribes,
   * then reconciles, so nothing that moved in between is missed.
   */
  async attachEvents(events: AliasEventSource): Promise<void> {
    if (this.closed || this.events) return;
    await this.subscribe(events);
    await this.reconcile('reconcile');
    await this.replayLatest();
  }

  /** True once the initial aliases are open. */
  get ready(): boolean {
    return this.started && !this.closed;
  }

  /** The backplane's status, or `null` without one. */
  eventStatus(): BackplaneStatus | null {
    return this.events ? (this.events.status?.() ?? this.lastStatus) : null;
  }

  /** Cache generations open for reading: the serving ones plus retired ones still draining. */
  openGenerations(): number {
    return this.table.openGenerations();
  }

  /** Endpoint names currently served. */
  names(): string[] {
    return this.table.names();
  }

  has(alias: string): boolean {
    return this.table.has(alias);
  }

  /**
   * Opens a generation by its concrete name, outside the serving slot (a change feed resuming from a token of a
   * generation the alias has left, while it still exists). The caller closes it.
   */
  openGeneration(name: string): Promise<ReadableCache> {
    return this.caches.openRo(name);
  }

  /** The generation currently serving `alias`, or `null` (no lease taken: for listings and tests). */
  current(alias: string): Generation | null {
    return this.table.current(alias);
  }

  /**
   * Takes a lease on the generation serving `alias` right now. Synchronous, so it can never observe a
   * half-done swap; the generation stays open until the lease is released.
   */
  acquire(alias: string): Lease {
    // A closed registry serves nothing, not even the reason an open failed.
    if (this.closed) throw new UnknownEndpointError(alias);
    try {
      return this.table.acquire(alias);
    } catch (err) {
      // A client that starts with the host (a change feed, a page polling) must hear "retry", not "no such
      // endpoint": the name is in the configuration and only its first generation is missing.
      if (err instanceof UnknownEndpointError && this.awaitsFirstGeneration(alias))
        throw new EndpointNotReadyError(
          alias,
          "its first generation is still being built (the app-server's GET /v1/endpoints shows its progress, or why its pipeline cannot start)",
        );
      throw err;
    }
  }

  /**
   * `alias` is a configured endpoint that this registry does not serve (yet) and whose alias was never retired:
   * the alias table has it live (not opened here yet), or never had it at all (no switch in its history). A retired
   * alias — its endpoint left the app-server's configuration — stays unknown even to an api-server still running
   * with the older file.
   */
  private awaitsFirstGeneration(alias: string): boolean {
    if (!this.configured.has(alias)) return false;
    try {
      return this.caches.resolveAlias(alias) !== null || this.caches.history(alias).length === 0;
    } catch (err) {
      this.logger.warn({ err, alias }, 'could not read the alias table; answering the endpoint as unknown');
      return false;
    }
  }

  private onEvent(event: SluiceEvent): void {
    if (event.type !== 'AliasRedirected' || this.closed) return;
    if (event.host !== this.options.host) {
      // Defence in depth: the backplane is asked for this host's events only, but any event source may be given.
      this.logger.debug({ alias: event.alias, host: event.host }, "ignored another host's AliasRedirected");
      return;
    }
    if (this.pending) {
      this.pending.push(event);
      return;
    }
    this.dispatch(event);
  }

  private dispatch(event: AliasRedirected): void {
    this.logger.debug({ alias: event.alias, to: event.to, version: event.version }, 'AliasRedirected');
    void this.sync(event.alias, 'event', event);
  }

  private watchTable(): void {
    if (this.closed) return;
    let version: number;
    try {
      version = this.caches.aliasTableVersion();
    } catch (err) {
      this.logger.warn({ err }, 'could not read the alias table version');
      return;
    }
    if (this.events && this.eventStatus() === 'connected') {
      // Events announce moves, never a retired alias (an endpoint removed from the configuration): that is seen
      // in the alias table only, so look for one whenever the table changed.
      if (version !== this.seenRetirementsVersion) void this.withdrawRetired(version);
      this.followUnannounced(version);
      return;
    }
    this.unannounced = null;
    if (version !== this.seenTableVersion) void this.reconcile('watch');
  }

  private seenRetirementsVersion = -1;
  /** A table version the watch saw while connected and no reconcile has read yet, and since when. */
  private unannounced: { version: number; since: number } | null = null;

  /**
   * A connected backplane is no proof that every event arrives: a hung nats-server, or a partition that drops
   * packets without resets, keeps the connection `connected` for minutes while nothing is delivered. The table
   * moved (its version changed) — the event normally applies that move within milliseconds; one that has not
   * after `eventGraceMs` is followed from the table, which reconciles (a move the event already applied switches
   * nothing). Otherwise readers would get the retired generation, and `sluice-min-position` requests a 503, until
   * the periodic reconcile.
   */
  private followUnannounced(version: number): void {
    if (version === this.seenTableVersion) {
      this.unannounced = null;
      return;
    }
    const now = Date.now();
    if (this.unannounced?.version !== version) this.unannounced = { version, since: now };
    else if (now - this.unannounced.since >= this.eventGraceMs) {
      this.unannounced = null;
      void this.reconcile('watch');
    }
  }

  /** Stops serving every alias the table no longer has (read at table version `version` or later). */
  private async withdrawRetired(version: number): Promise<void> {
    this.seenRetirementsVersion = version;
    try {
      const live = new Set(this.caches.listAliases().map((entry) => entry.alias));
      await Promise.all(
        this.table
          .aliases()
          .filter((alias) => !live.has(alias))
          .map((alias) => this.sync(alias, 'watch')),
      );
    } catch (err) {
      this.seenRetirementsVersion = -1;
      this.logger.warn({ err }, 'could not check the alias table for retired aliases; will retry');
    }
  }

  /**
   * Brings every alias in line with the alias table (new endpoints are opened, moved aliases switched).
   * Concurrent calls share one run.
   */
  reconcile(reason: SwitchReason = 'reconcile'): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.reconciling) {
      // A run is in progress and may have read the table before the change we are told about: run again after.
      this.reconcileAgain = true;
      return this.reconciling;
    }
    const run = (async () => {
      do {
        this.reconcileAgain = false;
        await this.reconcileOnce(reason);
      } while (this.reconcileAgain && !this.closed);
    })();
    this.reconciling = run;
    const clear = () => {
      if (this.reconciling === run) this.reconciling = null;
    };
    void run.then(clear, clear);
    return run;
  }

  private reconcileAgain = false;

  private async reconcileOnce(reason: SwitchReason): Promise<void> {
    try {
      // Read the version first: a redirect that lands while we list is seen by the next watch tick.
      const version = this.caches.aliasTableVersion();
      const aliases = this.caches.listAliases();
      // Aliases served here that the table no longer has were retired: `sync` withdraws them.
      const live = new Set(aliases.map((entry) => entry.alias));
      const retired = this.table.aliases().filter((alias) => !live.has(alias));
      await Promise.all(
        [...aliases.map((entry) => entry.alias), ...retired].map((alias) => this.sync(alias, reason)),
      );
      this.seenTableVersion = version;
    } catch (err) {
      if (reason === 'initial') throw err;
      this.logger.warn({ err }, 'alias reconcile failed; will retry');
    }
  }

  /** Switches `alias` to its newest known target (alias table, or the event when the table lags behind it). */
  private sync(alias: string, reason: SwitchReason, hint?: AliasRedirected): Promise<void> {
    const target = this.table.slot(alias);
    const next = target.chain.then(() => this.syncNow(alias, target, reason, hint));
    target.chain = next.catch(() => undefined);
    return next;
  }

  private async syncNow(
    alias: string,
    slot: Slot,
    reason: SwitchReason,
    hint: AliasRedirected | undefined,
  ): Promise<void> {
    if (this.closed) return;
    const entry = this.caches.resolveAlias(alias);
    if (!entry) {
      // The table is the truth, and the writer moves an alias there before it announces the move: an alias the
      // table lacks was retired (its endpoint left the configuration) or never existed, whatever an event — such
      // as the last one the backplane kept for it — says.
      const withdrawn = this.table.withdraw(slot);
      if (withdrawn)
        this.logger.info(
          { alias, cache: withdrawn.name, reason },
          'stopped serving an endpoint whose alias was retired (removed from the configuration)',
        );
      return;
    }
    let target: { cache: string; version: number } | null = entry;
    if (hint && hint.version !== undefined && hint.version > entry.version) {
      // The event is ahead of what this process can see of the table yet: trust its version.
      target = { cache: hint.to, version: hint.version };
    }
    const current = slot.current;
    if (current && current.name === target.cache) {
      if (target.version > current.version) current.version = target.version;
      if (hint && hint.version === undefined && hint.to !== current.name) this.recheckSoon();
      return;
    }
    if (current && target.version <= current.version) return; // a stale event or table read
    let cache: ReadableCache;
    try {
      cache = await this.caches.openRo(target.cache);
    } catch (err) {
      slot.failure = { cache: target.cache, error: err };
      this.logger.warn({ err, alias, cache: target.cache }, 'could not open the aliased cache; will retry');
      this.options.onSwitchFailure?.({ alias, to: target.cache, error: err });
      if (reason === 'event') this.recheckSoon();
      return;
    }
    if (this.closed) {
      await cache.close();
      return;
    }
    // The swap (requests that took a lease before it finish on `current`, which closes after them).
    const generation = this.table.serve(alias, slot, cache, target.version);
    this.logger.info(
      { alias, from: current?.name ?? null, to: generation.name, version: generation.version, reason },
      current ? 'switched endpoint to a new cache generation' : 'opened endpoint',
    );
    this.options.onSwitch?.({ alias, from: current?.name ?? null, to: generation.name, reason });
  }

  private recheckTimer: NodeJS.Timeout | null = null;

  /** A versionless event disagreed with the table (or an open failed): look again shortly. */
  private recheckSoon(): void {
    if (this.recheckTimer || this.closed) return;
    this.recheckTimer = setTimeout(() => {
      this.recheckTimer = null;
      void this.reconcile('reconcile');
    }, 250);
    this.recheckTimer.unref();
  }

  /** Unsubscribes, stops the timers and closes every generation (after its in-flight requests). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const timer of this.timers) clearInterval(timer);
    if (this.recheckTimer) clearTimeout(this.recheckTimer);
    this.unsubscribeStatus?.();
    try {
      await this.registration?.close();
    } catch (err) {
      this.logger.warn({ err }, 'unsubscribing from alias events failed');
    }
    await this.table.drain();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
