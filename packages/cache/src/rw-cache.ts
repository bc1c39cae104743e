import {
  type ApplyOptions,
  BadRecordError,
  CacheConflictError,
  type CacheSchema,
  type CommitOptions,
  type CommitState,
  type FieldType,
  type PipelineCheckpoint,
  PipelineCheckpointSchema,
  parseOrThrow,
  type RecordOp,
  SluiceError,
  type WritableCache,
} from '@sluice/core';
import { z } from 'zod';
import { type StagedChange, writeChanges } from './batch-write.js';
import { dataKey, indexKey } from './cache-dbs.js';
import { appendChanges, clearChanges, ensureChangeLog, type OldestTransactionMemo } from './change-log.js';
import { CommitThread } from './commit-thread.js';
import { translateWriteError } from './errors.js';
import {
  appendRuns,
  dropIndexBuild,
  ensureRunsDb,
  finishIndexBuild,
  INDEX_BUILD_KEY,
  type IndexBuildState,
  newIndexBuild,
  pendingBuild,
} from './index-build.js';
import { mergePatch, patchOf, type RecordPatch } from './patch.js';
import { decodeRecord, recordSerializer } from './record-json.js';
import { type CacheHandleInit, RoCache } from './ro-cache.js';
import {
  checkRecord,
  keyOf,
  keyProblem,
  newFields,
  storedKey,
  timestampFieldSet,
  withAddedFields,
} from './schema.js';
import { fencesAfter, landedState, patchResolver, type SpilledCommitOutcome } from './spilled-commit.js';
import { StagingArea, type StagingStep } from './staging.js';

/** A staged change of one primary key (see batch-write.ts). */
type Staged = StagedChange;

/**
 * What a commit under way took: the changes staged in memory, or the staging area's sets (every change staged
 * since the last commit, once some of them outgrew memory). Later applies judge conflicts against both.
 */
interface Committing {
  batch: Map<string, Staged>;
  sets: number[];
}

const CheckpointInput = PipelineCheckpointSchema.nullable();
const SourceHandle = z.string().min(1).max(512);
const MAX_OPS_PER_APPLY = 1_000_000;

/**
 * The writable handle of a cache generation (one writer process per cache). Writes are staged by `apply` and
 * become visible together at `commit`, which writes the records, every secondary index, the checkpoint and the
 * commit instant in one LMDB transaction: a reader never sees records that disagree with the checkpoint it
 * reads, and a crash mid-commit leaves the previous commit intact.
 *
 * @example
 * ```ts
 * await using cache = await manager.create({ endpoint: 'items', schema });
 * cache.apply([{ op: 'upsert', record: { id: 1, value: 10 } }]);
 * await cache.commit(checkpoint);
 * ```
 */
export class RwCache extends RoCache implements WritableCache {
  private staged = new Map<string, Staged>();
  /** What `commit` calls that have not landed yet took, oldest first (visible to conflict checks). */
  private committing: Committing[] = [];
  /**
   * Where staged changes go once more than `stagedInMemory` of them are held (staging.ts): the sets spilled since
   * the last commit took them, oldest first; the newest, `openSet`, takes further spills from sequence `openSeq`.
   * While any exists, a commit spills what memory holds too and applies the sets (staged-replay.ts).
   */
  private readonly staging: StagingArea;
  private pendingSets: number[] = [];
  private openSet: number | null = null;
  private openSeq = 0;
  /** Changes held in memory since the last spill or commit (each source transaction's, in order). */
  private memorySteps = 0;
  /**
   * The source transactions staged for the next commit (see {@link markTransaction}): each one's changes in the
   * order they were applied, and its positions; `openTransaction` holds what was applied since the last mark.
   * `transactionsLost` is set when a failed commit put its batch back (its changes are in no transaction list):
   * the next commit then logs its changes together, as one.
   */
  private transactions: Array<{ changes: Staged[]; positions: Record<string, unknown> }> = [];
  private openTransaction: Staged[] = [];
  private transactionsLost = false;
  private writing: Promise<unknown> = Promise.resolve();
  /** The change log's oldest transaction as this writer's last trim found it (so trims do not re-read it). */
  private readonly changeLogMemo: { oldest?: OldestTransactionMemo } = {};
  /**
   * The schema records are checked and written with: the stored one plus the fields added and not yet committed
   * (`pendingFields`, written by the next commit that lands). The only writer knows it without reading it back.
   */
  private writerSchema: CacheSchema;
  /** Where commits of spilled transactions run (started at the first one). */
  private commitThread: CommitThread | null = null;
  private pendingFields: Record<string, FieldType> = {};

