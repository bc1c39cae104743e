/**
 * The cache ports: what the pipeline (writer), the app-server (catalogue and steering) and the api-server
 * (reader) need from a host's cache generations and their alias table. `@sluice/cache` implements them
 * (`CacheManager implements WritableCacheCatalog`, `RwCache implements WritableCache`, `RoCache implements
 * ReadableCache`); everyone else sees only these types.
 */
import type { PipelineCheckpoint } from '../checkpoint.js';
import type { FieldType } from '../config.js';
import type { SwitchCause } from '../events.js';
import type { Filter, Query } from '../query.js';

/**
 * The shape of a cache: typed fields, a primary key of one or more fields, and secondary indexes (each a list
 * of fields). Two caches with equal schemas have equal schema hashes (`@sluice/cache`'s `schemaHash`).
 *
 * @example
 * ```ts
 * const schema: CacheSchema = { fields: { id: 'integer', region: 'string' }, primaryKey: ['id'], indexes: [['region']] };
 * ```
 */
export interface CacheSchema {
  fields: Record<string, FieldType>;
  primaryKey: string[];
  indexes: string[][];
}

/** Lifecycle of a cache generation: filled while `building`, read while `serving`, deleted after `retired`. */
export const CacheState = { building: 'building', serving: 'serving', retired: 'retired' } as const;
export type CacheState = (typeof CacheState)[keyof typeof CacheState];

/**
 * One write to a cache: insert/update/upsert a whole record, or delete by primary-key values (in primary-key
 * order). The pipeline's ops are these plus where they were read (`@sluice/pipeline`'s `RecordOp`).
 *
 * An upsert may leave fields `unchanged`: their values are the stored record's, filled in at commit (a logical
 * replication update does not send a TOASTed value it did not change); with `where`, the merged record is kept
 * only if it matches that filter, else the key is deleted. Such an upsert of a key with no stored record is a
 * conflict (`CACHE_CONFLICT` under `onConflict: 'fail'`). With `from` (primary-key values) the unchanged fields come
 * from the record under that key instead — an update that changed the primary key — as it stands when the op is
 * applied, so the op goes before the delete of that key.
 *
 * @example
 * ```ts
 * const ops: RecordOp[] = [{ op: 'upsert', record: { id: 1, value: 10 } }, { op: 'delete', key: [2] }];
 * cache.apply(ops);
 * cache.apply([{ op: 'upsert', record: { id: 10, qty: 4242 }, unchanged: ['name'] }], { onConflict: 'fail' });
 * ```
 */
export type RecordOp =
  | { op: 'insert' | 'update'; record: Record<string, unknown> }
  | {
      op: 'upsert';
      record: Record<string, unknown>;
      unchanged?: readonly string[];
      where?: Filter;
      from?: readonly unknown[];
    }
  | { op: 'delete'; key: unknown[] };

/**
 * What happens when an op meets the existing state: `insert` of a present key or `update`/`delete` of an
 * absent one. `fail` (default) rejects the whole batch with `CACHE_CONFLICT`; `skip` ignores the op;
 * `overwrite` turns the op into an upsert (or a no-op delete).
 */
export type ConflictPolicy = 'fail' | 'skip' | 'overwrite';

export interface ApplyOptions {
  onConflict?: ConflictPolicy;
  /**
   * The most changes the caller applies between two commits outside a source transaction (its commit cadence plus
   * one batch). A writer keeps staged changes in memory up to that many, even above its own `stagedInMemory`, so
   * only a source transaction larger than a commit moves to the staging area — a snapshot load committed every
   * `commitEveryRecords` never pays for the spill (it cost a 200 000-record load a third of its rate).
   */
  holdInMemory?: number;
}

/** The state written by the last commit, read in the same snapshot as the data it describes. */
export interface CommitState {
  checkpoint: PipelineCheckpoint | null;
  committedAt: string | null;
  recordCount: number;
  /** Handles of the sources that reported their snapshot complete into this cache. */
  snapshottingDone: string[];
  /**
   * Fencing tokens of the transfers that write into this cache: writer (transfer id) → the highest epoch that
   * committed. Checked and advanced inside the commit transaction (`commit(…, { fence })`).
   */
  fences?: Record<string, number>;
}

