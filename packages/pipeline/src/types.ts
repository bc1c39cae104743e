import type { CheckpointPort, FieldType, PipelineCheckpoint } from '@sluice/core';
import type { BadRecordReport } from './bad-records.js';
import type { RecordOp } from './ops.js';

/** How a pipeline runs: a transfer reads each source to its end; an endpoint keeps following. */
export type RunMode = 'transfer' | 'endpoint';

/** A batch of operations read from a source, with the source's position after the last of them. */
export interface SourceBatch {
  kind: 'records';
  ops: RecordOp[];
  /** Records the source read for this batch (including bad ones). */
  read: number;
  bad: BadRecordReport[];
  /** Position after this batch; resuming from it reads what follows. */
  position: unknown;
  /**
   * The source transaction continues in the next batch: no commit may fall between this batch and the end of
   * the transaction, so it becomes visible whole (logical replication). `position` stays the last committed one.
   */
  open?: boolean;
  /** Commit right after this batch (a source with nothing more at hand: keeps the lag low). */
  flush?: boolean;
  /**
   * This batch ends a source transaction (logical replication's `Commit`) that changed records: a sink that keeps a
   * change log marks it there, so a commit holding several transactions still shows each apart.
   */
  transactionEnd?: boolean;
  /** The destination is emptied (a truncate) before this batch's ops: staged and committed records alike. */
  truncate?: boolean;
}

/** The source has read everything that existed when it started (its snapshot). */
export interface SnapshotDoneMark {
  kind: 'snapshot-done';
  position: unknown;
}

export type SourceItem = SourceBatch | SnapshotDoneMark;

/**
 * The answer of a source asked whether it can continue from a checkpointed position. `sourceChanged`: it cannot
 * because what it reads changed (a table dropped and recreated, columns changed) — the new generation is a schema
 * change, not a plain restart.
 */
export type ResumeCheck = { ok: true } | { ok: false; reason: string; sourceChanged?: boolean };

export interface ReadOptions {
  signal: AbortSignal;
  mode: RunMode;
  /**
   * A transfer that follows (`options.follow`): after its snapshot the source keeps delivering changes until the
   * run is aborted, as an endpoint's does. Endpoints always follow.
   */
  follow?: boolean;
  /** Upper bound of operations in one batch. */
  batchSize: number;
  /**
   * Told the field types of the records the source delivers from now on, as its system declares them (a replicated
   * table's columns), whenever they may have changed: once as it starts reading, and again when the table gains a
   * column — before any record that carries it. Sources that cannot tell never call it.
   */
  fieldTypes?: (fields: Record<string, FieldType>) => void;
}

/**
 * A source node. `read` is pulled (async iteration), so a slow consumer slows the source and memory stays
 * bounded by one batch per source.
 */
export interface PipelineSource {
  /** Derived from configuration, stable across restarts. */
  readonly handle: string;
  /** The configuration that identifies this source (part of the DAG hash). */
  readonly description: unknown;
  canResume(position: unknown): Promise<ResumeCheck>;
  /**
   * Checks the source's configuration against the real system before anything is planned (a replication source:
   * `wal_level`, the `REPLICATION` privilege, the table's replica identity) and throws its stable error, so a
   * misconfiguration stops start-up rather than surfacing later as a retried failure.
   */
  preflight?(): Promise<void>;
  /**
   * The field type of each field its records carry, from the types the source system declares for them (a
   * PostgreSQL table's or query's columns), so an endpoint's schema does not depend on the values present when it
   * was sampled. Sources that cannot tell (files, JetStream) omit it: their fields are inferred from a sample.
   */
  fieldTypes?(): Promise<Record<string, FieldType>>;
  /** Reads from `position` (`null` = from the beginning). */
  read(position: unknown | null, options: ReadOptions): AsyncIterable<SourceItem>;
  /**
   * Called after the sink committed (and the checkpoint port saved) a checkpoint holding `position` for this
   * source: a source that confirms what it delivered (a replication slot's flush position) does it here, never
   * earlier.
   */
  committed?(position: unknown): void;
  /**
   * Completes a partial upsert this source delivered (`RecordOp.unchanged`: PostgreSQL sent no value for TOASTed
   * columns an update left unchanged) from what the source holds now, when no sink holds the previous record to fill
   * it from: the upsert with those values, or a delete of its key when the source holds no record under it any more
   * (its removal follows in what the source delivers). The values may be newer than the change (a later one set them
   * again; it follows too). Throws when the source cannot be read (the run fails and is retried from its checkpoint).
   * Sources that never deliver partial upserts omit it.
   *
   * @example
   * ```ts
   * const whole = await source.complete?.({ op: 'upsert', record: { id: 2, status: 'active' }, unchanged: ['body'] });
   * // { op: 'upsert', record: { id: 2, status: 'active', body: '…' } }, or { op: 'delete', key: [2] }
   * ```
   */
  complete?(op: Extract<RecordOp, { op: 'upsert' }>): Promise<RecordOp>;
  /** How far the source is ahead of what was read (records), when it can tell. */
  lag?(): number | null;
  /**
   * The transfer that read this source reached its terminal state (recorded in the store): remove what the source
   * kept for resuming outside the process (a replication slot and its publication). Sources that keep nothing omit it.
   */
  discard?(): Promise<void>;
  close(): Promise<void>;
}