  constructor(init: CacheHandleInit) {
    super(init);
    this.writerSchema = withAddedFields(init.schema, init.addedFields);
    ensureChangeLog(this.dbs);
    ensureRunsDb(this.dbs);
    this.staging = new StagingArea(this.dbs);
    this.staging.discardLeftovers();
  }

  /** The schema this writer checks records against: the stored one plus the fields added since the last commit. */
  override get schema(): CacheSchema {
    return this.writerSchema;
  }

  /**
   * Adds fields to the generation's schema (see core's `WritableCache.addFields`): records applied from now on are
   * checked against them, and the next commit that lands writes them into the stored schema entry in its own
   * transaction, so readers see them with the records that carry them. The schema's identity (`schemaHash`, the
   * alias table's copy) is not touched. A commit that fails keeps them for the next one.
   *
   * @example
   * ```ts
   * cache.addFields({ note: 'string' });
   * cache.apply([{ op: 'upsert', record: { id: 3, note: 'x' } }]);
   * await cache.commit(checkpoint);
   * ```
   */
  addFields(fields: Record<string, FieldType>): void {
    this.assertOpen();
    const added = newFields(this.writerSchema, fields);
    if (Object.keys(added).length === 0) return;
    this.pendingFields = { ...this.pendingFields, ...added };
    this.writerSchema = withAddedFields(this.writerSchema, added);
  }

  /**
   * Number of primary keys with staged, uncommitted changes held in memory (changes spilled to the staging area
   * once more than `stagedInMemory` were held are not counted).
   */
  get pendingCount(): number {
    return this.staged.size;
  }

