import {
  asSluiceError,
  type CheckpointPort,
  type ConnectionConfig,
  type EventPublisher,
  keyFields,
  type Logger,
  type NatsConfig,
  PIPELINE_DEFAULTS,
  type PipelineCheckpoint,
  PipelineCheckpointSchema,
  type PipelineProgress,
  parseOrThrow,
  postgresCapture,
  silentLogger,
  type TransferRequest,
  TransferRequestSchema,
  type TransferResult,
  TransferTerminatedError,
  type WritableCacheCatalog,
} from '@sluice/core';
import { type ConnectionContext, postgresUrl, sinkFor, sourceFor } from './addresses.js';
import { BadRecordCollector, type BadRecordReport } from './bad-records.js';
import { dagHash, decideRestart, type RestartPlan } from './dag.js';
import { commitSizeOf, runPipeline } from './run.js';
import { EndpointGenerationMovedError } from './sinks/cache.js';
import { fenceWriter, holdPostgresFence, type PostgresFenceHold } from './sinks/postgres-fence.js';
import { isReplicationSource, replicationStatusOf } from './sources/replication/status.js';
import type { PipelineSource, SourceBranch } from './types.js';

/** A transfer's sink handle: stable, so its checkpoint and fence rows are found by every run and every node. */
const sinkHandle = (id: string) => `${id}.sink`;

export interface TransferContext {
  /** Loads and saves the transfer's checkpoint (fenced by the app-server). */
  checkpoint: CheckpointPort;
  connections: Record<string, ConnectionConfig>;
  /** For destination `{type: 'endpoint'}`. */
  caches?: WritableCacheCatalog;
  events?: EventPublisher;
  /** Abort = terminate: the run stops promptly and throws `TransferTerminatedError`. */
  signal: AbortSignal;
  onProgress?: (progress: PipelineProgress) => void;
  logger?: Logger;
  commitEveryRecords?: number;
  commitEveryMs?: number;
  /** NATS for JetStream addresses that name no connection. */
  nats?: NatsConfig;
  /**
   * Called with the restart decision, before any record moves: once, and again if the run starts over (the
   * destination endpoint switched generations under it).
   */
  onDecision?: (plan: { decision: 'resume' | 'from-scratch'; reason: string }) => void;
  /** Read size of file sources (smaller = smaller batches; tests use it to stop mid-file). */
  fileChunkBytes?: number;
  /** Tuning of a replication source (tests shorten the keepalive and the wait for a slot still in use). */
  replication?: ConnectionContext['replication'];
  /**
   * Who this run's effects in the destination belong to: the tag of a file sink's temp files, the key of a PostgreSQL
   * sink's checkpoint and fence rows, the first part of a JetStream `Nats-Msg-Id`. Default: the transfer id, which
   * every run of a recorded transfer shares — that is what lets a successor resume from, dedupe against and fence out
   * its predecessors. A run nothing may resume or share effects with (fire-and-forget: unrecorded, so another run
   * with its id, recorded or not, may be going on at once) passes one of its own, and the same `writer` to
   * {@link discardTransferLeftovers}.
   */
  writer?: string;
}

/** What a transfer did, including up to 1000 bad-record reports (line / offset and reason). */
export interface TransferOutcome extends TransferResult {
  decision: 'resume' | 'from-scratch';
  reason: string;
  badRecordReports: BadRecordReport[];
  checkpoint: PipelineCheckpoint | null;
}

/**
 * Runs a transfer to completion: reads the source, writes the destination, commits an epoch (sink data
 * plus checkpoint, then the checkpoint port) every `commitEveryRecords` records or `commitEveryMs` ms.
 * Started again with the same checkpoint port it resumes where the last commit left off when the DAG and
 * source allow it, and starts from scratch otherwise; either way each record reaches the destination once.
 * A run into an endpoint whose alias moves under it (a blue/green rebuild switched, a promote, a rollback) starts
 * over and writes every record again into the generation the alias points at now, so a completed transfer's records
 * are all served whatever switches happened while it ran.
 * With `options.follow` (a replication PostgreSQL source, a following file) it never completes: after the snapshot
 * it applies the source's changes until `signal` aborts, then throws `TransferTerminatedError`. What a source or
 * sink keeps for resuming (a replication slot, a sink checkpoint) stays until {@link discardTransferLeftovers}.
 *
 * @example
 * ```ts
 * const result = await runTransfer(request, {
 *   checkpoint: { load: () => store.get(id).then((r) => r?.checkpoint ?? null), save: (c) => store.saveCheckpoint(id, epoch, c) },
 *   connections: config.connections, signal: controller.signal,
 * });
 * ```
 */
