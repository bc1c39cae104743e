/**
 * Lines up the store statements of app-server processes from a test, on a PostgreSQL store: triggers on the
 * `transfers` table wait for advisory locks the test holds, and the test watches `pg_locks` to see who waits where.
 * No timing in the test itself: each step waits for the statement it needs to be parked.
 */
import { sql, waitFor } from '@sluice/testkit';
import pg from 'pg';

/**
 * Heartbeats (one statement per node, every `heartbeatMs`) are never the statements a test waits for; they are
 * told apart by their text (the only update of the store that starts its condition with the owner instance).
 */
export const NOT_A_HEARTBEAT = `query NOT LIKE '%where "owner_instance" =%'`;

export interface StoreGates extends AsyncDisposable {
  /** Takes the keys (session locks of the test's own connection): statements gated on them wait from now. */
  hold(...keys: number[]): Promise<void>;
  /** Lets the statements waiting for the keys go on. */
  release(...keys: number[]): Promise<void>;
  /** Whether a statement other than a heartbeat waits for `key`; `queryLike`: only one whose text matches. */
  waitingOnAdvisory(key: number, queryLike?: string): Promise<boolean>;
  /** Whether a statement other than a heartbeat is queued behind a row lock. */
  waitingOnRow(): Promise<boolean>;
  /** Whether a heartbeat (the statement the other checks leave out) waits for `key`. */
  heartbeatWaitingOnAdvisory(key: number): Promise<boolean>;
}

/**
 * Installs the gates on the store database `db` (already migrated: the table must exist):
 *
 * - `rowHolds`: the body of a `BEFORE UPDATE … FOR EACH ROW` trigger (plpgsql statements, `NEW` and `OLD` in scope)
 *   that may `PERFORM pg_advisory_xact_lock_shared(key)`: the statement then waits holding the record's row lock,
 *   so every later write of that row queues behind it;
 * - `updateGate`: a key every update of `transfers` passes at its start, before it locks any row — a gate, not a
 *   hold: passed at once unless the test holds the key.
 *
 * @example
 * ```ts
 * await using gates = await openStoreGates(storeDb, { rowHolds: `IF NEW.state = 'TERMINATED' THEN PERFORM pg_advisory_xact_lock_shared(3); END IF;`, updateGate: 5 });
 * await gates.hold(3);
 * await waitFor(() => gates.waitingOnAdvisory(3));
 * ```
 */
export async function openStoreGates(
  db: { url: string; name: string },
  gates: { rowHolds: string; updateGate: number },
): Promise<StoreGates> {
  await sql(
    db.url,
    `CREATE FUNCTION hold_statements() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       ${gates.rowHolds}
       RETURN NEW;
     END $$`,
  );
  await sql(
    db.url,
    'CREATE TRIGGER held BEFORE UPDATE ON transfers FOR EACH ROW EXECUTE FUNCTION hold_statements()',
  );
  await sql(
    db.url,
    `CREATE FUNCTION hold_updates() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       -- An xact lock would stay taken to the end of the statement's transaction: take and give back at once.
       PERFORM pg_advisory_lock_shared(${gates.updateGate});
       PERFORM pg_advisory_unlock_shared(${gates.updateGate});
       RETURN NULL;
     END $$`,
  );
  await sql(
    db.url,
    'CREATE TRIGGER held_updates BEFORE UPDATE ON transfers FOR EACH STATEMENT EXECUTE FUNCTION hold_updates()',
  );
  const locker = new pg.Client({ connectionString: db.url });
  const watcher = new pg.Client({ connectionString: db.url });
  await locker.connect();
  await watcher.connect();
  const count = async (text: string, values: unknown[]) =>
    (await watcher.query<{ n: number }>(text, values)).rows[0]!.n;
  return {
    async hold(...keys) {
      for (const key of keys) await locker.query('SELECT pg_advisory_lock($1)', [key]);
    },
    async release(...keys) {
      for (const key of keys) await locker.query('SELECT pg_advisory_unlock($1)', [key]);
    },
    async waitingOnAdvisory(key, queryLike = '%') {
      return (
        (await count(
          `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.objid = $1 AND NOT l.granted AND ${NOT_A_HEARTBEAT}
              AND query LIKE $2`,
          [key, queryLike],
        )) > 0
      );
    },
    async waitingOnRow() {
      return (
        (await count(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = $1 AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')
              AND ${NOT_A_HEARTBEAT}`,
          [db.name],
        )) > 0
      );
    },
    async heartbeatWaitingOnAdvisory(key) {
      return (
        (await count(
          `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.objid = $1 AND NOT l.granted AND NOT (${NOT_A_HEARTBEAT})`,
          [key],
        )) > 0
      );
    },
    async [Symbol.asyncDispose]() {
      await locker.end().catch(() => {});
      await watcher.end().catch(() => {});
    },
  };
}

/**
 * Waits for a statement to park on a held gate (`parked()` true), then for PostgreSQL's statement timeout to cancel
 * it (`parked()` false again while the gate is still held: nothing else lets it go). `what` names the statement.
 *
 * @example
 * ```ts
 * await untilCancelled(() => gates.waitingOnAdvisory(GATE), 'the COMPLETED statement');
 * ```
 */
export async function untilCancelled(parked: () => Promise<boolean>, what: string): Promise<void> {
  await waitFor(parked, { timeoutMs: 30_000, intervalMs: 20, what: `${what} to wait in the store` });
  await waitFor(async () => !(await parked()), {
    timeoutMs: 60_000,
    intervalMs: 10,
    what: `the statement timeout to cancel ${what}`,
  });
}
