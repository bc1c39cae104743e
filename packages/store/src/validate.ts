import {
  type FieldIssue,
  type ListTransfersInput,
  NameSchema,
  type OwnerIdentity,
  parseOrThrow,
  TRANSFER_REQUEST_MAX_BYTES,
  type TransferFailure,
  TransferFailureSchema,
  TransferIdSchema,
  type TransferRequest,
  TransferRequestSchema,
  type TransferResult,
  TransferResultSchema,
  type TransferState,
  TransferStateSchema,
  type TransitionInput,
  ValidationError,
} from '@sluice/core';

/** Size limits of what the store accepts (bytes of UTF-8 JSON). */
export const STORE_LIMITS = {
  /** A stored transfer request: core's limit, which `parseTransferRequest` answers first (413). */
  maxRequestBytes: TRANSFER_REQUEST_MAX_BYTES,
  /** A pipeline checkpoint. */
  maxCheckpointBytes: 1024 * 1024,
  /** A request hash. */
  maxHashLength: 128,
  /** A node's advertised address. */
  maxAddressLength: 2048,
  /** An owner instance id. */
  maxInstanceIdLength: 200,
  /** Longest lease. */
  maxLeaseMs: 24 * 60 * 60 * 1000,
  /** Page size of `list` (default / maximum). */
  defaultPageSize: 100,
  /**
   * The largest `http.pageSizeMax` the configuration allows (core's `HttpConfigSchema`): the control API's page
   * bound is the operator's to choose, and a store that refused less answered a page the API had accepted with 400.
   */
  maxPageSize: 10_000,
  /** Batch size of `recoverExpired`. */
  maxRecoverBatch: 1000,
  /** Failure messages are cut to this many characters (a failing run must still be recorded). */
  maxErrorMessageLength: 16 * 1024,
  maxErrorCodeLength: 128,
} as const;

const HASH_PATTERN = /^[A-Za-z0-9+/=_:.-]+$/;
const INSTANCE_PATTERN = /^[A-Za-z0-9._:-]+$/;

function fail(what: string, issues: FieldIssue[]): never {
  const first = issues[0];
  throw new ValidationError(`${what}: ${first?.path}: ${first?.message}`, issues);
}

export function validId(id: unknown, path = 'id'): string {
  const result = TransferIdSchema.safeParse(id);
  if (result.success) return result.data;
  fail('Invalid transfer id', [{ path, message: result.error.issues[0]?.message ?? 'invalid id' }]);
}

export function validEpoch(epoch: unknown): number {
  if (typeof epoch === 'number' && Number.isSafeInteger(epoch) && epoch >= 1) return epoch;
  fail('Invalid epoch', [{ path: 'epoch', message: 'must be an integer of at least 1' }]);
}

export function validLeaseMs(leaseMs: unknown): number {
  if (
    typeof leaseMs === 'number' &&
    Number.isSafeInteger(leaseMs) &&
    leaseMs >= 1 &&
    leaseMs <= STORE_LIMITS.maxLeaseMs
  ) {
    return leaseMs;
  }
  fail('Invalid lease', [
    { path: 'leaseMs', message: `must be an integer from 1 to ${STORE_LIMITS.maxLeaseMs} (ms)` },
  ]);
}

export function validLimit(limit: unknown, max: number, path = 'limit'): number {
  if (typeof limit === 'number' && Number.isSafeInteger(limit) && limit >= 1 && limit <= max) return limit;
  fail('Invalid limit', [{ path, message: `must be an integer from 1 to ${max}` }]);
}

/** An age in milliseconds: a non-negative safe integer. */
export function validAgeMs(value: unknown, path: string): number {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value;
  fail('Invalid age', [{ path, message: 'must be a non-negative integer (ms)' }]);
}

export function validDate(value: unknown, path: string): Date {
  if (value instanceof Date && Number.isFinite(value.getTime())) return value;
  fail('Invalid date', [{ path, message: 'must be a valid Date' }]);
}

