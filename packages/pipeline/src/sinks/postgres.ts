import { type PipelineCheckpoint, PipelineCheckpointSchema, SinkError, StaleEpochError } from '@sluice/core';
import type pg from 'pg';
import type { RecordOp, Row } from '../ops.js';
import { ownField, setOwnField } from '../own.js';
import {
  connectPostgres,
  createTableIfAbsent,
  isConnectionLoss,
  primaryKeyOf,
  quoteIdent,
  quoteTableName,
} from '../pg.js';
import { type PipelineSink, type SinkFence, type SinkWriteResult, UNFENCED } from '../types.js';
import { readSinkColumns, type SinkColumns } from './postgres-columns.js';
import { advanceFence, fenceWriter, SINK_FENCE_COLUMNS, SINK_FENCE_TABLE } from './postgres-fence.js';
import { type ColumnValueWriter, columnValueWriter } from './postgres-geometry.js';
import { upsertKeyProblem } from './postgres-key.js';
import { isRecordRefusal, refusalReason } from './postgres-refusals.js';
import { columnSignature, upsertStatements } from './postgres-upsert.js';

export const SINK_CHECKPOINT_TABLE = 'sluice_sink_checkpoints';
export { SINK_FENCE_TABLE };

export interface PostgresSinkOptions {
  handle: string;
  url: string;
  table: string;
  /** Upsert key; defaults to the table's primary key. The table needs a unique index on it. */
  key?: string[];
  /** Identifies this writer's checkpoint and fence rows (the transfer id). */
  writerId: string;
  /** The run's epoch (the transfer's checkpoint port). Default: unfenced (epoch 0, no fence row touched). */
  fence?: SinkFence;
  /**
   * `lock_timeout` of the sink's session (ms). Default 30 000: longer than the idle timeout, so a new owner
   * waiting on a frozen stale owner's locks outlives that owner's session instead of failing first.
   */
  lockTimeoutMs?: number;
  /**
   * `idle_in_transaction_session_timeout` of the sink's session (ms). Default 10 000: a frozen owner's open
   * transaction is ended by the server (its locks released, its late COMMIT refused). Commits are never
   * that far apart while the sink is alive: a transaction stays open only from a batch's write to its commit.
   */
  idleInTransactionTimeoutMs?: number;
}

/** SQLSTATE 21000: `ON CONFLICT DO UPDATE` met one key twice among the rows it was given. */
const CARDINALITY_VIOLATION = '21000';

/**
 * Who says which records of a batch share a key: the sink, comparing them as JSON (one proposed row per key), or
 * PostgreSQL by the key columns' types (`UpsertStatements.lastOfEachKey`, after a `21000`).
 */
type UpsertKeys = 'json' | 'postgres';

/** A SQL string literal (a DO block takes no parameters). */
const literal = (value: string) => `'${value.replaceAll("'", "''")}'`;

/**
 * Why `record` cannot be written to `table`, or null: a field that is no column of the table. The statement maps
 * fields to columns by name (`json_populate_record`) and would silently drop it. A missing column is fine: a
 * record is the whole row, so its absent columns take their defaults (NULL when none).
 */
function unknownFieldsProblem(record: Row, columns: ReadonlySet<string>, table: string): string | null {
  let unknown: string[] | null = null;
  for (const field of Object.keys(record)) {
    if (columns.has(field)) continue;
    unknown ??= [];
    unknown.push(field);
  }
  return unknown === null ? null : `field(s) ${unknown.join(', ')} are not columns of table ${table}`;
}

/** Splits `ops` into those `table` can take and the upserts refused by {@link unknownFieldsProblem}. */
function refuseUnknownFields(
  ops: RecordOp[],
  columns: ReadonlySet<string>,
  table: string,
): { accepted: RecordOp[]; refused: SinkWriteResult['refused'] } {
  const refused: SinkWriteResult['refused'] = [];
  for (const op of ops) {
    if (op.op === 'delete') continue; // built from the key columns alone
    const reason = unknownFieldsProblem(op.record, columns, table);
    if (reason !== null) refused.push({ op, reason });
  }
  if (refused.length === 0) return { accepted: ops, refused };
  const bad = new Set(refused.map((r) => r.op));
  return { accepted: ops.filter((op) => !bad.has(op)), refused };
}

