/**
 * Typed errors with stable codes. Every failure a user can cause has its own class and `code`; the HTTP status
 * of a code is defined once, in {@link STATUS_BY_CODE}, and the HTTP layer maps errors to RFC 9457 problem
 * details with {@link toProblem}.
 */

/** Stable, documented error codes. Clients match on these, never on messages. */
export const ErrorCode = {
  VALIDATION_FAILED: 'VALIDATION_FAILED',
  MALFORMED_JSON: 'MALFORMED_JSON',
  UNSUPPORTED_MEDIA_TYPE: 'UNSUPPORTED_MEDIA_TYPE',
  PAYLOAD_TOO_LARGE: 'PAYLOAD_TOO_LARGE',
  HEADERS_TOO_LARGE: 'HEADERS_TOO_LARGE',
  REQUEST_TIMEOUT: 'REQUEST_TIMEOUT',
  IDEMPOTENCY_KEY_MISMATCH: 'IDEMPOTENCY_KEY_MISMATCH',
  IDEMPOTENCY_CONFLICT: 'IDEMPOTENCY_CONFLICT',
  UNSUPPORTED_ADDRESS_TYPE: 'UNSUPPORTED_ADDRESS_TYPE',
  UNKNOWN_CONNECTION: 'UNKNOWN_CONNECTION',
  PATH_NOT_ALLOWED: 'PATH_NOT_ALLOWED',
  PATH_NOT_ACCESSIBLE: 'PATH_NOT_ACCESSIBLE',
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
  METHOD_NOT_ALLOWED: 'METHOD_NOT_ALLOWED',
  CONFIG_INVALID: 'CONFIG_INVALID',
  STORE_UNAVAILABLE: 'STORE_UNAVAILABLE',
  BACKPLANE_UNAVAILABLE: 'BACKPLANE_UNAVAILABLE',
  NODE_SHUTTING_DOWN: 'NODE_SHUTTING_DOWN',
  CACHE_NOT_FOUND: 'CACHE_NOT_FOUND',
  CACHE_SCHEMA_MISMATCH: 'CACHE_SCHEMA_MISMATCH',
  CACHE_DISK_FULL: 'CACHE_DISK_FULL',
  CACHE_CONFLICT: 'CACHE_CONFLICT',
  CACHE_CLOSED: 'CACHE_CLOSED',
  CACHE_READ_ONLY: 'CACHE_READ_ONLY',
  CACHE_BUSY: 'CACHE_BUSY',
  CACHE_DAMAGED: 'CACHE_DAMAGED',
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
  GENERATION_NOT_HELD: 'GENERATION_NOT_HELD',
  GENERATION_NOT_SERVING: 'GENERATION_NOT_SERVING',
  NOTHING_TO_ROLL_BACK: 'NOTHING_TO_ROLL_BACK',
  CANNOT_RESUME: 'CANNOT_RESUME',
  ENDPOINT_STOPPED: 'ENDPOINT_STOPPED',
  ENDPOINT_NOT_RUNNING: 'ENDPOINT_NOT_RUNNING',
  ENDPOINT_NOT_READY: 'ENDPOINT_NOT_READY',
  ENDPOINT_TIMEOUT: 'ENDPOINT_TIMEOUT',
  UNKNOWN_SLOT: 'UNKNOWN_SLOT',
  SLOT_ACTIVE: 'SLOT_ACTIVE',
  SLOT_NOT_OWNED: 'SLOT_NOT_OWNED',
  SLOT_OF_ANOTHER_NODE: 'SLOT_OF_ANOTHER_NODE',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/**
 * The HTTP status of every error code: the one place a code's status is defined, so the two cannot drift
 * apart per throw site. Adding a code without a status does not compile.
 */
export const STATUS_BY_CODE = {
  VALIDATION_FAILED: 400,
  MALFORMED_JSON: 400,
  IDEMPOTENCY_KEY_MISMATCH: 400,
  INVALID_QUERY: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  PATH_NOT_ALLOWED: 403,
  PATH_NOT_ACCESSIBLE: 403,
  CACHE_READ_ONLY: 403,
  TRANSFER_NOT_FOUND: 404,
  UNKNOWN_ENDPOINT: 404,
  RECORD_NOT_FOUND: 404,
  CACHE_NOT_FOUND: 404,
  UNKNOWN_SLOT: 404,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  STALE_EPOCH: 409,
  LEASE_HELD: 409,
  ILLEGAL_TRANSITION: 409,
  NOTHING_TO_PROMOTE: 409,
  GENERATION_NOT_HELD: 409,
  GENERATION_NOT_SERVING: 409,
  NOTHING_TO_ROLL_BACK: 409,
  CANNOT_RESUME: 409,
  ENDPOINT_NOT_RUNNING: 409,
  CACHE_SCHEMA_MISMATCH: 409,
  CACHE_CONFLICT: 409,
  TRANSFER_TERMINATED: 409,
  SOURCE_SCHEMA_CHANGED: 409,
  SLOT_ACTIVE: 409,
  SLOT_NOT_OWNED: 409,
  SLOT_OF_ANOTHER_NODE: 409,
  REQUEST_TIMEOUT: 408,
  CURSOR_EXPIRED: 410,
  PAYLOAD_TOO_LARGE: 413,
  HEADERS_TOO_LARGE: 431,
  UNSUPPORTED_MEDIA_TYPE: 415,
  IDEMPOTENCY_CONFLICT: 422,
  UNSUPPORTED_ADDRESS_TYPE: 422,
  UNKNOWN_CONNECTION: 422,
  BAD_RECORD: 422,
  QUEUE_FULL: 429,
  CONFIG_INVALID: 500,
  INTERNAL: 500,
  SOURCE_FAILED: 502,
  SINK_FAILED: 502,
  REPLICATION_NOT_ENABLED: 502,
  REPLICATION_NOT_PERMITTED: 502,
  REPLICA_IDENTITY_MISSING: 502,
  STORE_UNAVAILABLE: 503,
  BACKPLANE_UNAVAILABLE: 503,
  NODE_SHUTTING_DOWN: 503,
  CACHE_CLOSED: 503,
  CACHE_BUSY: 503,
  CACHE_DAMAGED: 503,
  POSITION_NOT_REACHED: 503,
  ENDPOINT_STOPPED: 503,
  ENDPOINT_NOT_READY: 503,
  ENDPOINT_TIMEOUT: 504,
  CACHE_DISK_FULL: 507,
} as const satisfies Record<ErrorCode, number>;

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

function isErrorStatus(value: unknown): value is number {
  return Number.isInteger(value) && (value as number) >= 400 && (value as number) <= 599;
}

/**
 * The HTTP status for an error code or a thrown value: a code's entry in {@link STATUS_BY_CODE}; for a Sluice
 * error (also one from another copy of this package, which may know newer codes) the status it carries when
 * that is a valid error status; 500 for anything else.
 *
 * @example
 * ```ts
 * statusOf('QUEUE_FULL'); // 429
 * statusOf(new CacheClosedError('items-01')); // 503
 * statusOf(new TypeError('x')); // 500
 * ```
 */
export function statusOf(codeOrError: unknown): number {
  if (typeof codeOrError === 'string')
    return Object.hasOwn(STATUS_BY_CODE, codeOrError)
      ? STATUS_BY_CODE[codeOrError as ErrorCode]
      : STATUS_BY_CODE.INTERNAL;
  if (SluiceError.isInstance(codeOrError)) {
    const { status } = codeOrError as { status?: unknown };
    return isErrorStatus(status) ? status : STATUS_BY_CODE.INTERNAL;
  }
  return STATUS_BY_CODE.INTERNAL;
}

export interface SluiceErrorOptions {
  cause?: unknown;
  /** Extra machine-readable details, copied into the problem body. */
  details?: Record<string, unknown>;
}

/** What a {@link SluiceError} is made of; its HTTP status follows from `code`. */
export interface SluiceErrorInit extends SluiceErrorOptions {
  code: ErrorCode;
  message: string;
}

/**
 * Base of every Sluice error: a stable `code`, the HTTP `status` that code maps to (from
 * {@link STATUS_BY_CODE}), an optional `cause` and machine-readable `details`. Throw a specific subclass where
 * one exists; the base class is for codes without one (e.g. `INTERNAL`).
 *
 * @example
 * ```ts
 * throw new SluiceError({ code: 'INTERNAL', message: 'the ledger lost a row', cause: err });
 *
 * try { await store.transition(id, epoch, 'COMPLETED') }
 * catch (err) { if (SluiceError.isInstance(err) && err.code === 'STALE_EPOCH') stopWork() }
 * ```
 */
export class SluiceError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details: Record<string, unknown> | undefined;
  readonly [BRAND] = true;

  constructor(init: SluiceErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.status = statusOf(init.code);
    this.details = init.details;
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
    super({ code: ErrorCode.VALIDATION_FAILED, message, ...options });
    this.errors = errors;
  }
}