function boundedString(
  value: unknown,
  path: string,
  max: number,
  pattern: RegExp | null,
  issues: FieldIssue[],
  min = 1,
): string {
  if (typeof value !== 'string' || value.length < min || value.length > max) {
    issues.push({ path, message: `must be a string of ${min} to ${max} characters` });
    return '';
  }
  if (pattern && !pattern.test(value)) issues.push({ path, message: `has characters outside ${pattern}` });
  else if (value.includes('\0')) issues.push({ path, message: 'must not contain NUL bytes' });
  return value;
}

export function validOwner(owner: unknown, path = 'owner'): OwnerIdentity {
  if (typeof owner !== 'object' || owner === null)
    fail('Invalid owner', [{ path, message: 'expected an object' }]);
  const o = owner as Record<string, unknown>;
  const issues: FieldIssue[] = [];
  const nodeId = NameSchema.safeParse(o.nodeId);
  if (!nodeId.success) {
    issues.push({ path: `${path}.nodeId`, message: nodeId.error.issues[0]?.message ?? 'invalid node id' });
  }
  // Empty when the node advertises no URL (a single embedded node needs none).
  const address = boundedString(o.address, `${path}.address`, STORE_LIMITS.maxAddressLength, null, issues, 0);
  const instanceId = boundedString(
    o.instanceId,
    `${path}.instanceId`,
    STORE_LIMITS.maxInstanceIdLength,
    INSTANCE_PATTERN,
    issues,
  );
  if (issues.length > 0) fail('Invalid owner', issues);
  return { nodeId: o.nodeId as string, address, instanceId };
}

export function validHash(hash: unknown): string {
  const issues: FieldIssue[] = [];
  const value = boundedString(hash, 'requestHash', STORE_LIMITS.maxHashLength, HASH_PATTERN, issues);
  if (issues.length > 0) fail('Invalid request hash', issues);
  return value;
}

/** Serializes a JSON value within `maxBytes`, or throws a ValidationError naming `path`. */
export function boundedJson(value: unknown, path: string, maxBytes: number): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    throw new ValidationError(`Invalid ${path}: not serializable as JSON`, [
      { path, message: `not serializable as JSON (${(err as Error).message})` },
    ]);
  }
  if (text === undefined) {
    fail(`Invalid ${path}`, [{ path, message: 'must be a JSON value' }]);
  }
  // Fast check first: a string's UTF-8 length is at most 3 bytes per UTF-16 unit.
  if (text.length * 3 > maxBytes && Buffer.byteLength(text, 'utf8') > maxBytes) {
    fail(`Invalid ${path}`, [{ path, message: `larger than the limit of ${maxBytes} bytes` }]);
  }
  return text;
}

/** Validates a request for storage; returns the parsed request with its JSON text. */
export function validRequest(request: unknown): { request: TransferRequest; json: string } {
  const parsed = parseOrThrow(TransferRequestSchema, request, 'Invalid transfer request');
  if (parsed.mode !== 'idempotent') {
    fail('Invalid transfer request', [
      { path: 'request.mode', message: 'only idempotent requests are stored (fire-and-forget never is)' },
    ]);
  }
  // Serialize the parsed form (defaults filled in), so what is stored equals what is returned.
  return { request: parsed, json: boundedJson(parsed, 'request', STORE_LIMITS.maxRequestBytes) };
}

export function validState(state: unknown, path: string): TransferState {
  return parseOrThrow(TransferStateSchema, state, `Invalid ${path}`);
}

export function validFailure(error: unknown): TransferFailure {
  const parsed = parseOrThrow(TransferFailureSchema, error, 'Invalid error');
  return {
    code: parsed.code.slice(0, STORE_LIMITS.maxErrorCodeLength),
    message: parsed.message.slice(0, STORE_LIMITS.maxErrorMessageLength),
  };
}

export function validResult(result: unknown): TransferResult {
  return parseOrThrow(TransferResultSchema, result, 'Invalid result');
}

export interface ValidListInput {
  state: TransferState | undefined;
  ownerNodeId: string | undefined;
  after: string | undefined;
  limit: number;
  /** Only records whose lease expired (by the store's clock). */
  leaseExpired: boolean;
}

