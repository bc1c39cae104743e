import { type Clock, type Logger, silentLogger, systemClock, ValidationError } from '@sluice/core';
import type { Kysely } from 'kysely';
import { toStoreError } from './errors.js';
import { checkSchema, migrateToLatest } from './migrations.js';
import { openPostgres, type StatementNames } from './postgres.js';
import type { StoreDatabase } from './schema.js';
import { openSqlite, openSqliteReader } from './sqlite.js';
import { lockSqliteStore, type SqliteStoreLock } from './sqlite-lock.js';
import { SqlDataPlaneStore } from './store.js';
import { parseStoreUrl, redactUrl } from './url.js';

export interface OpenStoreOptions {
  /** Time source for leases and timestamps (default: the system clock). */
  clock?: Clock;
  logger?: Logger;
  /** PostgreSQL connection pool size (default 10). */
  poolSize?: number;
  /** PostgreSQL: how long to wait for a connection before `STORE_UNAVAILABLE` (default 5000 ms). */
  connectTimeoutMs?: number;
  /** PostgreSQL: longest statement (default 30000 ms). */
  statementTimeoutMs?: number;
  /** SQLite: how long to wait for another process's write lock before `STORE_UNAVAILABLE` (default 5000 ms). */
  busyTimeoutMs?: number;
  /**
   * SQLite: claim the file for this process until `close()` (`lockSqliteStore`): another process that holds it
   * makes the open fail with `CONFIG_INVALID`. An app-server asks for this (the embedded store is single-node);
   * tools and tests that share a file leave it off. Ignored for PostgreSQL and `:memory:`.
   */
  exclusive?: boolean;
}

function positiveInt(value: number | undefined, fallback: number, path: string, max: number): number {
  if (value === undefined) return fallback;
  if (Number.isSafeInteger(value) && value >= 1 && value <= max) return value;
  throw new ValidationError(`Invalid store option ${path}: must be an integer from 1 to ${max}`, [
    { path, message: `must be an integer from 1 to ${max}` },
  ]);
}

/**
 * Opens the transfer store named by `url` and brings its schema up to date (safe when several nodes start
 * at once). `sqlite:<path>` creates the file and its parent directories and uses WAL (with `exclusive`, it first
 * claims the file for this process); `sqlite::memory:` keeps everything in memory; `postgres://…` uses a
 * connection pool.
 *
 * @example
 * ```ts
 * await using store = await openStore('postgres://sluice@db:5432/sluice', { poolSize: 20 });
 * await store.ping();
 * ```
 */
export async function openStore(url: string, options: OpenStoreOptions = {}): Promise<SqlDataPlaneStore> {
  const location = parseStoreUrl(url);
  const logger = options.logger ?? silentLogger;
  const clock = options.clock ?? systemClock;
  let db: Kysely<StoreDatabase> | undefined;
  let reader: Kysely<StoreDatabase> | undefined;
  let statements: StatementNames | undefined;
  let lock: SqliteStoreLock | undefined;
  try {
    if (location.dialect === 'postgres') {
      const opened = openPostgres(location.connectionString, {
        poolSize: positiveInt(options.poolSize, 10, 'poolSize', 1000),
        connectTimeoutMs: positiveInt(options.connectTimeoutMs, 5_000, 'connectTimeoutMs', 600_000),
        statementTimeoutMs: positiveInt(options.statementTimeoutMs, 30_000, 'statementTimeoutMs', 3_600_000),
        logger,
      });
      db = opened.db;
      statements = opened.statements;
    } else {
      // Before the database is opened or migrated: a refused process must not have touched it.
      if (options.exclusive === true && location.path !== ':memory:') lock = lockSqliteStore(location.path);
      db = openSqlite(location.path, {
        busyTimeoutMs: positiveInt(options.busyTimeoutMs, 5_000, 'busyTimeoutMs', 600_000),
      });
    }
    const applied = await migrateToLatest(
      db as Kysely<unknown>,
      location.dialect,
      location.dialect === 'sqlite' ? location.path : url,
    );
    if (applied.length > 0) logger.info({ store: redactUrl(url), applied }, 'store: schema migrated');
    // Migrations recorded but tables gone (dropped by hand): refuse to start rather than run on nothing.
    await checkSchema(db as Kysely<unknown>);
    // SQLite: plain reads on a connection of their own, so they never queue behind writes waiting for a lock
    // another process holds (sqlite.ts). In memory, a second connection would be another database.
    if (location.dialect === 'sqlite' && location.path !== ':memory:')
      reader = openSqliteReader(location.path, {
        busyTimeoutMs: positiveInt(options.busyTimeoutMs, 5_000, 'busyTimeoutMs', 600_000),
      });
    return new SqlDataPlaneStore(db, location.dialect, clock, logger, statements, lock?.release, reader);
  } catch (err) {
    await reader?.destroy().catch(() => undefined);
    await db?.destroy().catch(() => undefined);
    lock?.release();
    throw toStoreError(err, 'open');
  }
}
