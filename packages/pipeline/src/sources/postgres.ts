import { setTimeout as delay } from 'node:timers/promises';
import { type FieldType, SourceError } from '@sluice/core';
import type pg from 'pg';
import { z } from 'zod';
import type { RecordOp, Row } from '../ops.js';
import { ownField, setOwnField } from '../own.js';
import {
  connectPostgres,
  fieldTypeOfPg,
  isConnectionLoss,
  primaryKeyOf,
  quoteIdent,
  quoteTableName,
} from '../pg.js';
import type { PipelineSource, ReadOptions, ResumeCheck, SourceItem } from '../types.js';
import { recordFields } from './postgres-columns.js';
import { keysetError, keysetProblem } from './postgres-key-check.js';

export const PostgresPositionSchema = z.object({
  phase: z.enum(['snapshot', 'incremental']),
  /** Last key read by the snapshot (keyset pagination), as text. */
  lastKey: z.array(z.string()).nullable(),
  /** Cursor value (as text) at the start of the snapshot, or the last one read incrementally. */
  cursor: z.string().nullable(),
  /** Key of the last row read incrementally (ties on the cursor are broken by the key). */
  cursorKey: z.array(z.string()).nullable(),
  read: z.number().int().nonnegative(),
});
export type PostgresPosition = z.output<typeof PostgresPositionSchema>;

export interface PostgresSourceOptions {
  handle: string;
  url: string;
  table?: string;
  query?: string;
  /** Key columns for keyset pagination; defaults to the table's primary key. */
  key?: string[];
  /** Monotonic column read incrementally after the snapshot (endpoints). */
  cursor?: string;
  pageSize?: number;
  pollMs?: number;
  /**
   * How long rows stay in the re-read window after their cursor value was first passed (default 10 s). A
   * transaction that sets its cursor value (`now()`, a sequence) early and commits later than a row with a
   * larger value was read is caught if it commits within this delay; re-reads are idempotent upserts.
   */
  settleMs?: number;
  /**
   * Declare the table's columns as logical replication publishes them (the schema of a replicated endpoint, read
   * through this source): stored generated columns, which `pgoutput` does not send, are no fields.
   */
  published?: boolean;
}

/**
 * A source `query` as the relation the source's statements select from: `(query) AS sluice_q`. As written the query
 * may end with `;` (which a subselect cannot hold) or with a `--` comment (which ran on over the `) AS sluice_q` and
 * everything after it on that line): both were syntax errors of a query that is valid on its own. The trailing `;`s
 * go, and the closing parenthesis starts a line of its own. A second statement after a `;` stays refused.
 *
 * @example
 * ```ts
 * querySubselect('SELECT id FROM t; -- all'); // '(SELECT id FROM t; -- all\n) AS sluice_q' (refused: ; mid-query)
 * querySubselect('SELECT id FROM t -- all;'); // '(SELECT id FROM t -- all\n) AS sluice_q'
 * ```
 */
export function querySubselect(query: string): string {
  return `(${query.replace(/[\s;]+$/, '')}\n) AS sluice_q`;
}

/** `details.retryable` for an error that means the connection was lost (a retry resumes from the checkpoint). */
const retryableIfLost = (err: unknown) => (isConnectionLoss(err) ? { details: { retryable: true } } : {});

/** Whether `err` says a retry may succeed (`details.retryable`, as a lost connection's error does). */
const isRetryable = (err: unknown) =>
  (err as { details?: { retryable?: unknown } }).details?.retryable === true;

/**
 * A failed statement as a `SOURCE_FAILED`: a lost connection (PostgreSQL restarting, a terminated backend, a
 * network cut) is retryable, so the transfer resumes from its checkpoint; a missing table is named (`42P01`,
 * undefined_table), and not retryable — but not ready yet (`details.notReady`, core's `SourceNotReady`): a transfer
 * fails, an endpoint waits for a migration to create it.
 */