/**
 * JSON text that does not parse: a body, or JSON carried elsewhere (a query-string parameter such as the change
 * feed's `filter`). `errors` names where that text was when it was not the body, as a validation error names its
 * path; a body's problem has none.
 *
 * @example
 * ```ts
 * new MalformedJsonError('filter is not valid JSON: …', {}, [{ path: 'querystring.filter', message: 'not valid JSON' }]);
 * ```
 */
export class MalformedJsonError extends SluiceError {
  /** Where the text was, when not in the body (a body's problem names no path). */
  readonly errors: FieldIssue[] | undefined;
  constructor(
    message = 'The body is not valid JSON',
    options: SluiceErrorOptions = {},
    errors?: FieldIssue[],
  ) {
    super({ code: ErrorCode.MALFORMED_JSON, message, ...options });
    this.errors = errors;
  }
}

/**
 * A body of a media type the route does not read (415), or JSON declared in a charset other than UTF-8: JSON text is
 * UTF-8 (RFC 8259 § 8.1), so reading it as UTF-8 anyway would change what it says. The refused charset is named in
 * the message and as the problem's `charset` member.
 *
 * @example
 * ```ts
 * new UnsupportedMediaTypeError('text/csv'); // Content type "text/csv" is not supported; send application/json
 * new UnsupportedMediaTypeError('application/json; charset=latin1', { charset: 'latin1' });
 * ```
 */
