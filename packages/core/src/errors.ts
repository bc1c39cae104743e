/**
 * Typed errors with stable codes. Every failure a user can cause has its own class and `code`; the HTTP layer
 * maps them to RFC 9457 problem details with {@link toProblem}.
 */

/** Stable, documented error codes. Clients match on these, never on messages. */
export const ErrorCode = {
  VALIDATION_FAILED: 'VALIDATION_FAILED',
  MALFORMED_JSON: 'MALFORMED_JSON',
  UNSUPPORTED_MEDIA_TYPE: 'UNSUPPORTED_MEDIA_TYPE',
  PAYLOAD_TOO_LARGE: 'PAYLOAD_TOO_LARGE',
  IDEMPOTENCY_KEY_MISMATCH: 'IDEMPOTENCY_KEY_MISMATCH',
  IDEMPOTENCY_CONFLICT: 'IDEMPOTENCY_CONFLICT',
  UNSUPPORTED_ADDRESS_TYPE: 'UNSUPPORTED_ADDRESS_TYPE',
  UNKNOWN_CONNECTION: 'UNKNOWN_CONNECTION',
  PATH_NOT_ALLOWED: 'PATH_NOT_ALLOWED',
  TRANSFER_NOT_FOUND: 'TRANSFER_NOT_FOUND',
  STALE_EPOCH: 'STALE_EPOCH',
  LEASE_HELD: 'LEASE_HELD',
  ILLEGAL_TRANSITION: 'ILLEGAL_TRANSITION',
  QUEUE_FULL: 'QUEUE_FULL',
  UNKNOWN_ENDPOINT: 'UNKNOWN_ENDPOINT',
  INVALID_QUERY: 'INVALID_QUERY',
  CURSOR_EXPIRED: 'CURSOR_EXPIRED',
  RECORD_NOT_FOUND: 'RECORD_NOT_FOUND',
  UNAUTHORIZED: 'UNAUTHORIZED',
  FORBIDDEN: 'FORBIDDEN',
  NOT_FOUND: 'NOT_FOUND',
  CONFIG_INVALID: 'CONFIG_INVALID',
  STORE_UNAVAILABLE: 'STORE_UNAVAILABLE',
  BACKPLANE_UNAVAILABLE: 'BACKPLANE_UNAVAILABLE',
  SHUTTING_DOWN: 'SHUTTING_DOWN',
  CACHE_NOT_FOUND: 'CACHE_NOT_FOUND',
  CACHE_SCHEMA_MISMATCH: 'CACHE_SCHEMA_MISMATCH',
  CACHE_DISK_FULL: 'CACHE_DISK_FULL',
  CACHE_CONFLICT: 'CACHE_CONFLICT',
  CACHE_CLOSED: 'CACHE_CLOSED',
  CACHE_BUSY: 'CACHE_BUSY',
  BAD_RECORD: 'BAD_RECORD',
  SOURCE_FAILED: 'SOURCE_FAILED',
  SINK_FAILED: 'SINK_FAILED',
  TRANSFER_TERMINATED: 'TRANSFER_TERMINATED',
  REPLICATION_NOT_ENABLED: 'REPLICATION_NOT_ENABLED',
  REPLICATION_NOT_PERMITTED: 'REPLICATION_NOT_PERMITTED',
  REPLICA_IDENTITY_MISSING: 'REPLICA_IDENTITY_MISSING',
  SOURCE_SCHEMA_CHANGED: 'SOURCE_SCHEMA_CHANGED',
  POSITION_NOT_REACHED: 'POSITION_NOT_REACHED',
  INTERNAL: 'INTERNAL',
  NOTHING_TO_PROMOTE: 'NOTHING_TO_PROMOTE',
  NOTHING_TO_ROLL_BACK: 'NOTHING_TO_ROLL_BACK',
  CANNOT_RESUME: 'CANNOT_RESUME',
  UNKNOWN_SLOT: 'UNKNOWN_SLOT',
  SLOT_ACTIVE: 'SLOT_ACTIVE',
  SLOT_NOT_OWNED: 'SLOT_NOT_OWNED',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** One failing location of a validation error: the path of the bad field and why. */
export interface FieldIssue {
  /** Path of the field, e.g. `source.path` or `endpoints[0].primaryKey`. */
  path: string;
  message: string;
}

const BRAND = Symbol.for('sluice.error');

/** Caller-supplied text echoed in a message is clipped: a 1 MB key must not become a 1 MB error message. */
function q(text: string): string {
  const value = String(text);
  return JSON.stringify(value.length > 200 ? `${value.slice(0, 200)}…` : value);
}

export interface SluiceErrorOptions {
  cause?: unknown;
  /** Extra machine-readable details, copied into the problem body. */
  details?: Record<string, unknown>;
}

/**
 * Base of every Sluice error: a stable `code`, the HTTP `status` it maps to, an optional `cause`.
 *
 * @example
 * ```ts
 * try { await store.transition(id, epoch, 'COMPLETED') }
 * catch (err) { if (SluiceError.isInstance(err) && err.code === 'STALE_EPOCH') stopWork() }
 * ```
 */
export class SluiceError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details: Record<string, unknown> | undefined;
  readonly [BRAND] = true;

  constructor(code: ErrorCode, message: string, status = 500, options: SluiceErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.details = options.details;
  }

  /** True for any Sluice error, even one thrown by another copy of this package. */
  static isInstance(value: unknown): value is SluiceError {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
  }

  /** True when `value` is a Sluice error with the given code. */
  static hasCode(value: unknown, code: ErrorCode): value is SluiceError {
    return SluiceError.isInstance(value) && value.code === code;
  }
}

