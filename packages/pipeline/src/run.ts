import { setTimeout as delay } from 'node:timers/promises';
import {
  type FieldType,
  type Logger,
  PIPELINE_DEFAULTS,
  type PipelineCheckpoint,
  silentLogger,
} from '@sluice/core';
import type { BadRecordCollector, BadRecordReport } from './bad-records.js';
import type { RestartPlan } from './dag.js';
import { inexactFieldProblem } from './json-numbers.js';
import { mergeSources } from './merge.js';
import { isPatch, keyOf, type RecordOp } from './ops.js';
import { ownField } from './own.js';
import { ProgressTracker } from './progress.js';
import { checkRecord, typeMismatch } from './schema.js';
import type { PipelineSink, RunMode, SourceBranch, SourceItem } from './types.js';

export interface RunPipelineOptions {
  /** Name used in logs (the transfer id or endpoint name). */
  name: string;
  dag: string;
  branches: SourceBranch[];
  sink: PipelineSink;
  mode: RunMode;
  /** A transfer that follows its sources after their snapshots until aborted (`options.follow`). */
  follow?: boolean;
  plan: RestartPlan;
  badRecords: BadRecordCollector;
  signal: AbortSignal;
  /** Called after the sink committed an epoch (the transfer's checkpoint port). */
  saveCheckpoint?: (checkpoint: PipelineCheckpoint) => Promise<void>;
  /** Checked on every record after the processors: values of the wrong type are bad records. */
  fields?: Record<string, FieldType>;
  /** Told what a branch's source declares its records' field types to be (`ReadOptions.fieldTypes`). */
  fieldTypes?: (branch: SourceBranch, fields: Record<string, FieldType>) => void;
  commitEveryRecords?: number;
  commitEveryMs?: number;
  /** Largest batch a source reads at once. Default: min(commitEveryRecords, 1000). */
  batchSize?: number;
  maxRecordsPerSecond?: number;
  progress?: ProgressTracker;
  onProgress?: (progress: ReturnType<ProgressTracker['snapshot']>) => void;
  /** Called after each commit (after the sink and the checkpoint port). */
  onCommit?: (checkpoint: PipelineCheckpoint) => void;
  logger?: Logger;
}

export interface RunPipelineResult {
  /** `true` when the run ended because `signal` was aborted. */
  aborted: boolean;
  checkpoint: PipelineCheckpoint | null;
  progress: ProgressTracker;
}

/** Counters carried in the sink's checkpoint position, so totals survive a resume. */
interface SinkPosition {
  written: number;
  read: number;
  bad: number;
  /** The last bad record's source and reason (kept with the count, so its evidence survives a restart). */
  lastBad?: LastBadRecord | null;
}

/** The last bad record of a run, as checkpoints keep it. */
export interface LastBadRecord {
  source: string;
  reason: string;
  at: string;
}

const TIMER = Symbol('timer');
/**
 * The longest a run works without handing the event loop a turn. A source whose items are all at hand (a replication
 * stream's buffered messages, a transfer's in-memory batches) resolves every `await` of the run at once, so the run
 * went on microtasks alone: an app-server's HTTP requests, its lease heartbeats and its other pipelines waited
 * until a big source transaction had been read whole (seconds).
 */
const SLICE_MS = 20;
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));
const ABORTED = Symbol('aborted');
/**
 * Why the sources' own signal aborts when a run ends: one reason for every run, because `abort()` without one
 * builds a DOMException with a stack trace each time (about 2 % of a node's CPU under many small transfers).
 */
const RUN_ENDED = Object.freeze(new Error('the pipeline run ended'));

/**
 * Thrown (and caught by `runPipeline`) when the signal aborted before a sink call: an owner that lost the
 * transfer (frozen past its lease, then resumed) must not touch the sink any more. Ends the run like any
 * abort (`aborted: true`).
 */
class SinkCallAborted extends Error {}

/**
 * Runs a DAG: pulls batches from the sources (so a slow sink slows them), passes every operation through
 * its branch's processors, writes to the sink, and every `commitEveryRecords` records or `commitEveryMs`
 * milliseconds commits an epoch: a checkpoint barrier holding every node's position, committed by the sink
 * with its data and then saved through `saveCheckpoint`.
 *
 * @example
 * ```ts
 * const plan = await decideRestart({ dag, branches, sink, checkpoint: await port.load() });
 * await sink.prepare(plan);
 * const { progress } = await runPipeline({ name: 'orders', dag, branches, sink, mode: 'transfer', plan,
 *   badRecords: new BadRecordCollector('skip'), signal, saveCheckpoint: (c) => port.save(c) });
 * ```
 */