export class UnsupportedMediaTypeError extends SluiceError {
  constructor(contentType: string | undefined, refused: { charset?: string; encoding?: string } = {}) {
    const { charset, encoding } = refused;
    super({
      code: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
      message:
        encoding !== undefined
          ? `Content-Encoding ${q(encoding)} is not supported; send the JSON body uncompressed (no content-encoding, or identity)`
          : charset === undefined
            ? `Content type ${contentType ? q(contentType) : '(none)'} is not supported; send application/json`
            : `Charset ${q(charset)} is not supported: JSON text is UTF-8 (RFC 8259 § 8.1); send the body as UTF-8 with charset=utf-8 or no charset`,
      ...(encoding !== undefined
        ? { details: { encoding } }
        : charset === undefined
          ? {}
          : { details: { charset } }),
    });
  }
}

/** The request line and headers exceed the HTTP server's limit (Node's 16 KiB by default): refused by its parser. */
export class HeadersTooLargeError extends SluiceError {
  constructor() {
    super({
      code: ErrorCode.HEADERS_TOO_LARGE,
      message: "The request line and headers exceed the server's limit (16 KiB by default)",
    });
  }
}

/** The request was not received within the HTTP server's request timeout. */
export class RequestTimeoutError extends SluiceError {
  constructor() {
    super({ code: ErrorCode.REQUEST_TIMEOUT, message: 'The request was not received in time' });
  }
}

export class PayloadTooLargeError extends SluiceError {
  constructor(limitBytes: number) {
    super({
      code: ErrorCode.PAYLOAD_TOO_LARGE,
      message: `The body exceeds the limit of ${limitBytes} bytes`,
      details: { limitBytes },
    });
  }
}

/**
 * A transfer request larger than {@link TRANSFER_REQUEST_MAX_BYTES} as parsed (defaults filled in): the same code as
 * a body over `http.bodyBytes`, since either way the client must send less — with the request's own limit and size.
 */
export class TransferRequestTooLargeError extends SluiceError {
  constructor(limitBytes: number, bytes: number) {
    super({
      code: ErrorCode.PAYLOAD_TOO_LARGE,
      message: `The transfer request is ${bytes} bytes as stored (its JSON with defaults filled in); at most ${limitBytes}`,
      details: { limitBytes, bytes },
    });
  }
}

export class IdempotencyKeyMismatchError extends SluiceError {
  constructor(headerKey: string, bodyId: string) {
    super({
      code: ErrorCode.IDEMPOTENCY_KEY_MISMATCH,
      message: `The Idempotency-Key header ${q(headerKey)} differs from the body id ${q(bodyId)}`,
    });
  }
}

/** The idempotency key was used before with a different request body. */
export class IdempotencyConflictError extends SluiceError {
  constructor(id: string) {
    super({
      code: ErrorCode.IDEMPOTENCY_CONFLICT,
      message: `Transfer ${q(id)} already exists with a different request body; use a new id for a different request`,
      details: { id },
    });
  }
}

export class UnsupportedAddressTypeError extends SluiceError {
  constructor(role: 'source' | 'destination', type: string) {
    super({
      code: ErrorCode.UNSUPPORTED_ADDRESS_TYPE,
      message: `Unsupported ${role} type ${q(type)}`,
      details: { role, type },
    });
  }
}

export class UnknownConnectionError extends SluiceError {
  constructor(name: string) {
    super({
      code: ErrorCode.UNKNOWN_CONNECTION,
      message: `No connection named ${q(name)} is configured on this node`,
      details: { connection: name },
    });
  }
}

export class PathNotAllowedError extends SluiceError {
  constructor(path: string) {
    super({
      code: ErrorCode.PATH_NOT_ALLOWED,
      message: `Path ${q(path)} is outside the configured file roots`,
      details: { path },
    });
  }
}

