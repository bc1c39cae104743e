import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import {
  type AliasEntry,
  type AliasSwitch,
  CACHE_DEFAULTS,
  CacheClosedError,
  type CacheInfo,
  CacheNotFoundError,
  CacheReadOnlyError,
  type CacheSchema,
  DEFAULT_QUERY_LIMITS,
  type GenerationNotes,
  type Logger,
  NameSchema,
  parseOrThrow,
  type RedirectOptions,
  SchemaMismatchError,
  silentLogger,
  type WritableCacheCatalog,
} from '@sluice/core';
import { AliasTable, type CacheMeta } from './alias-table.js';
import { type CacheDbs, cacheDbs, EMPTY_COMMIT, type StoredSchema } from './cache-dbs.js';
import { DEFAULT_RETENTION } from './change-log.js';
import { translateWriteError } from './errors.js';
import { collectGarbage } from './gc.js';
import { cachePath, describeGeneration, openGenerationEnv } from './generation-files.js';
import { acquireEnv, releaseEnv } from './lmdb-env.js';
import { newCacheName } from './names.js';
import { RECORD_FORMAT } from './record-json.js';
import { type CacheHandleInit, type ReadSettings, RoCache } from './ro-cache.js';
import { RwCache } from './rw-cache.js';
import { parseCacheSchema, schemaHash } from './schema.js';
import { type CacheManagerOptions, STAGED_IN_MEMORY } from './types.js';

// The configuration's defaults (defined once, in core), for a caller that leaves an option out.
const DEFAULTS = {
  gcGraceMs: CACHE_DEFAULTS.gcGraceMs,
  scanCap: CACHE_DEFAULTS.scanCap,
  defaultLimit: DEFAULT_QUERY_LIMITS.defaultLimit,
  maxLimit: DEFAULT_QUERY_LIMITS.maxLimit,
  maxIn: DEFAULT_QUERY_LIMITS.maxIn,
  maxDepth: DEFAULT_QUERY_LIMITS.maxDepth,
  deferIndexesFrom: CACHE_DEFAULTS.deferIndexesFrom,
  stagedInMemory: STAGED_IN_MEMORY,
} as const;

/**
 * Owns the caches under one root directory: `<root>/caches/<name>/` (one LMDB environment per cache) and
 * `<root>/aliases` (alias table + cache metadata). One process writes (the app-server); others open the same
 * root with `readOnly: true` and see every commit and redirect without restarting.
 *
 * @example
 * ```ts
 * await using caches = await openCacheManager('./.sluice');
 * const green = await caches.create({ endpoint: 'items', schema });
 * green.apply(ops);
 * await green.commit(checkpoint);
 * const { from } = await caches.redirect('items', green.name);
 * ```
 */
export class CacheManager implements WritableCacheCatalog {
  readonly rootDir: string;
  readonly readOnly: boolean;
  private readonly table: AliasTable;
  private readonly settings: ReadSettings;
  private readonly gcGraceMs: number;
  private readonly logger: Logger;
  private readonly handles = new Set<RoCache>();
  private closed = false;

  /** Use {@link openCacheManager}. */
  constructor(rootDir: string, table: AliasTable, options: CacheManagerOptions) {
    this.rootDir = rootDir;
    this.table = table;
    this.readOnly = options.readOnly ?? false;
    this.gcGraceMs = options.gcGraceMs ?? DEFAULTS.gcGraceMs;
    this.logger = options.logger ?? silentLogger;
    const maxLimit = options.maxLimit ?? DEFAULTS.maxLimit;
    this.settings = {
      scanCap: options.scanCap ?? DEFAULTS.scanCap,
      maxLimit,
      defaultLimit: Math.min(options.defaultLimit ?? DEFAULTS.defaultLimit, maxLimit),
      maxIn: options.maxIn ?? DEFAULTS.maxIn,
      maxDepth: options.maxDepth ?? DEFAULTS.maxDepth,
      changes: { ...DEFAULT_RETENTION, ...options.changes },
      deferIndexesFrom: options.deferIndexesFrom ?? DEFAULTS.deferIndexesFrom,
      stagedInMemory: Math.max(1, options.stagedInMemory ?? DEFAULTS.stagedInMemory),
    };
  }

  private cachePath(name: string): string {
    return cachePath(this.rootDir, name);
  }