/** Input failed schema validation; `errors` names each failing path. */
export class ValidationError extends SluiceError {
  readonly errors: FieldIssue[];
  constructor(message: string, errors: FieldIssue[], options: SluiceErrorOptions = {}) {
    super(ErrorCode.VALIDATION_FAILED, message, 400, options);
    this.errors = errors;
  }
}

export class MalformedJsonError extends SluiceError {
  constructor(message = 'The body is not valid JSON', options: SluiceErrorOptions = {}) {
    super(ErrorCode.MALFORMED_JSON, message, 400, options);
  }
}

export class UnsupportedMediaTypeError extends SluiceError {
  constructor(contentType: string | undefined) {
    super(
      ErrorCode.UNSUPPORTED_MEDIA_TYPE,
      `Content type ${contentType ? q(contentType) : '(none)'} is not supported; send application/json`,
      415,
    );
  }
}

export class PayloadTooLargeError extends SluiceError {
  constructor(limitBytes: number) {
    super(ErrorCode.PAYLOAD_TOO_LARGE, `The body exceeds the limit of ${limitBytes} bytes`, 413, {
      details: { limitBytes },
    });
  }
}

export class IdempotencyKeyMismatchError extends SluiceError {
  constructor(headerKey: string, bodyId: string) {
    super(
      ErrorCode.IDEMPOTENCY_KEY_MISMATCH,
      `The Idempotency-Key header ${q(headerKey)} differs from the body id ${q(bodyId)}`,
      400,
    );
  }
}

/** The idempotency key was used before with a different request body. */
export class IdempotencyConflictError extends SluiceError {
  constructor(id: string) {
    super(
      ErrorCode.IDEMPOTENCY_CONFLICT,
      `Transfer ${q(id)} already exists with a different request body; use a new id for a different request`,
      422,
      { details: { id } },
    );
  }
}

export class UnsupportedAddressTypeError extends SluiceError {
  constructor(role: 'source' | 'destination', type: string) {
    super(ErrorCode.UNSUPPORTED_ADDRESS_TYPE, `Unsupported ${role} type ${q(type)}`, 422, {
      details: { role, type },
    });
  }
}

export class UnknownConnectionError extends SluiceError {
  constructor(name: string) {
    super(ErrorCode.UNKNOWN_CONNECTION, `No connection named ${q(name)} is configured on this node`, 422, {
      details: { connection: name },
    });
  }
}