/**
 * A path inside the configured file roots that the server's user may not read or write (EACCES / EPERM): an
 * operator's fix (permissions, ownership), unlike {@link PathNotAllowedError}, which the request has to change.
 * `field` names the request field (`source.path`, `destination.path`); `reason` says what was denied.
 *
 * @example
 * ```ts
 * throw new PathNotAccessibleError('/data/in.jsonl', 'source.path', 'it cannot be read (EACCES)', { cause: err });
 * ```
 */
export class PathNotAccessibleError extends SluiceError {
  readonly errors: FieldIssue[];
  constructor(path: string, field: string, reason: string, options: SluiceErrorOptions = {}) {
    super({
      code: ErrorCode.PATH_NOT_ACCESSIBLE,
      message: `Path ${q(path)} is not accessible to the server: ${reason}`,
      ...options,
      details: { path, ...options.details },
    });
    this.errors = [{ path: field, message: `Not accessible: ${reason}` }];
  }
}

export class TransferNotFoundError extends SluiceError {
  constructor(id: string) {
    super({
      code: ErrorCode.TRANSFER_NOT_FOUND,
      message: `Transfer ${q(id)} does not exist`,
      details: { id },
    });
  }
}

/** A write was fenced off: the caller's epoch is no longer the record's epoch (another node took over). */
export class StaleEpochError extends SluiceError {
  constructor(id: string, expectedEpoch: number, options: SluiceErrorOptions = {}) {
    super({
      code: ErrorCode.STALE_EPOCH,
      message: `Transfer ${q(id)} is no longer at epoch ${expectedEpoch}; another owner took it over`,
      ...options,
      details: { id, expectedEpoch, ...options.details },
    });
  }
}

/**
 * A conditional takeover or termination was refused because the owner's lease has not expired by the store's
 * clock: the owner may still be working, so nobody else may change the record's owner yet.
 */
export class LeaseHeldError extends SluiceError {
  constructor(id: string, options: SluiceErrorOptions = {}) {
    super({
      code: ErrorCode.LEASE_HELD,
      message: `Transfer ${q(id)} is still leased by its owner; try again once the lease has expired`,
      ...options,
      details: { id, ...options.details },
    });
  }
}

export class IllegalTransitionError extends SluiceError {
  constructor(id: string, from: string, to: string) {
    super({
      code: ErrorCode.ILLEGAL_TRANSITION,
      message: `Transfer ${q(id)} cannot move from ${from} to ${to}`,
      details: { id, from, to },
    });
  }
}

/**
 * A node is at its capacity (its transfer queue, an api-server's change-feed subscribers, or those of one client);
 * retry after `retryAfterSeconds` (the `retry-after` header of the 429). `bound` says which capacity, where a node
 * has several: the setting's name and its value, as the problem's `limit` and `max` members.
 *
 * @example
 * ```ts
 * throw new QueueFullError(5, 'This client has as many change feeds as it may open', {
 *   limit: 'api.changes.maxPerClient',
 *   max: 100,
 * });
 * ```
 */
