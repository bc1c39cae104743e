import { SlotActiveError, SlotNotOwnedError, SourceError, UnknownSlotError } from '@sluice/core';
import type pg from 'pg';
import { connectPostgres, quoteIdent } from '../../pg.js';
import { lsnDistance, normalizeLsn } from './lsn.js';
import { type OwnedSlotMark, ownedSlotMarks } from './ownership.js';

/** A logical replication slot of a database, as operators see it. */
export interface ReplicationSlotInfo {
  slot: string;
  database: string | null;
  plugin: string | null;
  active: boolean;
  /** The walsender streaming it, when active. */
  activePid: number | null;
  confirmedFlushLsn: string | null;
  /** WAL the slot holds back: bytes from its confirmed position to the server's current one. */
  retainedBytes: number | null;
  walStatus: string | null;
  /** Who created it, from the mark on its Sluice publication; null for a slot Sluice did not create. */
  owner: OwnedSlotMark | null;
}

async function withConnection<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  let client: pg.Client;
  try {
    client = await connectPostgres(url);
  } catch (err) {
    throw new SourceError(`Cannot connect to PostgreSQL: ${(err as Error).message}`, { cause: err });
  }
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

async function slotsOf(client: pg.Client, prefix: string): Promise<ReplicationSlotInfo[]> {
  const result = await client.query<{
    slot: string;
    database: string | null;
    plugin: string | null;
    active: boolean;
    active_pid: number | null;
    confirmed: string | null;
    current: string;
    wal_status: string | null;
  }>(
    `SELECT slot_name AS slot, database, plugin, active, active_pid, confirmed_flush_lsn::text AS confirmed,
            pg_current_wal_lsn()::text AS current, wal_status
       FROM pg_replication_slots
      WHERE slot_type = 'logical' AND database = current_database() AND starts_with(slot_name, $1)
      ORDER BY slot_name`,
    [prefix],
  );
  const marks = await ownedSlotMarks(client);
  return result.rows.map((r) => ({
    slot: r.slot,
    database: r.database,
    plugin: r.plugin,
    active: r.active,
    activePid: r.active_pid,
    confirmedFlushLsn: r.confirmed === null ? null : normalizeLsn(r.confirmed),
    retainedBytes: r.confirmed === null ? null : lsnDistance(r.confirmed, r.current),
    walStatus: r.wal_status,
    owner: marks.get(r.slot) ?? null,
  }));
}

/**
 * The logical slots of the database at `url` (optionally only those whose names start with `prefix`), each with
 * the Sluice source that created it, if any.
 *
 * @example
 * ```ts
 * const orphans = (await listReplicationSlots(url)).filter((s) => s.owner?.node === 'h1' && !s.active);
 * ```
 */
export async function listReplicationSlots(url: string, prefix = ''): Promise<ReplicationSlotInfo[]> {
  return withConnection(url, (client) => slotsOf(client, prefix));
}

/**
 * Drops a slot Sluice created, and the publication marked with it: a removed endpoint's slot must not keep WAL
 * until the disk fills. Refuses, changing nothing, a slot that does not exist (`UNKNOWN_SLOT`), one a walsender
 * streams (`SLOT_ACTIVE`: stop its reader first) and one Sluice did not create (`SLOT_NOT_OWNED`).
 *
 * @example
 * ```ts
 * const { publication } = await dropReplicationSlot(url, 'sluice_h1_items_source');
 * ```
 */
export async function dropReplicationSlot(url: string, slot: string): Promise<OwnedSlotMark> {
  return withConnection(url, async (client) => {
    const info = (await slotsOf(client, slot)).find((s) => s.slot === slot);
    if (info === undefined) throw new UnknownSlotError(slot);
    if (info.owner === null) throw new SlotNotOwnedError(slot);
    if (info.active) throw new SlotActiveError(slot, info.activePid);
    try {
      await client.query('SELECT pg_drop_replication_slot($1)', [slot]);
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === '42704') throw new UnknownSlotError(slot); // dropped meanwhile
      if (code === '55006') throw new SlotActiveError(slot, null); // a walsender took it meanwhile
      throw new SourceError(`Cannot drop slot ${slot}: ${(err as Error).message}`, { cause: err });
    }
    await client.query(`DROP PUBLICATION IF EXISTS ${quoteIdent(info.owner.publication)}`);
    return info.owner;
  });
}