/**
 * Writes `ops` one at a time, each under a savepoint of its own, after their batch was refused: the ops the table
 * refuses are rolled back alone and returned with PostgreSQL's reason; every other one is written, in order.
 * Only a refusal of the op's values is a bad record; any other error ends the write.
 */
async function applyEach(
  c: pg.Client,
  ops: RecordOp[],
  apply: (batch: RecordOp[]) => Promise<void>,
): Promise<SinkWriteResult['refused']> {
  const refused: SinkWriteResult['refused'] = [];
  for (const op of ops) {
    await c.query('SAVEPOINT sluice_op');
    try {
      await apply([op]);
    } catch (err) {
      if (!isRecordRefusal(err)) throw err;
      await c.query('ROLLBACK TO SAVEPOINT sluice_op');
      refused.push({ op, reason: refusalReason(err) });
    }
    await c.query('RELEASE SAVEPOINT sluice_op');
  }
  return refused;
}

/**
 * Upserts records by key into an existing table (`INSERT … ON CONFLICT (key) DO UPDATE`), one transaction
 * per epoch that also writes the checkpoint into `sluice_sink_checkpoints`, so data and progress commit
 * together and a resumed transfer rewrites nothing twice.
 *
 * Fenced where the data lands: every sink transaction first advances the writer's row in `sluice_sink_fences`
 * to the run's epoch, unless a higher epoch is there (then it rolls back with `STALE_EPOCH`). The fence row stays
 * locked until the transaction ends, so a stale owner's transaction and the new owner's never interleave, and
 * the sessions' `idle_in_transaction_session_timeout` ends a frozen owner's open transaction (bounding how long
 * it can block the new owner, and refusing its late COMMIT).
 *
 * A record is the whole row as an `INSERT` of its fields makes it (columns it lacks take their defaults, NULL when
 * none; generated columns their expression: `postgres-upsert.ts`); a record with a field that is no column, or with a value
 * the table refuses (its column's type, NOT NULL, CHECK, a foreign key), is refused as a bad record: the batch is
 * written again one record at a time under savepoints, so only the refused records are left out. The key is checked
 * when the sink opens (its columns exist, a unique index on exactly them is the upsert's arbiter). A lost
 * connection is a retryable `SINK_FAILED`: the retried run resumes from the committed checkpoint.
 *
 * @example
 * ```ts
 * createPostgresSink({ handle: 't1.sink', url, table: 'orders_copy', key: ['id'], writerId: 't1' });
 * ```
 */