/** Options of {@link WritableCache.commit}. */
export interface CommitOptions {
  /**
   * A transfer's fencing token: the commit is refused with `STALE_EPOCH` (nothing written) when a higher epoch of
   * `writer` already committed here, and records `epoch` otherwise — in the same transaction as the data.
   */
  fence?: { writer: string; epoch: number };
  /**
   * Keep the checkpoint the cache holds at commit time (read inside the transaction) instead of writing one: for
   * writers that are not the cache's own pipeline, so its checkpoint never moves backwards under them.
   */
  keepCheckpoint?: boolean;
  /**
   * Part of a from-scratch load (a snapshot into a generation that was empty when it began): the cache may write
   * the commit's index entries as sorted runs and build its indexes from them at the end (at
   * `markSnapshottingDone`, or before the first commit that is not a bulk one), so the load's cost per record
   * does not grow with the indexes' size. The records are visible at commit as always; queries use the primary
   * key only until the indexes are built.
   */
  bulk?: boolean;
  /**
   * What the change log records of this commit: `full` (default) its upserts, deletes and commit marker; `commits`
   * only the marker (position, epoch), which keeps sequences contiguous. `commits` is for a generation that has not
   * served yet, whose log nobody can read: a change-feed token is issued only at or after the position a
   * generation had when it began to serve, and a feed crosses into a new generation by merging records, not by
   * reading its log. A from-scratch snapshot then does not write every record twice (and trim most of them again).
   */
  changeLog?: 'full' | 'commits';
}

/** How a query was answered. */
export interface QueryPlan {
  /** The index used (its fields joined by ","), `"primary"` for the primary key, or null for a full scan. */
  index: string | null;
  /** Records examined. */
  scanned: number;
  /**
   * True when a scan in the query's order stopped at the configured cap: the page may be short, and `next`
   * continues it. (A query sorted in memory beyond the cap is refused instead: `INVALID_QUERY`.)
   */
  capped: boolean;
}

export interface QueryResult {
  records: Record<string, unknown>[];
  /** Opaque `$after` cursor for the next page, bound to this cache; null when there is nothing more. */
  next: string | null;
  plan: QueryPlan;
}

/**
 * Text a {@link ReadableCache.queryJson} page is written between, so that a response body (`{"records":[…],
 * "next":…}`) is assembled in one buffer with no copy of its own.
 */
export interface JsonPageFrame {
  /** UTF-8 text written before the records' array. */
  head: string;
  /** UTF-8 text written after it, given the page's `next` cursor. */
  tail(next: string | null): string;
}

/**
 * What a reader narrows a caller's query or count to on someone else's behalf — a token's row filter, its
 * issuer's. It is ANDed into the caller's `$filter` after both are checked, each on its own: the caller's against
 * the query limits, with its mistakes named at the caller's paths (`$filter.…`); the row filter against the fields,
 * its mistakes named at `rowFilter.…`. So a caller's query means the same, and fails the same, with or without one.
 *
 * @example
 * ```ts
 * cache.count({ value: { $gte: 10 } }, { rowFilter: { region: 'eu' } }); // records of region eu with value ≥ 10
 * ```
 */
export interface ReadScope {
  /**
   * Only records matching it are read. A row filter is a token's claims (`filter`, `filters.<endpoint>`), each held
   * to the query limits where the token is read, ANDed: it may nest one level deeper than `maxDepth`.
   */
  rowFilter?: Filter;
}

/** A query answered with stored bytes (see {@link ReadableCache.queryJson}). */
export interface JsonPage {
  /**
   * The page's records as one JSON array, `[…]`: each record's stored text (UTF-8), in order — between the
   * frame's head and tail when one was given. Never written again by the cache (the caller may keep it). A
   * `Uint8Array` (in Node a `Buffer`): the contract names no Node type, so that its declarations type-check where
   * there is none — a browser project importing `@sluice/client`.
   */
  json: Uint8Array;
  /** How many records `json` holds. */
  count: number;
  /** Opaque `$after` cursor for the next page, bound to this cache; null when there is nothing more. */
  next: string | null;
  plan: QueryPlan;
  /** The commit state of the snapshot the records were read in (one frozen object per commit). */
  state: Readonly<CommitState>;
}

