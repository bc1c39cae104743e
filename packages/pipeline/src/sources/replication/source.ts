/**
 * Creates the logical-replication source of a PostgreSQL table: start-up checks and the publication, the restart
 * question (can the slot resume this checkpoint?), and one read — snapshot (snapshot.ts), then stream
 * (stream-read.ts) — with the slot confirmed only after the sink committed.
 */
import { SlotOfAnotherNodeError, SourceError } from '@sluice/core';
import type pg from 'pg';
import { quoteIdent } from '../../pg.js';
import type { PipelineSource, ReadOptions, ResumeCheck, SourceItem } from '../../types.js';
import { carryLag } from './carried-lag.js';
import { SourceConnections } from './connections.js';
import { columnFieldTypes, domainBaseTypes } from './domains.js';
import { createHeartbeatTable, DEFAULT_HEARTBEAT_TABLE } from './heartbeat.js';
import { relationChange, relationOidOf, tableRelation } from './identity.js';
import { LagTracker, type ReplicationLag } from './lag.js';
import { compareLsn, maxLsn, normalizeLsn } from './lsn.js';
import {
  markPublication,
  type OwnedSlotMark,
  parseOwnerComment,
  publicationComment,
  type SlotOwner,
} from './ownership.js';
import { leafPartitionsOf, partitionsChange } from './partitions.js';
import { type ReplicationPosition, ReplicationPositionSchema } from './position.js';
import { membershipChange, publicationMembership } from './publication-membership.js';
import {
  BusySlot,
  catalogColumns,
  checkReplicationPrerequisites,
  columnsChange,
  createSlotWithSnapshot,
  defaultReplicationName,
  dropSlot,
  ensurePublication,
  slotState,
  transferReplicationName,
} from './setup.js';
import { readSnapshot, snapshotError } from './snapshot.js';
import type { ReplicationSource } from './status.js';
import { type LiveStream, readStream, type StreamSource } from './stream-read.js';
import { UnchangedValueReader } from './unchanged-values.js';

/** How to read the table: where, which slot and publication, and the tuning of the snapshot and the stream. */
export interface ReplicationSourceOptions {
  handle: string;
  url: string;
  /** `table` or `schema.table`. */
  table: string;
  /** Key columns (default: the primary key; required for a table with only `REPLICA IDENTITY FULL`). */
  key?: string[];
  /**
   * The key the records must carry when it is not the source's own: an endpoint's `primaryKey` (as source
   * columns). It takes `key`'s place in the snapshot order and in deletes and key changes, so it is what the table's
   * replica identity must cover (else `REPLICA_IDENTITY_MISSING` at start-up). Not part of the description: it
   * follows from the endpoint's key, which its cache schema already records.
   */
  recordKey?: string[];
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
  /**
   * At most how often a position-only advance (a keepalive past the last transaction read, e.g. while only other
   * tables are written) is committed, so that a `sluice-min-position` wait for it ends. Default 100 ms.
   */
  positionFlushMs?: number;
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
  const heartbeatTable = options.heartbeat?.table ?? DEFAULT_HEARTBEAT_TABLE;
  const live: LiveStream = { stream: null, lag: new LagTracker(), slotWait: null };
  /** The key columns the records of the current read carry (set once the read checked the prerequisites). */
  let recordKeys: string[] | null = null;

