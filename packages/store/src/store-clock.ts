import { type RawBuilder, sql } from 'kysely';
import type { StoreDialect } from './dialect.js';
import { param } from './prepared.js';

/**
 * Lease arithmetic inside the statements, on the **store's** clock (issue 13, defect 6): leases are written and
 * compared with PostgreSQL's `clock_timestamp()`, never with a node's wall clock, so a node whose clock is ahead
 * cannot steal healthy leases and one whose clock is behind cannot write leases that look expired. The records'
 * `created_at`/`updated_at` and the nodes' `started_at`/`last_seen_at` use the same clock, so `list` orders
 * and `purge` ages records by one clock whatever node wrote them. SQLite is one
 * host's embedded store: its clock is that host's, bound per call as the `now` parameter (tests inject a Clock).
 *
 * Every prepared statement that uses these binds `now` (epoch ms, the node's clock; ignored by PostgreSQL's
 * expressions) and, for leases, `leaseMs`.
 */
export interface StoreClock {
  /** Now, in epoch milliseconds, as the store sees it. */
  readonly now: RawBuilder<number>;
  /** Now + the bound `leaseMs`. */
  readonly leaseUntil: RawBuilder<number>;
  /**
   * Now, for a query built per call rather than prepared: the node's `nodeNowMs` inlined as a value on SQLite,
   * ignored on PostgreSQL (its clock). Keeps the dialect choice here, not in the store's methods.
   */
  nowFor(nodeNowMs: number): RawBuilder<number>;
}

export function storeClock(dialect: StoreDialect): StoreClock {
  const now =
    dialect === 'postgres'
      ? sql<number>`(floor(extract(epoch from clock_timestamp()) * 1000))::bigint`
      : sql<number>`${param<number>('now')}`;
  return {
    now,
    leaseUntil: sql<number>`(${now} + ${param<number>('leaseMs')})`,
    nowFor: (nodeNowMs) => (dialect === 'postgres' ? now : sql<number>`${nodeNowMs}`),
  };
}
