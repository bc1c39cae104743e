/**
 * Reads the values an update left unchanged (TOASTed columns pgoutput sends no value for) from the table, by key,
 * for a change no sink holds the previous record of: a row entering an endpoint's filter, a row its cache lost.
 * See packages/pipeline/README.md § Unchanged TOAST values.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { SourceError } from '@sluice/core';
import type pg from 'pg';
import type { RecordOp, Row } from '../../ops.js';
import { ownField, setOwnField } from '../../own.js';
import { isConnectionLoss, quoteIdent, quoteTableName } from '../../pg.js';
import type { SourceConnections } from './connections.js';

/** A partial upsert as the replication source delivers it (the columns it lacks in `unchanged`). */
type PartialUpsert = Extract<RecordOp, { op: 'upsert' }>;

/** How long a read waits for the change's transaction to become visible before the read fails (retried). */
const VISIBLE_WITHIN_MS = 10_000;
const VISIBLE_POLL_MS = 5;

/**
 * Completes partial upserts by point reads on one connection of the source's own (opened on first use, dropped
 * after a failure). A read sees the table as committed when it runs, never before the change's transaction: the
 * walsender may send a commit a moment before PostgreSQL shows it to new snapshots, and the row version before it
 * need not hold the values (an earlier update of the same transaction may have set them), so the read waits until
 * the transaction is visible in its own snapshot. What it reads may be newer than the change (a later transaction
 * set the column again): that later change is in the stream too, and replaces it when it arrives.
 *
 * @example
 * ```ts
 * const reader = new UnchangedValueReader(connections, 'public.items');
 * const op = await reader.complete(partial, ['id']); // the upsert with every column, or a delete of its key
 * await reader.close();
 * ```
 */
export class UnchangedValueReader {
  #client: pg.Client | null = null;

  constructor(
    private readonly connections: SourceConnections,
    private readonly table: string,
  ) {}

  /**
   * The op with its unchanged columns' values as the table holds them now, or a delete of its key when the table
   * holds no row under it any more (deleted or moved since: its removal follows in the stream). Throws a
   * `SOURCE_FAILED` (retryable on a lost connection) when the table cannot be read: the run is retried from its
   * checkpoint, so nothing is skipped.
   */
  async complete(op: PartialUpsert, keys: readonly string[]): Promise<RecordOp> {
    const columns = op.unchanged ?? [];
    const key = keys.map((k) => ownField(op.record, k));
    if (key.some((v) => v === undefined || v === null))
      throw new SourceError(`Table ${this.table}: a change without its key columns ${keys.join(', ')}`);
    const found = await this.#read(columns, keys, key, op.transaction);
    const at = op.at ? { at: op.at } : {};
    if (found === null) return { op: 'delete', key, ...at };
    const record: Row = { ...op.record };
    for (const column of columns) setOwnField(record, column, ownField(found, column));
    return { op: 'upsert', record, ...at };
  }

  /** Closes the connection (the source closes). */
  async close(): Promise<void> {
    const client = this.#client;
    this.#client = null;
    if (client !== null) await this.connections.release(client);
  }

  /** The row's `columns` under `key` once `transaction` is visible (null: no such row), polling until it is. */
  async #read(
    columns: readonly string[],
    keys: readonly string[],
    key: readonly unknown[],
    transaction: string | undefined,
  ): Promise<Row | null> {
    const text = rowQuery(this.table, columns, keys);
    const params = [transaction ?? null, ...key];
    const deadline = Date.now() + VISIBLE_WITHIN_MS;
    for (;;) {
      let rows: Row[];
      try {
        this.#client ??= await this.connections.connect();
        rows = (await this.#client.query<Row>(text, params)).rows;
      } catch (err) {
        if (this.#client !== null) await this.connections.release(this.#client);
        this.#client = null;
        if (err instanceof SourceError) throw err;
        throw new SourceError(`Table ${this.table}: reading unchanged values: ${(err as Error).message}`, {
          cause: err,
          ...(isConnectionLoss(err) ? { details: { retryable: true } } : {}),
        });
      }
      const row = rows[0]!;
      if (row[VISIBLE] !== false) return row[FOUND] === true ? row : null;
      // Committed (it streamed) but not yet shown to new snapshots: a moment, unless the commit waits for a
      // synchronous standby — this slot named in synchronous_standby_names would wait for this very endpoint.
      if (Date.now() >= deadline)
        throw new SourceError(
          `Table ${this.table}: transaction ${transaction} streamed but stayed invisible for ${VISIBLE_WITHIN_MS} ms (is this slot a synchronous standby?)`,
          { details: { retryable: true } },
        );
      await delay(VISIBLE_POLL_MS);
    }
  }
}

const VISIBLE = '__sluice_visible';
const FOUND = '__sluice_found';

/**
 * One statement, one snapshot: whether the transaction (`$1`, a 32-bit xid as pgoutput sends it; null: unknown)
 * is visible in it, and the row's columns under the key (`$2`…). The xid is widened to the `xid8` of the snapshot's
 * epoch (of the previous epoch when it is above the snapshot's `xmax`, i.e. assigned before a wraparound).
 */
function rowQuery(table: string, columns: readonly string[], keys: readonly string[]): string {
  const list = columns.map(quoteIdent).join(', ');
  const where = keys.map((k, i) => `${quoteIdent(k)} = $${i + 2}`).join(' AND ');
  return `WITH snap AS (SELECT pg_current_snapshot() AS s, pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS x)
    SELECT CASE WHEN $1::bigint IS NULL THEN NULL ELSE pg_visible_in_snapshot(
             ((((snap.x >> 32) - CASE WHEN $1::bigint > (snap.x & 4294967295) THEN 1 ELSE 0 END) << 32)
               | $1::bigint)::text::xid8, snap.s) END AS "${VISIBLE}",
           r.*
      FROM snap LEFT JOIN LATERAL (
        SELECT true AS "${FOUND}"${list === '' ? '' : `, ${list}`} FROM ${quoteTableName(table)} WHERE ${where}
      ) r ON true`;
}