function sourceError(options: Pick<PostgresSourceOptions, 'handle' | 'table'>, err: unknown): SourceError {
  const missing = options.table !== undefined && (err as { code?: unknown }).code === '42P01';
  const reason = missing ? `table ${options.table} does not exist` : (err as Error).message;
  return new SourceError(`PostgreSQL source ${options.handle}: ${reason}`, {
    cause: err,
    ...(missing
      ? { details: { table: options.table, notReady: { setting: 'table', reason: 'does not exist yet' } } }
      : retryableIfLost(err)),
  });
}

/**
 * A PostgreSQL table or query. The snapshot pages through it by keyset on the key (no OFFSET, no long
 * transaction), so a key the request names is checked first to be unique and never NULL (else SOURCE_FAILED: paging
 * by it would skip rows); afterwards, with a `cursor` column, it reads rows whose cursor grew (e.g. `updated_at`),
 * ordered by (cursor, key). Each poll re-reads from the cursor value it had passed `settleMs` ago, so a change
 * committed late with a smaller cursor value than rows already read is still seen; the checkpoint holds that
 * settled position, so a resume re-reads the window too. Deletes are not seen.
 *
 * @example
 * ```ts
 * createPostgresSource({ handle: 'orders.source', url, table: 'orders', key: ['id'], cursor: 'updated_at' });
 * ```
 */
