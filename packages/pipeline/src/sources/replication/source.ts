import { type ReplicationStatus, SourceError, SourceSchemaChangedError } from '@sluice/core';
import type pg from 'pg';
import type { Pgoutput } from 'pg-logical-replication';
import { z } from 'zod';
import type { RecordOp, Row } from '../../ops.js';
import { isConnectionLoss, quoteIdent } from '../../pg.js';
import type { PipelineSource, ReadOptions, ResumeCheck, SourceItem } from '../../types.js';
import { SourceConnections } from './connections.js';
import { LagTracker, type ReplicationLag } from './lag.js';
import { compareLsn, isLsn, maxLsn, normalizeLsn } from './lsn.js';
import { markPublication, parseOwnerComment, publicationComment, type SlotOwner } from './ownership.js';
import {
  type ColumnList,
  checkReplicationPrerequisites,
  columnsOf,
  createSlotWithSnapshot,
  defaultReplicationName,
  dropSlot,
  ensurePublication,
  incompatibleColumns,
  slotState,
  transferReplicationName,
} from './setup.js';
import { ReplicationStream } from './stream.js';
import { TransactionAssembler } from './transaction-assembler.js';

/** The heartbeat table of a source that configures `heartbeat` without naming one. */
export const DEFAULT_HEARTBEAT_TABLE = 'sluice_heartbeat';