  /**
   * Stages inserts, updates, upserts and deletes, all or nothing: a bad record (`BAD_RECORD`) or a conflict
   * under `onConflict: 'fail'` (`CACHE_CONFLICT`) rejects the whole batch and stages nothing. Conflicts are
   * judged against the committed state plus everything staged before.
   */
  apply(ops: RecordOp[], options: ApplyOptions = {}): void {
    this.assertOpen();
    const policy = options.onConflict ?? 'fail';
    if (policy !== 'fail' && policy !== 'skip' && policy !== 'overwrite')
      throw new BadRecordError(`Unknown conflict policy "${String(policy)}"`, {});
    if (!Array.isArray(ops)) throw new BadRecordError('apply expects an array of operations', {});
    if (ops.length > MAX_OPS_PER_APPLY)
      throw new BadRecordError(`At most ${MAX_OPS_PER_APPLY} operations per apply`, {});
    const batch = new Map<string, Staged>();
    const serialize = recordSerializer(this.schema);
    const pkFields = this.schema.primaryKey;
    const exists = (id: string, key: Buffer): boolean => {
      const own = this.pendingChange(id, key, batch);
      if (own) return own.bytes !== null || own.patches != null;
      return this.dbs.data.doesExist(key);
    };
    /** A whole record's staged change: its text and index keys, encoded now (outside the write transaction). */
    const whole = (key: Buffer, pk: unknown[], record: Record<string, unknown>): Staged => ({
      key,
      pk,
      bytes: Buffer.from(serialize(record), 'utf8'),
      indexKeys: this.dbs.indexes.map((index) => indexKey(index, record, pkFields)),
    });
    ops.forEach((op, i) => {
      if (typeof op !== 'object' || op === null)
        throw new BadRecordError(`Operation ${i} is not an object`, { offset: i });
      if (op.op === 'delete') {
        const problem = keyProblem(this.schema, op.key);
        if (problem) throw new BadRecordError(`Operation ${i}: ${problem}`, { offset: i });
        const pk = storedKey(this.schema, op.key);
        const key = dataKey(this.dbs, pk);
        const id = key.toString('latin1');
        if (!exists(id, key)) {
          if (policy === 'fail')
            throw new CacheConflictError(`Operation ${i}: delete of a key that does not exist`, {
              details: { index: i, key: op.key },
            });
          return;
        }
        batch.set(id, { key, pk: [...pk], bytes: null, indexKeys: null });
        return;
      }
      if (op.op !== 'insert' && op.op !== 'update' && op.op !== 'upsert')
        throw new BadRecordError(`Operation ${i}: unknown op "${String((op as { op?: unknown }).op)}"`, {
          offset: i,
        });
      let record: Record<string, unknown>;
      try {
        // No copy: everything kept of the record (its text, its keys) is encoded below, before apply returns.
        record = checkRecord(this.schema, op.record);
      } catch (err) {
        throw new BadRecordError(`Operation ${i}: ${(err as Error).message}`, { offset: i });
      }
      const pk = keyOf(this.schema, record);
      const key = dataKey(this.dbs, pk);
      const id = key.toString('latin1');
      const patch = patchOf(op, record, i);
      const from = (op as { from?: unknown }).from;
      if (patch !== null && from !== undefined) {
        // A changed primary key: the unchanged fields come from the record under `from` as it stands now (the
        // change of that key, if any, was staged before this op or is in a commit under way; else what is stored).
        const source = this.recordFrom(from, i, batch);
        const merged =
          source === undefined ? undefined : mergePatch(source, patch, timestampFieldSet(this.schema));
        if (source === undefined) {
          if (policy === 'fail')
            throw new CacheConflictError(`Operation ${i}: patch from a key that holds no record`, {
              details: { index: i, key: from },
            });
          return;
        }
        if (merged !== undefined) batch.set(id, whole(key, pk, merged));
        // The merged record fails `where`: nothing under the new key (a record there, if any, goes).
        else if (exists(id, key)) batch.set(id, { key, pk, bytes: null, indexKeys: null });
        return;
      }
      if (patch !== null) {
        // A patch needs a record to fill its unchanged fields from: one staged here, or the stored one (read at
        // commit, in the write transaction). Without one it cannot be written whole, whatever the policy.
        if (!exists(id, key)) {
          if (policy === 'fail')
            throw new CacheConflictError(`Operation ${i}: patch of a key that does not exist`, {
              details: { index: i, key: pk },
            });
          return;
        }
        const own = batch.get(id) ?? this.staged.get(id) ?? this.spilled(this.pendingSets, key);
        batch.set(id, this.layered(own, { key, pk, patch }, whole));
        return;
      }
      if (op.op !== 'upsert' && policy !== 'overwrite') {
        const present = exists(id, key);
        if ((op.op === 'insert' && present) || (op.op === 'update' && !present)) {
          if (policy === 'fail')
            throw new CacheConflictError(
              `Operation ${i}: ${op.op} of a key that ${present ? 'already exists' : 'does not exist'}`,
              { details: { index: i, key: pk } },
            );
          return;
        }
      }
      // Encoded now, outside the commit's write transaction: the stored text and every index key.
      batch.set(id, whole(key, pk, record));
    });
    for (const [id, change] of batch) {
      this.staged.set(id, change);
      this.openTransaction.push(change);
    }
    this.memorySteps += batch.size;
    if (this.memorySteps >= Math.max(this.settings.stagedInMemory, options.holdInMemory ?? 0)) this.spill();
  }

