/**
 * The replication lag of a generation while no read of its slot streams — its run failed and is retried, or waits
 * for a slot another process reads: the lag its last read measured, carried on. PostgreSQL's WAL position is still
 * read every probe (an ordinary connection, no slot), so while PostgreSQL answers the lag keeps growing as WAL is
 * written; while it does not, the last figures stay, and `observedAt` says how old they are.
 */
import type { ReplicationStatus } from '@sluice/core';
import { SourceConnections } from './connections.js';
import type { LagTracker } from './lag.js';

/** What a carried lag needs: the database, the slot the figures are of, the last read's tracker, how often to probe. */
export interface CarriedLagOptions {
  url: string;
  slot: string;
  /** The lag tracker of the read that stopped: its committed position and samples go on from there. */
  tracker: LagTracker;
  probeMs: number;
}

/** A lag carried on past the end of a read; {@link CarriedLag.stop} once another read streams (or the endpoint stops). */
export interface CarriedLag {
  /**
   * The figures as `GET /v1/endpoints` shows them: the committed LSN the last read left, the lag behind PostgreSQL's
   * WAL as last read, and `observedAt`, when that was (ISO 8601). `lagSeconds` counts on while PostgreSQL is down:
   * the oldest WAL position not caught up with keeps getting older whether or not it can be read.
   */
  status(): ReplicationStatus;
  stop(): void;
}

/**
 * Carries on the lag `tracker` measured, probing PostgreSQL's WAL position every `probeMs` until stopped.
 *
 * @example
 * ```ts
 * const carried = carryLag({ url, slot: 'sluice_h1_items_source', tracker, probeMs: 1_000 });
 * carried.status(); // { slot, committedLsn: '0/1A2B3C', lagBytes: 81920, lagSeconds: 12.5, observedAt: '…', following: null }
 * carried.stop();
 * ```
 */
export function carryLag(options: CarriedLagOptions): CarriedLag {
  const { tracker, slot } = options;
  const connections = new SourceConnections(options.url);
  // A failed probe (PostgreSQL down or restarting) is skipped: the figures stay as last read.
  const probe = connections.every(options.probeMs, async (client) => {
    const result = await client.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
    tracker.observeServer(result.rows[0]!.lsn);
  });
  return {
    status() {
      const lag = tracker.lag();
      const observedAt = tracker.observedAt();
      return {
        slot,
        committedLsn: tracker.committedLsn(),
        lagBytes: lag?.bytes ?? null,
        lagSeconds: lag?.seconds ?? null,
        observedAt: observedAt === null ? null : new Date(observedAt).toISOString(),
        following: null,
      };
    },
    stop() {
      probe.stop();
      void connections.closeAll();
    },
  };
}