export class PathNotAllowedError extends SluiceError {
  constructor(path: string) {
    super(ErrorCode.PATH_NOT_ALLOWED, `Path ${q(path)} is outside the configured file roots`, 403, {
      details: { path },
    });
  }
}

export class TransferNotFoundError extends SluiceError {
  constructor(id: string) {
    super(ErrorCode.TRANSFER_NOT_FOUND, `Transfer ${q(id)} does not exist`, 404, { details: { id } });
  }
}

/** A write was fenced off: the caller's epoch is no longer the record's epoch (another node took over). */
export class StaleEpochError extends SluiceError {
  constructor(id: string, expectedEpoch: number, options: SluiceErrorOptions = {}) {
    super(
      ErrorCode.STALE_EPOCH,
      `Transfer ${q(id)} is no longer at epoch ${expectedEpoch}; another owner took it over`,
      409,
      { ...options, details: { id, expectedEpoch, ...options.details } },
    );
  }
}

/**
 * A conditional takeover or termination was refused because the owner's lease has not expired by the store's
 * clock: the owner may still be working, so nobody else may change the record's owner yet.
 */
export class LeaseHeldError extends SluiceError {
  constructor(id: string, options: SluiceErrorOptions = {}) {
    super(
      ErrorCode.LEASE_HELD,
      `Transfer ${q(id)} is still leased by its owner; try again once the lease has expired`,
      409,
      { ...options, details: { id, ...options.details } },
    );
  }
}

export class IllegalTransitionError extends SluiceError {
  constructor(id: string, from: string, to: string) {
    super(ErrorCode.ILLEGAL_TRANSITION, `Transfer ${q(id)} cannot move from ${from} to ${to}`, 409, {
      details: { id, from, to },
    });
  }
}

/** The node's transfer queue is full; retry after `retryAfterSeconds`. */
export class QueueFullError extends SluiceError {
  readonly retryAfterSeconds: number;
  constructor(retryAfterSeconds: number) {
    super(ErrorCode.QUEUE_FULL, 'This node is at its transfer capacity; retry later', 429, {
      details: { retryAfterSeconds },
    });
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

export class UnknownEndpointError extends SluiceError {
  constructor(name: string) {
    super(ErrorCode.UNKNOWN_ENDPOINT, `No endpoint named ${q(name)}`, 404, { details: { endpoint: name } });
  }
}

/** `POST /v1/endpoints/:name/promote` found no held generation to switch to. */
export class NothingToPromoteError extends SluiceError {
  constructor(endpoint: string) {
    super(ErrorCode.NOTHING_TO_PROMOTE, `Endpoint ${q(endpoint)} has no held generation to promote`, 409, {
      details: { endpoint },
    });
  }
}

/** A rollback found no retained generation to go back to (none yet, or it was garbage-collected). */
export class NothingToRollBackError extends SluiceError {
  constructor(endpoint: string, why: string) {
    super(ErrorCode.NOTHING_TO_ROLL_BACK, `Endpoint ${q(endpoint)} cannot roll back: ${why}`, 409, {
      details: { endpoint },
    });
  }
}

/** A rollback target's source cannot continue from that generation's checkpoint; nothing was changed. */
export class CannotResumeError extends SluiceError {
  constructor(endpoint: string, generation: string, reason: string) {
    super(
      ErrorCode.CANNOT_RESUME,
      `Endpoint ${q(endpoint)} cannot roll back to ${q(generation)}: ${reason}`,
      409,
      { details: { endpoint, generation, reason } },
    );
  }
}

/** A query is malformed or exceeds a limit; `errors` names each failing path. */
export class InvalidQueryError extends SluiceError {
  readonly errors: FieldIssue[];
  constructor(message: string, errors: FieldIssue[] = [], options: SluiceErrorOptions = {}) {
    super(ErrorCode.INVALID_QUERY, message, 400, options);
    this.errors = errors;
  }
}

/** A pagination cursor refers to a cache generation that no longer serves. */
export class CursorExpiredError extends SluiceError {
  constructor(
    message = 'The cursor belongs to a cache generation that is no longer served; restart the query',
  ) {
    super(ErrorCode.CURSOR_EXPIRED, message, 410);
  }
}

export class RecordNotFoundError extends SluiceError {
  constructor(endpoint: string, key: string) {
    super(ErrorCode.RECORD_NOT_FOUND, `No record with key ${q(key)} in endpoint ${q(endpoint)}`, 404, {
      details: { endpoint, key },
    });
  }
}

export class UnauthorizedError extends SluiceError {
  constructor(message = 'A valid bearer token is required') {
    super(ErrorCode.UNAUTHORIZED, message, 401);
  }
}

export class ForbiddenError extends SluiceError {
  constructor(message = 'The token does not grant access to this resource') {
    super(ErrorCode.FORBIDDEN, message, 403);
  }
}

export class NotFoundError extends SluiceError {
  constructor(message: string) {
    super(ErrorCode.NOT_FOUND, message, 404);
  }
}

/** The configuration is invalid; `errors` names each bad field. */
export class ConfigError extends SluiceError {
  readonly errors: FieldIssue[];
  constructor(message: string, errors: FieldIssue[] = [], options: SluiceErrorOptions = {}) {
    super(ErrorCode.CONFIG_INVALID, message, 500, options);
    this.errors = errors;
  }
}

export class StoreUnavailableError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super(ErrorCode.STORE_UNAVAILABLE, message, 503, options);
  }
}

