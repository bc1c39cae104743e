/**
 * The idempotency fingerprint: what tells "the same request again" from "the same key, another request". It is
 * the hash of the request's *normalized* form, so every spelling of one request — however a client library
 * serializes it — has one fingerprint (docs/architecture.md § Protocol 1, "Same request").
 */
import type { DestinationAddress, SourceAddress } from './addresses.js';
import { hashJson } from './json.js';
import { type TransferOptions, type TransferRequest, TransferRequestSchema } from './transfer.js';

/** A key given as one column name or a list: the list is the one spelling. */
function normalizedKey(key: unknown): unknown {
  return typeof key === 'string' ? [key] : key;
}

/** Drops `field` from `object` when it holds `value` (the meaning its absence has). */
function withoutValue<T extends object>(object: T, field: keyof T, value: unknown): T {
  if (object[field] !== value) return object;
  const { [field]: _dropped, ...rest } = object;
  return rest as T;
}

type Address = SourceAddress | DestinationAddress;

function normalizedAddress(address: Address, role: 'source' | 'destination'): Address {
  // A record stored by an earlier version may hold a shape this one no longer parses: left as it is.
  if (typeof address !== 'object' || address === null) return address;
  switch (address.type) {
    case 'file':
      return withoutValue(address, 'follow', false);
    case 'postgres': {
      const keyed = { ...address, key: normalizedKey(address.key) } as typeof address;
      // A transfer's source without `capture` polls (`postgresCapture(…, 'transfer')`): "poll" says the same. A
      // destination's `capture` is refused (request-rules), so it is kept for that refusal to see.
      return role === 'source' ? withoutValue(keyed, 'capture', 'poll') : keyed;
    }
    case 'jetstream':
      return { ...address, key: normalizedKey(address.key) } as typeof address;
    default:
      return address;
  }
}

/**
 * The one spelling of a parsed request: a `key` is a list (`"id"` → `["id"]`); a field given the value its
 * absence means is dropped (`follow: false` of a file source and of `options`, `capture: "poll"` of a PostgreSQL
 * source); everything else as parsed (schema defaults are filled in by the parse, object key order is the
 * hash's business). Only spellings of one meaning are folded: two requests that would run differently never
 * normalize alike. For fingerprints, not for running: the stored and run request is the parsed one.
 *
 * @example
 * ```ts
 * normalizeTransferRequest(parseTransferRequest({
 *   id: 'a', source: { type: 'file', path: 'in.jsonl', follow: false },
 *   destination: { type: 'postgres', connection: 'wh', table: 't', key: 'id' },
 * }));
 * // → { id: 'a', mode: 'idempotent', source: { type: 'file', path: 'in.jsonl', format: 'jsonl' },
 * //     destination: { type: 'postgres', connection: 'wh', table: 't', key: ['id'] },
 * //     properties: {}, options: { onBadRecord: 'skip' } }
 * ```
 */
export function normalizeTransferRequest(request: TransferRequest): TransferRequest {
  const options =
    typeof request.options === 'object' && request.options !== null
      ? withoutValue<TransferOptions>(request.options, 'follow', false)
      : request.options;
  return {
    ...request,
    source: normalizedAddress(request.source, 'source') as SourceAddress,
    destination: normalizedAddress(request.destination, 'destination') as DestinationAddress,
    options,
  };
}

/**
 * The idempotency fingerprint of a parsed request: SHA-256 (hex) of the canonical JSON of its normalized form
 * ({@link normalizeTransferRequest}), so neither key order, nor defaults spelled out or left out, nor a one-column
 * key as a string or a list, nor the id coming from the `Idempotency-Key` header change it. A request already in
 * its normalized form hashes as it did before the normalization existed.
 *
 * @example
 * ```ts
 * requestHash(parseTransferRequest({ ...body, destination: { ...pg, key: 'id' } })) ===
 *   requestHash(parseTransferRequest({ ...body, destination: { ...pg, key: ['id'] } })); // true
 * ```
 */
export function requestHash(request: TransferRequest): string {
  return hashJson(normalizeTransferRequest(request));
}

/**
 * Whether a stored record was submitted with the request whose fingerprint is `hash` (the resend is "the same
 * request"). Its stored hash answers at once when it equals `hash`; otherwise the stored request itself is
 * fingerprinted again — a record stored before the fingerprint was normalized holds the hash of its request as
 * it was written then, so an equal request spelled another way is recognised as well. The stored request is
 * parsed again first, so defaults added to the schema since it was stored count as given.
 *
 * @example
 * ```ts
 * if (!matchesStoredRequest(record, requestHash(request))) throw new IdempotencyConflictError(record.id);
 * ```
 */
export function matchesStoredRequest(
  stored: { requestHash: string; request: unknown },
  hash: string,
): boolean {
  if (stored.requestHash === hash) return true;
  const parsed = TransferRequestSchema.safeParse(stored.request);
  const request = parsed.success ? parsed.data : (stored.request as TransferRequest);
  if (typeof request !== 'object' || request === null) return false;
  return requestHash(request) === hash;
}