export async function runTransfer(request: TransferRequest, ctx: TransferContext): Promise<TransferOutcome> {
  const parsed = parseOrThrow(TransferRequestSchema, request, 'Invalid transfer request');
  const logger = ctx.logger ?? silentLogger;
  const started = Date.now();
  try {
    for (;;) {
      try {
        return await runAttempt(parsed, ctx, started);
      } catch (err) {
        if (!(err instanceof EndpointGenerationMovedError)) throw err;
        // The destination endpoint switched generations under the run: what it wrote is in one that no longer
        // serves. A fresh attempt is planned like a takeover's: its checkpoint names that generation, so it writes
        // every record again into the one the alias points at now.
        logger.warn(
          { transfer: parsed.id, ...err.details },
          'the endpoint switched generations during the transfer: writing it again into the new one',
        );
      }
    }
  } catch (err) {
    throw asSluiceError(err);
  }
}

/**
 * One run of a transfer from its saved checkpoint: opens the source and the sink, decides where to restart, runs
 * the pipeline and closes both.
 */
async function runAttempt(
  parsed: TransferRequest,
  ctx: TransferContext,
  started: number,
): Promise<TransferOutcome> {
  const logger = ctx.logger ?? silentLogger;
  const sourceKey = 'key' in parsed.source ? keyFields(parsed.source.key) : [];
  const connections: ConnectionContext = {
    connections: ctx.connections,
    ...(ctx.nats !== undefined ? { nats: ctx.nats } : {}),
    ...(ctx.replication !== undefined ? { replication: ctx.replication } : {}),
  };
  const source = sourceFor(parsed.source, `${parsed.id}.source`, connections, {
    role: 'transfer',
    ...(ctx.fileChunkBytes ? { chunkBytes: ctx.fileChunkBytes } : {}),
  });
  const commitEveryRecords =
    parsed.options.batchSize ?? ctx.commitEveryRecords ?? PIPELINE_DEFAULTS.commitEveryRecords;
  const sink = sinkFor(
    parsed.destination,
    sinkHandle(parsed.id),
    ctx.writer ?? parsed.id,
    // The checkpoint port is the fencing token: sinks check its epoch where their effects land.
    {
      ...connections,
      ...(ctx.caches ? { caches: ctx.caches } : {}),
      fence: ctx.checkpoint,
      commitSize: commitSizeOf(commitEveryRecords),
    },
    sourceKey,
  );
  const branches: SourceBranch[] = [{ source, processors: [] }];
  const dag = dagHash(branches, sink);
  const badRecords = new BadRecordCollector(parsed.options.onBadRecord, (report) =>
    logger.warn({ transfer: parsed.id, ...report }, 'bad record'),
  );
  try {
    if (ctx.signal.aborted) throw new TransferTerminatedError(parsed.id);
    const loaded = PipelineCheckpointSchema.safeParse(await ctx.checkpoint.load());
    const plan: RestartPlan = await decideRestart({
      dag,
      branches,
      sink,
      checkpoint: loaded.success ? loaded.data : null,
    });
    logger.info({ transfer: parsed.id, decision: plan.decision, reason: plan.reason }, 'restart decision');
    ctx.onDecision?.({ decision: plan.decision, reason: plan.reason });
    await sink.prepare(plan);
    const result = await runPipeline({
      name: parsed.id,
      dag,
      branches,
      sink,
      mode: 'transfer',
      ...(parsed.options.follow === true ? { follow: true } : {}),
      plan,
      badRecords,
      signal: ctx.signal,
      saveCheckpoint: (checkpoint) => ctx.checkpoint.save(checkpoint),
      commitEveryRecords,
      ...(ctx.commitEveryMs !== undefined ? { commitEveryMs: ctx.commitEveryMs } : {}),
      ...(parsed.options.maxRecordsPerSecond !== undefined
        ? { maxRecordsPerSecond: parsed.options.maxRecordsPerSecond }
        : {}),
      ...(ctx.onProgress ? { onProgress: progressWithReplication(source, ctx.onProgress) } : {}),
      logger,
    });
    if (result.aborted) throw new TransferTerminatedError(parsed.id);
    return {
      recordsRead: result.progress.recordsRead,
      recordsWritten: result.progress.recordsWritten,
      badRecords: result.progress.badRecords,
      durationMs: Date.now() - started,
      decision: plan.decision,
      reason: plan.reason,
      badRecordReports: badRecords.reports,
      checkpoint: result.checkpoint,
    };
  } finally {
    await Promise.allSettled([source.close(), sink.close()]);
  }
}