/** The batch a run reads at once when its options name none: min(commitEveryRecords, 1000). */
function defaultBatchSize(commitEveryRecords: number): number {
  return Math.max(1, Math.min(commitEveryRecords, 1_000));
}

/**
 * The most records a run with this `commitEveryRecords` (and the default batch) writes between two commits outside
 * a source transaction: the commit cadence plus one batch. A cache sink lets its cache hold that many staged changes
 * in memory (core's `ApplyOptions.holdInMemory`), so only a source transaction larger than a commit spills.
 *
 * @example
 * ```ts
 * commitSizeOf(10_000); // 11 000
 * ```
 */
export function commitSizeOf(commitEveryRecords: number = PIPELINE_DEFAULTS.commitEveryRecords): number {
  return commitEveryRecords + defaultBatchSize(commitEveryRecords);
}

export async function runPipeline(options: RunPipelineOptions): Promise<RunPipelineResult> {
  const logger = options.logger ?? silentLogger;
  const { sink, branches, signal } = options;
  const commitEveryRecords = options.commitEveryRecords ?? PIPELINE_DEFAULTS.commitEveryRecords;
  const commitEveryMs = options.commitEveryMs ?? PIPELINE_DEFAULTS.commitEveryMs;
  const batchSize = options.batchSize ?? defaultBatchSize(commitEveryRecords);
  const progress = options.progress ?? new ProgressTracker();
  const start = options.plan.checkpoint;

  const positions: Record<string, unknown> = {};
  const processed: Record<string, number> = {};
  for (const { source, processors } of branches) {
    positions[source.handle] = start ? (start.positions[source.handle] ?? null) : null;
    for (const p of processors) {
      const previous = start?.positions[p.handle] as { processed?: number } | undefined;
      processed[p.handle] = previous?.processed ?? 0;
    }
  }
  const previousSink = (start?.positions[sink.handle] ?? null) as SinkPosition | null;
  progress.recordsRead = previousSink?.read ?? 0;
  progress.recordsWritten = previousSink?.written ?? 0;
  progress.badRecords = previousSink?.bad ?? 0;
  let lastBad: LastBadRecord | null = previousSink?.lastBad ?? null;
  const addBad = (report: BadRecordReport) => {
    options.badRecords.add(report);
    progress.badRecords++;
    lastBad = { source: report.source, reason: report.reason, at: new Date().toISOString() };
  };
  progress.epoch = start?.epoch ?? 0;
  let lastCheckpoint: PipelineCheckpoint | null = start;
  let dirty = 0;
  let lastCommitAt = Date.now();
  /** Sources in the middle of a transaction: no commit may cut it (it must become visible whole). */
  const openSources = new Set<string>();
  const report = () => {
    progress.lag = branches.reduce<number | null>((sum, b) => {
      const lag = b.source.lag?.() ?? null;
      return lag === null ? sum : (sum ?? 0) + lag;
    }, null);
    options.onProgress?.(progress.snapshot());
  };

  const commit = async () => {
    const checkpointPositions: Record<string, unknown> = { ...positions };
    for (const [handle, count] of Object.entries(processed))
      checkpointPositions[handle] = { processed: count };
    checkpointPositions[sink.handle] = {
      ...sink.position?.(),
      written: progress.recordsWritten,
      read: progress.recordsRead,
      bad: progress.badRecords,
      ...(lastBad !== null ? { lastBad } : {}),
    } satisfies SinkPosition;
    const checkpoint: PipelineCheckpoint = {
      dag: options.dag,
      epoch: progress.epoch + 1,
      positions: checkpointPositions,
      at: new Date().toISOString(),
    };
    ensureNotAborted();
    await sink.commit(checkpoint);
    await options.saveCheckpoint?.(checkpoint);
    for (const { source } of branches) source.committed?.(checkpointPositions[source.handle]);
    progress.epoch = checkpoint.epoch;
    lastCheckpoint = checkpoint;
    dirty = 0;
    lastCommitAt = Date.now();
    progress.sample();
    report();
    options.onCommit?.(checkpoint);
  };

  const ensureNotAborted = () => {
    if (signal.aborted) throw new SinkCallAborted();
  };

  const keyFields = sink.keyFields;
  const fields = options.fields ?? sink.fields;
  /**
   * An endpoint mirrors its source: a record it refuses (a value its schema cannot hold — a `numeric` beyond a double)
   * is the source's current state of its key, so what the endpoint held of that key is gone from the source too. It
   * is deleted rather than kept: skipping the upsert alone left an UPDATE's replaced value served as fresh. A transfer
   * copies records and skips a bad one (its destination may hold nothing to replace).
   */
  const mirrors = options.mode === 'endpoint' && keyFields.length > 0;
  /** The key of a refused record, when the key itself is sound (null: nothing to delete by). */
  const unheldKey = (record: Record<string, unknown>): unknown[] | null => {
    const key = keyOf(record, keyFields);
    if (key === undefined) return null;
    return fields && keyProblem(key, keyFields, fields) !== null ? null : key;
  };
  /** The ops a source op becomes through its branch's processors. */
  const processOp = (branch: SourceBranch, op: RecordOp): RecordOp[] => {
    let ops: RecordOp[] = [op];
    for (const processor of branch.processors) {
      const next: RecordOp[] = [];
      for (const current of ops) {
        const result = processor.process(current);
        if (result === null) continue;
        if (Array.isArray(result)) next.push(...result);
        else next.push(result);
      }
      processed[processor.handle] = (processed[processor.handle] ?? 0) + ops.length;
      ops = next;
    }
    return ops;
  };
  /**
   * Adds to `into` what a source op becomes for the sink (with the source op it came from): its processors' results,
   * each checked — a bad record is reported (and a mirror deletes its key). False, adding nothing, for a partial
   * upsert (unchanged TOAST values) that no sink could fill — the sink holds no previous records, or the filter needs
   * a field the `select` drops — and that its source can complete: admit what the source completes it to instead.
   */
  const admit = (branch: SourceBranch, op: RecordOp, into: Admitted): boolean => {
    const ops = processOp(branch, op);
    if (
      completable(branch, op) &&
      ops.some((current) => isPatch(current) && patchProblem(current, sink) !== null)
    )
      return false;
    for (const current of ops) {
      if (current.op === 'delete') {
        const problem = fields ? keyProblem(current.key, keyFields, fields) : null;
        if (problem !== null) {
          addBad({ source: branch.source.handle, ...current.at, reason: problem });
          continue;
        }
      } else {
        const problem =
          keyFields.length > 0 && keyOf(current.record, keyFields) === undefined
            ? `missing primary key field(s) ${keyFields.join(', ')}`
            : ((fields ? checkRecord(current.record, fields) : null) ??
              // A JSON document the source could not read exactly (json-numbers.ts), typed or not.
              inexactFieldProblem(current.record));
        const partial = problem === null && isPatch(current) ? patchProblem(current, sink) : null;
        if (problem !== null || partial !== null) {
          addBad({ source: branch.source.handle, ...current.at, reason: (problem ?? partial)! });
          const unheld = mirrors ? unheldKey(current.record) : null;
          if (unheld !== null) {
            into.ops.push({ op: 'delete', key: unheld, ...(current.at ? { at: current.at } : {}) });
            into.origins.push(op);
          }
          continue;
        }
      }
      into.ops.push(current);
      into.origins.push(op);
    }
    return true;
  };
  /**
   * Writes ops; what the sink refuses is a bad record, but for `retry` (a partial upsert its source can complete):
   * whether that one was refused.
   */
  const writeOps = async (
    branch: SourceBranch,
    ops: RecordOp[],
    retry: RecordOp | null,
  ): Promise<boolean> => {
    ensureNotAborted();
    const result = await sink.write(ops);
    let refused = 0;
    let retried = false;
    for (const { op, reason } of result?.refused ?? []) {
      refused++;
      if (op === retry) retried = true;
      else addBad({ source: branch.source.handle, ...op.at, reason });
    }
    progress.recordsWritten += ops.length - refused;
    return retried;
  };
  /**
   * Writes admitted ops in their order. A partial upsert the sink refuses (it holds no record to fill it from: a
   * row entering the endpoint's filter, a row its cache lost) is completed by its source and written right after
   * it, before anything that followed it — so where the source can complete them, each partial upsert ends a write.
   */
  const writeAdmitted = async (branch: SourceBranch, { ops, origins }: Admitted): Promise<void> => {
    let from = 0;
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      const origin = origins[i]!;
      if (!isPatch(op) || !completable(branch, origin)) continue;
      const part = from === 0 && i === ops.length - 1 ? ops : ops.slice(from, i + 1);
      from = i + 1;
      if (!(await writeOps(branch, part, op))) continue;
      ensureNotAborted();
      const whole: Admitted = { ops: [], origins: [] };
      admit(branch, await branch.source.complete!(origin), whole);
      if (whole.ops.length > 0) await writeOps(branch, whole.ops, null);
    }
    if (from < ops.length) await writeOps(branch, from === 0 ? ops : ops.slice(from), null);
  };
  const handleRecords = async (branch: SourceBranch, item: Extract<SourceItem, { kind: 'records' }>) => {
    for (const bad of item.bad) addBad(bad);
    const out: Admitted = { ops: [], origins: [] };
    for (const op of item.ops) {
      if (admit(branch, op, out)) continue;
      // A partial upsert no sink can fill: its source reads the values it lacks (a point read by key).
      ensureNotAborted();
      admit(branch, await branch.source.complete!(op as CompletableOp), out);
    }
    progress.recordsRead += item.read;
    if (item.truncate) {
      ensureNotAborted();
      if (sink.truncate) await sink.truncate();
      else
        logger.warn(
          { pipeline: options.name, source: branch.source.handle },
          'sink cannot truncate; skipped',
        );
    }
    if (item.open) openSources.add(branch.source.handle);
    else openSources.delete(branch.source.handle);
    if (out.ops.length > 0) await writeAdmitted(branch, out);
    positions[branch.source.handle] = item.position;
    dirty += Math.max(1, item.read);
    // One commit may hold several source transactions (group commit): the sink's change log shows each apart.
    if (item.transactionEnd && sink.markTransaction) sink.markTransaction({ ...positions });
  };

  const controller = new AbortController();
  const stopSources = () => controller.abort();
  signal.addEventListener('abort', stopSources, { once: true });
  const follows = options.mode === 'endpoint' || options.follow === true;
  const readOptions = {
    signal: controller.signal,
    mode: options.mode,
    ...(options.follow === true ? { follow: true } : {}),
    batchSize,
  };
  const { fieldTypes } = options;
  const streams = branches.map((b) =>
    b.source.read(
      positions[b.source.handle] ?? null,
      fieldTypes ? { ...readOptions, fieldTypes: (fields) => fieldTypes(b, fields) } : readOptions,
    ),
  );
  const iterator = mergeSources(streams)[Symbol.asyncIterator]();
  const done = new Set<string>();
  progress.phase = 'snapshotting';
  report();
  logger.info(
    {
      pipeline: options.name,
      decision: options.plan.decision,
      reason: options.plan.reason,
      epoch: progress.epoch,
    },
    'pipeline started',
  );
  const throttleStart = Date.now();
  const throttleBase = progress.recordsRead;
  let sliceStart = performance.now();

  try {
    for (;;) {
      if (performance.now() - sliceStart >= SLICE_MS) {
        await turn();
        sliceStart = performance.now();
      }
      const next = iterator.next();
      let result: IteratorResult<{ branch: number; item: SourceItem }> | typeof TIMER | typeof ABORTED;
      for (;;) {
        let wait: number | undefined;
        if (dirty > 0 && openSources.size === 0) {
          wait = commitEveryMs - (Date.now() - lastCommitAt);
          if (wait <= 0) {
            await commit();
            continue;
          }
        }
        result = await settleOrAbort(next, signal, wait);
        if (result === TIMER) {
          await commit();
          continue;
        }
        break;
      }
      if (result === ABORTED) {
        void next.catch(() => {});
        progress.phase = 'stopped';
        report();
        return { aborted: true, checkpoint: lastCheckpoint, progress };
      }
      if (result.done) break;
      const { branch: index, item } = result.value;
      const branch = branches[index]!;
      if (item.kind === 'records') {
        await handleRecords(branch, item);
        if (openSources.size === 0 && (dirty >= commitEveryRecords || item.flush)) await commit();
        if (options.maxRecordsPerSecond) {
          const due =
            throttleStart + ((progress.recordsRead - throttleBase) * 1000) / options.maxRecordsPerSecond;
          const ahead = due - Date.now();
          if (ahead > 0) await settleOrAbort(delay(ahead), signal);
        }
        progress.sample();
        report();
      } else {
        positions[branch.source.handle] = item.position;
        dirty++;
        await commit();
        ensureNotAborted();
        await sink.snapshotDone?.(branch.source.handle, lastCheckpoint);
        done.add(branch.source.handle);
        logger.info({ pipeline: options.name, source: branch.source.handle }, 'snapshot done');
        if (done.size === branches.length && follows) {
          progress.phase = 'streaming';
          report();
        }
      }
    }
    if (signal.aborted) {
      progress.phase = 'stopped';
      return { aborted: true, checkpoint: lastCheckpoint, progress };
    }
    if (options.mode === 'transfer') {
      // The final checkpoint goes through the (fenced) checkpoint port before the sink publishes; a sink whose
      // publish cannot be taken back confirms its epoch once more in `finish` (`SinkFence.finishing`), so an
      // owner that lost the transfer fails there (STALE_EPOCH) instead of publishing its output.
      if (dirty > 0 || lastCheckpoint === null) await commit();
      ensureNotAborted();
      await sink.finish();
    } else if (dirty > 0) await commit();
    // Every source ended: a transfer is done; an endpoint keeps serving what it built.
    progress.phase = 'completed';
    report();
    return { aborted: false, checkpoint: lastCheckpoint, progress };
  } catch (err) {
    if (err instanceof SinkCallAborted) {
      progress.phase = 'stopped';
      report();
      return { aborted: true, checkpoint: lastCheckpoint, progress };
    }
    progress.phase = 'failed';
    report();
    throw err;
  } finally {
    signal.removeEventListener('abort', stopSources);
    controller.abort(RUN_ENDED);
    void iterator.return?.(undefined).catch(() => {});
  }
}