  /**
   * Moves what memory holds of the next commit — each change in order, the source transactions' marks, each key's
   * latest change — into the staging area's open set (a write transaction of its own; readers never see it).
   */
  private spill(): void {
    if (this.staged.size === 0 && this.transactions.length === 0 && this.openTransaction.length === 0) return;
    if (this.openSet === null) {
      this.openSet = this.staging.newSet();
      this.openSeq = 0;
      this.pendingSets.push(this.openSet);
    }
    const steps: StagingStep[] = [];
    if (this.transactionsLost)
      // A failed commit put its changes back outside any transaction list: they and what followed go as one.
      for (const change of this.staged.values()) steps.push({ change });
    else {
      for (const t of this.transactions) {
        for (const change of t.changes) steps.push({ change });
        steps.push({ positions: t.positions });
      }
      for (const change of this.openTransaction) steps.push({ change });
    }
    this.openSeq = this.staging.spill(this.openSet, this.openSeq, steps);
    this.staged = new Map();
    this.transactions = [];
    this.openTransaction = [];
    this.transactionsLost = false;
    this.memorySteps = 0;
  }

  /**
   * Stages the deletion of every record (a truncate of the source, inside its transaction): each committed one and
   * each one staged since the last commit, so it becomes visible with the rest of that transaction, never alone.
   * Memory stays bounded whatever the size: the deletes are applied a page at a time (and spill like any change).
   *
   * @example
   * ```ts
   * cache.apply(opsBeforeTheTruncate);
   * cache.truncate();
   * cache.apply(opsAfterIt);
   * await cache.commit(checkpoint); // the endpoint holds opsAfterIt's records only
   * ```
   */
  truncate(): void {
    this.assertOpen();
    const page = 10_000;
    const deleteAll = (pks: unknown[][]) => {
      if (pks.length > 0)
        this.apply(
          pks.map((key) => ({ op: 'delete', key })),
          { onConflict: 'overwrite' },
        );
    };
    // Staged since the last commit, in memory, spilled, or in a commit under way (listed before any is deleted).
    const memory = [...this.staged.values(), ...this.committing.flatMap((c) => [...c.batch.values()])];
    for (let i = 0; i < memory.length; i += page) deleteAll(memory.slice(i, i + page).map((c) => c.pk));
    for (const set of [...this.pendingSets, ...this.committing.flatMap((c) => c.sets)]) {
      let after: Buffer | null = null;
      for (;;) {
        const keys = this.staging.latestPage(set, after, page);
        if (keys.length === 0) break;
        after = keys[keys.length - 1]!.key;
        deleteAll(keys.map((k) => k.pk));
      }
    }
    // Committed, a page at a time in key order (each page read before its deletes are staged).
    let after: Buffer | null = null;
    for (;;) {
      const start: Buffer | undefined = after === null ? undefined : Buffer.concat([after, Buffer.from([0])]);
      const records: Array<{ key: Buffer; value: Buffer }> = [
        ...this.dbs.data.getRange({ ...(start ? { start } : {}), limit: page }),
      ];
      if (records.length === 0) break;
      after = Buffer.from(records[records.length - 1]!.key);
      deleteAll(records.map(({ value }) => keyOf(this.schema, decodeRecord(value))));
    }
  }

  /** The latest change of data key `key` in the staging area's `sets` (newest first), or undefined. */
  private spilled(sets: readonly number[], key: Buffer): Staged | undefined {
    for (let i = sets.length - 1; i >= 0; i--) {
      const change = this.staging.latest(sets[i]!, key);
      if (change !== undefined) return change;
    }
    return undefined;
  }

  /**
   * The latest change of the key `id` (data key `key`) not yet in the stored data: in this apply's `batch`, staged by
   * earlier applies (in memory, then spilled), or in a commit under way (newest first). Undefined when there is none.
   */
  private pendingChange(id: string, key: Buffer, batch: ReadonlyMap<string, Staged>): Staged | undefined {
    let own = batch.get(id) ?? this.staged.get(id) ?? this.spilled(this.pendingSets, key);
    for (let i = this.committing.length - 1; own === undefined && i >= 0; i--) {
      const taken = this.committing[i]!;
      own = taken.batch.get(id) ?? this.spilled(taken.sets, key);
    }
    return own;
  }

