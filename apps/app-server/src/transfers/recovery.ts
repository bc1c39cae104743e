import { isTerminal, type TransferRecord } from '@sluice/core';
import { claim } from './claim.js';
import type { CoordinatorState } from './context.js';
import { ownerChange, whoRuns } from './owner-lookup.js';

/** Candidates read per store round trip; a pass reads page after page until none are left or no room is. */
const SWEEP_PAGE = 16;
/** What a sweep pass may fill a node up to, in multiples of its concurrency (see `#sweepOnce`). */
const SWEEP_SHARE = 2;
/** A previous life's transfers read per store round trip; adoption reads page after page (`#adoptPreviousLife`). */
const ADOPT_PAGE = 100;

/**
 * Recovery of transfers nobody resent: the sweeper (leases that expired by the store's clock), the previous
 * life of this node id (a restart), and orphans (owned by this instance in the store, run by nothing here).
 * Each goes through {@link claim}, so the responder answers before the store says "owned".
 */
export class Recovery {
  readonly #state: CoordinatorState;
  #sweeping = false;
  readonly #inFlight = new Set<Promise<unknown>>();

  constructor(state: CoordinatorState) {
    this.#state = state;
  }

  /** Resolves once no recovery pass is running (shutdown waits for in-flight adoption). */
  async idle(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight]);
  }

  #track<T>(work: Promise<T>): Promise<T> {
    this.#inFlight.add(work);
    void work.finally(() => this.#inFlight.delete(work)).catch(() => {});
    return work;
  }

  sweep(): Promise<void> {
    if (this.#sweeping || this.#state.closing) return Promise.resolve();
    this.#sweeping = true;
    return this.#track(
      this.#sweepOnce().finally(() => {
        this.#sweeping = false;
      }),
    );
  }

  /**
   * One pass over **every** candidate, page after page (the cursor moves past the ones it skips or loses), until
   * none are left or this node holds its share (below). A pass that read one page of 16 left the rest of a dead owner's
   * transfers a sweep interval per page (100 transfers: 6 s past the lease at a 2 s interval; at the default 5 s,
   * tens of seconds), and the candidates it skips — transfers this node runs whose store lease lapsed (a freeze, a
   * late heartbeat), ones another node claimed first — took that page's places, hiding the rest pass after pass.
   */
  async #sweepOnce(): Promise<void> {
    const state = this.#state;
    try {
      for (const lifecycle of ['IN_PROGRESS', 'RECEIVED'] as const) {
        let cursor: string | undefined;
        do {
          const page = await state.o.store.list({
            state: lifecycle,
            leaseExpired: true,
            limit: SWEEP_PAGE,
            ...(cursor !== undefined ? { cursor } : {}),
          });
          for (const record of page.records) {
            if (state.closing) return;
            if (state.runs.has(record.id) || state.claiming.has(record.id)) continue;
            // A pass takes at most twice this node's concurrency in all (its slots and as many waiting), not every
            // place its queue has: the first node to sweep after an owner died queued the whole of that owner's
            // work while its peers stood idle (100 transfers over 3 nodes: done 33 s after the kill, against 19 s
            // when each pass took 16). Peers' passes take the rest; this node's next pass takes more as its runs end.
            if (state.scheduler.load >= SWEEP_SHARE * state.scheduler.concurrency) return;
            const ticket = state.scheduler.tryReserve();
            if (!ticket) return;
            // The store's clock decides: a candidate whose lease is in fact fresh is refused (LEASE_HELD).
            await claim(
              state,
              { via: 'takeover', record, cause: 'sweeper', requireExpiredLease: true },
              ticket,
            );
          }
          cursor = page.next ?? undefined;
        } while (cursor !== undefined);
      }
    } catch (err) {
      state.o.logger.warn({ err }, 'sweep failed');
    }
  }

  /**
   * A restarted node takes back what its previous incarnation owned. Asked first: during a rolling restart
   * the previous instance may still be alive and answering, and then it keeps its transfers.
   */
  adoptPreviousLife(): Promise<void> {
    return this.#track(this.#adoptPreviousLife());
  }

  /**
   * Every transfer of the previous life, page after page (as a sweep pass reads), until none are left or this
   * node has no room. It read one page of 100: a node whose previous life owned more left the rest to wait for
   * their lease and the sweeper, and took them back (if at all) a sweep share at a time. Not held to the sweep
   * share: these transfers were this node's own, running or queued here before the restart, and nobody else can
   * take them before their lease expires anyway; what does not fit is left to the sweepers of every node.
   */
  async #adoptPreviousLife(): Promise<void> {
    const state = this.#state;
    const { store, identity } = state.o;
    try {
      for (const lifecycle of ['IN_PROGRESS', 'RECEIVED'] as const) {
        let cursor: string | undefined;
        do {
          const page = await store.list({
            state: lifecycle,
            ownerNodeId: identity.nodeId,
            limit: ADOPT_PAGE,
            ...(cursor !== undefined ? { cursor } : {}),
          });
          for (const record of page.records) {
            if (state.closing || state.scheduler.free <= 0) return;
            if (record.ownerInstance === identity.instanceId) continue;
            await this.#adoptIfGone(record).catch((err) =>
              state.o.logger.warn(
                { transferId: record.id, err },
                'could not adopt a transfer of a previous life',
              ),
            );
          }
          cursor = page.next ?? undefined;
        } while (cursor !== undefined);
      }
    } catch (err) {
      state.o.logger.warn({ err }, 'could not list transfers of a previous life');
    }
  }

  async #adoptIfGone(record: TransferRecord): Promise<void> {
    const state = this.#state;
    if (state.runs.has(record.id) || state.claiming.has(record.id)) return;
    const change = ownerChange(await whoRuns(state, record));
    if (change === 'leave') {
      state.o.logger.info(
        { transferId: record.id, ownerInstance: record.ownerInstance },
        'a live instance with this node id still runs the transfer; not adopted',
      );
      return;
    }
    const ticket = state.scheduler.tryReserve();
    if (!ticket) return;
    await claim(
      state,
      { via: 'takeover', record, cause: 'restart', requireExpiredLease: change === 'after-lease' },
      ticket,
    );
  }

  /**
   * Transfers the store says this instance owns but nothing here runs (a run dropped while the store was
   * unreachable): run them again from their checkpoint, or hand them back when there is no room.
   */
  resumeOrphans(ids: string[]): Promise<void> {
    return this.#track(this.#resumeOrphans(ids));
  }

  async #resumeOrphans(ids: string[]): Promise<void> {
    const state = this.#state;
    const { store, identity } = state.o;
    for (const id of ids) {
      const record = await store.get(id);
      if (!record || isTerminal(record.state) || record.ownerInstance !== identity.instanceId) continue;
      if (state.runs.has(id) || state.claiming.has(id) || state.closing) continue;
      const ticket = state.scheduler.tryReserve();
      if (!ticket) {
        await store.release(id, record.epoch).catch(() => {});
        continue;
      }
      await claim(state, { via: 'takeover', record, cause: 'orphan', requireExpiredLease: false }, ticket);
    }
  }
}
