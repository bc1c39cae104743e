import { realpathSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { ConfigError, SluiceError, StoreUnavailableError } from '@sluice/core';
import type Database from 'better-sqlite3';
import { makeStoreDirectory } from './sqlite-directory.js';
import { openSqliteDatabase } from './sqlite-driver.js';

/** The companion file that claims a SQLite store: `<store file>.lock`, next to it. */
export const SQLITE_LOCK_SUFFIX = '.lock';

/** A claim on a SQLite store file for this process alone; released by `release()` or by the process ending. */
export interface SqliteStoreLock {
  /** The lock file. */
  readonly path: string;
  release(): void;
}

/**
 * The real path of the store file, so that two spellings of one file (a symlinked directory, `./x` and `/abs/x`)
 * claim one lock. A hard link to the file is not seen through (noted in the README).
 */
function realStorePath(path: string): string {
  try {
    return realpathSync.native(path);
  } catch {
    // Not created yet: its directory is real, the name is the one the store will create.
    return join(realpathSync.native(dirname(path)), basename(path));
  }
}

function isBusy(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return code === 'SQLITE_BUSY' || code === 'SQLITE_LOCKED';
}

/**
 * Claims the SQLite store at `path` for this process: a second process (or a second claim in this one) is refused
 * with `CONFIG_INVALID` naming the file. The embedded store is single-node — two app-servers on one file would
 * each run the single-node backplane and recover each other's transfers as orphans — so it must be refused at
 * start, not merely serialized.
 *
 * The claim is SQLite's own file lock (a POSIX advisory lock, which the kernel drops when the process ends, even
 * on SIGKILL) held by an exclusive transaction that never ends on a companion database, `<path>.lock`. So it can
 * never go stale, and no pid has to be judged: unlike a pid file, a dead holder's lock is simply gone. The file
 * itself is never removed (removing it could let two processes lock two different inodes of one name); it stays
 * empty. The store file itself is not locked, so tools may still read it.
 *
 * @example
 * ```ts
 * const lock = lockSqliteStore('/var/lib/sluice/store.db');
 * try { ... } finally { lock.release(); }
 * ```
 */
export function lockSqliteStore(path: string): SqliteStoreLock {
  let real: string;
  let db: Database.Database;
  try {
    makeStoreDirectory(path);
    real = realStorePath(path);
    // timeout 0: a held lock is an answer, not something to wait for.
    db = openSqliteDatabase(`${real}${SQLITE_LOCK_SUFFIX}`, { timeout: 0 });
  } catch (err) {
    // A missing native addon (CONFIG_INVALID) is an install to fix, not an outage.
    if (SluiceError.isInstance(err)) throw err;
    throw new StoreUnavailableError(
      `Cannot open the lock file of the SQLite store at ${path}: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
  const lockPath = `${real}${SQLITE_LOCK_SUFFIX}`;
  try {
    db.pragma('locking_mode = EXCLUSIVE');
    // Takes SQLite's exclusive lock at once and keeps it: the transaction is never committed, and nothing is
    // written (no journal, the file stays empty).
    db.exec('BEGIN EXCLUSIVE');
  } catch (err) {
    db.close();
    if (!isBusy(err))
      throw new StoreUnavailableError(
        `Cannot lock the SQLite store at ${path} (${lockPath}): ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    throw new ConfigError(
      `Another app-server is using the SQLite store ${real} (it holds ${lockPath}); the embedded store is single-node: stop that app-server, give this one another store file, or use PostgreSQL (store: postgres://…) for several nodes`,
      [{ path: 'store', message: `in use by another process (${lockPath} is locked)` }],
      { cause: err },
    );
  }
  let released = false;
  return {
    path: lockPath,
    release() {
      if (released) return;
      released = true;
      // Closing the connection ends its transaction and drops the lock; the file stays (see above).
      db.close();
    },
  };
}
