/**
 * The snapshot half of a replication source: the table read by keyset pages (in key order, each page after the
 * last key read) inside the transaction the caller opened on the slot's exported snapshot, or on a fresh one when
 * a snapshot resumes in a later session.
 */
import { SourceError } from '@sluice/core';
import type pg from 'pg';
import type { RecordOp, Row } from '../../ops.js';
import { setOwnField } from '../../own.js';
import { isConnectionLoss, quoteIdent, quoteTableName } from '../../pg.js';
import type { ReadOptions, SourceItem } from '../../types.js';
import type { ReplicationPosition } from './position.js';

/** A failed snapshot statement: a lost connection (PostgreSQL restarting) is retried from the checkpoint. */
export function snapshotError(err: unknown): SourceError {
  return new SourceError(`Snapshot: ${(err as Error).message}`, {
    cause: err,
    ...(isConnectionLoss(err) ? { details: { retryable: true } } : {}),
  });
}

/** The table a snapshot reads: the source's handle (for positions), the table, its key columns, rows per page. */
export interface SnapshotTable {
  handle: string;
  table: string;
  keys: string[];
  /** Rows per page (capped by the run's batch size). */
  pageSize: number;
}

/**
 * Reads `source.table` from `start.lastKey` (or its beginning) on `client`, one `records` item per page; `advance`
 * receives each page's position before the item is yielded. Stops when aborted or after a short page.
 */
export async function* readSnapshot(
  client: pg.Client,
  source: SnapshotTable,
  start: ReplicationPosition,
  readOptions: ReadOptions,
  advance: (position: ReplicationPosition) => void,
): AsyncGenerator<SourceItem> {
  const { keys, table, pageSize } = source;
  const keyList = keys.map(quoteIdent).join(', ');
  const keyText = keys.map((k, i) => `${quoteIdent(k)}::text AS "__sluice_k${i}"`).join(', ');
  const limit = Math.max(1, Math.min(pageSize, readOptions.batchSize));
  // The table's columns but its stored generated ones, which pgoutput does not publish: a row the stream upserts
  // could never carry them, so a snapshot row must not either (setup.ts `catalogColumns` leaves them out as well).
  let selected: string;
  try {
    const columns = await client.query<{ list: string }>(
      `SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) AS list FROM pg_attribute
        WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''`,
      [quoteTableName(table)],
    );
    selected = columns.rows[0]!.list;
  } catch (err) {
    throw snapshotError(err);
  }
  let position = start;
  for (;;) {
    if (readOptions.signal.aborted) return;
    const params: unknown[] = position.lastKey ?? [];
    const where = position.lastKey
      ? `WHERE (${keyList}) > (${keys.map((_, i) => `$${i + 1}`).join(', ')})`
      : '';
    let rows: Row[];
    try {
      rows = (
        await client.query<Row>(
          `SELECT ${selected}, ${keyText} FROM ${quoteTableName(table)} ${where} ORDER BY ${keyList} LIMIT ${limit}`,
          params,
        )
      ).rows;
    } catch (err) {
      throw snapshotError(err);
    }
    if (rows.length > 0) {
      const lastKey = keys.map((_, i) => String(rows[rows.length - 1]![`__sluice_k${i}`]));
      const ops: RecordOp[] = rows.map((row) => {
        const record: Row = {};
        const key: string[] = [];
        for (const name of Object.keys(row)) {
          if (name.startsWith('__sluice_k')) key.push(String(row[name]));
          else setOwnField(record, name, row[name]);
        }
        return {
          op: 'upsert',
          record,
          at: { source: source.handle, position: `s:${position.lsn}:${JSON.stringify(key)}` },
        };
      });
      position = { ...position, lastKey, read: position.read + rows.length };
      advance(position);
      yield { kind: 'records', ops, read: rows.length, bad: [], position };
    }
    if (rows.length < limit) return;
  }
}