/**
 * One entry of a generation's change log, as readers get it: a record's new value, a delete, or the marker
 * that ends one commit (with the checkpoint positions it reached).
 */
export type ChangeEntry =
  | {
      seq: number;
      op: 'upsert';
      key: unknown[];
      record: Record<string, unknown>;
      /** What the change replaced: see {@link ChangeBefore}. */
      readonly before?: ChangeBefore;
    }
  | { seq: number; op: 'delete'; key: unknown[]; readonly before?: ChangeBefore }
  | {
      seq: number;
      op: 'commit';
      /** The checkpoint's positions (DAG node handle → position) reached by this commit, or null. */
      position: Record<string, unknown> | null;
      epoch: number | null;
      /** Commit instant, ms since the epoch. */
      at: number;
    };

/**
 * The record a logged upsert or delete replaced: null when its key held none, absent when the log does not say
 * (entries written before the log kept it). A change feed under a row filter needs it to stay silent about
 * records outside the filter: a delete (or an upsert leaving the filter) is sent only if the record was in view.
 */
export type ChangeBefore = Record<string, unknown> | null;

/** Retained range of a change log: entries `first … last` exist (`last < first` when the log is empty). */
export interface ChangeHead {
  first: number;
  last: number;
}

/** One held read snapshot of a generation: its head, its records (primary-key order) and its log agree. */
export interface PinnedGeneration {
  readonly head: ChangeHead;
  /** Entries after sequence `after` in this snapshot, oldest first. */
  read(after: number, limit: number): ChangeEntry[];
  /**
   * Records in encoded primary-key order, from after `afterKey` (exclusive), each with its data key (byte
   * order = key order, so two generations with the same key types merge by comparing these). Bytes as
   * `Uint8Array` (see {@link JsonPage.json}).
   */
  records(afterKey?: Uint8Array): Iterable<{ dataKey: Uint8Array; record: Record<string, unknown> }>;
  close(): void;
}

/**
 * A generation's change log (change feeds read it). Each call reads the latest commit, another process's
 * included; {@link ChangeLog.pin} holds one snapshot.
 *
 * @example
 * ```ts
 * const log = cache.changeLog();
 * const entries = log.read(log.head().first - 1, 100);
 * ```
 */
export interface ChangeLog {
  head(): ChangeHead;
  read(after: number, limit: number): ChangeEntry[];
  pin(): PinnedGeneration;
}

/**
 * A read-only handle of one cache generation. Every call reads the latest commit in one snapshot, so records,
 * counts and the commit state agree; another process's commits are visible without reopening.
 *
 * @example
 * ```ts
 * await using cache = await caches.openRo('items');
 * const record = cache.get([42]);
 * const { records, next } = cache.query(parseQuery({ $filter: { value: { $gte: 10 } } }));
 * ```
 */
export interface ReadableCache extends AsyncDisposable {
  readonly name: string;
  /** The endpoint the generation materializes. */
  readonly endpoint: string;
  /**
   * The generation's schema as of its latest commit: the one it was created with, plus any fields its writer
   * added since ({@link WritableCache.addFields}) — so a reader that has the generation open sees them without
   * reopening it. A new object whenever it changes (results derived from it can be cached by its identity).
   */
  readonly schema: CacheSchema;
  /** The record with these primary-key values (in key order), or undefined. */
  get(key: unknown[]): Record<string, unknown> | undefined;
  /** The record's stored JSON text (UTF-8), to send as it is; a `Uint8Array` as {@link JsonPage.json}. */
  getJson(key: unknown[]): Uint8Array | undefined;
  /** A page of records matching `query` (and `scope`'s row filter). */
  query(query: Query | Partial<Query>, scope?: ReadScope): QueryResult;
  /**
   * A page as the JSON array of its stored texts (framed by `frame` when given), and the commit state of the
   * same snapshot; only records matching `scope`'s row filter.
   */
  queryJson(query: Query | Partial<Query>, frame?: JsonPageFrame, scope?: ReadScope): JsonPage;
  /**
   * The latest commit state, one frozen object per commit; it starts a fresh read snapshot that the next
   * `getJson` in the same synchronous step reads too.
   */
  servingState(): Readonly<CommitState>;
  /**
   * How many records match `filter` (and `scope`'s row filter). Refused (`INVALID_QUERY` at `$filter`) when no index
   * narrows the filter to at most the cache's scan cap of records to check one by one.
   */
  count(filter?: Filter, scope?: ReadScope): number;
  /** {@link count}, or null where it would be refused for the scan cap. */
  countWithinCap(filter?: Filter, scope?: ReadScope): number | null;
  commitState(): CommitState;
  changeLog(): ChangeLog;
  close(): Promise<void>;
}