  private assertOpen(): void {
    if (this.closed) throw new CacheClosedError();
  }

  private assertWritable(what: string): void {
    this.assertOpen();
    if (this.readOnly) throw new CacheReadOnlyError(what);
  }

  /** Creates a cache generation for `endpoint` (unique time-sortable name, state `building`). */
  async create(input: { endpoint: string; schema: CacheSchema }): Promise<RwCache> {
    this.assertWritable('create a cache');
    const endpoint = parseOrThrow(NameSchema, input?.endpoint, 'Invalid endpoint name');
    const schema = parseCacheSchema(input?.schema);
    const name = newCacheName(endpoint);
    const meta: CacheMeta = {
      name,
      endpoint,
      createdAt: new Date().toISOString(),
      schemaHash: schemaHash(schema),
      schema,
      state: 'building',
      retiredAt: null,
    };
    try {
      // Metadata first: a directory without metadata is garbage that gc may remove.
      this.table.write(() => this.table.putCache(meta));
      const path = this.cachePath(name);
      mkdirSync(path, { recursive: true });
      const env = await acquireEnv(path, false);
      try {
        const dbs = cacheDbs(env, schema);
        const stored: StoredSchema = {
          name,
          endpoint,
          schema,
          schemaHash: meta.schemaHash,
          createdAt: meta.createdAt,
          recordFormat: RECORD_FORMAT,
        };
        env.root.transactionSync(() => {
          dbs.meta.putSync('schema', stored);
          dbs.meta.putSync('commit', EMPTY_COMMIT);
        });
        return this.handle((init) => new RwCache(init), name, endpoint, stored, dbs);
      } catch (err) {
        await releaseEnv(path);
        throw err;
      }
    } catch (err) {
      throw translateWriteError(err, `Creating a cache for "${endpoint}" failed`);
    }
  }

  /** Opens an existing cache for writing; with `expectedSchema`, a different schema is `CACHE_SCHEMA_MISMATCH`. */
  async openRw(name: string, expectedSchema?: CacheSchema): Promise<RwCache> {
    this.assertWritable('open a cache for writing');
    const meta = this.liveMeta(name);
    if (!meta) throw new CacheNotFoundError(String(name).slice(0, 256));
    if (expectedSchema !== undefined) {
      const expected = schemaHash(parseCacheSchema(expectedSchema));
      if (expected !== meta.schemaHash) throw new SchemaMismatchError(name, expected, meta.schemaHash);
    }
    const { dbs, stored } = await openGenerationEnv(this.cachePath(meta.name), meta, false, 'write');
    return this.handle((init) => new RwCache(init), name, stored.endpoint, stored, dbs);
  }

  /** Opens a cache (by name, or by alias: its current target) for reading. */
  async openRo(nameOrAlias: string): Promise<RoCache> {
    this.assertOpen();
    const target = this.resolveAlias(nameOrAlias)?.cache ?? nameOrAlias;
    const meta = this.liveMeta(target);
    if (!meta) throw new CacheNotFoundError(String(nameOrAlias).slice(0, 256));
    const { dbs, stored } = await openGenerationEnv(this.cachePath(meta.name), meta, this.readOnly, 'read');
    return this.handle((init) => new RoCache(init), target, stored.endpoint, stored, dbs);
  }

  /** The cache an alias points to and the alias's version, or null. */
  resolveAlias(alias: string): { cache: string; version: number } | null {
    this.assertOpen();
    if (typeof alias !== 'string') return null;
    const entry = this.table.read((options) => this.table.alias(alias, options));
    return entry ? { cache: entry.cache, version: entry.version } : null;
  }

  listAliases(): AliasEntry[] {
    this.assertOpen();
    return this.table.read((options) => this.table.aliasList(options));
  }

  /** Changes on every redirect of any alias; other processes poll it to notice redirects. */
  aliasTableVersion(): number {
    this.assertOpen();
    return this.table.read((options) => this.table.version(options));
  }

