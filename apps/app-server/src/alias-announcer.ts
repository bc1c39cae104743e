/**
 * Announces this host's alias table on the backplane wherever what the backplane last published for the host lags
 * it. A switch publishes its `AliasRedirected` once, and one made while NATS was out of reach waits in the
 * backplane's outbox — in memory, so an app-server stopped before NATS came back took it with it: the host's
 * api-servers that stayed connected heard nothing, and served the old generation until their periodic reconcile
 * (test/alias-state-after-restart.test.ts). The alias table (LMDB, durable) is the truth and the backplane's kept
 * state (the latest redirect per alias, JetStream KV) is derived from it: on start and on every reconnect this
 * compares the two and publishes the table's state for each alias the kept state does not point at the same
 * generation — so whatever a previous process or connection lost is announced again, and nothing else is.
 *
 * A redirect describes a state, not a moment, so announcing one twice is harmless (readers switch to what the table
 * says; the KV keeps one per alias): that happens when a pass meets a switch whose own publish is still on its way
 * (a reconnect's pass and the outbox's flush of what it kept run side by side).
 */
import {
  type AliasEntry,
  type AliasRedirected,
  aliasRedirected,
  type Backplane,
  type BackplaneStatus,
  type Logger,
  SluiceError,
} from '@sluice/core';

/** What the announcer needs of the node. */
export interface AliasAnnouncerOptions {
  backplane: Pick<Backplane, 'publish' | 'latestAliasEvents' | 'status' | 'onStatus'>;
  /** The host's alias table now (`CacheManager.listAliases`). */
  aliases: () => AliasEntry[];
  /** This host's `node.id`, the `host` of its redirects. */
  host: string;
  logger: Logger;
  /** Delay before trying again after a pass that could not finish while connected (JetStream not ready yet). */
  retryMs?: number;
}

/**
 * The announcer's one phase: `idle`, `announcing` (a pass runs; a request meanwhile runs one more after it),
 * `waiting` (a retry is armed), `closed`.
 */
const AnnouncerPhase = {
  idle: 'idle',
  announcing: 'announcing',
  waiting: 'waiting',
  closed: 'closed',
} as const;
type AnnouncerPhase = (typeof AnnouncerPhase)[keyof typeof AnnouncerPhase];

/** How one pass ended: everything owed is published (or kept by the backplane), or it must be tried again. */
type PassOutcome = 'done' | 'retry';

const DEFAULT_RETRY_MS = 2_000;

/**
 * Keeps the backplane's alias state of this host in line with its alias table: one pass now, one on every
 * reconnect, passes never overlapping.
 *
 * @example
 * ```ts
 * await using announcer = AliasAnnouncer.start({ backplane, aliases: () => caches.listAliases(), host: 'h1', logger });
 * await announcer.settled(); // the first pass is over
 * ```
 */
export class AliasAnnouncer implements AsyncDisposable {
  readonly #options: AliasAnnouncerOptions;
  #phase: AnnouncerPhase = AnnouncerPhase.idle;
  /** A pass was asked for while one ran: run another once it ends (a reconnect during a pass). */
  #again = false;
  #running: Promise<void> = Promise.resolve();
  #retryTimer: NodeJS.Timeout | null = null;
  #unsubscribe: (() => void) | null = null;

  private constructor(options: AliasAnnouncerOptions) {
    this.#options = options;
  }

  /** Starts announcing: a pass now, and one each time the backplane is connected again. */
  static start(options: AliasAnnouncerOptions): AliasAnnouncer {
    const announcer = new AliasAnnouncer(options);
    let last: BackplaneStatus = options.backplane.status();
    announcer.#unsubscribe = options.backplane.onStatus((status) => {
      const previous = last;
      last = status;
      if (status === 'connected' && previous !== 'connected') announcer.announce();
    });
    announcer.announce();
    return announcer;
  }

  /** Asks for a pass (shared with one running: that one is followed by another). */
  announce(): void {
    switch (this.#phase) {
      case AnnouncerPhase.closed:
        return;
      case AnnouncerPhase.announcing:
        this.#again = true;
        return;
      case AnnouncerPhase.waiting:
        this.#clearRetry();
        break;
      default:
        break;
    }
    this.#phase = AnnouncerPhase.announcing;
    this.#running = this.#run();
  }

  /** Resolves once the pass running now (and the ones asked for meanwhile) ended. */
  settled(): Promise<void> {
    return this.#running;
  }

  async #run(): Promise<void> {
    let outcome: PassOutcome;
    do {
      this.#again = false;
      outcome = await this.#pass().catch((err: unknown) => {
        this.#options.logger.warn({ err }, 'could not announce the alias table; will try again');
        return 'retry' as const;
      });
    } while (this.#again && this.#phase === AnnouncerPhase.announcing);
    if (this.#phase !== AnnouncerPhase.announcing) return; // closed meanwhile
    if (outcome === 'retry' && this.#options.backplane.status() === 'connected') {
      this.#phase = AnnouncerPhase.waiting;
      this.#retryTimer = setTimeout(() => {
        this.#retryTimer = null;
        this.announce();
      }, this.#options.retryMs ?? DEFAULT_RETRY_MS);
      this.#retryTimer.unref();
      return;
    }
    // Done, or disconnected: the next reconnect asks again.
    this.#phase = AnnouncerPhase.idle;
  }

  /** Publishes the table's state of every alias whose kept state points elsewhere (or is missing). */
  async #pass(): Promise<PassOutcome> {
    const { backplane, host, logger } = this.#options;
    if (backplane.status() !== 'connected') return 'done'; // the reconnect asks again
    // The table first: a switch that lands after this read is announced by its own publish, and the kept state
    // read next then names a version at least as new as the one read here (skipped below), never an older one.
    const table = this.#options.aliases();
    const announced = new Map<string, AliasRedirected>();
    for (const event of await backplane.latestAliasEvents())
      if (event.type === 'AliasRedirected' && event.host === host) announced.set(event.alias, event);
    let outcome: PassOutcome = 'done';
    for (const entry of table) {
      if (this.#phase === AnnouncerPhase.closed) return 'done';
      const last = announced.get(entry.alias) ?? null;
      // Readers switch to what the table says whatever an event carries: the same target needs no word, and a
      // newer kept redirect is a switch published since the table was read.
      if (last !== null && (last.to === entry.cache || (last.version ?? -1) > entry.version)) continue;
      const event = aliasRedirected({
        host,
        alias: entry.alias,
        from: last?.to ?? null,
        to: entry.cache,
        version: entry.version,
        checkpoint: null,
      });
      try {
        await backplane.publish(event);
        logger.info(
          { endpoint: entry.alias, from: event.from, to: entry.cache, version: entry.version },
          'announced an alias state the backplane had not published',
        );
      } catch (err) {
        // Kept by the backplane (the connection dropped meanwhile): it publishes it on the reconnect, and a
        // process that stops before then leaves it to this pass of the next one.
        if (SluiceError.isInstance(err) && err.details?.deferred === true) continue;
        logger.warn({ err, endpoint: entry.alias }, 'could not announce the alias state; will try again');
        outcome = 'retry';
      }
    }
    return outcome;
  }

  #clearRetry(): void {
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
  }

  /** Stops announcing; waits for a pass in flight. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.#phase = AnnouncerPhase.closed;
    this.#clearRetry();
    this.#unsubscribe?.();
    this.#unsubscribe = null;
    await this.#running;
  }
}