/**
 * The writable handle of one generation (one writer process per cache): `apply` stages ops, `commit` makes them
 * visible together with the checkpoint, in one transaction.
 *
 * @example
 * ```ts
 * await using cache = await caches.create({ endpoint: 'items', schema });
 * cache.apply([{ op: 'upsert', record: { id: 1, value: 10 } }]);
 * await cache.commit(checkpoint, { fence: { writer: transferId, epoch } });
 * ```
 */
export interface WritableCache extends ReadableCache {
  /** Stages ops, all or nothing (`BAD_RECORD`, or `CACHE_CONFLICT` under `onConflict: 'fail'`). */
  apply(ops: RecordOp[], options?: ApplyOptions): void;
  /** Writes what was staged, the checkpoint and the commit instant atomically. */
  commit(checkpoint: PipelineCheckpoint | null, options?: CommitOptions): Promise<void>;
  /**
   * Marks the end of a source transaction among the changes staged for the next commit, at `positions` (source
   * handle → position): one commit may hold several source transactions, and its change log then shows each one
   * apart — its changes in order, then a commit marker at its position — as if each had been committed alone.
   */
  markTransaction?(positions: Record<string, unknown>): void;
  /**
   * Adds fields to the generation's schema: fields its source's records gained while it was being written (a
   * column added to a replicated table). Records applied from now on are checked against them; readers see them
   * with the next commit, written in its transaction. They are not part of the schema's identity (its hash, what a
   * restart compares): a generation that grew is continued like any other. A name already among the fields with
   * the same type is a no-op; with another type, or an invalid name or type, `VALIDATION_FAILED`.
   *
   * @example
   * ```ts
   * cache.addFields({ note: 'string' });
   * cache.apply([{ op: 'upsert', record: { id: 3, note: 'x' } }]);
   * await cache.commit(checkpoint); // readers can now query `note` (older records read it as null)
   * ```
   */
  addFields?(fields: Record<string, FieldType>): void;
  /**
   * Stages the deletion of every record — each committed one and each one staged since the last commit — for the
   * next commit (a source's truncate inside its transaction: visible with the rest of it, never alone).
   *
   * @example
   * ```ts
   * cache.apply(opsBeforeTheTruncate);
   * cache.truncate();
   * cache.apply(opsAfterIt);
   * await cache.commit(checkpoint); // the endpoint holds opsAfterIt's records only
   * ```
   */
  truncate(): void;
  /** Records that `source` finished its snapshot into this generation. */
  markSnapshottingDone(source: string): Promise<void>;
  /** Deletes every record, the checkpoint and the change log (a rebuild into the same generation). */
  clear(): Promise<void>;
}

/** One move of an alias, kept in the alias table (newest first in {@link CacheCatalog.history}). */
export interface AliasSwitch {
  alias: string;
  from: string | null;
  to: string;
  at: string;
  cause: SwitchCause;
  /** The alias version the switch produced. */
  version: number;
}

/**
 * How {@link WritableCacheCatalog.redirect} moves an alias.
 *
 * @example
 * ```ts
 * // A rollback: back to blue, and the green it abandons retired with the move — no crash can split the two.
 * await caches.redirect('items', blue, { cause: 'rollback', retire: [green] });
 * ```
 */
export interface RedirectOptions {
  /** Why the alias moves, kept in its history (default `rebuild`). */
  cause?: SwitchCause;
  /**
   * Other generations the move abandons (a green building or held beside the generation the alias leaves), retired
   * in the redirect's own transaction: a process that dies right after the move cannot leave one of them `building`
   * for a restart to pick up and switch to. Names that are `to`, still another alias's target, unknown or being
   * deleted are left alone, as {@link WritableCacheCatalog.retire} would.
   */
  retire?: readonly string[];
}

