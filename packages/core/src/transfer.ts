import { z } from 'zod';
import {
  assertKnownAddressType,
  type DestinationAddress,
  DestinationAddressSchema,
  postgresCapture,
  type SourceAddress,
  SourceAddressSchema,
} from './addresses.js';
import { IdempotencyKeyMismatchError, TransferRequestTooLargeError, ValidationError } from './errors.js';
import { JsonScalarSchema, refuseProtoKey, SafeKeySchema } from './json.js';
import { parseOrThrow } from './validation.js';

/**
 * The idempotency key / transfer id: 1–200 chars of `[A-Za-z0-9._:-]`, except `.` and `..`: URL clients (fetch,
 * browsers, curl) resolve those as dot-segments, so `GET /v1/transfers/..` never reaches the transfer.
 */
export const TransferIdSchema = z
  .string()
  .min(1, 'must be 1 to 200 characters')
  .max(200, 'must be 1 to 200 characters')
  .regex(/^[A-Za-z0-9._:-]+$/, 'may contain only letters, digits, ".", "_", ":", "-"')
  .refine((id) => id !== '.' && id !== '..', 'must not be "." or ".." (a URL path cannot name them)');

export const TransferMode = { idempotent: 'idempotent', fireAndForget: 'fire-and-forget' } as const;
export type TransferMode = (typeof TransferMode)[keyof typeof TransferMode];

export const BadRecordPolicy = { skip: 'skip', fail: 'fail' } as const;
export type BadRecordPolicy = (typeof BadRecordPolicy)[keyof typeof BadRecordPolicy];

export const TransferOptionsSchema = z.strictObject({
  /** Throttle: at most this many records per second. */
  maxRecordsPerSecond: z.number().int().positive().max(10_000_000).optional(),
  /** What to do with a record that cannot be parsed or typed: skip and report (default), or fail the run. */
  onBadRecord: z.enum(BadRecordPolicy).default('skip'),
  /** Records per checkpoint commit. */
  batchSize: z.number().int().min(1).max(100_000).optional(),
  /**
   * After the snapshot, keep applying the source's changes until the transfer is terminated (it never completes
   * on its own). Only for a source that can follow (a PostgreSQL table with `capture: replication`, or a file with
   * `follow: true`) into a destination that applies changes as they come (not a file: see {@link canReceiveFollow}).
   */
  follow: z.boolean().optional(),
});
export type TransferOptions = z.output<typeof TransferOptionsSchema>;

export const PropertiesSchema = z
  .record(SafeKeySchema, JsonScalarSchema)
  .refine((p) => Object.keys(p).length <= 64, { message: 'at most 64 properties' });

/**
 * The largest transfer request, in bytes of its JSON as parsed (defaults filled in) — the form the store keeps. One
 * limit for every mode and whatever `http.bodyBytes` allows.
 */
export const TRANSFER_REQUEST_MAX_BYTES = 1024 * 1024;

/** A transfer request as it arrives on the wire. */
export const TransferRequestSchema = z
  .strictObject({
    id: TransferIdSchema,
    mode: z.enum(TransferMode).default('idempotent'),
    source: SourceAddressSchema,
    destination: DestinationAddressSchema,
    properties: refuseProtoKey(PropertiesSchema).default({}),
    options: TransferOptionsSchema.default({ onBadRecord: 'skip' }),
  })
  .refine((request) => request.options.follow !== true || canFollow(request.source), {
    message:
      'follow needs a source that can follow: a PostgreSQL table with capture "replication", or a file with follow: true',
    path: ['options', 'follow'],
  })
  .refine((request) => request.options.follow !== true || canReceiveFollow(request.destination), {
    message:
      'follow needs a destination that applies changes as they come (postgres, jetstream or endpoint): a file destination is published only when the transfer ends, which a following transfer never does',
    path: ['options', 'follow'],
  });
export type TransferRequest = z.output<typeof TransferRequestSchema>;
export type TransferRequestInput = z.input<typeof TransferRequestSchema>;

/**
 * Whether a transfer from `source` can run with `options.follow`: a PostgreSQL source read by logical replication
 * (it streams every change after its snapshot) or a file source that follows its growth.
 *
 * @example
 * ```ts
 * canFollow({ type: 'postgres', connection: 'db', table: 'orders', capture: 'replication' }); // true
 * canFollow({ type: 'file', path: 'in.jsonl', format: 'jsonl' }); // false
 * ```
 */
export function canFollow(source: SourceAddress): boolean {
  if (source.type === 'postgres') return postgresCapture(source, 'transfer') === 'replication';
  if (source.type === 'file') return source.follow === true;
  return false;
}

/**
 * Whether a transfer with `options.follow` can write into `destination`: one that applies each change as it comes
 * (a PostgreSQL table, a JetStream subject, an endpoint's cache). A file is published (renamed into place) once, when the transfer
 * completes — a following transfer only ends by being terminated, whose leftovers are discarded — so it would never
 * appear.
 *
 * @example
 * ```ts
 * canReceiveFollow({ type: 'postgres', connection: 'db', table: 'orders_copy' }); // true
 * canReceiveFollow({ type: 'file', path: 'out.jsonl', format: 'jsonl' }); // false
 * ```
 */