  /**
   * The record under primary-key values `from` as the next op would see it: staged (this apply's `batch`, earlier
   * applies), in a commit under way, else stored. Undefined when there is none, or when it is itself an unresolved
   * patch (its fields are known only at commit).
   */
  private recordFrom(
    from: unknown,
    index: number,
    batch: ReadonlyMap<string, Staged>,
  ): Record<string, unknown> | undefined {
    const problem = keyProblem(this.schema, from);
    if (problem) throw new BadRecordError(`Operation ${index}: "from": ${problem}`, { offset: index });
    const key = dataKey(this.dbs, storedKey(this.schema, from as unknown[]));
    const own = this.pendingChange(key.toString('latin1'), key, batch);
    if (own !== undefined) return own.bytes === null || own.patches ? undefined : decodeRecord(own.bytes);
    const stored = this.dbs.data.getBinary(key);
    return stored === undefined ? undefined : decodeRecord(stored);
  }

  /**
   * Marks the end of a source transaction among the staged changes, at `positions`: a commit holding several
   * (group commit under a burst) logs each apart — its changes in order, then a commit marker at its positions —
   * so a change feed sends each transaction and its `commit`, as if each had been committed alone. The records
   * written are the same either way (the last state of each key).
   *
   * @example
   * ```ts
   * cache.apply(firstTransactionOps);
   * cache.markTransaction({ 'orders.source': firstPosition });
   * cache.apply(secondTransactionOps);
   * await cache.commit(checkpointAtSecond); // log: first's changes, marker, second's changes, marker
   * ```
   */
  markTransaction(positions: Record<string, unknown>): void {
    this.assertOpen();
    this.transactions.push({ changes: this.openTransaction, positions: { ...positions } });
    this.openTransaction = [];
  }

  /**
   * The change log of a commit of `batch` as source transactions, or null to log the batch as one: no transaction
   * was marked, a failed commit lost the marks, or a patch is staged (its bytes are resolved for the last change of
   * its key only). A change whose key changes once in the commit and was written unchanged is left out, as in the
   * single form; a key changed several times logs each change.
   */
  private takeTransactions(): {
    earlier: Array<{ changes: Staged[]; positions: Record<string, unknown> }>;
    last: Staged[];
  } | null {
    const transactions = this.transactions;
    const open = this.openTransaction;
    const lost = this.transactionsLost;
    this.transactions = [];
    this.openTransaction = [];
    this.transactionsLost = false;
    if (lost || transactions.length === 0) return null;
    for (const t of transactions) for (const change of t.changes) if (change.patches) return null;
    for (const change of open) if (change.patches) return null;
    // The last marked transaction ends where the commit's checkpoint is when nothing was applied after it.
    if (open.length === 0) {
      const final = transactions.pop()!;
      return { earlier: transactions, last: final.changes };
    }
    return { earlier: transactions, last: open };
  }

