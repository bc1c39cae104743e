import { type PipelineCheckpoint, PipelineCheckpointSchema, SinkError } from '@sluice/core';
import type pg from 'pg';
import type { RecordOp, Row } from '../ops.js';
import { connectPostgres, primaryKeyOf, quoteIdent } from '../pg.js';
import type { PipelineSink } from '../types.js';

export const SINK_CHECKPOINT_TABLE = 'sluice_sink_checkpoints';

export interface PostgresSinkOptions {
  handle: string;
  url: string;
  table: string;
  /** Upsert key; defaults to the table's primary key. The table needs a unique index on it. */
  key?: string[];
  /** Identifies this writer's checkpoint row (the transfer id). */
  writerId: string;
}

/**
 * Upserts records by key into an existing table (`INSERT … ON CONFLICT (key) DO UPDATE`), one transaction
 * per epoch that also writes the checkpoint into `sluice_sink_checkpoints`, so data and progress commit
 * together and a resumed transfer rewrites nothing twice.
 *
 * @example
 * ```ts
 * createPostgresSink({ handle: 't1.sink', url, table: 'orders_copy', key: ['id'], writerId: 't1' });
 * ```
 */
export function createPostgresSink(options: PostgresSinkOptions): PipelineSink {
  let client: pg.Client | null = null;
  let key: string[] = options.key ?? [];
  let columns: string[] = [];
  let inTransaction = false;
  const table = quoteIdent(options.table);
  const writer = `${options.writerId}:${options.handle}`;

  const fail = (what: string, err: unknown) =>
    new SinkError(`PostgreSQL sink ${options.table}: ${what}: ${(err as Error).message}`, { cause: err });
  const connect = async () => {
    if (client) return client;
    try {
      client = await connectPostgres(options.url);
      await client.query(
        `CREATE TABLE IF NOT EXISTS ${SINK_CHECKPOINT_TABLE} (writer text PRIMARY KEY, checkpoint jsonb NOT NULL, committed_at timestamptz NOT NULL DEFAULT now())`,
      );
      const cols = await client.query<{ column_name: string }>(
        `SELECT a.attname AS column_name FROM pg_attribute a
          WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
        [table],
      );
      columns = cols.rows.map((r) => r.column_name);
      if (key.length === 0) key = await primaryKeyOf(client, options.table);
    } catch (err) {
      const c = client;
      client = null;
      await c?.end().catch(() => {});
      throw fail('cannot open', err);
    }
    if (key.length === 0) throw new SinkError(`Table ${options.table} has no primary key; configure "key"`);
    return client;
  };
  const begin = async () => {
    const c = await connect();
    if (!inTransaction) {
      await c.query('BEGIN');
      inTransaction = true;
    }
    return c;
  };

  const sink: PipelineSink & { readonly keyFields: string[] } = {
    handle: options.handle,
    description: { type: 'postgres', table: options.table, key: options.key ?? null },
    get keyFields() {
      return key;
    },
    keepsCheckpoint: true,
    async committed() {
      const c = await connect();
      const r = await c.query<{ checkpoint: unknown }>(
        `SELECT checkpoint FROM ${SINK_CHECKPOINT_TABLE} WHERE writer = $1`,
        [writer],
      );
      const parsed = PipelineCheckpointSchema.safeParse(r.rows[0]?.checkpoint);
      return parsed.success ? parsed.data : null;
    },
    async prepare({ decision }) {
      const c = await connect();
      if (decision === 'from-scratch')
        await c.query(`DELETE FROM ${SINK_CHECKPOINT_TABLE} WHERE writer = $1`, [writer]);
    },
    async write(ops: RecordOp[]) {
      const c = await begin();
      const cols = columns.map(quoteIdent).join(', ');
      const keyList = key.map(quoteIdent).join(', ');
      const updates = columns
        .filter((col) => !key.includes(col))
        .map((col) => `${quoteIdent(col)} = EXCLUDED.${quoteIdent(col)}`);
      const upsert = async (rows: Row[]) => {
        // Later ops for the same key win: keep the last one only (ON CONFLICT cannot touch a row twice).
        const byKey = new Map<string, Row>();
        for (const row of rows) byKey.set(JSON.stringify(key.map((k) => row[k])), row);
        await c.query(
          `INSERT INTO ${table} (${cols}) SELECT ${cols} FROM json_populate_recordset(NULL::${table}, $1::json)
           ON CONFLICT (${keyList}) DO ${updates.length > 0 ? `UPDATE SET ${updates.join(', ')}` : 'NOTHING'}`,
          [JSON.stringify([...byKey.values()])],
        );
      };
      const remove = async (rows: Row[]) => {
        await c.query(
          `DELETE FROM ${table} WHERE (${keyList}) IN (SELECT ${keyList} FROM json_populate_recordset(NULL::${table}, $1::json))`,
          [JSON.stringify(rows)],
        );
      };
      try {
        // Consecutive runs of upserts or deletes, in order, so a delete after an upsert of a key wins.
        let run: Row[] = [];
        let deleting = false;
        for (const op of ops) {
          const isDelete = op.op === 'delete';
          if (isDelete !== deleting && run.length > 0) {
            await (deleting ? remove(run) : upsert(run));
            run = [];
          }
          deleting = isDelete;
          if (op.op === 'delete') {
            const row: Row = {};
            key.forEach((k, i) => {
              row[k] = op.key[i];
            });
            run.push(row);
          } else run.push(op.record);
        }
        if (run.length > 0) await (deleting ? remove(run) : upsert(run));
      } catch (err) {
        throw fail('write failed', err);
      }
    },
    async commit(checkpoint: PipelineCheckpoint) {
      const c = await begin();
      try {
        await c.query(
          `INSERT INTO ${SINK_CHECKPOINT_TABLE} (writer, checkpoint, committed_at) VALUES ($1, $2, now())
           ON CONFLICT (writer) DO UPDATE SET checkpoint = EXCLUDED.checkpoint, committed_at = now()`,
          [writer, JSON.stringify(checkpoint)],
        );
        await c.query('COMMIT');
      } catch (err) {
        throw fail('commit failed', err);
      } finally {
        inTransaction = false;
      }
    },
    async finish() {
      const c = await connect();
      await c.query(`DELETE FROM ${SINK_CHECKPOINT_TABLE} WHERE writer = $1`, [writer]);
    },
    async close() {
      const c = client;
      client = null;
      if (c && inTransaction) await c.query('ROLLBACK').catch(() => {});
      inTransaction = false;
      await c?.end().catch(() => {});
    },
  };
  return sink;
}
