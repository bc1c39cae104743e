import type { FieldType, Logger, PipelineCheckpoint } from '@sluice/core';
import type { ChangeRetention } from './change-log.js';

/**
 * The shape of a cache: typed fields, a primary key of one or more fields, and secondary indexes (each a list
 * of fields). Two caches with equal schemas have equal {@link schemaHash}es.
 */
export interface CacheSchema {
  fields: Record<string, FieldType>;
  primaryKey: string[];
  indexes: string[][];
}

/** Lifecycle of a cache generation: filled while `building`, read while `serving`, deleted after `retired`. */
export const CacheState = { building: 'building', serving: 'serving', retired: 'retired' } as const;
export type CacheState = (typeof CacheState)[keyof typeof CacheState];

/** Why an alias moved (core's `SwitchCause`). */
export type SwitchCause = 'rebuild' | 'schema-change' | 'restart' | 'promote' | 'rollback';

/** One move of an alias, kept in the alias table (durable, newest first in {@link CacheManager.history}). */
export interface AliasSwitch {
  alias: string;
  from: string | null;
  to: string;
  at: string;
  cause: SwitchCause;
  /** The alias version the switch produced. */
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
  /** Why the generation was built (the cause its switch will carry). */
  cause?: SwitchCause | null;
  /** Bad records skipped while building it. */
  badRecords?: number | null;
}

/** What a cache's list entry says about it. */
export interface CacheInfo {
  name: string;
  endpoint: string;
  createdAt: string;
  schemaHash: string;
  schema: CacheSchema;
  state: CacheState;
  retiredAt: string | null;
  /** Bytes on disk of the cache's LMDB files. */
  sizeBytes: number;
  recordCount: number;
  checkpoint: PipelineCheckpoint | null;
  committedAt: string | null;
  /** When the alias last moved to it (null: never served). */
  switchedAt: string | null;
  notes: GenerationNotes;
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

/** Options of {@link RwCache.commit}. */
export interface CommitOptions {
  /**
   * A transfer's fencing token: the commit is refused with `STALE_EPOCH` (nothing written) when a higher epoch of
   * `writer` already committed here, and records `epoch` otherwise — in the same LMDB transaction as the data.
   */
  fence?: { writer: string; epoch: number };
  /**
   * Keep the checkpoint the cache holds at commit time (read inside the transaction) instead of writing one: for
   * writers that are not the cache's own pipeline, so its checkpoint never moves backwards under them.
   */
  keepCheckpoint?: boolean;
}

/** One write: insert/update/upsert a whole record, or delete by primary-key values (in primary-key order). */
export type RecordOp =
  | { op: 'insert' | 'update' | 'upsert'; record: Record<string, unknown> }
  | { op: 'delete'; key: unknown[] };

/**
 * What happens when an op meets the existing state: `insert` of a present key or `update`/`delete` of an
 * absent one. `fail` (default) rejects the whole batch with `CACHE_CONFLICT`; `skip` ignores the op;
 * `overwrite` turns the op into an upsert (or a no-op delete).
 */
export type ConflictPolicy = 'fail' | 'skip' | 'overwrite';

export interface ApplyOptions {
  onConflict?: ConflictPolicy;
}

/** How a query was answered. */
export interface QueryPlan {
  /** The index used (its fields joined by ","), `"primary"` for the primary key, or null for a full scan. */
  index: string | null;
  /** Records examined. */
  scanned: number;
  /** True when the scan stopped at the configured cap: the page may be incomplete (see `next`). */
  capped: boolean;
}

export interface QueryResult {
  records: Record<string, unknown>[];
  /** Opaque `$after` cursor for the next page, bound to this cache; null when there is nothing more. */
  next: string | null;
  plan: QueryPlan;
}

/** A query answered with stored bytes (see `RoCache.queryJson`). */
export interface JsonPage {
  /** The page's records as one JSON array, `[…]`: each record's stored text (UTF-8), in order. */
  json: Buffer;
  /** How many records `json` holds. */
  count: number;
  /** Opaque `$after` cursor for the next page, bound to this cache; null when there is nothing more. */
  next: string | null;
  plan: QueryPlan;
  /** The commit state of the snapshot the records were read in (one frozen object per commit). */
  state: Readonly<CommitState>;
}

export interface CacheManagerOptions {
  /** How long a retired generation is kept before `gc` deletes it (default `CACHE_DEFAULTS.gcGraceMs`: 60 s). */
  gcGraceMs?: number;
  /** Most records a query examines before it answers with `capped: true` (default `CACHE_DEFAULTS.scanCap`: 100 000). */
  scanCap?: number;
  /** `limit` applied when a query has none (default 50). */
  defaultLimit?: number;
  /** Largest accepted `limit` (default 1000). */
  maxLimit?: number;
  /** Open for reading only (api-server): writes are refused and caches are opened read-only. */
  readOnly?: boolean;
  logger?: Logger;
  /** How much of each generation's change log commits keep (`cache.changes`; default 100 000 entries, 24 h). */
  changes?: Partial<ChangeRetention>;
}

/** An alias table entry. */
export interface AliasEntry {
  alias: string;
  cache: string;
  version: number;
}