export class BackplaneUnavailableError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super(ErrorCode.BACKPLANE_UNAVAILABLE, message, 503, options);
  }
}

/** The node is shutting down and takes no new work; another node (or this one, restarted) will. */
export class ShuttingDownError extends SluiceError {
  constructor(
    message = 'This node is shutting down; send the request to another node',
    options: SluiceErrorOptions = {},
  ) {
    super(ErrorCode.SHUTTING_DOWN, message, 503, options);
  }
}

export class CacheNotFoundError extends SluiceError {
  constructor(name: string) {
    super(ErrorCode.CACHE_NOT_FOUND, `Cache or alias ${q(name)} does not exist`, 404, { details: { name } });
  }
}

/** An existing cache was created with another schema (fields, primary key or indexes). */
export class SchemaMismatchError extends SluiceError {
  constructor(cache: string, expectedHash: string, actualHash: string) {
    super(
      ErrorCode.CACHE_SCHEMA_MISMATCH,
      `Cache ${q(cache)} has schema ${actualHash}, expected ${expectedHash}`,
      409,
      { details: { cache, expectedHash, actualHash } },
    );
  }
}

export class DiskFullError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super(ErrorCode.CACHE_DISK_FULL, message, 507, options);
  }
}

/** A cache write hit its conflict policy (insert of an existing key, update of a missing one). */
export class CacheConflictError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super(ErrorCode.CACHE_CONFLICT, message, 409, options);
  }
}

export class CacheClosedError extends SluiceError {
  constructor(name: string) {
    super(ErrorCode.CACHE_CLOSED, `Cache ${q(name)} is closed`, 503, { details: { name } });
  }
}

/** A cache environment stayed locked by another live process for longer than the wait allowed. */
export class CacheBusyError extends SluiceError {
  constructor(message: string, details: Record<string, unknown>) {
    super(ErrorCode.CACHE_BUSY, message, 503, { details });
  }
}

/** A source record could not be parsed or typed; carries where it was found. */
export class BadRecordError extends SluiceError {
  constructor(message: string, location: { line?: number; offset?: number; source?: string }) {
    super(ErrorCode.BAD_RECORD, message, 422, { details: location });
  }
}

export class SourceError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super(ErrorCode.SOURCE_FAILED, message, 502, options);
  }
}

export class SinkError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super(ErrorCode.SINK_FAILED, message, 502, options);
  }
}

export class TransferTerminatedError extends SluiceError {
  constructor(id: string) {
    super(ErrorCode.TRANSFER_TERMINATED, `Transfer ${q(id)} was terminated`, 409, { details: { id } });
  }
}