/** A processor node: maps one operation to zero, one or several. Must be pure (no own state to checkpoint). */
export interface PipelineProcessor {
  readonly handle: string;
  readonly description: unknown;
  process(op: RecordOp): RecordOp | RecordOp[] | null;
  /**
   * The field types of what it outputs, given those of its input — for processors that only keep, drop or rename
   * fields (filter, select). Processors that compute fields (function) omit it: their output is typed from a sample.
   */
  mapFields?(fields: Record<string, FieldType>): Record<string, FieldType>;
}

/** A sink node. Writes are staged; `commit` makes them durable together with the checkpoint. */
export interface PipelineSink {
  readonly handle: string;
  readonly description: unknown;
  /** Primary-key fields the sink needs on every record (records without them are bad records). */
  readonly keyFields: readonly string[];
  /** Field types the sink requires (a cache's schema): records with other types become bad records. */
  readonly fields?: Record<string, FieldType>;
  /**
   * `true` when the sink stores the checkpoint atomically with its data (`committed()` is then
   * authoritative); `false` when its writes are idempotent on replay and it keeps no checkpoint.
   */
  readonly keepsCheckpoint: boolean;
  /**
   * The checkpoint the sink committed with its data, or null. `pipeline` is the checkpoint loaded from the
   * checkpoint port: a sink whose position lives in that checkpoint (the file sink) checks its data against it.
   */
  committed(pipeline?: PipelineCheckpoint | null): Promise<PipelineCheckpoint | null>;
  /**
   * Extra fields recorded in the sink's position of every checkpoint (taken just before `commit`), e.g.
   * the file sink's private temp file and its committed length.
   */
  position?(): Record<string, unknown>;
  /** Called once before writing: `from-scratch` discards whatever the sink staged in earlier runs. */
  prepare(decision: {
    decision: 'resume' | 'from-scratch';
    checkpoint: PipelineCheckpoint | null;
  }): Promise<void>;
  /**
   * Stages `ops`. A sink may refuse some (returned with the reason: they count as bad records, not as written),
   * e.g. a partial upsert with no stored record to fill it from.
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: most sinks' `write` resolves to nothing (void), not undefined
  write(ops: RecordOp[]): Promise<void | SinkWriteResult>;
  /**
   * `true` when the sink takes partial upserts (`RecordOp.unchanged` / `where`, see ops.ts) and fills them from the
   * record it holds; for other sinks such an op is a bad record.
   */
  readonly acceptsPatches?: boolean;
  /**
   * Empties the destination as part of the current epoch (a source's truncate): what is staged and what is
   * committed. Sinks without it skip truncates (with a warning), as the file sink skips deletes.
   */
  truncate?(): Promise<void>;
  commit(checkpoint: PipelineCheckpoint): Promise<void>;
  /**
   * A source transaction ended with the ops written since the last mark, at `positions` (source handle →
   * position): a sink with a change log (the cache) shows it apart even when one commit holds several.
   */
  markTransaction?(positions: Record<string, unknown>): void;
  /** A source has finished its snapshot and everything it read is committed. */
  snapshotDone?(sourceHandle: string, checkpoint: PipelineCheckpoint | null): Promise<void>;
  /**
   * Every source ended (transfers): make the result visible. What the sink committed for resuming stays until
   * `discard`: an owner that dies before the store records COMPLETED leaves its successor a resume point at
   * the end, so the successor writes nothing a second time.
   */
  finish(): Promise<void>;
  /**
   * The transfer's terminal state (COMPLETED, FAILED, TERMINATED) is recorded in the store: remove what this writer
   * kept in any run for resuming (temp files, committed checkpoints); nothing will resume from it. Never called
   * before that record, and it never touches the fence: a stale owner is still refused. Sinks that keep nothing
   * outside their destination omit it.
   */
  discard?(): Promise<void>;
  close(): Promise<void>;
}

/** What {@link PipelineSink.write} refused. */
export interface SinkWriteResult {
  refused: Array<{ op: RecordOp; reason: string }>;
}

/**
 * The fencing token a transfer's sink carries to where its effects land: the run's epoch (`0` = unfenced), the
 * store's fenced "finishing" step (throws `STALE_EPOCH` once another owner took over) and, where the owner can tell,
 * whether it may still write at all (`mayWrite`). The checkpoint port is one.
 */
export type SinkFence = Pick<CheckpointPort, 'epoch' | 'finishing' | 'mayWrite'>;

/** No fencing (fire-and-forget runs, tools): epoch 0 and a finishing step that always passes. */
export const UNFENCED: SinkFence = { epoch: 0, finishing: async () => {} };

/** One source with its chain of processors. */
export interface SourceBranch {
  source: PipelineSource;
  processors: PipelineProcessor[];
}
