import { z } from 'zod';

/**
 * The cache settings' defaults, defined once: the schema below fills them into configuration, and
 * `@sluice/cache` falls back to them when a caller of `openCacheManager` leaves an option out.
 */
export const CACHE_DEFAULTS = {
  /** How long a retired generation is kept before `gc` may delete it. */
  gcGraceMs: 60_000,
  /** Most records one query without a fitting index examines before it answers `capped: true`. */
  scanCap: 100_000,
  /** Each generation's change log (what change feeds resume from), trimmed at every commit. */
  changes: { retainRecords: 100_000, retainMs: 24 * 3_600_000 },
  /**
   * Records a snapshot load writes with their index entries before it defers the rest to an index build
   * (docs/cache-index-build.md § Small loads write their indexes directly).
   */
  deferIndexesFrom: 250_000,
  /**
   * Staged changes a cache writer holds in memory before it moves the rest of a source transaction to the
   * generation's staging area on disk (packages/cache/README.md § Staging): a transaction of any size then costs
   * about this many changes' worth of memory. A snapshot commit never spills (its writer names its own size).
   */
  stagedInMemory: 10_000,
} as const;

/** `cache`: this host's LMDB cache generations. */
export const CacheConfigSchema = z
  .strictObject({
    gcGraceMs: z
      .number()
      .int()
      .min(0)
      .max(7 * 24 * 3_600_000)
      .default(CACHE_DEFAULTS.gcGraceMs),
    scanCap: z.number().int().min(1).max(100_000_000).default(CACHE_DEFAULTS.scanCap),
    deferIndexesFrom: z.number().int().min(0).max(1_000_000_000).default(CACHE_DEFAULTS.deferIndexesFrom),
    stagedInMemory: z.number().int().min(1).max(100_000_000).default(CACHE_DEFAULTS.stagedInMemory),
    changes: z
      .strictObject({
        /** Most log entries kept per generation (the newest transaction is always kept whole). */
        retainRecords: z
          .number()
          .int()
          .min(1)
          .max(1_000_000_000)
          .default(CACHE_DEFAULTS.changes.retainRecords),
        /** Transactions older than this are dropped (0 = no age limit). */
        retainMs: z
          .number()
          .int()
          .min(0)
          .max(365 * 24 * 3_600_000)
          .default(CACHE_DEFAULTS.changes.retainMs),
      })
      .prefault({}),
  })
  .prefault({});
export type CacheConfig = z.output<typeof CacheConfigSchema>;