/**
 * Waits for `promise`, or for `signal` to abort, or for `timeoutMs`. Listeners are removed every time:
 * racing against one long-lived promise would pin every settled value (each batch) in memory.
 */
function settleOrAbort<T>(
  promise: Promise<T>,
  signal: AbortSignal,
  timeoutMs?: number,
): Promise<T | typeof ABORTED | typeof TIMER> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      resolve(ABORTED);
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const cleanup = () => {
      if (timer !== undefined) clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    };
    const onAbort = () => {
      cleanup();
      resolve(ABORTED);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    if (timeoutMs !== undefined)
      timer = setTimeout(() => {
        cleanup();
        resolve(TIMER);
      }, timeoutMs);
    promise.then(
      (value) => {
        cleanup();
        resolve(value);
      },
      (err: unknown) => {
        cleanup();
        reject(err);
      },
    );
  });
}

/**
 * Why a partial upsert (unchanged TOAST values, see ops.ts) cannot be written, or null: only a sink that holds the
 * previous record fills it in, and only when its filter can be decided on the merged record.
 */
function patchProblem(op: RecordOp, sink: PipelineSink): string | null {
  if (op.op === 'delete') return null;
  if (op.lost !== undefined && op.lost.length > 0)
    return `unchanged TOAST value(s) of ${(op.unchanged ?? []).join(', ')} not sent, and the filter needs field(s) ${op.lost.join(', ')} the endpoint does not keep`;
  if (sink.acceptsPatches === true) return null;
  return `unchanged TOAST value(s) of ${(op.unchanged ?? []).join(', ')} not sent; set REPLICA IDENTITY FULL on the source table`;
}