export function createPostgresSink(options: PostgresSinkOptions): PipelineSink {
  let client: pg.Client | null = null;
  let key: string[] = options.key ?? [];
  let columns: SinkColumns = {
    names: [],
    inserted: [],
    updatable: [],
    overridesIdentity: false,
    numbering: new Set(),
  };
  /** The table's column names, to check every record's fields against (read once per connection). */
  let columnSet: ReadonlySet<string> = new Set();
  /** Columns whose values PostgreSQL takes only in another spelling than the pipeline's (point, circle). */
  let writers: Array<[string, ColumnValueWriter]> = [];
  let inTransaction = false;
  const table = quoteTableName(options.table);
  const writer = fenceWriter(options.writerId, options.handle);
  const fence = options.fence ?? UNFENCED;
  const lockTimeoutMs = options.lockTimeoutMs ?? 30_000;
  const idleTimeoutMs = options.idleInTransactionTimeoutMs ?? 10_000;

  /**
   * A `SINK_FAILED`. A lost connection (PostgreSQL restarting, a terminated backend, a network cut) is retryable: the
   * open transaction died with it, so a retry resumes from the committed checkpoint and writes nothing twice.
   */
  const fail = (what: string, err: unknown) =>
    new SinkError(`PostgreSQL sink ${options.table}: ${what}: ${(err as Error).message}`, {
      cause: err,
      ...(isConnectionLoss(err) ? { details: { retryable: true } } : {}),
    });
  /**
   * `fail` for a statement of the sink's own client. After a lost connection the client is dropped (`pg` refuses
   * every later query on it), so the next call connects again. Its transaction is gone: the caller must restart
   * from `committed()`, as a failed run does.
   */
  const failed = (what: string, err: unknown) => {
    if (isConnectionLoss(err)) {
      const c = client;
      client = null;
      inTransaction = false;
      void c?.end().catch(() => {});
    }
    return fail(what, err);
  };
  const connect = async () => {
    if (client) return client;
    let problem: string | null = null;
    try {
      client = await connectPostgres(options.url);
      await client.query(
        `SELECT set_config('lock_timeout', $1, false), set_config('idle_in_transaction_session_timeout', $2, false)`,
        [`${Math.max(0, Math.floor(lockTimeoutMs))}ms`, `${Math.max(0, Math.floor(idleTimeoutMs))}ms`],
      );
      await createTableIfAbsent(
        client,
        SINK_CHECKPOINT_TABLE,
        'writer text PRIMARY KEY, checkpoint jsonb NOT NULL, committed_at timestamptz NOT NULL DEFAULT now()',
      );
      await createTableIfAbsent(client, SINK_FENCE_TABLE, SINK_FENCE_COLUMNS);
      columns = await readSinkColumns(client, table);
      writers = columns.inserted.flatMap((c) => {
        const writer = columnValueWriter(c.typeOid);
        return writer === null ? [] : [[c.name, writer] as [string, ColumnValueWriter]];
      });
      columnSet = new Set(columns.names);
      if (key.length === 0) key = await primaryKeyOf(client, options.table);
      problem =
        key.length === 0
          ? `Table ${options.table} has no primary key; configure "key"`
          : await upsertKeyProblem(client, options.table, table, key, columnSet);
    } catch (err) {
      const c = client;
      client = null;
      await c?.end().catch(() => {});
      throw fail('cannot open', err);
    }
    if (problem !== null) {
      // Not retryable: the table stays what it is until someone changes it or the request.
      const c = client;
      client = null;
      await c.end().catch(() => {});
      throw new SinkError(`PostgreSQL sink ${options.table}: ${problem}`, {
        details: { table: options.table },
      });
    }
    return client;
  };
  /** Opens the sink's transaction with the fence step first: nothing of a stale epoch lands after it. */
  const begin = async () => {
    const c = await connect();
    if (!inTransaction) {
      try {
        await c.query('BEGIN');
        inTransaction = true;
        if (fence.epoch > 0) {
          if (!(await advanceFence(c, writer, fence.epoch))) {
            await c.query('ROLLBACK');
            inTransaction = false;
            const current = await c.query<{ epoch: string }>(
              `SELECT epoch::text FROM ${SINK_FENCE_TABLE} WHERE writer = $1`,
              [writer],
            );
            throw new StaleEpochError(options.writerId, fence.epoch, {
              details: { writer, current: Number(current.rows[0]?.epoch ?? 0) },
            });
          }
        }
      } catch (err) {
        if (err instanceof StaleEpochError) throw err;
        if (inTransaction) await c.query('ROLLBACK').catch(() => {});
        inTransaction = false;
        throw failed('cannot begin a fenced transaction', err);
      }
    }
    return c;
  };
  /** Runs `sql` in a fenced transaction of its own (outside the batch's one); `what` names it in an error. */
  const fenced = async (what: string, sql: string, params: unknown[]) => {
    const c = await begin();
    try {
      await c.query(sql, params);
      await c.query('COMMIT');
    } catch (err) {
      await c.query('ROLLBACK').catch(() => {});
      throw failed(what, err);
    } finally {
      inTransaction = false;
    }
  };

  const sink: PipelineSink & { readonly keyFields: string[] } = {
    handle: options.handle,
    description: { type: 'postgres', table: options.table, key: options.key ?? null },
    get keyFields() {
      return key;
    },
    keepsCheckpoint: true,
    async committed() {
      // Read under the fence, in the transaction that advances it: a stale owner's transaction still open
      // holds the fence row, so this waits for its COMMIT (and sees what it committed) and every later
      // transaction of that owner is refused. Read before the fence, the restart would resume behind a
      // batch the stale owner was about to commit, and write it a second time (docs/fencing.md).
      const c = await begin();
      try {
        const r = await c.query<{ checkpoint: unknown }>(
          `SELECT checkpoint FROM ${SINK_CHECKPOINT_TABLE} WHERE writer = $1`,
          [writer],
        );
        await c.query('COMMIT');
        const parsed = PipelineCheckpointSchema.safeParse(r.rows[0]?.checkpoint);
        return parsed.success ? parsed.data : null;
      } catch (err) {
        await c.query('ROLLBACK').catch(() => {});
        throw failed('cannot read the committed checkpoint', err);
      } finally {
        inTransaction = false;
      }
    },
    async prepare({ decision }) {
      await connect();
      // Fenced too: a stale owner starting over must not erase the new owner's committed checkpoint.
      if (decision === 'from-scratch')
        await fenced(
          'cannot clear the committed checkpoint',
          `DELETE FROM ${SINK_CHECKPOINT_TABLE} WHERE writer = $1`,
          [writer],
        );
    },
    async write(ops: RecordOp[]) {
      const c = await begin();
      const keyList = key.map(quoteIdent).join(', ');
      /** `row` with its point and circle values in PostgreSQL's text (a copy; the op keeps what was read). */
      const spelled = (row: Row): Row => {
        if (writers.length === 0) return row;
        const out: Row = { ...row };
        for (const [column, write] of writers)
          if (Object.hasOwn(out, column)) setOwnField(out, column, write(ownField(out, column)));
        return out;
      };
      /**
       * Upserts a run of records (no delete among them), each key's last record winning (ON CONFLICT cannot touch a
       * row twice): one statement per set of given columns ({@link columnSignature}), so records lacking an optional
       * field do not split the run into a statement each. `keys: 'postgres'` lets PostgreSQL tell which records share
       * a key (1 and "1" are one `int`), for a batch whose JSON-distinct keys it found equal (`21000`).
       */
      const upsert = async (rows: Row[], keys: UpsertKeys) => {
        const byKey = new Map<string, Row>();
        for (const row of rows) {
          const id = JSON.stringify(key.map((k) => ownField(row, k)));
          // Deleted first: a key's last record takes its place at the end of the order.
          byKey.delete(id);
          byKey.set(id, row);
        }
        const latest = keys === 'json' ? [...byKey.values()] : rows;
        const groups = new Map<string, Row[]>();
        for (const row of latest) {
          const signature = columnSignature(row, columns, key);
          const group = groups.get(signature);
          if (group === undefined) groups.set(signature, [row]);
          else group.push(row);
        }
        for (const [signature, group] of groups) {
          const statements = upsertStatements(table, columns, key, signature);
          await c.query(keys === 'json' ? statements.distinct : statements.lastOfEachKey, [
            JSON.stringify(group.map(spelled)),
          ]);
        }
      };
      const remove = async (rows: Row[]) => {
        await c.query(
          `DELETE FROM ${table} WHERE (${keyList}) IN (SELECT ${keyList} FROM json_populate_recordset(NULL::${table}, $1::json))`,
          [JSON.stringify(rows)],
        );
      };
      /** Writes `batch` in order: consecutive runs of upserts or deletes, so a delete after an upsert of a key wins. */
      const apply = async (batch: RecordOp[], keys: UpsertKeys) => {
        let run: Row[] = [];
        let deleting = false;
        for (const op of batch) {
          const isDelete = op.op === 'delete';
          if (isDelete !== deleting && run.length > 0) {
            await (deleting ? remove(run) : upsert(run, keys));
            run = [];
          }
          deleting = isDelete;
          if (op.op === 'delete') {
            const row: Row = {};
            key.forEach((k, i) => {
              setOwnField(row, k, op.key[i]);
            });
            run.push(row);
          } else run.push(op.record);
        }
        if (run.length > 0) await (deleting ? remove(run) : upsert(run, keys));
      };
      // Refused ops are bad records (the transfer's `onBadRecord` decides), never written with a field dropped.
      const { accepted, refused } = refuseUnknownFields(ops, columnSet, options.table);
      try {
        // A savepoint: a value the table refuses (a type, NOT NULL, CHECK) aborts only this batch's statements,
        // not the epoch's transaction with the batches before it that are not committed yet.
        if (accepted.length > 0) {
          await c.query('SAVEPOINT sluice_batch');
          let keys: UpsertKeys = 'json';
          for (;;) {
            try {
              await apply(accepted, keys);
            } catch (err) {
              // Keys distinct as JSON that are one key to PostgreSQL (1 and "1"): the batch again, PostgreSQL
              // picking each key's last record — a sort of the batch, so only when it is needed.
              const again = keys === 'json' && (err as { code?: unknown }).code === CARDINALITY_VIOLATION;
              if (!again && !isRecordRefusal(err)) throw err;
              await c.query('ROLLBACK TO SAVEPOINT sluice_batch');
              if (again) {
                keys = 'postgres';
                continue;
              }
              const each = keys;
              refused.push(...(await applyEach(c, accepted, (batch) => apply(batch, each))));
            }
            break;
          }
          await c.query('RELEASE SAVEPOINT sluice_batch');
        }
      } catch (err) {
        throw failed('write failed', err);
      }
      if (refused.length === 0) return undefined;
      // In the order of the source, as every other bad record is reported.
      const order = new Map(ops.map((op, i) => [op, i]));
      refused.sort((a, b) => (order.get(a.op) ?? 0) - (order.get(b.op) ?? 0));
      return { refused };
    },
    async truncate() {
      // A source's truncate (logical replication), in the epoch's transaction: the table is empty exactly when the
      // source transaction that truncated it commits. DELETE, not TRUNCATE: no ACCESS EXCLUSIVE lock on a table
      // readers are querying, and its row triggers fire like every other write of the sink.
      const c = await begin();
      try {
        await c.query(`DELETE FROM ${table}`);
      } catch (err) {
        throw failed('truncate failed', err);
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
        throw failed('commit failed', err);
      } finally {
        inTransaction = false;
      }
    },
    async finish() {
      // Every row is committed already. The final checkpoint stays: until the store records the transfer as
      // COMPLETED, an owner that dies here hands over a resume point at the end, and the next owner writes
      // nothing again. Deleting it here made that owner start from scratch (docs/fencing.md § after the end).
      // `discard` removes it once the terminal state is recorded.
    },
    async discard() {
      // The transfer's terminal state is recorded in the store: nothing resumes from the checkpoint any more.
      // The fence row stays, so a stale owner still running is refused wherever it writes.
      const c = await connectPostgres(options.url);
      try {
        await c.query(
          `DO $$ BEGIN
             IF to_regclass('${SINK_CHECKPOINT_TABLE}') IS NOT NULL THEN
               DELETE FROM ${SINK_CHECKPOINT_TABLE} WHERE writer = ${literal(writer)};
             END IF;
           END $$`,
        );
      } catch (err) {
        throw fail('cannot remove the committed checkpoint', err);
      } finally {
        await c.end().catch(() => {});
      }
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
