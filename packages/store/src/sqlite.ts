import { SluiceError, StoreUnavailableError } from '@sluice/core';
import type Database from 'better-sqlite3';
import { Kysely, type SqliteDatabase, type SqliteStatement } from 'kysely';
import type { StoreDatabase } from './schema.js';
import { BusyWaitingSqliteDialect } from './sqlite-busy-wait.js';
import { makeStoreDirectory } from './sqlite-directory.js';
import { openSqliteDatabase } from './sqlite-driver.js';

export interface SqliteOptions {
  /** How long a statement waits for another connection's write lock before `STORE_UNAVAILABLE`. */
  busyTimeoutMs: number;
}

const STATEMENT_CACHE_SIZE = 128;

/**
 * better-sqlite3 with a bounded cache of prepared statements: kysely prepares every query it runs, and the
 * store runs the same few SQL texts over and over, so re-parsing them would dominate a fast embedded write.
 */
class StatementCachingDatabase implements SqliteDatabase {
  readonly #db: Database.Database;
  readonly #statements = new Map<string, Database.Statement>();

  constructor(db: Database.Database) {
    this.#db = db;
  }

  prepare(sql: string): SqliteStatement {
    let statement = this.#statements.get(sql);
    if (statement === undefined) {
      statement = this.#db.prepare(sql);
      if (this.#statements.size >= STATEMENT_CACHE_SIZE) {
        const oldest = this.#statements.keys().next().value;
        if (oldest !== undefined) this.#statements.delete(oldest);
      }
      this.#statements.set(sql, statement);
    }
    return statement as unknown as SqliteStatement;
  }

  close(): void {
    this.#statements.clear();
    this.#db.close();
  }
}

/**
 * Opens (creating parent directories) a SQLite database in WAL mode for the store.
 *
 * @example
 * ```ts
 * const db = openSqlite('/var/lib/sluice/store.db', { busyTimeoutMs: 5000 });
 * ```
 */
export function openSqlite(path: string, options: SqliteOptions): Kysely<StoreDatabase> {
  const raw = openRaw(path, false);
  try {
    // WAL: readers never block the writer and a commit is one append (no fsync per commit with NORMAL).
    // Opening waits synchronously (once, before the node serves anything) for a lock another process holds.
    raw.pragma(`busy_timeout = ${options.busyTimeoutMs}`);
    raw.pragma('journal_mode = WAL');
    raw.pragma('synchronous = NORMAL');
    raw.pragma('foreign_keys = ON');
    raw.pragma('busy_timeout = 0');
  } catch (err) {
    raw.close();
    throw err;
  }
  return kyselyOver(raw, options);
}

/**
 * Opens the database file at `path` with no busy timeout of its own — better-sqlite3's would sleep on the main
 * thread; the dialect waits instead (sqlite-busy-wait.ts).
 */
function openRaw(path: string, readonly: boolean): Database.Database {
  try {
    if (!readonly && path !== ':memory:') makeStoreDirectory(path);
    return openSqliteDatabase(path, { timeout: 0, readonly });
  } catch (err) {
    // A missing native addon (CONFIG_INVALID) is an install to fix, not an outage.
    if (SluiceError.isInstance(err)) throw err;
    throw new StoreUnavailableError(`Cannot open the SQLite store at ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }
}

/** Kysely over `raw`: statements cached, a held write lock waited for asynchronously. */
function kyselyOver(raw: Database.Database, options: SqliteOptions): Kysely<StoreDatabase> {
  return new Kysely<StoreDatabase>({
    dialect: new BusyWaitingSqliteDialect(
      { database: new StatementCachingDatabase(raw) },
      options.busyTimeoutMs,
    ),
  });
}

/**
 * A second, read-only connection to the store file at `path` (opened by {@link openSqlite} first: WAL is set
 * there). In WAL mode a reader never waits for the writer, but kysely serializes the statements of one connection:
 * on the writer's connection a read queued behind statements waiting for another process's write lock (up to
 * `busyTimeoutMs` each), so a client reading a stored outcome waited as long as the lock was held. The store sends
 * its plain reads here.
 *
 * @example
 * ```ts
 * const reader = openSqliteReader('/var/lib/sluice/store.db', { busyTimeoutMs: 5000 });
 * ```
 */
export function openSqliteReader(path: string, options: SqliteOptions): Kysely<StoreDatabase> {
  return kyselyOver(openRaw(path, true), options);
}