  /**
   * Makes everything staged visible, with `checkpoint` and the commit instant, in one transaction. On failure
   * nothing is written and the changes stay staged (a full disk is `CACHE_DISK_FULL`).
   */
  async commit(checkpoint: PipelineCheckpoint | null, options: CommitOptions = {}): Promise<void> {
    this.assertOpen();
    const parsed = parseOrThrow(
      CheckpointInput,
      checkpoint,
      'Invalid checkpoint',
    ) as PipelineCheckpoint | null;
    // What is staged now belongs to this commit, even if the caller applies more before it runs. Once some of it
    // went to the staging area, all of it does: the commit then applies the sets, each change in order.
    let sets: number[] | null = null;
    if (this.pendingSets.length > 0) {
      this.spill();
      sets = this.pendingSets;
      this.pendingSets = [];
      this.openSet = null;
    }
    const batch = this.staged;
    this.staged = new Map();
    const transactions = this.takeTransactions();
    this.memorySteps = 0;
    // Fields added so far land with this commit (records applied after them were checked against them).
    const adding = this.pendingFields;
    const taken: Committing = { batch, sets: sets ?? [] };
    this.committing.push(taken);
    try {
      await this.serialized(async () => {
        this.assertOpen();
        // Only bulk commits add to a pending index build; any other commit needs complete indexes first (a
        // commit of spilled sets writes its index entries as it applies each change).
        if (options.bulk !== true || sets !== null) await this.finishIndexBuild();
        if (sets !== null) {
          await this.commitSpilled(sets, parsed, options, adding);
          return;
        }
        this.write((state) => {
          const fences = fencesAfter(state, options.fence);
          // A bulk load writes its first records' index entries as they come, and defers the rest to an index
          // build (index-build.ts) once it outgrows `deferIndexesFrom` (docs/cache-index-build.md).
          const checkpointOut = options.keepCheckpoint === true ? state.checkpoint : parsed;
          let build: IndexBuildState | null = null;
          if (options.bulk === true && this.dbs.covering && this.dbs.indexes.length > 0)
            build = pendingBuild(this.dbs) ?? this.indexBuildFor(state, batch.size);
          const outcome = writeChanges(
            this.dbs,
            this.schema.primaryKey,
            batch.values(),
            state.recordCount === 0,
            build !== null,
            patchResolver(this.dbs, this.schema),
          );
          if (build !== null && outcome.deferred !== null)
            this.dbs.meta.putSync(
              INDEX_BUILD_KEY,
              appendRuns(this.dbs, build, outcome.deferred, outcome.replaced),
            );
          const count = state.recordCount + outcome.delta;
          const unchanged = outcome.unchanged;
          if (options.changeLog !== 'commits' && transactions !== null) {
            // Several source transactions in one commit: each logged apart (see markTransaction).
            const times = new Map<Staged, number>();
            const occurrences = new Map<string, number>();
            const all = [...transactions.earlier.flatMap((t) => t.changes), ...transactions.last];
            for (const change of all) {
              const id = change.key.toString('latin1');
              occurrences.set(id, (occurrences.get(id) ?? 0) + 1);
            }
            for (const change of all) times.set(change, occurrences.get(change.key.toString('latin1'))!);
            // What each logged change replaced: for a key's first change in this commit the stored record
            // (writeChanges noted it on the batch's change), for a later one the change before it.
            const stored = new Map<string, Buffer | null | undefined>();
            for (const change of batch.values()) stored.set(change.key.toString('latin1'), change.before);
            const latest = new Map<string, Buffer | null>();
            for (const change of all) {
              const id = change.key.toString('latin1');
              change.before = latest.has(id) ? latest.get(id)! : stored.get(id);
              latest.set(id, change.bytes);
            }
            const logged = (changes: Staged[]) =>
              unchanged === null
                ? changes
                : changes.filter((change) => !(unchanged.has(change) && times.get(change) === 1));
            appendChanges(
              this.dbs,
              logged(transactions.last),
              checkpointOut,
              this.settings.changes,
              Date.now(),
              this.changeLogMemo,
              transactions.earlier.map((t) => ({ changes: logged(t.changes), positions: t.positions })),
            );
          } else
            appendChanges(
              this.dbs,
              options.changeLog === 'commits'
                ? []
                : unchanged === null
                  ? batch.values()
                  : [...batch.values()].filter((change) => !unchanged.has(change)),
              checkpointOut,
              this.settings.changes,
              Date.now(),
              this.changeLogMemo,
            );
          return landedState(this.dbs, state, {
            fences,
            checkpoint: checkpointOut,
            recordCount: count,
            adding,
          });
        }, 'commit');
      });
      if (sets !== null) this.staging.forget(sets);
      // Landed: what was added since this commit began stays pending for the next one.
      const landed = this.pendingFields;
      this.pendingFields = {};
      for (const [name, type] of Object.entries(landed))
        if (!Object.hasOwn(adding, name)) this.pendingFields[name] = type;
    } catch (err) {
      // A fenced-off writer's batch is dropped: no later commit may publish a stale owner's changes.
      if (SluiceError.hasCode(err, 'STALE_EPOCH')) {
        if (sets !== null) this.staging.discardSets(sets);
        throw err;
      }
      if (sets !== null) {
        // The sets stay in the staging area, older than anything staged since: a retry applies them first.
        this.pendingSets = [...sets, ...this.pendingSets];
        throw err;
      }
      if (this.pendingSets.length > 0) {
        // Spilled since this commit began: the batch goes back as a set of its own, before those.
        const set = this.staging.newSet();
        this.staging.spill(
          set,
          0,
          [...batch.values()].map((change) => ({ change })),
        );
        this.pendingSets.unshift(set);
        throw err;
      }
      // Keep the batch staged (older than anything staged or committed since), so a retry commits it.
      const newer = this.committing.slice(this.committing.indexOf(taken) + 1);
      const restored = new Map<string, Staged>();
      for (const [id, change] of batch) if (!newer.some((b) => b.batch.has(id))) restored.set(id, change);
      // A patch staged since applies on top of the failed batch's change of its key, not the stored record.
      for (const [id, change] of this.staged)
        restored.set(id, change.patches ? this.stack(restored.get(id), change) : change);
      this.staged = restored;
      // The put-back changes belong to no marked transaction: the next commit logs its changes as one.
      this.transactionsLost = true;
      throw err;
    } finally {
      this.committing = this.committing.filter((b) => b !== taken);
    }
  }

