import {
  IllegalTransitionError,
  InternalError,
  SluiceError,
  StoreUnavailableError,
  type TransferState,
} from '@sluice/core';

/** Error codes (PostgreSQL SQLSTATE, Node socket, SQLite) that mean "the database cannot be reached now". */
const UNAVAILABLE_CODES: ReadonlySet<string> = new Set([
  // Node sockets / DNS
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  // PostgreSQL: connection exceptions, operator intervention, resources
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
  '57P01', // admin_shutdown (pg_terminate_backend, server stopping)
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now (starting up / shutting down)
  '57P05', // idle_session_timeout
  '53300', // too_many_connections
  // The statement did not get an answer in time and was rolled back, nothing of it written: the server's
  // statement_timeout (a row held by another session longer than that) or an operator's pg_cancel_backend, and a
  // lock_timeout set on the store's role. An outage to wait out like a SQLite lock held past busyTimeoutMs
  // (SQLITE_BUSY_TIMEOUT) or the client's own query timeout: reported INTERNAL, a transfer's outcome was dropped
  // and the finished transfer ran again (apps/app-server/test/store-statement-timeout.test.ts).
  '57014', // query_canceled
  '55P03', // lock_not_available
  '53100', // disk_full
  '40001', // serialization_failure: retryable
  '40P01', // deadlock_detected: retryable
  '3D000', // database does not exist (dropped under us)
  // Who connects is refused (a role that does not exist, no pg_hba entry, a wrong or rotated password): the store
  // cannot be used until that is fixed — unavailable, with PostgreSQL's reason in the message, never INTERNAL.
  '28000', // invalid_authorization_specification
  '28P01', // invalid_password
  // SQLite
  'SQLITE_BUSY',
  'SQLITE_BUSY_SNAPSHOT',
  'SQLITE_BUSY_RECOVERY',
  'SQLITE_BUSY_TIMEOUT',
  'SQLITE_LOCKED',
  'SQLITE_CANTOPEN',
  'SQLITE_FULL',
  'SQLITE_NOTADB',
  'SQLITE_CORRUPT',
  'SQLITE_READONLY',
  'SQLITE_READONLY_DBMOVED',
]);

/** Driver messages without a code that mean the connection or pool is gone. */
const UNAVAILABLE_MESSAGES: readonly RegExp[] = [
  /connection terminated/i,
  /terminating connection/i,
  /timeout exceeded when trying to connect/i,
  /connection timeout/i,
  /cannot use a pool after calling end/i,
  /client has encountered a connection error/i,
  /client was closed/i,
  /not queryable/i,
  /database connection is not open/i,
  /driver has already been destroyed/i,
  /server closed the connection/i,
  /connect ECONNREFUSED/i,
  /query read timeout/i,
  // A migration by another node changed a table under this connection's prepared statements: the
  // connection is replaced and a retry succeeds.
  /cached plan must not change result type/i,
];

/** True when `err` (or its cause chain) says the database is unreachable rather than the request wrong. */
export function isUnavailableError(err: unknown): boolean {
  for (let current = err, depth = 0; current && depth < 5; depth++) {
    if (typeof current !== 'object') return false;
    const { code, message } = current as { code?: unknown; message?: unknown };
    if (typeof code === 'string' && (UNAVAILABLE_CODES.has(code) || code.startsWith('SQLITE_IOERR'))) {
      return true;
    }
    if (typeof message === 'string' && UNAVAILABLE_MESSAGES.some((re) => re.test(message))) return true;
    // AggregateError from a multi-address connect (e.g. localhost → ::1 and 127.0.0.1)
    const errors = (current as { errors?: unknown }).errors;
    if (Array.isArray(errors) && errors.some((inner) => isUnavailableError(inner))) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * True when `err` says a table of the store does not exist: PostgreSQL's `undefined_table` (42P01), SQLite's
 * `no such table`. The schema was migrated when the store opened, so its tables were dropped since, or the
 * database was replaced by an empty one.
 */
export function isSchemaMissingError(err: unknown): boolean {
  for (let current = err, depth = 0; current && depth < 5; depth++) {
    if (typeof current !== 'object') return false;
    const { code, message } = current as { code?: unknown; message?: unknown };
    if (code === '42P01') return true;
    if (code === 'SQLITE_ERROR' && typeof message === 'string' && /^no such table: /i.test(message))
      return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * `STORE_UNAVAILABLE` with `details.reason: "schema-missing"`: the database answers but the store's tables are
 * not there. Never repaired automatically (an empty schema would forget every transfer record, and resent
 * requests would run again): the operator restores the database, or drops the rest of the schema to start over.
 */
export function schemaMissingError(operation: string, cause: unknown): StoreUnavailableError {
  const message = cause instanceof Error ? cause.message : String(cause);
  return new StoreUnavailableError(
    `The transfer store's schema is missing (${operation}: ${message}): its tables were dropped or the database ` +
      'was replaced by an empty one. Sluice does not recreate them on its own — restore the database, or drop ' +
      'what is left of the schema and restart to start empty (docs/operations.md, "The store\'s schema")',
    { cause, details: { reason: 'schema-missing' } },
  );
}

/**
 * Turns anything a driver throws into a typed Sluice error: Sluice errors pass through, unreachable
 * databases and a missing schema become `STORE_UNAVAILABLE`, the rest `INTERNAL` with the driver error as `cause`.
 */
export function toStoreError(err: unknown, operation: string): SluiceError {
  if (SluiceError.isInstance(err)) return err;
  const message = err instanceof Error ? err.message : String(err);
  if (isSchemaMissingError(err)) return schemaMissingError(operation, err);
  if (isUnavailableError(err)) {
    return new StoreUnavailableError(`The transfer store is unavailable (${operation}): ${message}`, {
      cause: err,
    });
  }
  return new InternalError(`The transfer store failed (${operation}): ${message}`, { cause: err });
}

/**
 * A write on a transfer in a terminal state (`COMPLETED`, `FAILED`, `TERMINATED`): terminal states are
 * final. Carries the `ILLEGAL_TRANSITION` code.
 */
export class TransferFinalError extends IllegalTransitionError {
  constructor(id: string, state: TransferState, operation: string) {
    super(id, state, state);
    this.message = `Transfer "${id}" is ${state}, a final state; ${operation} refused`;
  }
}

/** Thrown by every operation after `close()`. */
export function closedStoreError(): StoreUnavailableError {
  return new StoreUnavailableError('The transfer store is closed');
}
