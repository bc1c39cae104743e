/**
 * Waiting for another process's SQLite write lock without blocking the event loop.
 *
 * better-sqlite3 is synchronous: its `timeout` (SQLite's busy handler) sleeps inside the call, on the main thread.
 * With the store file's write lock held by another process (a `BEGIN IMMEDIATE` in a tool, a backup), every
 * statement froze the whole app-server for the busy timeout — probes, the control API, lease heartbeats, endpoint
 * pipelines — one statement after another for as long as the lock was held. So the database is opened with no busy
 * timeout and each statement that finds the lock taken (`SQLITE_BUSY`) is retried here after an asynchronous pause,
 * until the same bound, which is what SQLite's busy handler does, minus the blocking.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import {
  type CompiledQuery,
  type DatabaseConnection,
  type Driver,
  type QueryCompiler,
  type QueryResult,
  SqliteDialect,
  type SqliteDialectConfig,
  type TransactionSettings,
} from 'kysely';

/** The first pause after a busy answer; it doubles up to {@link MAX_PAUSE_MS}. */
const FIRST_PAUSE_MS = 1;
const MAX_PAUSE_MS = 50;

/**
 * Only plain `SQLITE_BUSY` waits, as SQLite's busy handler does: `SQLITE_BUSY_SNAPSHOT` (a deferred transaction whose
 * snapshot another writer overtook) cannot be cured by running the statement again.
 */
function isLockBusy(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === 'SQLITE_BUSY';
}

/**
 * SQLite's own message ("database is locked") says neither by whom nor for how long: this one does, and keeps the
 * code the store reports as `STORE_UNAVAILABLE`.
 */
function lockedTooLong(err: unknown, busyTimeoutMs: number): Error {
  return Object.assign(
    new Error(
      `the SQLite store file is locked by another process (its write lock still held after ${busyTimeoutMs} ms)`,
      { cause: err },
    ),
    { code: 'SQLITE_BUSY' },
  );
}

/**
 * Runs `statement` until it does not find the database locked, pausing (asynchronously) between tries; after
 * `busyTimeoutMs` the last `SQLITE_BUSY` is thrown (the store reports it as `STORE_UNAVAILABLE`).
 */
async function untilUnlocked<T>(busyTimeoutMs: number, statement: () => Promise<T>): Promise<T> {
  const deadline = performance.now() + busyTimeoutMs;
  let pause = FIRST_PAUSE_MS;
  for (;;) {
    try {
      return await statement();
    } catch (err) {
      if (!isLockBusy(err)) throw err;
      const left = deadline - performance.now();
      if (left <= 0) throw lockedTooLong(err, busyTimeoutMs);
      await sleep(Math.min(pause, left));
      pause = Math.min(pause * 2, MAX_PAUSE_MS);
    }
  }
}

/** A connection whose statements wait for a held write lock asynchronously (see the module's comment). */
class BusyWaitingConnection implements DatabaseConnection {
  readonly inner: DatabaseConnection;
  readonly #busyTimeoutMs: number;

  constructor(inner: DatabaseConnection, busyTimeoutMs: number) {
    this.inner = inner;
    this.#busyTimeoutMs = busyTimeoutMs;
  }

  executeQuery<R>(compiledQuery: CompiledQuery): Promise<QueryResult<R>> {
    return untilUnlocked(this.#busyTimeoutMs, () => this.inner.executeQuery<R>(compiledQuery));
  }

  streamQuery<R>(compiledQuery: CompiledQuery, chunkSize?: number): AsyncIterableIterator<QueryResult<R>> {
    // Streams are read-only here; in WAL mode a reader never waits for the write lock.
    return this.inner.streamQuery<R>(compiledQuery, chunkSize);
  }
}

/** kysely's SQLite driver, its connection wrapped in a {@link BusyWaitingConnection}. */
class BusyWaitingDriver implements Driver {
  readonly #inner: Driver;
  readonly #busyTimeoutMs: number;
  #connection: BusyWaitingConnection | null = null;

  constructor(inner: Driver, busyTimeoutMs: number) {
    this.#inner = inner;
    this.#busyTimeoutMs = busyTimeoutMs;
  }

  init(): Promise<void> {
    return this.#inner.init();
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    const inner = await this.#inner.acquireConnection();
    // kysely's SQLite driver hands out its one connection (behind its mutex): wrap it once.
    if (this.#connection?.inner !== inner)
      this.#connection = new BusyWaitingConnection(inner, this.#busyTimeoutMs);
    return this.#connection;
  }

  // The transaction statements go through the wrapped connection's executeQuery, so `begin` waits too.
  beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    return this.#inner.beginTransaction(connection, settings);
  }

  commitTransaction(connection: DatabaseConnection): Promise<void> {
    return this.#inner.commitTransaction(connection);
  }

  rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    return this.#inner.rollbackTransaction(connection);
  }

  async savepoint(
    connection: DatabaseConnection,
    savepointName: string,
    compileQuery: QueryCompiler['compileQuery'],
  ): Promise<void> {
    await this.#inner.savepoint?.(connection, savepointName, compileQuery);
  }

  async rollbackToSavepoint(
    connection: DatabaseConnection,
    savepointName: string,
    compileQuery: QueryCompiler['compileQuery'],
  ): Promise<void> {
    await this.#inner.rollbackToSavepoint?.(connection, savepointName, compileQuery);
  }

  async releaseSavepoint(
    connection: DatabaseConnection,
    savepointName: string,
    compileQuery: QueryCompiler['compileQuery'],
  ): Promise<void> {
    await this.#inner.releaseSavepoint?.(connection, savepointName, compileQuery);
  }

  releaseConnection(connection: DatabaseConnection): Promise<void> {
    return this.#inner.releaseConnection(
      connection instanceof BusyWaitingConnection ? connection.inner : connection,
    );
  }

  destroy(): Promise<void> {
    return this.#inner.destroy();
  }
}

/**
 * kysely's SQLite dialect whose statements wait up to `busyTimeoutMs` for another process's write lock without
 * blocking the event loop. Open the database with `timeout: 0`, so that better-sqlite3 never sleeps itself.
 *
 * @example
 * ```ts
 * new Kysely({ dialect: new BusyWaitingSqliteDialect({ database }, 5_000) });
 * ```
 */
export class BusyWaitingSqliteDialect extends SqliteDialect {
  readonly #busyTimeoutMs: number;

  constructor(config: SqliteDialectConfig, busyTimeoutMs: number) {
    super(config);
    this.#busyTimeoutMs = busyTimeoutMs;
  }

  override createDriver(): Driver {
    return new BusyWaitingDriver(super.createDriver(), this.#busyTimeoutMs);
  }
}