export function createPostgresSource(options: PostgresSourceOptions): PipelineSource {
  const pageSize = options.pageSize ?? 1_000;
  const pollMs = options.pollMs ?? 1_000;
  const settleMs = options.settleMs ?? 10_000;
  const relation =
    options.table !== undefined ? quoteTableName(options.table) : querySubselect(options.query ?? '');
  let client: pg.Client | null = null;
  let key: string[] | null = options.key && options.key.length > 0 ? options.key : null;

  const connect = async () => {
    if (client) return client;
    try {
      client = await connectPostgres(options.url);
    } catch (err) {
      throw new SourceError(`Cannot connect to PostgreSQL: ${(err as Error).message}`, {
        cause: err,
        ...retryableIfLost(err),
      });
    }
    return client;
  };
  /**
   * A failed statement of `client`. After a lost connection the client is dropped: `pg` refuses every later query
   * on it, so the next use (a resumed read, `canResume`) connects again.
   */
  const failed = (err: unknown) => {
    if (isConnectionLoss(err)) {
      const c = client;
      client = null;
      void c?.end().catch(() => {});
    }
    return sourceError(options, err);
  };
  const keyColumns = async (c: pg.Client) => {
    if (key) return key;
    if (options.table === undefined)
      throw new SourceError(`Source ${options.handle}: a query source needs "key" for keyset pagination`);
    try {
      key = await primaryKeyOf(c, options.table);
    } catch (err) {
      throw failed(err);
    }
    if (key.length === 0) throw new SourceError(`Table ${options.table} has no primary key; configure "key"`);
    return key;
  };
  /**
   * Whether the snapshot must check that `keys` page the rows (unique, never NULL) before it reads: a key the
   * request names (a query's, or a table's other than its primary key). A table's primary key is both already.
   */
  const keyNeedsCheck = async (c: pg.Client, keys: string[]) => {
    if (!options.key || options.key.length === 0) return false;
    if (options.table === undefined) return true;
    let primary: string[];
    try {
      primary = await primaryKeyOf(c, options.table);
    } catch (err) {
      throw failed(err);
    }
    return primary.length !== keys.length || primary.some((column, i) => column !== keys[i]);
  };
  const run = async <R extends pg.QueryResultRow>(sql: string, params: unknown[]) => {
    const c = await connect();
    try {
      return await c.query<R>(sql, params);
    } catch (err) {
      throw failed(err);
    }
  };

  async function canResume(raw: unknown): Promise<ResumeCheck> {
    const parsed = PostgresPositionSchema.safeParse(raw);
    if (!parsed.success) return { ok: false, reason: 'the checkpointed position is malformed' };
    if (parsed.data.phase === 'incremental' && options.cursor === undefined)
      return { ok: false, reason: 'the checkpoint is incremental but no cursor column is configured' };
    try {
      await run(`SELECT 1 FROM ${relation} LIMIT 0`, []);
      return { ok: true };
    } catch (err) {
      // Unreachable is not "cannot resume": starting from scratch would write again what the sink committed.
      if (isRetryable(err)) throw err;
      return { ok: false, reason: (err as Error).message };
    }
  }

  async function* read(from: unknown | null, readOptions: ReadOptions): AsyncGenerator<SourceItem> {
    const c = await connect();
    const keys = await keyColumns(c);
    const keyList = keys.map(quoteIdent).join(', ');
    const keyText = keys.map((k, i) => `${quoteIdent(k)}::text AS "__sluice_k${i}"`).join(', ');
    const cursorCol = options.cursor ? quoteIdent(options.cursor) : null;
    const limit = Math.min(pageSize, readOptions.batchSize);
    let position: PostgresPosition;
    if (from === null) {
      let high: string | null = null;
      if (cursorCol) {
        const r = await run<{ high: string | null }>(
          `SELECT max(${cursorCol})::text AS high FROM ${relation}`,
          [],
        );
        high = r.rows[0]?.high ?? null;
      }
      position = { phase: 'snapshot', lastKey: null, cursor: high, cursorKey: null, read: 0 };
    } else position = PostgresPositionSchema.parse(from);
    if (position.phase === 'snapshot' && (await keyNeedsCheck(c, keys))) {
      const problem = await keysetProblem(run, relation, keys);
      if (problem !== null) throw keysetError(options.handle, problem);
    }

    const keyOfRow = (row: Row) => keys.map((_, i) => String(row[`__sluice_k${i}`]));
    // The op's source position: in the snapshot its key (under the snapshot's cursor high mark), in the
    // incremental phase its cursor value and key. A re-read of the settle window or a replay names the same
    // position; an update of the row moves its cursor and so is a new position.
    const positionOf = (row: Row) =>
      '__sluice_cursor' in row
        ? `c:${JSON.stringify([String(row.__sluice_cursor), ...keyOfRow(row)])}`
        : `s:${JSON.stringify([position.cursor, ...keyOfRow(row)])}`;
    /** The page's rows as upserts of their relation's columns (`appended`: the statement's own columns after `*`). */
    const toOps = (result: pg.QueryResult<Row>, appended: number) => {
      const fields = recordFields(options.handle, result.fields, appended);
      const ops: RecordOp[] = [];
      for (const row of result.rows) {
        const record: Row = {};
        for (const name of fields) setOwnField(record, name, ownField(row, name));
        ops.push({ op: 'upsert', record, at: { source: options.handle, position: positionOf(row) } });
      }
      return ops;
    };

    while (position.phase === 'snapshot') {
      if (readOptions.signal.aborted) return;
      const params: unknown[] = [];
      let where = '';
      if (position.lastKey) {
        params.push(...position.lastKey);
        where = `WHERE (${keyList}) > (${keys.map((_, i) => `$${i + 1}`).join(', ')})`;
      }
      const result = await run<Row>(
        `SELECT *, ${keyText} FROM ${relation} ${where} ORDER BY ${keyList} LIMIT ${limit}`,
        params,
      );
      const rows = result.rows;
      if (rows.length > 0) {
        position = {
          ...position,
          lastKey: keyOfRow(rows[rows.length - 1]!),
          read: position.read + rows.length,
        };
        yield { kind: 'records', ops: toOps(result, keys.length), read: rows.length, bad: [], position };
      }
      if (rows.length < limit) {
        position = cursorCol
          ? { ...position, phase: 'incremental', lastKey: null, cursorKey: null }
          : { ...position, lastKey: position.lastKey };
        yield { kind: 'snapshot-done', position };
        if (!cursorCol || readOptions.mode === 'transfer') return;
      }
    }
    if (readOptions.mode === 'transfer') {
      yield { kind: 'snapshot-done', position };
      return;
    }
    if (!cursorCol) return;
    // Resumed in the incremental phase: the snapshot was done in an earlier run.
    if (from !== null && PostgresPositionSchema.parse(from).phase === 'incremental')
      yield { kind: 'snapshot-done', position };
    const cursorText = `${cursorCol}::text AS "__sluice_cursor"`;
    type Mark = Pick<PostgresPosition, 'cursor' | 'cursorKey'>;
    // Where each poll started, with when: a poll starts from the newest mark at least `settleMs` old (the
    // settled position), so rows passed less than `settleMs` ago are read again.
    const marks: Array<{ at: number; mark: Mark }> = [
      { at: Date.now(), mark: { cursor: position.cursor, cursorKey: position.cursorKey } },
    ];
    const settledMark = (): Mark => {
      const now = Date.now();
      while (marks.length > 1 && marks[1]!.at <= now - settleMs) marks.shift();
      return marks[0]!.mark;
    };
    for (;;) {
      if (readOptions.signal.aborted) return;
      const settled = settledMark();
      let from: Mark = settled;
      let high: Mark | null = null;
      // One poll: page from the settled position to the end of the table.
      for (;;) {
        if (readOptions.signal.aborted) return;
        const params: unknown[] = [];
        let where = '';
        if (from.cursor !== null && from.cursorKey) {
          params.push(from.cursor, ...from.cursorKey);
          where = `WHERE (${cursorCol}, ${keyList}) > (${params.map((_, i) => `$${i + 1}`).join(', ')})`;
        } else if (from.cursor !== null) {
          params.push(from.cursor);
          where = `WHERE ${cursorCol} > $1`;
        }
        const result = await run<Row>(
          `SELECT *, ${keyText}, ${cursorText} FROM ${relation} ${where} ORDER BY ${cursorCol}, ${keyList} LIMIT ${limit}`,
          params,
        );
        const rows = result.rows;
        if (rows.length > 0) {
          const last = rows[rows.length - 1]!;
          from = { cursor: String(last.__sluice_cursor), cursorKey: keyOfRow(last) };
          high = from;
          // The checkpoint is the settled position: a resume re-reads the window, never skips it.
          position = { ...position, ...settled, read: position.read + rows.length };
          yield {
            kind: 'records',
            ops: toOps(result, keys.length + 1),
            read: rows.length,
            bad: [],
            position,
          };
        }
        if (rows.length < limit) break;
      }
      if (high) marks.push({ at: Date.now(), mark: high });
      try {
        await delay(pollMs, undefined, { signal: readOptions.signal });
      } catch {
        return;
      }
    }
  }

  return {
    handle: options.handle,
    description: {
      type: 'postgres',
      table: options.table ?? null,
      query: options.query ?? null,
      key: options.key ?? null,
      cursor: options.cursor ?? null,
    },
    canResume,
    // The columns of the table or query (no row read): their declared types, as the pipeline's parsers read them.
    async fieldTypes() {
      const result = await run(`SELECT * FROM ${relation} LIMIT 0`, []);
      const generated =
        options.published === true && options.table !== undefined
          ? new Set(
              (
                await run(
                  `SELECT attname AS name FROM pg_attribute
                    WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated <> ''`,
                  [relation],
                )
              ).rows.map((r) => String(r.name)),
            )
          : new Set<string>();
      const fields: Record<string, FieldType> = {};
      recordFields(options.handle, result.fields, 0);
      for (const field of result.fields)
        if (!generated.has(field.name)) setOwnField(fields, field.name, fieldTypeOfPg(field.dataTypeID));
      return fields;
    },
    read,
    close: async () => {
      const c = client;
      client = null;
      await c?.end().catch(() => {});
    },
  };
}