export class QueueFullError extends SluiceError {
  readonly retryAfterSeconds: number;
  constructor(
    retryAfterSeconds: number,
    message = 'This node is at its transfer capacity; retry later',
    bound?: { limit: string; max: number },
  ) {
    super({
      code: ErrorCode.QUEUE_FULL,
      message,
      details: { retryAfterSeconds, ...bound },
    });
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

export class UnknownEndpointError extends SluiceError {
  constructor(name: string) {
    super({
      code: ErrorCode.UNKNOWN_ENDPOINT,
      message: `No endpoint named ${q(name)}`,
      details: { endpoint: name },
    });
  }
}

/** `POST /v1/endpoints/:name/promote` found no held generation to switch to. */
export class NothingToPromoteError extends SluiceError {
  constructor(endpoint: string) {
    super({
      code: ErrorCode.NOTHING_TO_PROMOTE,
      message: `Endpoint ${q(endpoint)} has no held generation to promote`,
      details: { endpoint },
    });
  }
}

/**
 * A promote named the generation the operator means, and that one is not held: another was held since (a second
 * rebuild superseded it) or it was promoted, retired or never existed. Nothing moves. `held` is the generation held
 * now (null: none).
 */
export class GenerationNotHeldError extends SluiceError {
  constructor(endpoint: string, generation: string, held: string | null) {
    super({
      code: ErrorCode.GENERATION_NOT_HELD,
      message:
        held === null
          ? `Endpoint ${q(endpoint)} holds no generation to promote, not ${q(generation)}; nothing moved`
          : `Endpoint ${q(endpoint)} holds ${q(held)}, not ${q(generation)}; nothing moved (promote ${q(held)} to switch to it)`,
      details: { endpoint, generation, held },
    });
  }
}

/**
 * A rollback named the generation the operator saw serving (`from`), and another serves now: the endpoint moved on
 * (a rebuild switched, someone else promoted or rolled back) after the operator's picture was taken. Nothing moves.
 * `serving` is the generation serving now (null: none).
 */
export class GenerationNotServingError extends SluiceError {
  constructor(endpoint: string, generation: string, serving: string | null) {
    super({
      code: ErrorCode.GENERATION_NOT_SERVING,
      message:
        serving === null
          ? `Endpoint ${q(endpoint)} serves no generation, not ${q(generation)}; nothing moved`
          : `Endpoint ${q(endpoint)} serves ${q(serving)} now, not ${q(generation)}; nothing moved (look at its generations again, then roll back from ${q(serving)} if you still mean to)`,
      details: { endpoint, generation, serving },
    });
  }
}

/** A rollback found no retained generation to go back to (none yet, or it was garbage-collected). */
export class NothingToRollBackError extends SluiceError {
  constructor(endpoint: string, why: string) {
    super({
      code: ErrorCode.NOTHING_TO_ROLL_BACK,
      message: `Endpoint ${q(endpoint)} cannot roll back: ${why}`,
      details: { endpoint },
    });
  }
}

/** A rollback target's source cannot continue from that generation's checkpoint; nothing was changed. */
export class CannotResumeError extends SluiceError {
  constructor(endpoint: string, generation: string, reason: string) {
    super({
      code: ErrorCode.CANNOT_RESUME,
      message: `Endpoint ${q(endpoint)} cannot roll back to ${q(generation)}: ${reason}`,
      details: { endpoint, generation, reason },
    });
  }
}

/** The endpoint's pipeline was stopped (the node is shutting down): it takes no more steering or waits. */
export class EndpointStoppedError extends SluiceError {
  constructor(endpoint: string) {
    super({
      code: ErrorCode.ENDPOINT_STOPPED,
      message: `Endpoint pipeline ${q(endpoint)} is stopped`,
      details: { endpoint },
    });
  }
}

/**
 * `ENDPOINT_NOT_RUNNING`: the endpoint is configured (and listed) but its pipeline is not running — it failed to
 * start, and steering it needs a running pipeline. `failure` is why (its code and message); a Rebuild starts the
 * pipeline again. Not `UNKNOWN_ENDPOINT`: the endpoint exists, and the caller can fix the cause.
 */
export class EndpointNotRunningError extends SluiceError {
  constructor(endpoint: string, failure: { code: string; message: string }) {
    super({
      code: ErrorCode.ENDPOINT_NOT_RUNNING,
      message: `Endpoint ${q(endpoint)} is not running: ${failure.message.slice(0, 2_000)} (${failure.code})`,
      details: { endpoint, failure: { code: failure.code, message: failure.message.slice(0, 2_000) } },
    });
  }
}

/**
 * `ENDPOINT_NOT_READY`: the endpoint exists (its alias names a generation) but this api-server cannot serve that
 * generation yet — it is still being opened, or opening it failed (say, a cache written by an older version
 * that the app-server is rebuilding). Not `UNKNOWN_ENDPOINT`: a client should retry, not give up.
 */
export class EndpointNotReadyError extends SluiceError {
  readonly retryAfterSeconds = 1;
  constructor(endpoint: string, reason: string, options: Pick<SluiceErrorOptions, 'cause'> = {}) {
    super({
      code: ErrorCode.ENDPOINT_NOT_READY,
      message: `Endpoint ${q(endpoint)} cannot be served yet: ${reason}; retry shortly`,
      details: { endpoint },
      ...options,
    });
  }
}

/** Waiting for an endpoint to serve a complete generation took longer than allowed. */
export class EndpointTimeoutError extends SluiceError {
  constructor(endpoint: string, timeoutMs: number) {
    super({
      code: ErrorCode.ENDPOINT_TIMEOUT,
      message: `Endpoint ${q(endpoint)} did not finish its snapshot within ${timeoutMs} ms`,
      details: { endpoint, timeoutMs },
    });
  }
}

/**
 * `ENDPOINT_TIMEOUT` (504) of a promote: the held generation had not committed the position the serving one last
 * committed within the hand-over wait (the endpoint's `switch.handoverWaitMs`), so the alias stayed where it was
 * (moving it would have sent readers' positions back, docs/generations.md § The switch hands over at a position).
 * Nothing changed; promote again once it caught up. The problem carries both positions: `committed`, the held
 * generation's, and `target`, the one it had to reach (the serving generation's last commit as last compared; null
 * when none was), each as `<source handle>=<lsn>`.
 *
 * @example
 * ```ts
 * throw new SwitchNotCaughtUpError('items', 'items-01h…', 'items.source=0/16B3748', 10_000, 'items.source=0/16C0000');
 * ```
 */
export class SwitchNotCaughtUpError extends SluiceError {
  constructor(
    endpoint: string,
    generation: string,
    committed: string,
    waitMs: number,
    target: string | null = null,
  ) {
    const reach = target === null ? '' : ` (${target})`;
    super({
      code: ErrorCode.ENDPOINT_TIMEOUT,
      message: `Endpoint ${q(endpoint)}: ${q(generation)} (committed ${committed}) did not catch up with the position the serving generation committed${reach} within ${waitMs} ms (switch.handoverWaitMs); the alias stays (promote again once it caught up)`,
      details: { endpoint, generation, committed, target, waitMs },
    });
  }
}

/** A query is malformed or exceeds a limit; `errors` names each failing path. */
export class InvalidQueryError extends SluiceError {
  readonly errors: FieldIssue[];
  constructor(message: string, errors: FieldIssue[] = [], options: SluiceErrorOptions = {}) {
    super({ code: ErrorCode.INVALID_QUERY, message, ...options });
    this.errors = errors;
  }
}

/** A pagination cursor refers to a cache generation that no longer serves. */
export class CursorExpiredError extends SluiceError {
  constructor(
    message = 'The cursor belongs to a cache generation that is no longer served; restart the query',
  ) {
    super({ code: ErrorCode.CURSOR_EXPIRED, message });
  }
}

export class RecordNotFoundError extends SluiceError {
  constructor(endpoint: string, key: string) {
    super({
      code: ErrorCode.RECORD_NOT_FOUND,
      message: `No record with key ${q(key)} in endpoint ${q(endpoint)}`,
      details: { endpoint, key },
    });
  }
}

export class UnauthorizedError extends SluiceError {
  constructor(message = 'A valid bearer token is required') {
    super({ code: ErrorCode.UNAUTHORIZED, message });
  }
}

export class ForbiddenError extends SluiceError {
  constructor(message = 'The token does not grant access to this resource') {
    super({ code: ErrorCode.FORBIDDEN, message });
  }
}

export class NotFoundError extends SluiceError {
  constructor(message: string) {
    super({ code: ErrorCode.NOT_FOUND, message });
  }
}

/**
 * The path exists but not with this method: `allow` lists the methods it has (the HTTP layer sends them as the
 * `Allow` header, and the problem body carries them too). Not `NOT_FOUND`: the client has the right path and the
 * wrong verb, and a 404 would send it looking for another path.
 */
export class MethodNotAllowedError extends SluiceError {
  readonly allow: readonly string[];
  constructor(method: string, allow: readonly string[]) {
    super({
      code: ErrorCode.METHOD_NOT_ALLOWED,
      message: `Method ${method.slice(0, 32)} is not allowed on this path; it allows ${allow.join(', ')}`,
      details: { allow: [...allow] },
    });
    this.allow = allow;
  }
}

/** The configuration is invalid; `errors` names each bad field. */
export class ConfigError extends SluiceError {
  readonly errors: FieldIssue[];
  constructor(message: string, errors: FieldIssue[] = [], options: SluiceErrorOptions = {}) {
    super({ code: ErrorCode.CONFIG_INVALID, message, ...options });
    this.errors = errors;
  }
}

export class StoreUnavailableError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super({ code: ErrorCode.STORE_UNAVAILABLE, message, ...options });
  }
}