/** An alias and the generation it points at. */
export interface AliasEntry {
  alias: string;
  cache: string;
  version: number;
}

/** What the writer notes about a generation in the alias table, beside its state. */
export interface GenerationNotes {
  /** When every source of the generation finished its snapshot. */
  snapshotDoneAt?: string | null;
  /** Set while the generation is held by a switch gate (or manual mode): why, and since when. */
  held?: { reason: string; at: string } | null;
  /** The restart decision of the latest run into this generation. */
  decision?: { decision: string; reason: string } | null;
  /** Why the generation was built: the reason of the run that started it from scratch (later resumes keep it). */
  built?: string | null;
  /** Why the generation was built (the cause its switch will carry). */
  cause?: SwitchCause | null;
  /** Bad records skipped while building it. */
  badRecords?: number | null;
  /**
   * Set when its source changed under it in a way it cannot follow (`SOURCE_SCHEMA_CHANGED`: a table recreated or
   * taken out of its publication, a column changed): the message. It is never continued again — neither by a retry,
   * a restart nor a rollback — though it serves until a new generation replaces it.
   */
  sourceChanged?: string | null;
}

/** What the catalogue says about one generation. */
export interface CacheInfo {
  name: string;
  endpoint: string;
  createdAt: string;
  schemaHash: string;
  schema: CacheSchema;
  state: CacheState;
  retiredAt: string | null;
  /** Bytes on disk of the generation's files. */
  sizeBytes: number;
  recordCount: number;
  checkpoint: PipelineCheckpoint | null;
  committedAt: string | null;
  /** When the alias last moved to it (null: never served). */
  switchedAt: string | null;
  notes: GenerationNotes;
}

/**
 * A host's cache generations and alias table, for reading: what serving processes (opened read-only) and the
 * operator views need.
 *
 * @example
 * ```ts
 * const target = caches.resolveAlias('items'); // { cache: 'items-…', version: 3 } or null
 * await using cache = await caches.openRo('items');
 * ```
 */
export interface CacheCatalog extends AsyncDisposable {
  /** Opens a generation, by name or through an alias, for reading. `CACHE_NOT_FOUND` when there is none. */
  openRo(nameOrAlias: string): Promise<ReadableCache>;
  resolveAlias(alias: string): { cache: string; version: number } | null;
  listAliases(): AliasEntry[];
  /** Increments on every alias-table write (readers poll it to notice switches). */
  aliasTableVersion(): number;
  list(): Promise<CacheInfo[]>;
  info(name: string): Promise<CacheInfo | null>;
  /** The switches of `alias`, newest first. */
  history(alias: string): AliasSwitch[];
  close(): Promise<void>;
}

/**
 * The writer's catalogue: creates and opens generations for writing, moves aliases, annotates and retires
 * generations. One writer process per host (the app-server).
 *
 * @example
 * ```ts
 * const green = await caches.create({ endpoint: 'items', schema });
 * // … fill and commit green …
 * const { from, version } = await caches.redirect('items', green.name, { cause: 'rebuild' });
 * ```
 */
export interface WritableCacheCatalog extends CacheCatalog {
  /** A new, empty generation of `endpoint` (state `building`) under a unique generated name. */
  create(input: { endpoint: string; schema: CacheSchema }): Promise<WritableCache>;
  /** Opens a generation for writing; `CACHE_SCHEMA_MISMATCH` when `expectedSchema` differs from its own. */
  openRw(name: string, expectedSchema?: CacheSchema): Promise<WritableCache>;
  /**
   * Points `alias` at `to` atomically (recorded in its history with `cause`); returns the previous target. The
   * generations named in `retire` are retired in the same transaction (see {@link RedirectOptions.retire}).
   */
  redirect(
    alias: string,
    to: string,
    options?: RedirectOptions,
  ): Promise<{ from: string | null; version: number }>;
  /** Merges `notes` into what the alias table says about generation `name`. */
  annotate(name: string, notes: GenerationNotes): Promise<void>;
  /** Marks a generation retired now (garbage collection removes it later); never an alias target. */
  retire(name: string): Promise<void>;
}