  /**
   * Commits the staging area's `sets` (a transaction that outgrew memory) on the commit thread (commit-thread.ts),
   * so this thread's event loop turns while every change of it is applied in the commit's one write transaction.
   */
  private async commitSpilled(
    sets: number[],
    checkpoint: PipelineCheckpoint | null,
    options: CommitOptions,
    adding: Record<string, FieldType>,
  ): Promise<void> {
    this.commitThread ??= new CommitThread();
    let outcome: SpilledCommitOutcome;
    try {
      outcome = await this.commitThread.run({
        path: this.dbs.env.path,
        schema: this.schema,
        sets,
        checkpoint: options.keepCheckpoint === true ? { kind: 'keep' } : { kind: 'write', value: checkpoint },
        fence: options.fence,
        adding,
        changeLog: options.changeLog ?? 'full',
        retention: this.settings.changes,
        now: Date.now(),
        memo: this.changeLogMemo,
      });
    } catch (err) {
      throw translateWriteError(err, `Cache "${this.name}": commit failed`);
    }
    if (outcome.memo.oldest === undefined) delete this.changeLogMemo.oldest;
    else this.changeLogMemo.oldest = outcome.memo.oldest;
  }

  /**
   * A patch applied to the change staged for its key (`own`), or to the stored record when none is: a whole staged
   * record is merged now; otherwise the patch joins the layers resolved at commit.
   */
  private layered(
    own: Staged | undefined,
    next: { key: Buffer; pk: unknown[]; patch: RecordPatch },
    whole: (key: Buffer, pk: unknown[], record: Record<string, unknown>) => Staged,
  ): Staged {
    const { key, pk, patch } = next;
    if (own === undefined) return { key, pk, bytes: null, indexKeys: null, patches: [patch] };
    if (own.patches) return { ...own, pk, patches: [...own.patches, patch] };
    const merged =
      own.bytes === null
        ? undefined
        : mergePatch(decodeRecord(own.bytes), patch, timestampFieldSet(this.schema));
    return merged === undefined ? { key, pk, bytes: null, indexKeys: null } : whole(key, pk, merged);
  }

  /** A staged patched change on top of an older change of the same key (a failed commit's, restored). */
  private stack(older: Staged | undefined, patched: Staged): Staged {
    if (older === undefined) return patched;
    // An older delete: nothing to fill from (apply judged the patch against it, or against what replaced it).
    if (older.bytes === null && !older.patches) return older;
    const serialize = recordSerializer(this.schema);
    let out = older;
    for (const patch of patched.patches ?? [])
      out = this.layered(out, { key: patched.key, pk: patched.pk, patch }, (key, pk, record) => ({
        key,
        pk,
        bytes: Buffer.from(serialize(record), 'utf8'),
        indexKeys: this.dbs.indexes.map((index) => indexKey(index, record, this.schema.primaryKey)),
      }));
    return out;
  }

