/**
 * The streaming half of a replication source: `pgoutput` messages from the slot, assembled into whole source
 * transactions of the replicated table, with keepalives moving the position between transactions, the lag probe
 * and the heartbeat running beside it, and a resumed snapshot's catch-up ended once the stream has passed it.
 */
import { SourceError, SourceSchemaChangedError } from '@sluice/core';
import type { Pgoutput } from 'pg-logical-replication';
import { quoteTableName } from '../../pg.js';
import type { ReadOptions, SourceItem } from '../../types.js';
import type { SourceConnections } from './connections.js';
import { columnFieldTypes, domainBaseTypes } from './domains.js';
import { writeHeartbeat } from './heartbeat.js';
import { relationChange, streamedIdentityGap, tableRelation } from './identity.js';
import { LagTracker } from './lag.js';
import { compareLsn, normalizeLsn } from './lsn.js';
import { leafPartitionsOf, partitionsChange, TruncateScope, truncateScope } from './partitions.js';
import type { ReplicationPosition } from './position.js';
import {
  type ColumnList,
  catalogColumns,
  columnsChange,
  columnsProblem,
  incompatibleColumns,
  slotState,
  withAttnums,
} from './setup.js';
import type { SlotWait } from './status.js';
import { IDLE, ReplicationStream } from './stream.js';
import { TransactionAssembler } from './transaction-assembler.js';
import { pastPageHeader, walLayout } from './wal-pages.js';

/** What the stream reads and how (the source's options, defaults applied). */
export interface StreamSource {
  handle: string;
  url: string;
  table: string;
  slot: string;
  publication: string;
  keepaliveMs: number;
  highWater: number;
  lagProbeMs: number;
  flushWithinMs: number;
  /**
   * At most how often a position-only advance (a keepalive past the last transaction read) is committed: soon
   * enough for a reader waiting on that position, not one commit for every transaction of other tables.
   */
  positionFlushMs: number;
  slotWaitMs: number;
  /** The heartbeat's table and interval, or null without one. */
  heartbeat: { table: string; intervalMs: number } | null;
  connections: SourceConnections;
}

/**
 * What the source reports while (and after) it streams: the stream being read (null between reads), to confirm
 * committed positions to, the lag tracker of the latest read, and the wait for the slot before a read streams (null
 * unless another process streams the slot meanwhile).
 */
export interface LiveStream {
  stream: ReplicationStream | null;
  lag: LagTracker;
  slotWait: SlotWait | null;
}

/**
 * Streams from `start.lsn` (after waiting for the slot to be free) until aborted, or — `untilCaughtUp` — until a
 * resumed snapshot's catch-up ends. Each source transaction of the table reaches the sink whole.
 */
