/**
 * The heartbeat table of replication sources that configure `heartbeat`: one row per slot, rewritten every interval
 * while streaming, so the slot's confirmed position advances through a transaction of its own even when the
 * replicated table is idle.
 */
import { SourceError } from '@sluice/core';
import type pg from 'pg';
import { createTableIfAbsent, quoteTableName } from '../../pg.js';

/** The heartbeat table of a source that configures `heartbeat` without naming one. */
export const DEFAULT_HEARTBEAT_TABLE = 'sluice_heartbeat';

/** Creates the heartbeat table if absent (one row per slot: the last heartbeat write). */
export async function createHeartbeatTable(client: pg.Client, table: string): Promise<void> {
  try {
    await createTableIfAbsent(
      client,
      quoteTableName(table),
      'slot text PRIMARY KEY, at timestamptz NOT NULL',
    );
  } catch (err) {
    throw new SourceError(`Heartbeat table ${table}: ${(err as Error).message}`, { cause: err });
  }
}

/** One heartbeat of `slot`: a write that streams through the slot. */
export async function writeHeartbeat(client: pg.Client, table: string, slot: string): Promise<void> {
  await client.query(
    `INSERT INTO ${quoteTableName(table)} (slot, at) VALUES ($1, now())
                 ON CONFLICT (slot) DO UPDATE SET at = excluded.at`,
    [slot],
  );
}