  /**
   * The index build a bulk commit of `size` records begins, or null to write its index entries directly: a
   * generation that stays under `deferIndexesFrom` records never defers (each entry written once costs less than
   * a run entry and its merge); a bulk commit that takes it past that defers from then on — onto the entries
   * already in the indexes, unless they are empty (then the merge appends).
   */
  private indexBuildFor(state: CommitState, size: number): IndexBuildState | null {
    if (state.recordCount + size < this.settings.deferIndexesFrom) return null;
    return newIndexBuild(state.recordCount > 0);
  }

  /** Records that `source` finished its snapshot into this cache (kept in the commit state). */
  async markSnapshottingDone(source: string): Promise<void> {
    this.assertOpen();
    const handle = parseOrThrow(SourceHandle, source, 'Invalid source handle');
    // A finished snapshot ends a bulk load: its indexes are built before the flag is recorded.
    await this.serialized(async () => {
      await this.finishIndexBuild();
      this.write(
        (state) =>
          state.snapshottingDone.includes(handle)
            ? state
            : { ...state, snapshottingDone: [...state.snapshottingDone, handle] },
        'markSnapshottingDone',
      );
    });
  }

  /**
   * Merges a pending index build into the indexes (index-build.ts), in bounded transactions; a no-op when none
   * is pending. Commits that are not bulk ones and `markSnapshottingDone` call it first.
   */
  async finishIndexBuild(): Promise<void> {
    if (pendingBuild(this.dbs) === null) return;
    try {
      await finishIndexBuild(this.dbs, this.schema.primaryKey);
    } catch (err) {
      throw translateWriteError(err, `Cache "${this.name}": index build failed`);
    }
  }

  /**
   * Drops every record and index entry and resets the commit state (no checkpoint, no snapshot flags), in one
   * transaction; staged changes are discarded. Used when a rebuild restarts a cache from scratch.
   */
  async clear(): Promise<void> {
    this.assertOpen();
    this.staged = new Map();
    this.transactions = [];
    this.openTransaction = [];
    this.memorySteps = 0;
    const sets = this.pendingSets;
    this.pendingSets = [];
    this.openSet = null;
    await this.serialized(() => {
      this.write(() => {
        this.staging.dropSets(sets);
        this.dbs.data.clearSync();
        for (const index of this.dbs.indexes) index.db.clearSync();
        dropIndexBuild(this.dbs);
        clearChanges(this.dbs);
        return {
          checkpoint: null,
          committedAt: new Date().toISOString(),
          recordCount: 0,
          snapshottingDone: [],
        };
      }, 'clear');
      this.staging.forget(sets);
    });
  }

  /** Discards staged changes on close. */
  override async close(): Promise<void> {
    if (this.closed) return;
    await this.writing.catch(() => undefined);
    await this.commitThread?.close();
    this.commitThread = null;
    this.staged = new Map();
    // What was spilled for a commit that will not come: nobody else reads it, and it only takes disk.
    try {
      this.staging.discardSets(this.pendingSets);
    } finally {
      this.pendingSets = [];
      this.openSet = null;
    }
    await super.close();
  }

  /** Runs `update` on the commit state in one synchronous write transaction. */
  private write(update: (state: CommitState) => CommitState, what: string): void {
    try {
      this.dbs.env.root.transactionSync(() => {
        const next = update(this.readCommit());
        this.dbs.meta.putSync('commit', next);
      });
    } catch (err) {
      throw translateWriteError(err, `Cache "${this.name}": ${what} failed`);
    }
  }

  private serialized<T>(fn: () => T): Promise<T> {
    const run = this.writing.then(fn, fn);
    this.writing = run.catch(() => undefined);
    return run;
  }
}
