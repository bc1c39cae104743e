/**
 * How many change feeds each client holds open on this api-server, bounded by `api.changes.maxPerClient`. Without
 * it the process-wide `maxSubscribers` was the only bound, and one client opening feeds in a loop took every slot:
 * every other client was refused although it held none.
 */

/**
 * Open feeds per client key (`TokenScope.client`, or `address:<ip>` without auth). Only clients with a feed open
 * are kept, so the map is as large as the feeds are many at most.
 *
 * @example
 * ```ts
 * const slots = new ClientSlots(100);
 * if (slots.isFull('sub:eu-analyst')) throw refusal;
 * slots.take('sub:eu-analyst'); // when the feed opens
 * slots.give('sub:eu-analyst'); // when it closes
 * ```
 */
export class ClientSlots {
  private readonly held = new Map<string, number>();

  constructor(readonly maxPerClient: number) {}

  /** Feeds `client` has open. */
  heldBy(client: string): number {
    return this.held.get(client) ?? 0;
  }

  /** `client` may open no other feed now. */
  isFull(client: string): boolean {
    return this.heldBy(client) >= this.maxPerClient;
  }

  /** A feed of `client` opened. */
  take(client: string): void {
    this.held.set(client, this.heldBy(client) + 1);
  }

  /** A feed of `client` closed (once per {@link ClientSlots.take}). */
  give(client: string): void {
    const left = this.heldBy(client) - 1;
    if (left > 0) this.held.set(client, left);
    else this.held.delete(client);
  }

  /** Clients with at least one feed open. */
  get clients(): number {
    return this.held.size;
  }
}