export async function* readStream(
  source: StreamSource,
  live: LiveStream,
  start: ReplicationPosition,
  keys: string[],
  readOptions: ReadOptions,
  untilCaughtUp: boolean,
): AsyncGenerator<SourceItem> {
  const { connections, slot, table } = source;
  await waitForSlot(source, live, start.lsn);
  let position = start;
  live.lag = new LagTracker();
  live.lag.commit(position.lsn);
  /** The end of the last transaction of ours read: the stream is caught up past it once that is committed. */
  let lastChange: string | null = null;
  /** When the oldest transaction read and not yet flagged for commit ended. */
  let unflushedSince: number | null = null;
  /** When a position-only advance was last committed, and whether a later one still waits for its turn. */
  let positionFlushedAt = 0;
  let positionPending = false;
  const baseTypes = await connections.withClient(domainBaseTypes);
  const layout = await connections.withClient(walLayout);
  const current = new ReplicationStream({
    url: source.url,
    slot,
    publication: source.publication,
    startLsn: position.lsn,
    keepaliveMs: source.keepaliveMs,
    highWater: source.highWater,
    baseTypes,
  });
  live.stream = current;
  current.start();
  // The table the generation follows is a relation, not a name: once it is dropped (recreated or not) or leaves
  // the publication, nothing more of it streams — the stream would stay green on a table that is gone.
  const relation = start.relation;
  const replaced = new AbortController();
  let replacedBecause: string | null = null;
  const signal = AbortSignal.any([readOptions.signal, replaced.signal]);
  // PostgreSQL's own position, for the lag also while nothing streams; and whether the table is still the same.
  const probe = connections.every(source.lagProbeMs, async (client) => {
    const result = await client.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
    live.lag.observeServer(result.rows[0]!.lsn);
    if (relation === undefined || replacedBecause !== null) return;
    const now = await tableRelation(client, table, source.publication);
    replacedBecause = relationChange(table, relation, now, true);
    // A column dropped, retyped (a rewrite `USING` an expression gives every row a new value) or added with a
    // default changed every row without a change to stream (no relation message either, until some row of the
    // table changes): the generation would serve the old shape, and call it fresh, for as long as the table is quiet.
    if (replacedBecause === null && now !== null)
      replacedBecause = await columnsChange(
        client,
        table,
        position.columns,
        position.storage,
        position.labels,
      );
    // A partition attached or detached brought or took rows without a change to stream.
    if (replacedBecause === null && now !== null && start.partitions !== undefined) {
      const leaves = await leafPartitionsOf(client, table);
      replacedBecause = partitionsChange(table, start.partitions, leaves ?? []);
    }
    if (replacedBecause !== null) replaced.abort();
  });
  // A write that streams through this slot, so it advances even when the table is idle and nothing else does.
  const beat = source.heartbeat;
  const heartbeat =
    beat === null
      ? null
      : connections.every(beat.intervalMs, (client) => writeHeartbeat(client, beat.table, slot));
  const qualified = await connections.withClient(async (client) => {
    const r = await client.query<{ schema: string; name: string }>(
      `SELECT n.nspname AS schema, c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.oid = $1::regclass`,
      [quoteTableName(table)],
    );
    return r.rows[0]!;
  });
  const isTable = (relation: Pgoutput.MessageRelation) =>
    relation.schema === qualified.schema && relation.name === qualified.name;
  // A partitioned table's changes stream under its leaf partitions unless the publication publishes via the root.
  const partitions = new Set(start.partitions ?? []);
  const ours = (relation: Pgoutput.MessageRelation) =>
    isTable(relation) || partitions.has(relation.relationOid);
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
  const txn = new TransactionAssembler({ handle: source.handle, table, keys, ours });

  try {
    for (;;) {
      const item = await current.next(
        signal,
        positionPending ? positionFlushedAt + source.positionFlushMs - Date.now() : undefined,
      );
      if (item === null) {
        if (replacedBecause !== null && !readOptions.signal.aborted)
          throw tableReplaced(table, replacedBecause);
        return;
      }
      if (item.kind === IDLE.kind) {
        // The connection went quiet with a keepalive's position not yet committed: its turn has come.
        if (positionPending && !txn.open && current.buffered() === 0) {
          yield { kind: 'records', ops: [], read: 0, bad: [], position, flush: true };
          positionFlushedAt = Date.now();
          positionPending = false;
        }
        continue;
      }
      if (item.kind === 'failed') throw item.error;
      if (item.kind === 'keepalive') {
        live.lag.observeReceived(item.lsn);
        live.lag.observeServer(item.lsn);
        // Between transactions everything before the keepalive has been read: the position may move there,
        // so an idle slot (or one whose WAL is all other tables') advances once this is committed.
        if (!txn.open && current.buffered() === 0) {
          const applied = live.lag.committedLsn();
          if (lastChange === null || (applied !== null && compareLsn(lastChange, applied) <= 0))
            live.lag.readPast(item.lsn);
        }
        // A keepalive on a page boundary has passed that page's header too: a reader asking for the insert
        // location of a record that ended there (wal-pages.ts) is answered now, not after the next record.
        const reached = pastPageHeader(item.lsn, layout);
        if (!txn.open && compareLsn(reached, position.lsn) > 0 && current.buffered() === 0) {
          position = { ...position, lsn: reached };
          if (passedCatchUp()) {
            yield { kind: 'snapshot-done', position };
            if (untilCaughtUp) return;
          } else {
            // Committed within positionFlushMs, not at the run's next commitEveryMs: a reader waiting for this
            // position (`sluice-min-position` of a write to another table, or of any WAL after the table's last
            // change) has every change it asks for already, and would otherwise wait out its freshness window —
            // and get 503 whenever commitEveryMs is the longer of the two. Not at once for every keepalive: the
            // walsender sends one each time it catches up, i.e. about once per transaction of other tables.
            const due = unflushedSince !== null || Date.now() - positionFlushedAt >= source.positionFlushMs;
            yield { kind: 'records', ops: [], read: 0, bad: [], position, flush: due };
            unflushedSince = null;
            if (due) positionFlushedAt = Date.now();
            positionPending = !due;
          }
        } else if (!txn.open && unflushedSince !== null && current.buffered() === 0) {
          // The last transaction was read with this keepalive still queued behind it: commit it now rather
          // than at the run's next commitEveryMs.
          yield { kind: 'records', ops: [], read: 0, bad: [], position, flush: true };
          unflushedSince = null;
          positionPending = false;
        }
        continue;
      }
      const message = item.message;
      switch (message.tag) {
        case 'begin':
          txn.begin(message);
          live.lag.beginTransaction();
          break;
        case 'relation': {
          if (!ours(message)) break;
          const leaf = !isTable(message);
          // Same name, another table (a publication of all tables streams the recreated one too).
          if (!leaf && relation !== undefined && message.relationOid !== relation)
            throw tableReplaced(
              table,
              relationChange(table, relation, { oid: message.relationOid, published: true }, false)!,
            );
          // The identity changed under the stream: what follows would not name the records' keys, and replaying
          // that WAL never will — a new generation (whose start-up check then says what to fix).
          const gap = streamedIdentityGap(table, message, keys);
          if (gap !== null)
            throw new SourceSchemaChangedError(
              `Table ${table}: its replica identity changed; ${gap}; the endpoint needs a new generation`,
              { details: { table, change: 'replica identity' } },
            );
          const columns: ColumnList = message.columns.map((c) => [c.name, c.typeOid]);
          const known = new Set(position.columns.map(([name]) => name));
          // The catalog too (relation messages are rare): a column dropped and added again under its name and type
          // looks unchanged in the message, and a new column's identity (its attnum) is only there.
          const catalog = await connections.withClient((client) => catalogColumns(client, table));
          const problem =
            incompatibleColumns(position.columns, columns) ??
            columnsProblem(position.columns, catalog, position.storage, position.labels);
          if (problem !== null)
            throw new SourceSchemaChangedError(
              `Table ${table}: ${problem}; the endpoint needs a new generation`,
              { details: { table, change: problem } },
            );
          // A leaf's columns are the table's in its own order: only the ones it adds are news.
          const announced = leaf
            ? [...position.columns, ...columns.filter(([name]) => !known.has(name))]
            : columns;
          position = {
            ...position,
            columns: withAttnums(announced, position.columns, catalog.columns),
            storage: catalog.storage,
            labels: catalog.labels,
          };
          // A column added (no default: every row already there holds NULL): its records follow this message.
          if (position.columns.some(([name]) => !known.has(name)))
            readOptions.fieldTypes?.(columnFieldTypes(position.columns, baseTypes));
          break;
        }
        case 'insert':
        case 'update':
        case 'delete':
          if (txn.change(message, batchSize)) yield txn.take(position, { open: true });
          break;
        case 'truncate':
          if (txn.open && truncateScope(table, message.relations, isTable, partitions) === TruncateScope.all)
            txn.truncate(message);
          break;
        case 'commit': {
          if (!txn.open) break;
          // Rows that waited for their key to settle (moved onto a key another row still held) are handed on now,
          // still inside the transaction: parts of at most batchSize, the last one below.
          txn.settle();
          while (txn.pending > batchSize) yield txn.take(position, { open: true, limit: batchSize });
          const end = normalizeLsn(message.commitEndLsn ?? message.commitLsn ?? position.lsn);
          if (compareLsn(end, position.lsn) > 0) position = { ...position, lsn: end };
          live.lag.observeReceived(position.lsn);
          if (txn.changed) lastChange = position.lsn;
          // Commit now when nothing more is waiting, or when transactions have waited `flushWithinMs` behind a
          // never-empty buffer (a steady stream would otherwise wait for the run's commitEveryMs).
          unflushedSince ??= Date.now();
          const flush = current.buffered() === 0 || Date.now() - unflushedSince >= source.flushWithinMs;
          if (flush) {
            unflushedSince = null;
            positionPending = false;
          }
          if (passedCatchUp()) {
            yield txn.take(position, { end: true });
            txn.end();
            yield { kind: 'snapshot-done', position };
            if (untilCaughtUp) return;
          } else yield txn.take(position, { flush, end: true });
          txn.end();
          break;
        }
        default:
          break;
      }
    }
  } finally {
    live.stream = null;
    probe.stop();
    heartbeat?.stop();
    await current.close();
  }
}