export function canReceiveFollow(destination: DestinationAddress): boolean {
  return destination.type !== 'file';
}

/**
 * Parses a transfer request from an untrusted body, taking the id from an `Idempotency-Key` header when
 * the body has none. Unknown address types are reported as `UNSUPPORTED_ADDRESS_TYPE`; a request over
 * {@link TRANSFER_REQUEST_MAX_BYTES} as parsed as `PAYLOAD_TOO_LARGE`.
 *
 * @example
 * ```ts
 * const request = parseTransferRequest(req.body, req.headers['idempotency-key']);
 * ```
 */
export function parseTransferRequest(body: unknown, idempotencyKey?: string): TransferRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new ValidationError('Invalid transfer request: the body must be a JSON object', [
      { path: '(root)', message: 'expected an object' },
    ]);
  }
  const input = { ...(body as Record<string, unknown>) };
  if (idempotencyKey !== undefined) {
    if (input.id === undefined) input.id = idempotencyKey;
    // A non-string body id is a plain validation failure at `id`, reported by the schema below.
    else if (typeof input.id === 'string' && input.id !== idempotencyKey)
      throw new IdempotencyKeyMismatchError(idempotencyKey, input.id);
  }
  assertKnownAddressType('source', input.source);
  assertKnownAddressType('destination', input.destination);
  const request = parseOrThrow(TransferRequestSchema, input, 'Invalid transfer request');
  assertWithinSize(request);
  return request;
}

/**
 * Refuses a request over {@link TRANSFER_REQUEST_MAX_BYTES}, measured as the store measures what it writes (its JSON
 * as parsed): a body within `http.bodyBytes` can still be larger once its defaults are filled in, and the limit
 * must not depend on the mode (fire-and-forget requests are not stored, but are the same requests).
 */
function assertWithinSize(request: TransferRequest): void {
  const json = JSON.stringify(request);
  // A UTF-16 unit is at most 3 bytes of UTF-8: most requests need no byte count.
  if (json.length * 3 <= TRANSFER_REQUEST_MAX_BYTES) return;
  const bytes = new TextEncoder().encode(json).byteLength;
  if (bytes > TRANSFER_REQUEST_MAX_BYTES)
    throw new TransferRequestTooLargeError(TRANSFER_REQUEST_MAX_BYTES, bytes);
}

export const TransferState = {
  RECEIVED: 'RECEIVED',
  IN_PROGRESS: 'IN_PROGRESS',
  COMPLETED: 'COMPLETED',
  FAILED: 'FAILED',
  TERMINATED: 'TERMINATED',
} as const;
export type TransferState = (typeof TransferState)[keyof typeof TransferState];
/** Validates a {@link TransferState}: the values of the const object, so the two never differ. */
export const TransferStateSchema = z.enum(TransferState);

/** What a completed (or partially run) transfer read and wrote. */
export const TransferResultSchema = z.object({
  recordsRead: z.number().int().nonnegative(),
  recordsWritten: z.number().int().nonnegative(),
  badRecords: z.number().int().nonnegative().default(0),
  durationMs: z.number().nonnegative().optional(),
});
export type TransferResult = z.output<typeof TransferResultSchema>;

/** Why a transfer failed. */
export const TransferFailureSchema = z.object({
  code: z.string(),
  message: z.string(),
});
export type TransferFailure = z.output<typeof TransferFailureSchema>;

/** The durable record of an idempotent transfer. */
export interface TransferRecord {
  id: string;
  requestHash: string;
  request: TransferRequest;
  state: TransferState;
  ownerNodeId: string | null;
  ownerAddress: string | null;
  /** Identifies the owner's process incarnation (a restarted node is a new owner). */
  ownerInstance: string | null;
  /** Fencing epoch: increments on every change of owner. */
  epoch: number;
  leaseExpiresAt: Date | null;
  /**
   * Runs of the transfer so far: its first, and one more for every owner that runs it again (a takeover or a resume).
   * A terminate that takes a silent owner's transfer runs nothing and adds none (its epoch still moves on).
   */
  attempts: number;
  /**
   * Retryable failures (a peer unreachable for now) since the transfer last saved progress: a run that ends on
   * one adds one, a saved checkpoint that differs from the last starts the count again. Owner changes do not
   * count. The app-server records the transfer FAILED once this passes its retry budget.
   */
  retries: number;
  /**
   * The epoch whose owner passed its fenced finishing step (`DataPlaneStore.finishing`): about to publish what
   * cannot be taken back. While it equals `epoch` (and the record is not final) no owner change on a "nobody"
   * lands until the lease expired. Null until an owner of the transfer reached that step.
   */
  finishingEpoch: number | null;
  error: TransferFailure | null;
  result: TransferResult | null;
  /** The pipeline's progress checkpoint, written fenced by the epoch. */
  checkpoint: unknown | null;
  createdAt: Date;
  updatedAt: Date;
}
