import { EndpointNotReadyError, type Logger, type ReadableCache, UnknownEndpointError } from '@sluice/core';

/** One open cache generation behind an alias, with the requests currently reading it. */
export interface Generation {
  readonly alias: string;
  readonly cache: ReadableCache;
  /** The concrete cache name (what the `sluice-cache` header reports). */
  readonly name: string;
  /** The alias-table version that pointed the alias at this cache. */
  version: number;
  /** Requests in flight on this generation. */
  refs: number;
  /** Set once a newer generation replaced this one; it closes when `refs` reaches zero. */
  retired: boolean;
  readonly openedAt: number;
}

/** A request's hold on one generation; release it exactly once when the response is built. */
export interface Lease {
  readonly generation: Generation;
  readonly cache: ReadableCache;
  release(): void;
}

/** One alias's place in the table. */
export interface Slot {
  current: Generation | null;
  /** Why the aliased generation could not be opened the last time (while nothing serves the alias). */
  failure: { cache: string; error: unknown } | null;
  /** Serializes switches of one alias. */
  chain: Promise<void>;
}

/**
 * The serving half of the endpoint registry: alias → the generation answering it now, the leases requests hold
 * on generations, and the closing of a replaced generation once its last lease is released. Which cache an alias
 * should serve is the registry's decision (events, the alias table); this table only swaps and drains.
 *
 * @example
 * ```ts
 * const table = new ServingTable(logger);
 * table.serve('items', table.slot('items'), await caches.openRo(name), version);
 * const lease = table.acquire('items');
 * try { return lease.cache.get([42]); } finally { lease.release(); }
 * ```
 */
export class ServingTable {
  private readonly slots = new Map<string, Slot>();
  private readonly closing = new Set<Promise<void>>();
  private open = 0;

  constructor(private readonly logger: Logger) {}

  /** Cache generations open for reading: the serving ones plus retired ones still draining. */
  openGenerations(): number {
    return this.open;
  }

  /** The slot of `alias`, created empty on first use. */
  slot(alias: string): Slot {
    let slot = this.slots.get(alias);
    if (!slot) {
      slot = { current: null, failure: null, chain: Promise.resolve() };
      this.slots.set(alias, slot);
    }
    return slot;
  }

  /** Every alias with a slot: served, failing to open, or withdrawn. */
  aliases(): string[] {
    return [...this.slots.keys()];
  }

  /**
   * Stops serving `slot` (its alias was retired): new requests get `UNKNOWN_ENDPOINT`, requests in flight finish
   * on the generation, which closes after them. Returns the generation withdrawn, if one served.
   */
  withdraw(slot: Slot): Generation | null {
    const withdrawn = slot.current;
    slot.current = null;
    slot.failure = null;
    if (withdrawn) this.retire(withdrawn);
    return withdrawn;
  }

  /** Endpoint names currently served. */
  names(): string[] {
    return [...this.slots.entries()].filter(([, slot]) => slot.current !== null).map(([alias]) => alias);
  }

  has(alias: string): boolean {
    return this.slots.get(alias)?.current != null;
  }

  /** The generation currently serving `alias`, or `null` (no lease taken). */
  current(alias: string): Generation | null {
    return this.slots.get(alias)?.current ?? null;
  }

  /**
   * Takes a lease on the generation serving `alias` right now. Synchronous, so it can never observe a
   * half-done swap; the generation stays open until the lease is released.
   */
  acquire(alias: string): Lease {
    const slot = this.slots.get(alias);
    const generation = slot?.current;
    if (!generation) {
      // The alias exists but names a generation this process could not open (yet): retryable, not unknown.
      const failure = slot?.failure ?? null;
      if (failure) {
        const why = failure.error instanceof Error ? failure.error.message : String(failure.error);
        throw new EndpointNotReadyError(alias, `its cache ${failure.cache} cannot be opened (${why})`, {
          cause: failure.error,
        });
      }
      throw new UnknownEndpointError(alias);
    }
    generation.refs += 1;
    let released = false;
    return {
      generation,
      cache: generation.cache,
      release: () => {
        if (released) return;
        released = true;
        generation.refs -= 1;
        if (generation.retired && generation.refs === 0) this.closeGeneration(generation);
      },
    };
  }

  /**
   * Makes `cache` (which the alias table pointed at in `version`) the generation serving `slot`, and retires
   * the one it replaces. Returns the new generation.
   */
  serve(alias: string, slot: Slot, cache: ReadableCache, version: number): Generation {
    this.open += 1;
    const generation: Generation = {
      alias,
      cache,
      name: cache.name,
      version,
      refs: 0,
      retired: false,
      openedAt: Date.now(),
    };
    const replaced = slot.current;
    // The swap itself: one assignment. Requests that took a lease before it finish on `replaced`.
    slot.current = generation;
    slot.failure = null;
    if (replaced) this.retire(replaced);
    return generation;
  }

  /** Waits for the switches under way, then closes every generation (after its in-flight requests). */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.slots.values()].map((slot) => slot.chain));
    for (const slot of this.slots.values()) {
      if (slot.current) this.retire(slot.current);
      slot.current = null;
    }
    await Promise.allSettled([...this.closing]);
  }

  private retire(generation: Generation): void {
    generation.retired = true;
    if (generation.refs === 0) this.closeGeneration(generation);
  }

  private closeGeneration(generation: Generation): void {
    const done = generation.cache
      .close()
      .catch((err: unknown) => this.logger.warn({ err, cache: generation.name }, 'closing a cache failed'))
      .then(() => {
        this.open -= 1;
        this.closing.delete(done);
      });
    this.closing.add(done);
  }
}