const CURSOR_PREFIX = 't1:';

/** Encodes the last id of a page as an opaque cursor. */
export function encodeCursor(lastId: string): string {
  return Buffer.from(CURSOR_PREFIX + lastId, 'utf8').toString('base64url');
}

/** The last id a cursor names, or null when it is not a cursor {@link encodeCursor} made. */
function cursorId(cursor: unknown): string | null {
  if (typeof cursor === 'string' && cursor.length <= 400 && /^[A-Za-z0-9_-]+$/.test(cursor)) {
    const text = Buffer.from(cursor, 'base64url').toString('utf8');
    if (text.startsWith(CURSOR_PREFIX)) {
      const id = text.slice(CURSOR_PREFIX.length);
      if (TransferIdSchema.safeParse(id).success) return id;
    }
  }
  return null;
}

/**
 * Whether `cursor` is one `list()` returns as `next` (of either dialect), so a caller can refuse any other where it
 * was given — the control API at `querystring.cursor` — before asking the store, which refuses it at `cursor`.
 *
 * @example
 * ```ts
 * isTransferCursor(page.next!); // true
 * isTransferCursor('zzz'); // false
 * ```
 */
export function isTransferCursor(cursor: unknown): boolean {
  return cursorId(cursor) !== null;
}

function decodeCursor(cursor: unknown): string {
  const id = cursorId(cursor);
  if (id !== null) return id;
  fail('Invalid cursor', [{ path: 'cursor', message: 'not a cursor returned by list()' }]);
}

export function validListInput(input: unknown): ValidListInput {
  if (input === undefined) {
    return {
      state: undefined,
      ownerNodeId: undefined,
      after: undefined,
      limit: STORE_LIMITS.defaultPageSize,
      leaseExpired: false,
    };
  }
  if (typeof input !== 'object' || input === null) {
    fail('Invalid list input', [{ path: '(root)', message: 'expected an object' }]);
  }
  const i = input as ListTransfersInput;
  return {
    state: i.state === undefined ? undefined : validState(i.state, 'state'),
    ownerNodeId:
      i.ownerNodeId === undefined
        ? undefined
        : parseOrThrow(NameSchema, i.ownerNodeId, 'Invalid ownerNodeId'),
    after: i.cursor === undefined || i.cursor === null ? undefined : decodeCursor(i.cursor),
    limit:
      i.limit === undefined ? STORE_LIMITS.defaultPageSize : validLimit(i.limit, STORE_LIMITS.maxPageSize),
    leaseExpired: i.leaseExpired === true,
  };
}

/** The state a submit creates its record in: `RECEIVED` (the default) or `IN_PROGRESS` (claimed and started at once). */
export function validSubmitState(state: unknown): 'RECEIVED' | 'IN_PROGRESS' {
  if (state === undefined || state === 'RECEIVED' || state === 'IN_PROGRESS') return state ?? 'RECEIVED';
  throw new ValidationError('Invalid submit state: expected RECEIVED or IN_PROGRESS', [
    { path: 'state', message: 'expected RECEIVED or IN_PROGRESS' },
  ]);
}

/** A transition's input, validated: its target state and its error and result as JSON text (null when absent). */
export interface ValidTransition {
  to: TransferState;
  error: string | null;
  result: string | null;
}

/** Validates a transition's input (`to`, optional `error` and `result`), each at its own path. */
export function validTransitionInput(input: unknown): ValidTransition {
  if (typeof input !== 'object' || input === null) {
    throw new ValidationError('Invalid transition: expected an object', [
      { path: '(root)', message: 'expected an object' },
    ]);
  }
  const i = input as TransitionInput;
  const to = validState(i.to, 'target state');
  const error = i.error === undefined || i.error === null ? null : validFailure(i.error);
  const result = i.result === undefined || i.result === null ? null : validResult(i.result);
  return {
    to,
    error: error === null ? null : JSON.stringify(error),
    result: result === null ? null : JSON.stringify(result),
  };
}