/** One row per slot: the last heartbeat write. */
async function createHeartbeatTable(client: pg.Client, table: string): Promise<void> {
  try {
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${quoteIdent(table)} (slot text PRIMARY KEY, at timestamptz NOT NULL)`,
    );
  } catch (err) {
    // Two sources creating it at once: one wins, the other sees a duplicate type/table.
    if ((err as { code?: string }).code !== '23505' && (err as { code?: string }).code !== '42P07')
      throw new SourceError(`Heartbeat table ${table}: ${(err as Error).message}`, { cause: err });
  }
}

const Lsn = z.string().refine(isLsn, 'not an LSN');

/**
 * The checkpointed position of a replication source. `lsn` is where the stream continues: the slot's consistent
 * point until the first transaction, then the end of the last transaction committed with the cache. In `snapshot`
 * the keyset snapshot has read up to `lastKey`; in `catch-up` a snapshot resumed in a later session (its exported
 * snapshot died with the process) is complete only once the stream has passed `catchUp`.
 */
export const ReplicationPositionSchema = z.object({
  capture: z.literal('replication'),
  slot: z.string(),
  publication: z.string(),
  phase: z.enum(['snapshot', 'catch-up', 'stream']),
  lsn: Lsn,
  lastKey: z.array(z.string()).nullable(),
  catchUp: Lsn.nullable(),
  columns: z.array(z.tuple([z.string(), z.number().int()])),
  read: z.number().int().nonnegative(),
});
export type ReplicationPosition = z.output<typeof ReplicationPositionSchema>;

export interface ReplicationSourceOptions {
  handle: string;
  url: string;
  /** `table` or `schema.table`. */
  table: string;
  /** Key columns (default: the primary key; required for a table with only `REPLICA IDENTITY FULL`). */
  key?: string[];
  slot: string;
  publication: string;
  /** Rows per snapshot page. Default 1000 (capped by the run's batch size). */
  pageSize?: number;
  /** Standby status updates asking for a keepalive, so an idle slot advances. Default 5000 ms. */
  keepaliveMs?: number;
  /**
   * The longest a transaction read waits for a commit behind a stream that never pauses: past it the batch asks
   * the run to commit (more transactions per commit below it). Default 20 ms.
   */
  flushWithinMs?: number;
  /** How often PostgreSQL's current WAL position is sampled for the lag (also while nothing streams). Default 1000 ms. */
  lagProbeMs?: number;
  /** Messages buffered before the replication socket is paused. Default 10 000. */
  highWater?: number;
  /** How long to wait for a slot still held by a dead process's walsender before failing. Default 15 s. */
  slotWaitMs?: number;
  /**
   * Writes a row to `table` (default `sluice_heartbeat`, created if absent, added to the publication) every
   * `intervalMs` while streaming, so the slot's confirmed position advances through a transaction of its own
   * even when the table is idle — not only through keepalives.
   */
  heartbeat?: { table?: string; intervalMs: number };
  /**
   * Who this source belongs to: marked on the publication it creates (see {@link SlotOwner}), so that
   * `sluice-app-server slots` and the removal of an endpoint drop only the slots Sluice created.
   */
  owner?: SlotOwner;
}

export type { ReplicationLag } from './lag.js';

/** A replication source: a {@link PipelineSource} that can also say how far it lags. */
/** True for a source made by {@link createReplicationSource}. */
export function isReplicationSource(source: PipelineSource): source is ReplicationSource {
  return typeof (source as Partial<ReplicationSource>).replicationLag === 'function';
}

/**
 * What operators see of a replication source (its slot, committed LSN, lag in bytes and seconds), or null for any
 * other source: `GET /v1/endpoints` and a running transfer's progress report it.
 *
 * @example
 * ```ts
 * replicationStatusOf(source); // { slot: 'sluice_x_…', committedLsn: '0/1A2B3C', lagBytes: 0, lagSeconds: 0 }
 * ```
 */
export function replicationStatusOf(source: PipelineSource): ReplicationStatus | null {
  if (!isReplicationSource(source)) return null;
  const lag = source.replicationLag();
  return {
    slot: source.slot,
    committedLsn: source.committedLsn(),
    lagBytes: lag?.bytes ?? null,
    lagSeconds: lag?.seconds ?? null,
  };
}

export interface ReplicationSource extends PipelineSource {
  /** The replication slot it reads. */
  readonly slot: string;
  /** Lag of what the cache committed behind PostgreSQL's current WAL position (null before streaming). */
  replicationLag(): ReplicationLag | null;
  /** The LSN the cache has committed (the freshness position), or null before the first commit. */
  committedLsn(): string | null;
}

/** A failed snapshot statement: a lost connection (PostgreSQL restarting) is retried from the checkpoint. */
function snapshotError(err: unknown): SourceError {
  return new SourceError(`Snapshot: ${(err as Error).message}`, {
    cause: err,
    ...(isConnectionLoss(err) ? { details: { retryable: true } } : {}),
  });
}

/**
 * A PostgreSQL table read by logical replication (`pgoutput`). On a fresh start it checks `wal_level`, the role's
 * `REPLICATION` privilege and the table's replica identity (each a stable start-up error), creates the publication
 * if absent, (re)creates the slot with an exported snapshot, reads the table by keyset pages inside that snapshot
 * (`REPEATABLE READ`, `SET TRANSACTION SNAPSHOT`), then streams from the slot's consistent point — so nothing is
 * lost or applied twice between the two. Each source transaction reaches the sink whole (`open` batches are never
 * cut by a commit); deletes are deletes, a truncate empties the destination. The position is the LSN, and the slot
 * is confirmed only through {@link PipelineSource.committed}, after the sink committed it.
 *
 * @example
 * ```ts
 * createReplicationSource({ handle: 'orders.source', url, table: 'public.orders',
 *   slot: 'sluice_h1_orders_source', publication: 'sluice_h1_orders_source' });
 * ```
 */
export function createReplicationSource(options: ReplicationSourceOptions): ReplicationSource {
  const pageSize = options.pageSize ?? 1_000;
  const keepaliveMs = options.keepaliveMs ?? 5_000;
  const highWater = options.highWater ?? 10_000;
  const slotWaitMs = options.slotWaitMs ?? 15_000;
  const { slot, publication, table } = options;
  let stream: ReplicationStream | null = null;
  const lagProbeMs = options.lagProbeMs ?? 1_000;
  const flushWithinMs = options.flushWithinMs ?? 20;
  const heartbeatTable = options.heartbeat?.table ?? DEFAULT_HEARTBEAT_TABLE;
  let lag = new LagTracker();

  const connections = new SourceConnections(options.url);
  const connect = () => connections.connect();
  const withClient = <T>(fn: (client: pg.Client) => Promise<T>) => connections.withClient(fn);
  const every = (everyMs: number, task: (client: pg.Client) => Promise<void>) =>
    connections.every(everyMs, task);

  async function canResume(raw: unknown): Promise<ResumeCheck> {
    const parsed = ReplicationPositionSchema.safeParse(raw);
    if (!parsed.success) return { ok: false, reason: 'the checkpoint is not a replication position' };
    const position = parsed.data;
    if (position.slot !== slot || position.publication !== publication)
      return { ok: false, reason: `the checkpoint is of slot ${position.slot}, the source now uses ${slot}` };
    // Connection failures throw (the start is retried): only a definite answer may cost a new generation.
    return withClient(async (client) => {
      const state = await slotState(client, slot);
      if (state === null) return { ok: false, reason: `replication slot ${slot} no longer exists` };
      if (state.walStatus === 'lost')
        return {
          ok: false,
          reason: `replication slot ${slot} lost the WAL it needs (max_slot_wal_keep_size)`,
        };
      if (state.confirmedFlush !== null && compareLsn(state.confirmedFlush, position.lsn) > 0)
        return {
          ok: false,
          reason: `replication slot ${slot} is confirmed at ${state.confirmedFlush}, past the cache's ${position.lsn}`,
        };
      const problem = incompatibleColumns(position.columns, await columnsOf(client, table));
      if (problem !== null) return { ok: false, reason: `table ${table}: ${problem}` };
      return { ok: true };
    });
  }

  /**
   * The prerequisites (each its own stable error), then the publication, created if absent and then marked as
   * Sluice's. A publication of Sluice's own default name without a mark (made before marks existed) is marked
   * too; one the operator made and named stays unmarked, and so does its slot: Sluice never drops those.
   */
  const prepare = () =>
    withClient(async (client) => {
      const facts = await checkReplicationPrerequisites(client, table, options.key ?? null);
      const created = await ensurePublication(client, publication, table);
      if (options.heartbeat !== undefined) {
        await createHeartbeatTable(client, heartbeatTable);
        await ensurePublication(client, publication, heartbeatTable);
      }
      const owner = options.owner;
      if (owner !== undefined) {
        const ours =
          created ||
          (publication ===
            (owner.role === 'transfer'
              ? transferReplicationName(owner.handle)
              : defaultReplicationName(owner.node, owner.handle)) &&
            (await publicationComment(client, publication)) === null);
        if (ours) await markPublication(client, publication, owner, slot);
      }
      return facts;
    });

  async function* read(from: unknown | null, readOptions: ReadOptions): AsyncGenerator<SourceItem> {
    const keys = (await prepare()).key;
    // A transfer without `follow` copies the consistent snapshot and ends; an endpoint and a following transfer stream on.
    const follows = readOptions.mode === 'endpoint' || readOptions.follow === true;
    let position: ReplicationPosition;
    let snapshot: pg.Client | null = null;
    if (from === null) {
      // A fresh generation: a fresh slot, whose exported snapshot is exactly its consistent point.
      await withClient((client) => dropSlot(client, slot, slotWaitMs));
      const created = await createSlotWithSnapshot(options.url, slot);
      try {
        snapshot = await connect();
        await snapshot.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
        await snapshot.query(`SET TRANSACTION SNAPSHOT '${created.snapshotName.replace(/'/g, "''")}'`);
      } finally {
        await created.connection.end().catch(() => {});
      }
      position = {
        capture: 'replication',
        slot,
        publication,
        phase: 'snapshot',
        lsn: created.consistentPoint,
        lastKey: null,
        catchUp: null,
        columns: await columnsOf(snapshot, table),
        read: 0,
      };
    } else {
      position = ReplicationPositionSchema.parse(from);
      if (position.phase === 'snapshot') {
        // The exported snapshot ended with the previous process: continue the pages in a new snapshot, and call
        // the snapshot complete once the stream (replaying from the slot's consistent point) has passed it.
        snapshot = await connect();
        await snapshot.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
        const now = await snapshot.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
        const at = normalizeLsn(now.rows[0]!.lsn);
        position = { ...position, catchUp: position.catchUp ? maxLsn(position.catchUp, at) : at };
      }
    }

    if (snapshot !== null) {
      const client = snapshot;
      try {
        yield* readSnapshot(client, keys, position, readOptions, (next) => {
          position = next;
        });
        await client.query('COMMIT').catch((err: unknown) => {
          throw snapshotError(err);
        });
      } finally {
        await connections.release(client);
      }
      if (readOptions.signal.aborted) return;
      if (position.catchUp === null) {
        position = { ...position, phase: 'stream', lastKey: null };
        yield { kind: 'snapshot-done', position };
      } else position = { ...position, phase: 'catch-up', lastKey: null };
    } else if (position.phase === 'stream') yield { kind: 'snapshot-done', position };
    // The slot stays until the transfer's terminal state is recorded (`discard`): an owner that dies before then
    // hands its successor a resume point, where dropping it here would make the successor copy everything again.
    if (position.phase === 'stream' && !follows) return;

    // A snapshot resumed in a later session is consistent only once the stream passed `catchUp`: a transfer
    // without `follow` streams that far, then ends.
    yield* readStream(position, keys, readOptions, !follows);
  }

  async function* readSnapshot(
    client: pg.Client,
    keys: string[],
    start: ReplicationPosition,
    readOptions: ReadOptions,
    advance: (position: ReplicationPosition) => void,
  ): AsyncGenerator<SourceItem> {
    const keyList = keys.map(quoteIdent).join(', ');
    const keyText = keys.map((k, i) => `${quoteIdent(k)}::text AS "__sluice_k${i}"`).join(', ');
    const limit = Math.max(1, Math.min(pageSize, readOptions.batchSize));
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
            `SELECT *, ${keyText} FROM ${quoteIdent(table)} ${where} ORDER BY ${keyList} LIMIT ${limit}`,
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
          for (const name in row) {
            if (name.startsWith('__sluice_k')) key.push(String(row[name]));
            else record[name] = row[name];
          }
          return {
            op: 'upsert',
            record,
            at: { source: options.handle, position: `s:${position.lsn}:${JSON.stringify(key)}` },
          };
        });
        position = { ...position, lastKey, read: position.read + rows.length };
        advance(position);
        yield { kind: 'records', ops, read: rows.length, bad: [], position };
      }
      if (rows.length < limit) return;
    }
  }

  async function* readStream(
    start: ReplicationPosition,
    keys: string[],
    readOptions: ReadOptions,
    untilCaughtUp: boolean,
  ): AsyncGenerator<SourceItem> {
    await waitForSlot(start.lsn);
    let position = start;
    lag = new LagTracker();
    lag.commit(position.lsn);
    /** The end of the last transaction of ours read: the stream is caught up past it once that is committed. */
    let lastChange: string | null = null;
    /** When the oldest transaction read and not yet flagged for commit ended. */
    let unflushedSince: number | null = null;
    const current = new ReplicationStream({
      url: options.url,
      slot,
      publication,
      startLsn: position.lsn,
      keepaliveMs,
      highWater,
    });
    stream = current;
    current.start();
    // PostgreSQL's own position, for the lag also while nothing streams.
    const probe = every(lagProbeMs, async (client) => {
      const result = await client.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
      lag.observeServer(result.rows[0]!.lsn);
    });
    // A write that streams through this slot, so it advances even when the table is idle and nothing else does.
    const heartbeat =
      options.heartbeat === undefined
        ? null
        : every(options.heartbeat.intervalMs, async (client) => {
            await client.query(
              `INSERT INTO ${quoteIdent(heartbeatTable)} (slot, at) VALUES ($1, now())
                 ON CONFLICT (slot) DO UPDATE SET at = excluded.at`,
              [slot],
            );
          });
    const qualified = await withClient(async (client) => {
      const r = await client.query<{ schema: string; name: string }>(
        `SELECT n.nspname AS schema, c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.oid = $1::regclass`,
        [quoteIdent(table)],
      );
      return r.rows[0]!;
    });
    const ours = (relation: Pgoutput.MessageRelation) =>
      relation.schema === qualified.schema && relation.name === qualified.name;
    const batchSize = Math.max(1, readOptions.batchSize);
    /**
     * The one place a resumed snapshot's catch-up ends: once the stream has passed the LSN the new snapshot was
     * taken at, every change the pages might have missed is applied; the position enters phase `stream`.
     */
    const passedCatchUp = (): boolean => {
      if (position.phase !== 'catch-up' || compareLsn(position.lsn, position.catchUp!) < 0) return false;
      position = { ...position, phase: 'stream', catchUp: null };
      return true;
    };
    const txn = new TransactionAssembler({ handle: options.handle, table, keys, ours });

    try {
      for (;;) {
        const item = await current.next(readOptions.signal);
        if (item === null) return;
        if (item.kind === 'failed') throw item.error;
        if (item.kind === 'keepalive') {
          lag.observeReceived(item.lsn);
          lag.observeServer(item.lsn);
          // Between transactions everything before the keepalive has been read: the position may move there,
          // so an idle slot (or one whose WAL is all other tables') advances once this is committed.
          if (!txn.open && current.buffered() === 0) {
            const applied = lag.committedLsn();
            if (lastChange === null || (applied !== null && compareLsn(lastChange, applied) <= 0))
              lag.readPast(item.lsn);
          }
          if (!txn.open && compareLsn(item.lsn, position.lsn) > 0 && current.buffered() === 0) {
            position = { ...position, lsn: normalizeLsn(item.lsn) };
            if (passedCatchUp()) {
              yield { kind: 'snapshot-done', position };
              if (untilCaughtUp) return;
            } else {
              yield { kind: 'records', ops: [], read: 0, bad: [], position, flush: unflushedSince !== null };
              unflushedSince = null;
            }
          } else if (!txn.open && unflushedSince !== null && current.buffered() === 0) {
            // The last transaction was read with this keepalive still queued behind it: commit it now rather
            // than at the run's next commitEveryMs.
            yield { kind: 'records', ops: [], read: 0, bad: [], position, flush: true };
            unflushedSince = null;
          }
          continue;
        }
        const message = item.message;
        switch (message.tag) {
          case 'begin':
            txn.begin(message);
            lag.beginTransaction();
            break;
          case 'relation': {
            if (!ours(message)) break;
            const columns: ColumnList = message.columns.map((c) => [c.name, c.typeOid]);
            const problem = incompatibleColumns(position.columns, columns);
            if (problem !== null)
              throw new SourceSchemaChangedError(
                `Table ${table}: ${problem}; the endpoint needs a new generation`,
                { details: { table, change: problem } },
              );
            position = { ...position, columns };
            break;
          }
          case 'insert':
          case 'update':
          case 'delete':
            if (txn.change(message, batchSize)) yield txn.take(position, { open: true });
            break;
          case 'truncate':
            txn.truncate(message);
            break;
          case 'commit': {
            if (!txn.open) break;
            const end = normalizeLsn(message.commitEndLsn ?? message.commitLsn ?? position.lsn);
            if (compareLsn(end, position.lsn) > 0) position = { ...position, lsn: end };
            lag.observeReceived(position.lsn);
            if (txn.changed) lastChange = position.lsn;
            // Commit now when nothing more is waiting, or when transactions have waited `flushWithinMs` behind a
            // never-empty buffer (a steady stream would otherwise wait for the run's commitEveryMs).
            unflushedSince ??= Date.now();
            const flush = current.buffered() === 0 || Date.now() - unflushedSince >= flushWithinMs;
            if (flush) unflushedSince = null;
            if (passedCatchUp()) {
              yield txn.take(position);
              txn.end();
              yield { kind: 'snapshot-done', position };
              if (untilCaughtUp) return;
            } else yield txn.take(position, { flush });
            txn.end();
            break;
          }
          default:
            break;
        }
      }
    } finally {
      stream = null;
      probe.stop();
      heartbeat?.stop();
      await current.close();
    }
  }

  /** A slot still held by the walsender of a process that just died is released within moments: wait for it. */
  async function waitForSlot(lsn: string): Promise<void> {
    const deadline = Date.now() + slotWaitMs;
    await withClient(async (client) => {
      for (;;) {
        const state = await slotState(client, slot);
        if (state === null)
          throw new SourceError(`Replication slot ${slot} no longer exists (resume at ${lsn})`);
        if (state.activePid === null) return;
        if (Date.now() > deadline)
          // Retryable: a transfer resumes later (the previous owner's walsender may still be winding down).
          throw new SourceError(
            `Replication slot ${slot} is in use by PostgreSQL backend ${state.activePid}; is another process streaming it?`,
            { details: { slot, activePid: state.activePid, retryable: true } },
          );
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    });
  }

  return {
    handle: options.handle,
    slot,
    description: {
      type: 'postgres',
      capture: 'replication',
      table,
      key: options.key ?? null,
      slot,
      publication,
    },
    canResume,
    preflight: async () => {
      await prepare();
    },
    read,
    committed(raw: unknown) {
      const parsed = ReplicationPositionSchema.safeParse(raw);
      if (!parsed.success || parsed.data.phase === 'snapshot') return;
      lag.commit(parsed.data.lsn);
      stream?.confirm(parsed.data.lsn);
    },
    async discard() {
      // The slot would hold WAL until the disk fills; the publication goes too when Sluice created it for this slot.
      await withClient(async (client) => {
        await dropSlot(client, slot, slotWaitMs);
        const mark = parseOwnerComment(publication, await publicationComment(client, publication));
        if (mark !== null && mark.slot === slot)
          await client.query(`DROP PUBLICATION IF EXISTS ${quoteIdent(publication)}`);
      });
    },
    replicationLag: (): ReplicationLag | null => lag.lag(),
    committedLsn: () => lag.committedLsn(),
    close: async () => {
      const s = stream;
      stream = null;
      await s?.close();
      await connections.closeAll();
    },
  };
}
