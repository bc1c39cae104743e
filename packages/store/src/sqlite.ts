import { SluiceError, StoreUnavailableError } from '@sluice/core';
import type Database from 'better-sqlite3';
import { Kysely, type SqliteDatabase, SqliteDialect, type SqliteStatement } from 'kysely';
import type { StoreDatabase } from './schema.js';
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
  let raw: Database.Database;
  try {
    if (path !== ':memory:') makeStoreDirectory(path);
    raw = openSqliteDatabase(path, { timeout: options.busyTimeoutMs });
  } catch (err) {
    // A missing native addon (CONFIG_INVALID) is an install to fix, not an outage.
    if (SluiceError.isInstance(err)) throw err;
    throw new StoreUnavailableError(`Cannot open the SQLite store at ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  try {
    // WAL: readers never block the writer and a commit is one append (no fsync per commit with NORMAL).
    raw.pragma('journal_mode = WAL');
    raw.pragma('synchronous = NORMAL');
    raw.pragma('foreign_keys = ON');
  } catch (err) {
    raw.close();
    throw err;
  }
  return new Kysely<StoreDatabase>({
    dialect: new SqliteDialect({ database: new StatementCachingDatabase(raw) }),
  });
}
