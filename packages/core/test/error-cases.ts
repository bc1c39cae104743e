import type { ErrorCode, SluiceError } from '../src/errors.js';
import * as errors from '../src/errors.js';

/**
 * One instance of every error class with the code and HTTP status it must carry. Shared by the error and
 * problem tests; the table is the contract clients rely on.
 */
export const ERROR_CASES: ReadonlyArray<{
  error: SluiceError;
  cls: abstract new (...args: never[]) => SluiceError;
  code: ErrorCode;
  status: number;
}> = [
  {
    error: new errors.ValidationError('Invalid x: a: bad', [{ path: 'a', message: 'bad' }]),
    cls: errors.ValidationError,
    code: 'VALIDATION_FAILED',
    status: 400,
  },
  {
    error: new errors.MalformedJsonError(),
    cls: errors.MalformedJsonError,
    code: 'MALFORMED_JSON',
    status: 400,
  },
  {
    error: new errors.UnsupportedMediaTypeError('text/plain'),
    cls: errors.UnsupportedMediaTypeError,
    code: 'UNSUPPORTED_MEDIA_TYPE',
    status: 415,
  },
  {
    error: new errors.HeadersTooLargeError(),
    cls: errors.HeadersTooLargeError,
    code: 'HEADERS_TOO_LARGE',
    status: 431,
  },
  {
    error: new errors.RequestTimeoutError(),
    cls: errors.RequestTimeoutError,
    code: 'REQUEST_TIMEOUT',
    status: 408,
  },
  {
    error: new errors.PayloadTooLargeError(1024),
    cls: errors.PayloadTooLargeError,
    code: 'PAYLOAD_TOO_LARGE',
    status: 413,
  },
  {
    error: new errors.IdempotencyKeyMismatchError('a', 'b'),
    cls: errors.IdempotencyKeyMismatchError,
    code: 'IDEMPOTENCY_KEY_MISMATCH',
    status: 400,
  },
  {
    error: new errors.IdempotencyConflictError('t-1'),
    cls: errors.IdempotencyConflictError,
    code: 'IDEMPOTENCY_CONFLICT',
    status: 422,
  },
  {
    error: new errors.UnsupportedAddressTypeError('source', 's3'),
    cls: errors.UnsupportedAddressTypeError,
    code: 'UNSUPPORTED_ADDRESS_TYPE',
    status: 422,
  },
  {
    error: new errors.UnknownConnectionError('warehouse'),
    cls: errors.UnknownConnectionError,
    code: 'UNKNOWN_CONNECTION',
    status: 422,
  },
  {
    error: new errors.PathNotAccessibleError('/data/in.jsonl', 'source.path', 'it cannot be read (EACCES)'),
    cls: errors.PathNotAccessibleError,
    code: 'PATH_NOT_ACCESSIBLE',
    status: 403,
  },
  {
    error: new errors.PathNotAllowedError('/etc/passwd'),
    cls: errors.PathNotAllowedError,
    code: 'PATH_NOT_ALLOWED',
    status: 403,
  },
  {
    error: new errors.TransferNotFoundError('t-1'),
    cls: errors.TransferNotFoundError,
    code: 'TRANSFER_NOT_FOUND',
    status: 404,
  },
  {
    error: new errors.StaleEpochError('t-1', 3),
    cls: errors.StaleEpochError,
    code: 'STALE_EPOCH',
    status: 409,
  },
  { error: new errors.LeaseHeldError('t-1'), cls: errors.LeaseHeldError, code: 'LEASE_HELD', status: 409 },
  {
    error: new errors.ShuttingDownError(),
    cls: errors.ShuttingDownError,
    code: 'NODE_SHUTTING_DOWN',
    status: 503,
  },
  {
    error: new errors.IllegalTransitionError('t-1', 'COMPLETED', 'IN_PROGRESS'),
    cls: errors.IllegalTransitionError,
    code: 'ILLEGAL_TRANSITION',
    status: 409,
  },
  { error: new errors.QueueFullError(2), cls: errors.QueueFullError, code: 'QUEUE_FULL', status: 429 },
  {
    error: new errors.UnknownEndpointError('items'),
    cls: errors.UnknownEndpointError,
    code: 'UNKNOWN_ENDPOINT',
    status: 404,
  },
  {
    error: new errors.InvalidQueryError('Invalid query: $limit: too big', [
      { path: '$limit', message: 'too big' },
    ]),
    cls: errors.InvalidQueryError,
    code: 'INVALID_QUERY',
    status: 400,
  },
  {
    error: new errors.CursorExpiredError(),
    cls: errors.CursorExpiredError,
    code: 'CURSOR_EXPIRED',
    status: 410,
  },
  {
    error: new errors.RecordNotFoundError('items', '42'),
    cls: errors.RecordNotFoundError,
    code: 'RECORD_NOT_FOUND',
    status: 404,
  },
  { error: new errors.UnauthorizedError(), cls: errors.UnauthorizedError, code: 'UNAUTHORIZED', status: 401 },
  { error: new errors.ForbiddenError(), cls: errors.ForbiddenError, code: 'FORBIDDEN', status: 403 },
  {
    error: new errors.MethodNotAllowedError('DELETE', ['GET', 'HEAD']),
    cls: errors.MethodNotAllowedError,
    code: 'METHOD_NOT_ALLOWED',
    status: 405,
  },
  {
    error: new errors.NotFoundError('No route GET /x'),
    cls: errors.NotFoundError,
    code: 'NOT_FOUND',
    status: 404,
  },
  {
    error: new errors.ConfigError('Invalid configuration: store: bad', [{ path: 'store', message: 'bad' }]),
    cls: errors.ConfigError,
    code: 'CONFIG_INVALID',
    status: 500,
  },
  {
    error: new errors.StoreUnavailableError('database down'),
    cls: errors.StoreUnavailableError,
    code: 'STORE_UNAVAILABLE',
    status: 503,
  },
  {
    error: new errors.BackplaneUnavailableError('nats down'),
    cls: errors.BackplaneUnavailableError,
    code: 'BACKPLANE_UNAVAILABLE',
    status: 503,
  },
  {
    error: new errors.CacheNotFoundError('items'),
    cls: errors.CacheNotFoundError,
    code: 'CACHE_NOT_FOUND',
    status: 404,
  },
  {
    error: new errors.SchemaMismatchError('items-01', 'aaa', 'bbb'),
    cls: errors.SchemaMismatchError,
    code: 'CACHE_SCHEMA_MISMATCH',
    status: 409,
  },
  {
    error: new errors.DiskFullError('map full'),
    cls: errors.DiskFullError,
    code: 'CACHE_DISK_FULL',
    status: 507,
  },
  {
    error: new errors.CacheConflictError('key exists'),
    cls: errors.CacheConflictError,
    code: 'CACHE_CONFLICT',
    status: 409,
  },
  {
    error: new errors.CacheClosedError('items-01'),
    cls: errors.CacheClosedError,
    code: 'CACHE_CLOSED',
    status: 503,
  },
  { error: new errors.CacheClosedError(), cls: errors.CacheClosedError, code: 'CACHE_CLOSED', status: 503 },
  {
    error: new errors.CacheReadOnlyError('create a cache'),
    cls: errors.CacheReadOnlyError,
    code: 'CACHE_READ_ONLY',
    status: 403,
  },
  {
    error: new errors.CacheBusyError('locked', { path: '/data/caches/items-01' }),
    cls: errors.CacheBusyError,
    code: 'CACHE_BUSY',
    status: 503,
  },
  {
    error: new errors.CacheDamagedError('not an LMDB file', { path: '/data/caches/items-01/data.mdb' }),
    cls: errors.CacheDamagedError,
    code: 'CACHE_DAMAGED',
    status: 503,
  },
  {
    error: new errors.BadRecordError('line 3 is not JSON', { line: 3, source: 'in.jsonl' }),
    cls: errors.BadRecordError,
    code: 'BAD_RECORD',
    status: 422,
  },
  {
    error: new errors.SourceError('read failed'),
    cls: errors.SourceError,
    code: 'SOURCE_FAILED',
    status: 502,
  },
  { error: new errors.SinkError('write failed'), cls: errors.SinkError, code: 'SINK_FAILED', status: 502 },
  {
    error: new errors.ReplicationNotEnabledError('replica'),
    cls: errors.ReplicationNotEnabledError,
    code: 'REPLICATION_NOT_ENABLED',
    status: 502,
  },
  {
    error: new errors.ReplicationNotPermittedError('reader'),
    cls: errors.ReplicationNotPermittedError,
    code: 'REPLICATION_NOT_PERMITTED',
    status: 502,
  },
  {
    error: new errors.ReplicaIdentityMissingError('public.t'),
    cls: errors.ReplicaIdentityMissingError,
    code: 'REPLICA_IDENTITY_MISSING',
    status: 502,
  },
  {
    error: new errors.SourceSchemaChangedError('column v changed type'),
    cls: errors.SourceSchemaChangedError,
    code: 'SOURCE_SCHEMA_CHANGED',
    status: 409,
  },
  {
    error: new errors.PositionNotReachedError('not yet', 1),
    cls: errors.PositionNotReachedError,
    code: 'POSITION_NOT_REACHED',
    status: 503,
  },
  {
    error: new errors.TransferTerminatedError('t-1'),
    cls: errors.TransferTerminatedError,
    code: 'TRANSFER_TERMINATED',
    status: 409,
  },
  {
    error: new errors.NothingToPromoteError('items'),
    cls: errors.NothingToPromoteError,
    code: 'NOTHING_TO_PROMOTE',
    status: 409,
  },
  {
    error: new errors.GenerationNotHeldError('items', 'items-01', 'items-02'),
    cls: errors.GenerationNotHeldError,
    code: 'GENERATION_NOT_HELD',
    status: 409,
  },
  {
    error: new errors.GenerationNotServingError('items', 'items-01', 'items-02'),
    cls: errors.GenerationNotServingError,
    code: 'GENERATION_NOT_SERVING',
    status: 409,
  },
  {
    error: new errors.NothingToRollBackError('items', 'no earlier generation is retained'),
    cls: errors.NothingToRollBackError,
    code: 'NOTHING_TO_ROLL_BACK',
    status: 409,
  },
  {
    error: new errors.CannotResumeError('items', 'items-01', 'file changed'),
    cls: errors.CannotResumeError,
    code: 'CANNOT_RESUME',
    status: 409,
  },
  {
    error: new errors.EndpointStoppedError('items'),
    cls: errors.EndpointStoppedError,
    code: 'ENDPOINT_STOPPED',
    status: 503,
  },
  {
    error: new errors.EndpointNotRunningError('items', {
      code: 'REPLICA_IDENTITY_MISSING',
      message: 'Table "items" has no primary key',
    }),
    cls: errors.EndpointNotRunningError,
    code: 'ENDPOINT_NOT_RUNNING',
    status: 409,
  },
  {
    error: new errors.EndpointNotReadyError('items', 'its cache is being opened'),
    cls: errors.EndpointNotReadyError,
    code: 'ENDPOINT_NOT_READY',
    status: 503,
  },
  {
    error: new errors.EndpointTimeoutError('items', 60_000),
    cls: errors.EndpointTimeoutError,
    code: 'ENDPOINT_TIMEOUT',
    status: 504,
  },
  {
    error: new errors.SwitchNotCaughtUpError('items', 'items-01h', '0/16B3748', 10_000),
    cls: errors.SwitchNotCaughtUpError,
    code: 'ENDPOINT_TIMEOUT',
    status: 504,
  },
  {
    error: new errors.UnknownSlotError('sluice_h1_gone_source'),
    cls: errors.UnknownSlotError,
    code: 'UNKNOWN_SLOT',
    status: 404,
  },
  {
    error: new errors.SlotActiveError('sluice_h1_items_source', 4242),
    cls: errors.SlotActiveError,
    code: 'SLOT_ACTIVE',
    status: 409,
  },
  {
    error: new errors.SlotNotOwnedError('debezium'),
    cls: errors.SlotNotOwnedError,
    code: 'SLOT_NOT_OWNED',
    status: 409,
  },
  {
    error: new errors.SlotOfAnotherNodeError('sluice_host_a_items_source', 'host_a', 'host-a'),
    cls: errors.SlotOfAnotherNodeError,
    code: 'SLOT_OF_ANOTHER_NODE',
    status: 409,
  },
];
