import { connectPostgres, quoteIdent } from '../../pg.js';
import { lsnDistance, normalizeLsn } from './lsn.js';
import { dropSlot } from './setup.js';

/** A logical replication slot of a database, as operators see it. */
export interface ReplicationSlotInfo {
  slot: string;
  database: string | null;
  active: boolean;
  confirmedFlushLsn: string | null;
  /** WAL the slot holds back: bytes from its confirmed position to the server's current one. */
  retainedBytes: number | null;
  walStatus: string | null;
}

/**
 * The `pgoutput` slots of the database at `url` whose names start with `prefix` (Sluice's: `sluice_<node id>_`).
 *
 * @example
 * ```ts
 * const slots = await listReplicationSlots(url, 'sluice_h1_');
 * ```
 */
export async function listReplicationSlots(url: string, prefix = 'sluice_'): Promise<ReplicationSlotInfo[]> {
  const client = await connectPostgres(url);
  try {
    const result = await client.query<{
      slot: string;
      database: string | null;
      active: boolean;
      confirmed: string | null;
      current: string;
      wal_status: string | null;
    }>(
      `SELECT slot_name AS slot, database, active, confirmed_flush_lsn::text AS confirmed,
              pg_current_wal_lsn()::text AS current, wal_status
         FROM pg_replication_slots
        WHERE slot_type = 'logical' AND database = current_database() AND starts_with(slot_name, $1)
        ORDER BY slot_name`,
      [prefix],
    );
    return result.rows.map((r) => ({
      slot: r.slot,
      database: r.database,
      active: r.active,
      confirmedFlushLsn: r.confirmed === null ? null : normalizeLsn(r.confirmed),
      retainedBytes: r.confirmed === null ? null : lsnDistance(r.confirmed, r.current),
      walStatus: r.wal_status,
    }));
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * Drops a slot (waiting briefly for a walsender that still holds it) and the publication of the same name, if any:
 * a removed endpoint's slot must not keep WAL until the disk fills. Returns whether the slot existed.
 */
export async function dropReplicationSlot(url: string, slot: string, publication = slot): Promise<boolean> {
  const client = await connectPostgres(url);
  try {
    const dropped = await dropSlot(client, slot, 5_000);
    await client.query(`DROP PUBLICATION IF EXISTS ${quoteIdent(publication)}`);
    return dropped;
  } finally {
    await client.end().catch(() => {});
  }
}
