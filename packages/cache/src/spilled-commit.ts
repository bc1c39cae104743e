/**
 * The commit of a transaction that outgrew memory: its changes wait in the staging area (staging.ts) and are applied,
 * each in order, inside the commit's one write transaction. That can take seconds (a million-row UPDATE: tens of
 * seconds), so it runs on a thread of its own (commit-thread.ts) and the writer's event loop — an app-server's HTTP
 * requests, lease heartbeats, other endpoints' pipelines — keeps turning. Everything it needs crosses as plain data
 * (a {@link SpilledCommitJob}); this module is the one definition of what such a commit does, whichever thread runs it.
 */
import {
  type CacheSchema,
  type CommitState,
  type FieldType,
  type PipelineCheckpoint,
  StaleEpochError,
} from '@sluice/core';
import type { Transaction } from 'lmdb';
import type { ResolvePatches } from './batch-write.js';
import { type CacheDbs, EMPTY_COMMIT, indexKey, type StoredSchema } from './cache-dbs.js';
import { appendSteps, type ChangeRetention, type OldestTransactionMemo } from './change-log.js';
import { mergePatch } from './patch.js';
import { recordSerializer } from './record-json.js';
import { timestampFieldSet } from './schema.js';
import { readToEnd, replaySteps } from './staged-replay.js';
import type { StagingArea } from './staging.js';

/** What a commit of spilled sets is asked to do (structured-clonable: it crosses to the commit thread). */
export interface SpilledCommitJob {
  /** The generation's LMDB environment. */
  path: string;
  /** The writer's schema: the stored one plus the fields added since the last commit (patches are resolved with it). */
  schema: CacheSchema;
  /** The staging sets this commit applies, oldest first. */
  sets: number[];
  /** The checkpoint to write, or `keep` for the one the cache holds when the transaction runs. */
  checkpoint: { kind: 'write'; value: PipelineCheckpoint | null } | { kind: 'keep' };
  fence?: { writer: string; epoch: number } | undefined;
  /** Fields added since the last commit: stored in the schema entry by this commit. */
  adding: Record<string, FieldType>;
  /** `full`: every change goes to the change log; `commits`: only the commit marker. */
  changeLog: 'full' | 'commits';
  retention: ChangeRetention;
  /** The commit instant (ms since the epoch) the change log records. */
  now: number;
  memo: { oldest?: OldestTransactionMemo };
}

/** What it did: the commit state it left, and the change log's memo after its trim. */
export interface SpilledCommitOutcome {
  state: CommitState;
  memo: { oldest?: OldestTransactionMemo };
}

/** The commit state stored in `dbs`, read in `transaction` (else in the current one). */
export function storedCommit(dbs: CacheDbs, transaction?: Transaction): CommitState {
  const state = dbs.meta.get('commit', transaction ? { transaction } : undefined) as CommitState | undefined;
  return state ? { ...state, snapshottingDone: [...state.snapshottingDone] } : { ...EMPTY_COMMIT };
}

/**
 * The writer fences a commit leaves: `fence` recorded, or a `STALE_EPOCH` thrown (inside the transaction, so it
 * aborts and nothing of the commit is written; docs/fencing.md) when a higher epoch of its writer committed.
 */
export function fencesAfter(
  state: CommitState,
  fence: { writer: string; epoch: number } | undefined,
): CommitState['fences'] {
  if (fence === undefined) return state.fences;
  const highest = state.fences?.[fence.writer] ?? 0;
  if (highest > fence.epoch)
    throw new StaleEpochError(fence.writer, fence.epoch, { details: { epoch: highest } });
  return { ...state.fences, [fence.writer]: fence.epoch };
}

/**
 * The end of a commit's write transaction: the fields it adds stored in the schema entry, and the commit state it
 * leaves (its checkpoint, its instant, its record count, the writer fences).
 */
export function landedState(
  dbs: CacheDbs,
  state: CommitState,
  commit: {
    fences: CommitState['fences'];
    checkpoint: CommitState['checkpoint'];
    recordCount: number;
    adding: Record<string, FieldType>;
  },
): CommitState {
  if (Object.keys(commit.adding).length > 0) {
    const stored = dbs.meta.get('schema') as StoredSchema;
    dbs.meta.putSync('schema', {
      ...stored,
      addedFields: { ...stored.addedFields, ...commit.adding },
    } satisfies StoredSchema);
  }
  return {
    ...state,
    ...(commit.fences !== undefined ? { fences: commit.fences } : {}),
    checkpoint: commit.checkpoint,
    committedAt: new Date().toISOString(),
    recordCount: commit.recordCount,
  };
}

/** Resolves a staged patch against the record stored when the commit runs (in its write transaction). */
export function patchResolver(dbs: CacheDbs, schema: CacheSchema): ResolvePatches {
  const timestamps = timestampFieldSet(schema);
  const serialize = recordSerializer(schema);
  return (change, stored) => {
    let record = stored;
    for (const patch of change.patches ?? []) record = mergePatch(record, patch, timestamps);
    change.patches = null;
    if (record === undefined) {
      change.bytes = null;
      change.indexKeys = null;
      return;
    }
    change.bytes = Buffer.from(serialize(record), 'utf8');
    change.indexKeys = dbs.indexes.map((index) => indexKey(index, record, schema.primaryKey));
  };
}

/**
 * Applies the job's staging sets and writes the commit state, in the current write transaction of `dbs`' environment.
 * Throws `STALE_EPOCH` (the transaction then aborts) for a fenced-off writer.
 */
export function commitSpilledSets(
  dbs: CacheDbs,
  staging: StagingArea,
  job: SpilledCommitJob,
): SpilledCommitOutcome {
  const state = storedCommit(dbs);
  const fences = fencesAfter(state, job.fence);
  const checkpoint = job.checkpoint.kind === 'keep' ? state.checkpoint : job.checkpoint.value;
  const outcome = { delta: 0 };
  const steps = replaySteps(
    dbs,
    job.schema.primaryKey,
    (function* chain() {
      for (const set of job.sets) yield* staging.steps(set);
    })(),
    patchResolver(dbs, job.schema),
    outcome,
  );
  // The steps apply the staged changes as they are read (replaySteps is lazy): a commit that logs its changes
  // reads them as it appends them to the change log; one that logs only the commit reads them here.
  if (job.changeLog === 'commits') readToEnd(steps);
  const memo = { ...job.memo };
  appendSteps(dbs, job.changeLog === 'commits' ? [] : steps, checkpoint, job.retention, job.now, memo);
  staging.dropSets(job.sets);
  const next = landedState(dbs, state, {
    fences,
    checkpoint,
    recordCount: state.recordCount + outcome.delta,
    adding: job.adding,
  });
  dbs.meta.putSync('commit', next);
  return { state: next, memo };
}