export class BackplaneUnavailableError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super({ code: ErrorCode.BACKPLANE_UNAVAILABLE, message, ...options });
  }
}

/**
 * `NODE_SHUTTING_DOWN`: the node is shutting down and takes no new work; another node (or this one, restarted)
 * will. Not `STORE_UNAVAILABLE`: the store is fine, so a client should go elsewhere rather than wait for it.
 */
export class ShuttingDownError extends SluiceError {
  constructor(
    message = 'This node is shutting down; send the request to another node',
    options: SluiceErrorOptions = {},
  ) {
    super({ code: ErrorCode.NODE_SHUTTING_DOWN, message, ...options });
  }
}

export class CacheNotFoundError extends SluiceError {
  constructor(name: string) {
    super({
      code: ErrorCode.CACHE_NOT_FOUND,
      message: `Cache or alias ${q(name)} does not exist`,
      details: { name },
    });
  }
}

/** An existing cache was created with another schema (fields, primary key or indexes). */
export class SchemaMismatchError extends SluiceError {
  constructor(cache: string, expectedHash: string, actualHash: string) {
    super({
      code: ErrorCode.CACHE_SCHEMA_MISMATCH,
      message: `Cache ${q(cache)} has schema ${actualHash}, expected ${expectedHash}`,
      details: { cache, expectedHash, actualHash },
    });
  }
}