/** A replication source's database does not run `wal_level = logical` (start-up error; no fallback to polling). */
export class ReplicationNotEnabledError extends SluiceError {
  constructor(walLevel: string, options: SluiceErrorOptions = {}) {
    super(
      ErrorCode.REPLICATION_NOT_ENABLED,
      `PostgreSQL runs wal_level=${q(walLevel)}; logical replication needs wal_level=logical (set it in postgresql.conf or ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL), or configure the source with capture: poll and a cursor column`,
      502,
      { ...options, details: { setting: 'wal_level', value: walLevel, required: 'logical' } },
    );
  }
}

/** The source's role may not create or read a replication slot (start-up error). */
export class ReplicationNotPermittedError extends SluiceError {
  constructor(role: string, options: SluiceErrorOptions = {}) {
    super(
      ErrorCode.REPLICATION_NOT_PERMITTED,
      `Role ${q(role)} lacks the REPLICATION privilege logical replication needs (ALTER ROLE ${role} WITH REPLICATION), or configure the source with capture: poll`,
      502,
      { ...options, details: { role, privilege: 'REPLICATION' } },
    );
  }
}

/** `slots drop` named a replication slot that no configured PostgreSQL connection has. */
export class UnknownSlotError extends SluiceError {
  constructor(slot: string) {
    super(
      ErrorCode.UNKNOWN_SLOT,
      `No logical replication slot ${q(slot)} on the configured connections`,
      404,
      {
        details: { slot },
      },
    );
  }
}

/** A replication slot a walsender is streaming from: stop the process that reads it first. */
export class SlotActiveError extends SluiceError {
  constructor(slot: string, pid: number | null) {
    super(
      ErrorCode.SLOT_ACTIVE,
      `Replication slot ${q(slot)} is in use${pid === null ? '' : ` by PostgreSQL backend ${pid}`}; stop the app-server that streams it (or remove its endpoint) first`,
      409,
      { details: { slot, pid } },
    );
  }
}

/** A replication slot Sluice did not create: it is never dropped by Sluice (use SQL if it must go). */
export class SlotNotOwnedError extends SluiceError {
  constructor(slot: string) {
    super(
      ErrorCode.SLOT_NOT_OWNED,
      `Replication slot ${q(slot)} was not created by Sluice (no Sluice publication names it); drop it with SQL if it is really unused`,
      409,
      { details: { slot } },
    );
  }
}

/** A replicated table whose updates and deletes would not name their row (no primary key, no replica identity). */
export class ReplicaIdentityMissingError extends SluiceError {
  constructor(table: string, options: SluiceErrorOptions = {}) {
    super(
      ErrorCode.REPLICA_IDENTITY_MISSING,
      `Table ${q(table)} has no primary key and no replica identity, so its updates and deletes cannot be mirrored: add a primary key, or ALTER TABLE ${table} REPLICA IDENTITY FULL (with "key" configured)`,
      502,
      { ...options, details: { table } },
    );
  }
}

/** The source table's columns changed in a way the endpoint's schema cannot take: a new generation is built. */
export class SourceSchemaChangedError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super(ErrorCode.SOURCE_SCHEMA_CHANGED, message, 409, options);
  }
}

/** A read asked for a position (`sluice-min-position`) the serving generation did not reach in time. */
export class PositionNotReachedError extends SluiceError {
  /** Seconds after which a retry is worth it (`retry-after`). */
  readonly retryAfterSeconds: number;
  constructor(message: string, retryAfterSeconds = 1, options: SluiceErrorOptions = {}) {
    super(ErrorCode.POSITION_NOT_REACHED, message, 503, options);
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

/** Wraps anything that is not a SluiceError, so callers always get a code. */
export function asSluiceError(err: unknown): SluiceError {
  if (SluiceError.isInstance(err)) return err;
  let message: string;
  try {
    message = err instanceof Error ? err.message : String(err);
  } catch {
    // e.g. an object without a prototype, or whose toString throws
    message = 'non-error value thrown';
  }
  return new SluiceError(ErrorCode.INTERNAL, message, 500, { cause: err });
}