  const connections = new SourceConnections(options.url);
  const connect = () => connections.connect();
  const withClient = <T>(fn: (client: pg.Client) => Promise<T>) => connections.withClient(fn);
  const unchangedValues = new UnchangedValueReader(connections, table);
  const streamSource: StreamSource = {
    handle: options.handle,
    url: options.url,
    table,
    slot,
    publication,
    keepaliveMs,
    highWater,
    lagProbeMs: options.lagProbeMs ?? 1_000,
    flushWithinMs: options.flushWithinMs ?? 20,
    positionFlushMs: options.positionFlushMs ?? 100,
    slotWaitMs,
    heartbeat:
      options.heartbeat === undefined
        ? null
        : { table: heartbeatTable, intervalMs: options.heartbeat.intervalMs },
    connections,
  };

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
      if (position.relation !== undefined) {
        const replaced = relationChange(
          table,
          position.relation,
          await tableRelation(client, table, publication),
          false,
        );
        if (replaced !== null) return { ok: false, reason: replaced, sourceChanged: true };
      }
      // Checked after the start-up's preflight repaired the publication: the OIDs still tell the gap it leaves.
      // After the table's own identity: a table dropped and made again also left (and re-entered) the publication,
      // and is the source changing, not a gap in it.
      const gap = membershipChange(
        publication,
        table,
        position.membership,
        await publicationMembership(client, publication, table),
      );
      if (gap !== null) return { ok: false, reason: gap };
      const problem = await columnsChange(client, table, position.columns, position.storage, position.labels);
      if (problem !== null) return { ok: false, reason: `table ${table}: ${problem}`, sourceChanged: true };
      const leaves = await leafPartitionsOf(client, table);
      const moved = leaves === null ? null : partitionsChange(table, position.partitions ?? [], leaves);
      if (moved !== null) return { ok: false, reason: moved, sourceChanged: true };
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
      const facts = await checkReplicationPrerequisites(
        client,
        table,
        options.recordKey ?? options.key ?? null,
      );
      const created = await ensurePublication(client, publication, table);
      if (options.heartbeat !== undefined) {
        await createHeartbeatTable(client, heartbeatTable);
        await ensurePublication(client, publication, heartbeatTable);
      }
      const owner = options.owner;
      if (owner !== undefined) {
        const comment = created ? null : await publicationComment(client, publication);
        const ours =
          created ||
          (publication ===
            (owner.role === 'transfer'
              ? transferReplicationName(owner.handle)
              : defaultReplicationName(owner.node, owner.handle)) &&
            comment === null);
        if (ours) await markPublication(client, publication, owner, slot);
        else if (owner.role === 'endpoint')
          refuseAnotherNodesSlot(parseOwnerComment(publication, comment), owner);
      }
      return facts;
    });

  async function* read(from: unknown | null, readOptions: ReadOptions): AsyncGenerator<SourceItem> {
    const facts = await prepare();
    const keys = facts.key;
    recordKeys = keys;
    // A transfer without `follow` copies the consistent snapshot and ends; an endpoint and a following transfer stream on.
    const follows = readOptions.mode === 'endpoint' || readOptions.follow === true;
    let position: ReplicationPosition;
    let snapshot: pg.Client | null = null;
    if (from === null) {
      // A fresh generation: a fresh slot, whose exported snapshot is exactly its consistent point.
      // An endpoint's slot is named after its node id: another live app-server streaming it is one configured
      // with the same node id, and terminating it would start a tug of war (each rebuilding the other). A
      // transfer's taker-over does terminate a presumed-dead owner's stream (fencing).
      const busy = options.owner?.role === 'transfer' ? BusySlot.terminate : BusySlot.refuseLiveSluice;
      await withClient((client) => dropSlot(client, slot, slotWaitMs, busy));
      const created = await createSlotWithSnapshot(options.url, slot);
      try {
        snapshot = await connect();
        await snapshot.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
        await snapshot.query(`SET TRANSACTION SNAPSHOT '${created.snapshotName.replace(/'/g, "''")}'`);
      } finally {
        await created.connection.end().catch(() => {});
      }
      const partitions = await leafPartitionsOf(snapshot, table);
      const membership = await withClient((client) => publicationMembership(client, publication, table));
      // As the snapshot sees them: the columns its rows hold, and the storage they are read from.
      const catalog = await catalogColumns(snapshot, table);
      position = {
        capture: 'replication',
        slot,
        publication,
        phase: 'snapshot',
        lsn: created.consistentPoint,
        lastKey: null,
        catchUp: null,
        columns: catalog.columns,
        storage: catalog.storage,
        labels: catalog.labels,
        relation: await relationOidOf(snapshot, table),
        ...(partitions === null ? {} : { partitions }),
        ...(membership === null ? {} : { membership }),
        read: 0,
      };
    } else {
      position = ReplicationPositionSchema.parse(from);
      // A checkpoint from before relations were recorded: the table canResume accepted is the one to follow.
      position.relation ??= facts.relation;
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

    // The records' field types as this read starts (a column may have been added since the schema was resolved, or
    // while the endpoint was stopped); the stream tells of columns added later.
    if (readOptions.fieldTypes !== undefined) {
      const baseTypes = await withClient(domainBaseTypes);
      readOptions.fieldTypes(columnFieldTypes(position.columns, baseTypes));
    }

    if (snapshot !== null) {
      const client = snapshot;
      try {
        const snapshotTable = { handle: options.handle, table, keys, pageSize };
        yield* readSnapshot(client, snapshotTable, position, readOptions, (next) => {
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
    yield* readStream(streamSource, live, position, keys, readOptions, !follows);
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
    async complete(op) {
      // Only a read delivers partial upserts, and it set the key they carry before its first one.
      if (recordKeys === null) throw new SourceError(`Table ${table}: no read delivered this change`);
      return unchangedValues.complete(op, recordKeys);
    },
    committed(raw: unknown) {
      const parsed = ReplicationPositionSchema.safeParse(raw);
      if (!parsed.success || parsed.data.phase === 'snapshot') return;
      live.lag.commit(parsed.data.lsn);
      live.stream?.confirm(parsed.data.lsn);
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
    replicationLag: (): ReplicationLag | null => live.lag.lag(),
    committedLsn: () => live.lag.committedLsn(),
    lagBehind: (lsn: string, since: number): ReplicationLag => live.lag.behind(lsn, since),
    // Not from the moment the read asks for its slot: only once PostgreSQL let it stream (another process may hold it).
    streaming: () => live.stream?.started === true,
    slotWait: () => live.slotWait,
    // Only a read that streamed sampled PostgreSQL's WAL position: one that never did (it failed before, or waited
    // for its slot in vain) knows nothing worth carrying.
    carryLag: () =>
      live.lag.observedAt() === null
        ? null
        : carryLag({ url: options.url, slot, tracker: live.lag, probeMs: streamSource.lagProbeMs }),
    close: async () => {
      const s = live.stream;
      live.stream = null;
      await s?.close();
      await unchangedValues.close();
      await connections.closeAll();
    },
  };
}

/**
 * Refuses a publication (and so its slot) that another node's endpoint created: names derived from node ids that
 * differ only in case or punctuation coincide, and streaming (or dropping, for a fresh generation) that node's slot
 * would make each host rebuild the other's generations in turn.
 */
function refuseAnotherNodesSlot(mark: OwnedSlotMark | null, owner: SlotOwner): void {
  if (mark !== null && mark.role === 'endpoint' && mark.node !== owner.node)
    throw new SlotOfAnotherNodeError(mark.slot, owner.node, mark.node);
}