export class DiskFullError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super({ code: ErrorCode.CACHE_DISK_FULL, message, ...options });
  }
}

/** A cache write hit its conflict policy (insert of an existing key, update of a missing one). */
export class CacheConflictError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super({ code: ErrorCode.CACHE_CONFLICT, message, ...options });
  }
}

/** A cache generation, or (without a `name`) the whole cache manager, was used after it was closed. */
export class CacheClosedError extends SluiceError {
  constructor(name?: string) {
    super(
      name === undefined
        ? { code: ErrorCode.CACHE_CLOSED, message: 'The cache manager is closed' }
        : { code: ErrorCode.CACHE_CLOSED, message: `Cache ${q(name)} is closed`, details: { name } },
    );
  }
}

/** A write (create, redirect, gc, …) through a cache manager opened with `readOnly: true`. */
export class CacheReadOnlyError extends SluiceError {
  constructor(operation: string) {
    super({
      code: ErrorCode.CACHE_READ_ONLY,
      message: `The cache manager is read-only; cannot ${operation}`,
      details: { operation },
    });
  }
}

/** A cache environment stayed locked by another live process for longer than the wait allowed. */
export class CacheBusyError extends SluiceError {
  constructor(message: string, details: Record<string, unknown>) {
    super({ code: ErrorCode.CACHE_BUSY, message, details });
  }
}

/**
 * A cache environment's files are not LMDB files (overwritten, truncated, a bad restore): they are never opened
 * (LMDB would read them as pages and may crash the process). An endpoint's generation in that state is rebuilt from
 * its source by the app-server; `details.path` names the file.
 */
export class CacheDamagedError extends SluiceError {
  constructor(message: string, details: { path: string }) {
    super({ code: ErrorCode.CACHE_DAMAGED, message, details });
  }
}

/** A source record could not be parsed or typed; carries where it was found. */
export class BadRecordError extends SluiceError {
  constructor(message: string, location: { line?: number; offset?: number; source?: string }) {
    super({ code: ErrorCode.BAD_RECORD, message, details: location });
  }
}

export class SourceError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super({ code: ErrorCode.SOURCE_FAILED, message, ...options });
  }
}

/**
 * What a source's address names is not usable yet, though the configuration may well be right: a file another job has
 * not written yet (or not made readable), a table a migration has not created yet. Carried as `details.notReady` of a
 * `SOURCE_FAILED` ({@link SourceError}). An endpoint waits for it — it retries its start with back-off and serves once
 * the thing appears, since its configuration is an operator's and its source may come later; a transfer, a one-time
 * copy of what is there now, fails.
 */
export interface SourceNotReady {
  /** The source setting that names what is missing (`path`, `table`): the endpoint's `source.<setting>`. */
  setting: string;
  /** What is wrong with it, for a message (`does not exist yet`, `is not readable by the app-server's user`). */
  reason: string;
}

/**
 * The source setting a `SOURCE_FAILED` is about (`details.setting`, or its {@link SourceNotReady}'s), such as `path`
 * for a file that cannot be read — the endpoint's `source.<setting>` to look at — or null.
 */
export function sourceSettingOf(err: unknown): string | null {
  if (!SluiceError.isInstance(err)) return null;
  const setting = err.details?.setting;
  return typeof setting === 'string' ? setting : (sourceNotReadyOf(err)?.setting ?? null);
}

/**
 * The {@link SourceNotReady} an error carries (`details.notReady`), or null for any other error.
 *
 * @example
 * ```ts
 * if (sourceNotReadyOf(err) !== null) retryLater();
 * ```
 */
export function sourceNotReadyOf(err: unknown): SourceNotReady | null {
  if (!SluiceError.isInstance(err)) return null;
  const notReady = err.details?.notReady as Partial<SourceNotReady> | undefined;
  return typeof notReady?.setting === 'string' && typeof notReady.reason === 'string'
    ? { setting: notReady.setting, reason: notReady.reason }
    : null;
}

export class SinkError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super({ code: ErrorCode.SINK_FAILED, message, ...options });
  }
}

/** The transfer was terminated (or handed back) while it ran; `details.reason` says which stop it was. */
export class TransferTerminatedError extends SluiceError {
  constructor(id: string, options: SluiceErrorOptions = {}) {
    super({
      code: ErrorCode.TRANSFER_TERMINATED,
      message: `Transfer ${q(id)} was terminated`,
      ...options,
      details: { id, ...options.details },
    });
  }
}