/** The run's progress, with the slot, committed LSN and lag when the source reads logical replication. */
function progressWithReplication(
  source: PipelineSource,
  onProgress: (progress: PipelineProgress) => void,
): (progress: PipelineProgress) => void {
  if (!isReplicationSource(source)) return onProgress;
  return (progress) => onProgress({ ...progress, replication: replicationStatusOf(source) });
}

/**
 * Removes what the runs of a transfer kept for resuming (a file sink's temp files, a PostgreSQL sink's committed
 * checkpoint, a replication source's slot and publication), once its terminal state (COMPLETED, FAILED or TERMINATED) is recorded and nothing will resume from it.
 *
 * @example
 * ```ts
 * await discardTransferLeftovers(request, { connections: config.connections });
 * ```
 */
export async function discardTransferLeftovers(
  request: TransferRequest,
  ctx: Pick<TransferContext, 'connections' | 'caches' | 'nats' | 'replication' | 'writer'>,
): Promise<void> {
  const parsed = parseOrThrow(TransferRequestSchema, request, 'Invalid transfer request');
  const connections: ConnectionContext = {
    connections: ctx.connections,
    ...(ctx.nats !== undefined ? { nats: ctx.nats } : {}),
    ...(ctx.replication !== undefined ? { replication: ctx.replication } : {}),
  };
  // Both are tried, each failure reported: a slot left behind fills the source's disk.
  const results = await Promise.allSettled([
    discardSource(parsed, connections),
    discardSink(parsed, connections, ctx.writer ?? parsed.id),
  ]);
  for (const result of results) if (result.status === 'rejected') throw asSluiceError(result.reason);
}

/** A replication source keeps its slot and publication; the other sources keep nothing. */
async function discardSource(request: TransferRequest, connections: ConnectionContext): Promise<void> {
  if (request.source.type !== 'postgres' || postgresCapture(request.source, 'transfer') !== 'replication')
    return;
  const source = sourceFor(request.source, `${request.id}.source`, connections, { role: 'transfer' });
  try {
    await source.discard?.();
  } finally {
    await source.close();
  }
}

/**
 * A file sink keeps temp files, a PostgreSQL sink its committed checkpoint; the others keep nothing. Only `writer`'s:
 * another writer's are another run's.
 */
async function discardSink(
  request: TransferRequest,
  connections: ConnectionContext,
  writer: string,
): Promise<void> {
  if (request.destination.type !== 'file' && request.destination.type !== 'postgres') return;
  const sourceKey = 'key' in request.source ? keyFields(request.source.key) : [];
  const sink = sinkFor(request.destination, sinkHandle(request.id), writer, connections, sourceKey);
  try {
    await sink.discard?.();
  } finally {
    await sink.close();
  }
}

/** A transfer destination's fence taken at a new epoch and not yet committed ({@link holdTransferFence}). */
export type TransferFenceHold = PostgresFenceHold;

/**
 * Takes the fence of the transfer's destination at `epoch`, held open, for a node that makes itself the owner
 * without running the transfer (a terminate of a transfer whose owner is gone): it waits out a stale owner's sink
 * transaction still open there, and once `commit`ted that owner cannot land anything more. `release` if the store
 * refuses the change of owner: a live owner's fence stays as it was. Null for destinations fenced otherwise: a
 * file is published only after the store's fenced `finishing` step, and nothing else holds a transaction open.
 *
 * @example
 * ```ts
 * const hold = await holdTransferFence(record.request, { connections }, record.epoch + 1);
 * try { await store.terminateAbandoned(id, record.epoch, identity); } catch (err) { await hold?.release(); throw err; }
 * await hold?.commit();
 * ```
 */
export async function holdTransferFence(
  request: TransferRequest,
  ctx: Pick<TransferContext, 'connections'>,
  epoch: number,
): Promise<TransferFenceHold | null> {
  const parsed = parseOrThrow(TransferRequestSchema, request, 'Invalid transfer request');
  if (parsed.destination.type !== 'postgres') return null;
  return holdPostgresFence({
    url: postgresUrl({ connections: ctx.connections }, parsed.destination.connection),
    writer: fenceWriter(parsed.id, sinkHandle(parsed.id)),
    epoch,
  });
}