/** Ops on their way to the sink, each with the source op it came from (what its source completes, if need be). */
interface Admitted {
  ops: RecordOp[];
  origins: RecordOp[];
}

/** A partial upsert as a source delivers it: what `PipelineSource.complete` takes. */
type CompletableOp = Extract<RecordOp, { op: 'upsert' }>;

/** Whether `op` is a partial upsert its branch's source can complete (`PipelineSource.complete`). */
function completable(branch: SourceBranch, op: RecordOp): op is CompletableOp {
  return (
    branch.source.complete !== undefined &&
    op.op === 'upsert' &&
    op.unchanged !== undefined &&
    op.unchanged.length > 0
  );
}

/** Why a delete's key does not fit the key fields' types, or null. */
function keyProblem(
  key: readonly unknown[],
  keyFields: readonly string[],
  fields: Record<string, FieldType>,
): string | null {
  if (key.length !== keyFields.length) return `a delete needs ${keyFields.length} key value(s)`;
  for (let i = 0; i < key.length; i++) {
    const type = ownField(fields, keyFields[i]!);
    if (key[i] === null || key[i] === undefined) return `key field "${keyFields[i]}" is missing`;
    const problem = type ? typeMismatch(key[i], type) : null;
    if (problem !== null) return `key field "${keyFields[i]}": ${problem}`;
  }
  return null;
}