  /**
   * Points `alias` at cache `to` atomically and returns the previous target and the alias's new version.
   * `to` becomes `serving`; the previous target becomes `retired` (unless another alias still points to it),
   * and `gc` deletes it after the grace period. The switch is recorded in the alias's history with its `cause`
   * (default `rebuild`) in the same transaction, and a hold on `to` is lifted. The generations named in
   * `options.retire` — others the move abandons — are retired in that same transaction too, so no crash can leave
   * the alias moved and one of them still `building` for a restart to resume and switch to.
   *
   * @example
   * ```ts
   * // Roll back to blue, abandoning the green that was being built (or held) beside it: one write.
   * await caches.redirect('items', blue, { cause: 'rollback', retire: [green] });
   * ```
   */
  async redirect(
    alias: string,
    to: string,
    options: RedirectOptions = {},
  ): Promise<{ from: string | null; version: number }> {
    this.assertWritable('redirect an alias');
    const name = parseOrThrow(NameSchema, alias, 'Invalid alias');
    try {
      return this.table.write(() => {
        const target = this.table.cache(to);
        if (!target || target.deleting) throw new CacheNotFoundError(String(to).slice(0, 256));
        const previous = this.table.alias(name);
        // From the last version even of a retired alias: an old event of it must stay older than this move.
        const version = this.table.lastVersion(name) + 1;
        const at = new Date().toISOString();
        this.table.setAlias(name, to, version);
        this.table.putCache({
          ...target,
          state: 'serving',
          retiredAt: null,
          switchedAt: at,
          notes: { ...target.notes, held: null },
        });
        const from = previous?.cache ?? null;
        this.table.addSwitch({ alias: name, from, to, at, cause: options.cause ?? 'rebuild', version });
        if (from !== null && from !== to) {
          const old = this.table.cache(from);
          const stillTarget = this.table.aliasList().some((a) => a.cache === from);
          if (old && !stillTarget)
            this.table.putCache({ ...old, state: 'retired', retiredAt: new Date().toISOString() });
        }
        for (const abandoned of options.retire ?? []) if (abandoned !== to) this.retireInTable(abandoned, at);
        this.table.bumpVersion();
        return { from, version };
      });
    } catch (err) {
      throw translateWriteError(err, `Redirecting "${name}" failed`);
    }
  }

  /**
   * Retires `alias` — its endpoint is no longer configured: readers stop resolving it (`resolveAlias` and
   * `listAliases` no longer show it), every generation of the endpoint is retired (so `gc` deletes them after the
   * grace period) and the table version moves, which is how api-servers of this host notice. A later `redirect`
   * of the same alias counts its version on from the retired one. Returns the generation it pointed at and the
   * retired version, or null when the alias is not live (nothing changes).
   */
  async retireAlias(alias: string): Promise<{ from: string; version: number } | null> {
    this.assertWritable('retire an alias');
    const name = parseOrThrow(NameSchema, alias, 'Invalid alias');
    try {
      return this.table.write(() => {
        const previous = this.table.alias(name);
        if (!previous) return null;
        const version = previous.version + 1;
        this.table.retireAlias(name, previous.cache, version);
        const targets = new Set(this.table.aliasList().map((a) => a.cache));
        const at = new Date().toISOString();
        for (const meta of this.table.cacheList()) {
          if (meta.endpoint !== name || meta.deleting || targets.has(meta.name)) continue;
          if (meta.state === 'retired') continue;
          this.table.putCache({
            ...meta,
            state: 'retired',
            retiredAt: at,
            notes: { ...meta.notes, held: null },
          });
        }
        this.table.bumpVersion();
        return { from: previous.cache, version };
      });
    } catch (err) {
      throw translateWriteError(err, `Retiring the alias "${name}" failed`);
    }
  }

  /** The switches of `alias` (from, to, at, cause, version), newest first; kept across restarts. */
  history(alias: string): AliasSwitch[] {
    this.assertOpen();
    if (typeof alias !== 'string') return [];
    return this.table.read((options) => this.table.switches(alias, options));
  }

  /**
   * Merges `notes` into what the alias table says about generation `name` (a writer's annotations: held and why,
   * snapshot done, restart decision). Unknown names are `CACHE_NOT_FOUND`.
   */
  async annotate(name: string, notes: GenerationNotes): Promise<void> {
    this.assertWritable('annotate a cache');
    try {
      this.table.write(() => {
        const meta = this.table.cache(name);
        if (!meta || meta.deleting) throw new CacheNotFoundError(String(name).slice(0, 256));
        this.table.putCache({ ...meta, notes: { ...meta.notes, ...notes } });
      });
    } catch (err) {
      throw translateWriteError(err, `Annotating "${name}" failed`);
    }
  }