/** The table the generation followed is gone (dropped, recreated, unpublished): the endpoint needs a new one. */
function tableReplaced(table: string, change: string): SourceSchemaChangedError {
  return new SourceSchemaChangedError(`Table ${table}: ${change}; the endpoint needs a new generation`, {
    details: { table, change },
  });
}

/**
 * A slot still held by the walsender of a process that just died is released within moments: wait for it — up to
 * `slotWaitMs`, shown meanwhile as `live.slotWait` (another reader may hold it for good: the wait is then a failed
 * attempt, retried).
 */
async function waitForSlot(source: StreamSource, live: LiveStream, lsn: string): Promise<void> {
  const { slot } = source;
  const since = Date.now();
  const until = since + source.slotWaitMs;
  try {
    await source.connections.withClient(async (client) => {
      for (;;) {
        const state = await slotState(client, slot);
        if (state === null)
          throw new SourceError(`Replication slot ${slot} no longer exists (resume at ${lsn})`);
        if (state.activePid === null) return;
        live.slotWait = { slot, since, until, activePid: state.activePid };
        if (Date.now() > until)
          // Retryable: a transfer resumes later (the previous owner's walsender may still be winding down).
          throw new SourceError(
            `Replication slot ${slot} is in use by PostgreSQL backend ${state.activePid}; is another process streaming it?`,
            { details: { slot, activePid: state.activePid, retryable: true } },
          );
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    });
  } finally {
    live.slotWait = null;
  }
}
