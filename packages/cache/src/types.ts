import { CACHE_DEFAULTS, type Logger } from '@sluice/core';
import type { ChangeRetention } from './change-log.js';

/*
 * The cache contracts (`CacheSchema`, `RecordOp`, `ReadableCache`, `WritableCache`, `CacheCatalog`, …) live in
 * `@sluice/core`'s ports (packages/core/src/ports/cache.ts); what stays here is this implementation's own options.
 */

/** Options of {@link CacheManager} (`openCacheManager`). */
export interface CacheManagerOptions {
  /** How long a retired generation is kept before `gc` deletes it (default `CACHE_DEFAULTS.gcGraceMs`: 60 s). */
  gcGraceMs?: number;
  /** Most records a query examines before it answers with `capped: true` (default `CACHE_DEFAULTS.scanCap`: 100 000). */
  scanCap?: number;
  /** `limit` applied when a query has none (default 50). */
  defaultLimit?: number;
  /** Largest accepted `limit` (default 1000). */
  maxLimit?: number;
  /**
   * Largest `$in` list of a query's filter (default 1000): the api-server passes its `query.maxIn`, so a query it
   * accepts is not refused again here with another limit.
   */
  maxIn?: number;
  /** Deepest `$and` / `$or` nesting of a query's filter (default 8; the api-server passes its `query.maxDepth`). */
  maxDepth?: number;
  /** Open for reading only (api-server): writes are refused and caches are opened read-only. */
  readOnly?: boolean;
  logger?: Logger;
  /** How much of each generation's change log commits keep (`cache.changes`; default 100 000 entries, 24 h). */
  changes?: Partial<ChangeRetention>;
  /**
   * Records a bulk load (a snapshot into a new generation) writes with their index entries before it defers the
   * rest to an index build (docs/cache-index-build.md § Small loads write their indexes directly). Default
   * 250 000: below it, writing each index entry once costs less than writing it twice (a run, then the merge);
   * above it, an index B-tree filled in random key order dirties more pages per commit the larger it gets (time,
   * and memory held until the commit).
   */
  deferIndexesFrom?: number;
  /**
   * Staged changes a writer holds in memory, as JavaScript objects, before it moves them to the generation's staging
   * area on disk (a `staging` database of its LMDB environment, read by nobody else; the commit applies them in its
   * write transaction). Default {@link STAGED_IN_MEMORY}: a source transaction of any size then costs the writer
   * about that many changes' worth of memory, not its own size.
   */
  stagedInMemory?: number;
}

/** Default of {@link CacheManagerOptions.stagedInMemory} (`cache.stagedInMemory` of the configuration). */
export const STAGED_IN_MEMORY = CACHE_DEFAULTS.stagedInMemory;