  /**
   * Marks a generation retired now (a building one a newer run superseded); gc removes it later. A generation an
   * alias move abandons is retired by that move instead (`redirect`'s `retire`), in the same transaction.
   */
  async retire(name: string): Promise<void> {
    this.assertWritable('retire a cache');
    try {
      this.table.write(() => this.retireInTable(name, new Date().toISOString()));
    } catch (err) {
      throw translateWriteError(err, `Retiring "${name}" failed`);
    }
  }

  /**
   * Inside an alias-table write: retires generation `name` (its hold lifted) unless it is unknown, being deleted or
   * an alias target.
   */
  private retireInTable(name: string, at: string): void {
    const meta = this.table.cache(name);
    if (!meta || meta.deleting || this.table.aliasList().some((a) => a.cache === name)) return;
    this.table.putCache({ ...meta, state: 'retired', retiredAt: at, notes: { ...meta.notes, held: null } });
  }

  /** Every cache generation with its size, record count and commit checkpoint. */
  async list(): Promise<CacheInfo[]> {
    this.assertOpen();
    const metas = this.table.read((options) => this.table.cacheList(options));
    const out: CacheInfo[] = [];
    for (const meta of metas) {
      if (meta.deleting) continue;
      out.push(await describeGeneration(this.cachePath(meta.name), meta, this.readOnly));
    }
    return out;
  }

  async info(name: string): Promise<CacheInfo | null> {
    this.assertOpen();
    const meta = this.liveMeta(name);
    return meta ? describeGeneration(this.cachePath(meta.name), meta, this.readOnly) : null;
  }

  /**
   * Deletes retired generations whose grace period has passed (and abandoned `building` generations that a newer
   * generation of the same endpoint superseded), never an alias target, never a cache open in this process or
   * in another one. Deletion marks the cache first, so a crash mid-delete is finished by the next `gc`.
   * Returns the names deleted.
   */
  async gc(now: Date = new Date()): Promise<string[]> {
    this.assertWritable('collect garbage');
    const { rootDir, table, gcGraceMs, logger } = this;
    return collectGarbage({ rootDir, table, gcGraceMs, logger }, now);
  }

  /** Closes every handle this manager opened, then the alias table. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const handle of [...this.handles]) await handle.close();
    await releaseEnv(this.table.env.path);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private liveMeta(name: string): CacheMeta | null {
    if (typeof name !== 'string' || name.length === 0 || name.length > 512) return null;
    const meta = this.table.read((options) => this.table.cache(name, options));
    return meta && !meta.deleting ? meta : null;
  }

  /** Builds a handle this manager tracks (closed with the manager), with the schema its entry stores. */
  private handle<T extends RoCache>(
    make: (init: CacheHandleInit) => T,
    name: string,
    endpoint: string,
    stored: Pick<StoredSchema, 'schema' | 'addedFields'>,
    dbs: CacheDbs,
  ): T {
    const ref: { handle?: RoCache } = {};
    const handle = make({
      name,
      endpoint,
      schema: stored.schema,
      ...(stored.addedFields !== undefined ? { addedFields: stored.addedFields } : {}),
      dbs,
      settings: this.settings,
      onClose: () => {
        if (ref.handle) this.handles.delete(ref.handle);
      },
    });
    ref.handle = handle;
    this.handles.add(handle);
    return handle;
  }
}

/**
 * Opens the cache manager over `rootDir` (created if missing).
 *
 * @example
 * ```ts
 * // app-server (writer) and api-server (reader) on the same host:
 * const writer = await openCacheManager('/var/lib/sluice');
 * const reader = await openCacheManager('/var/lib/sluice', { readOnly: true });
 * ```
 */
export async function openCacheManager(
  rootDir: string,
  options: CacheManagerOptions = {},
): Promise<CacheManager> {
  const root = resolve(rootDir);
  mkdirSync(join(root, 'caches'), { recursive: true });
  const env = await acquireEnv(join(root, 'aliases'), options.readOnly ?? false);
  try {
    return new CacheManager(root, new AliasTable(env), options);
  } catch (err) {
    await releaseEnv(env.path);
    throw err;
  }
}