/** A replication source's database does not run `wal_level = logical` (start-up error; no fallback to polling). */
export class ReplicationNotEnabledError extends SluiceError {
  constructor(walLevel: string, options: SluiceErrorOptions = {}) {
    super({
      code: ErrorCode.REPLICATION_NOT_ENABLED,
      message: `PostgreSQL runs wal_level=${q(walLevel)}; logical replication needs wal_level=logical (set it in postgresql.conf or ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL), or configure the source with capture: poll and a cursor column`,
      ...options,
      details: { setting: 'wal_level', value: walLevel, required: 'logical' },
    });
  }
}

/** The source's role may not create or read a replication slot (start-up error). */
export class ReplicationNotPermittedError extends SluiceError {
  constructor(role: string, options: SluiceErrorOptions = {}) {
    super({
      code: ErrorCode.REPLICATION_NOT_PERMITTED,
      message: `Role ${q(role)} lacks the REPLICATION privilege logical replication needs (ALTER ROLE ${role} WITH REPLICATION), or configure the source with capture: poll`,
      ...options,
      details: { role, privilege: 'REPLICATION' },
    });
  }
}

/** `slots drop` named a replication slot that no configured PostgreSQL connection has. */
export class UnknownSlotError extends SluiceError {
  constructor(slot: string) {
    super({
      code: ErrorCode.UNKNOWN_SLOT,
      message: `No logical replication slot ${q(slot)} on the configured connections`,
      details: { slot },
    });
  }
}

/** A replication slot a walsender is streaming from: stop the process that reads it first. */
export class SlotActiveError extends SluiceError {
  constructor(slot: string, pid: number | null) {
    super({
      code: ErrorCode.SLOT_ACTIVE,
      message: `Replication slot ${q(slot)} is in use${pid === null ? '' : ` by PostgreSQL backend ${pid}`}; stop the app-server that streams it (or remove its endpoint) first`,
      details: { slot, pid },
    });
  }
}

/** A replication slot Sluice did not create: it is never dropped by Sluice (use SQL if it must go). */
export class SlotNotOwnedError extends SluiceError {
  constructor(slot: string) {
    super({
      code: ErrorCode.SLOT_NOT_OWNED,
      message: `Replication slot ${q(slot)} was not created by Sluice (no Sluice publication names it); drop it with SQL if it is really unused`,
      details: { slot },
    });
  }
}

/**
 * An endpoint's replication slot that another node's endpoint created: two node ids that differ only in case or
 * punctuation (`host-a`, `host_a`) — or one `slot` configured on two hosts — name one slot, and reading it would
 * take it from that node (each host would rebuild the other's generations in turn). Not retried: give one host
 * another `node.id` (or the source another `slot` and `publication`).
 */
export class SlotOfAnotherNodeError extends SluiceError {
  constructor(slot: string, node: string, owner: string) {
    super({
      code: ErrorCode.SLOT_OF_ANOTHER_NODE,
      message: `Replication slot ${q(slot)} belongs to node ${q(owner)}'s endpoint; this node (${q(node)}) would take it from that node: node ids that differ only in case, "-", "." or "_" name the same slots, so give this host another node.id (or the source a slot and publication of its own)`,
      details: { slot, node, owner },
    });
  }
}

/** A replicated table whose updates and deletes would not name their row (no primary key, no replica identity). */
export class ReplicaIdentityMissingError extends SluiceError {
  constructor(table: string, options: SluiceErrorOptions = {}) {
    super({
      code: ErrorCode.REPLICA_IDENTITY_MISSING,
      message: `Table ${q(table)} has no primary key and no replica identity, so its updates and deletes cannot be mirrored: add a primary key, or ALTER TABLE ${table} REPLICA IDENTITY FULL (with "key" configured)`,
      ...options,
      details: { table },
    });
  }
}

/** The source table's columns changed in a way the endpoint's schema cannot take: a new generation is built. */
export class SourceSchemaChangedError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super({ code: ErrorCode.SOURCE_SCHEMA_CHANGED, message, ...options });
  }
}

/** A read asked for a position (`sluice-min-position`) the serving generation did not reach in time. */
export class PositionNotReachedError extends SluiceError {
  /** Seconds after which a retry is worth it (`retry-after`). */
  readonly retryAfterSeconds: number;
  constructor(message: string, retryAfterSeconds = 1, options: SluiceErrorOptions = {}) {
    super({ code: ErrorCode.POSITION_NOT_REACHED, message, ...options });
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

/** A bug or an unexpected failure (`INTERNAL`, 500): its message stays out of HTTP bodies; keep the `cause`. */
export class InternalError extends SluiceError {
  constructor(message: string, options: SluiceErrorOptions = {}) {
    super({ code: ErrorCode.INTERNAL, message, ...options });
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
  return new InternalError(message, { cause: err });
}
