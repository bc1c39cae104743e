/**
 * Read your writes through the query API: a read that names the position a write reached (`sluice-min-position`)
 * is answered only once the serving generation has committed that far. The server waits up to its
 * `api.freshnessWaitMs` and then answers `503 POSITION_NOT_REACHED` with `retry-after`; this module keeps asking
 * until the client's own deadline, so a caller writes `await items.get(42, { minPosition: lsn })` and gets its row.
 */
import { SluiceClientError } from './errors.js';
import { delay } from './http.js';

/**
 * A position a read must see: a bare PostgreSQL LSN (`'0/16B3748'`, for an endpoint with one source) or source
 * handle → LSN (`{ 'items.source': '0/16B3748' }`). After a write's `COMMIT`, `SELECT pg_current_wal_insert_lsn()` on the
 * same connection gives it (`pg_current_wal_lsn()` can be before a commit made with `synchronous_commit = off`).
 */
export type MinPosition = string | Readonly<Record<string, string>>;

/** Options of every read (get, query, count, scan). */
export interface ReadOptions {
  signal?: AbortSignal | undefined;
  /**
   * Answer only once the endpoint has committed at least this position (read your writes). Sent as
   * `sluice-min-position`; a `503 POSITION_NOT_REACHED` is asked again after its `retry-after` until
   * `freshnessTimeoutMs` has passed, then thrown.
   */
  minPosition?: MinPosition | undefined;
  /** How long a read with `minPosition` keeps asking (default 10 000 ms). */
  freshnessTimeoutMs?: number | undefined;
}

/** Default of {@link ReadOptions.freshnessTimeoutMs}. */
export const DEFAULT_FRESHNESS_TIMEOUT_MS = 10_000;

/** Pause before asking again when a 503 carries no `retry-after`. */
const RETRY_MS = 200;

/**
 * The `sluice-min-position` header value of `position` (RFC 8941 dictionary of strings for a record).
 *
 * @example
 * ```ts
 * minPositionHeader('0/16B3748'); // '0/16B3748'
 * minPositionHeader({ 'items.source': '0/16B3748' }); // 'items.source="0/16B3748"'
 * ```
 */
export function minPositionHeader(position: MinPosition): string {
  if (typeof position === 'string') return position;
  return Object.entries(position)
    .map(([handle, lsn]) => `${handle}=${JSON.stringify(lsn)}`)
    .join(', ');
}

/**
 * A `sluice-position` header (RFC 8941 dictionary of strings: source handle → committed LSN) as a record, or null
 * when absent (the endpoint has no replication source) or not of that form.
 *
 * @example
 * ```ts
 * parsePositionHeader('items.source="0/16B3748"'); // { 'items.source': '0/16B3748' }
 * ```
 */
export function parsePositionHeader(header: string | null): Record<string, string> | null {
  if (header === null || header.trim() === '') return null;
  const position: Record<string, string> = {};
  for (const member of header.split(',')) {
    const match = /^\s*([a-z*][a-z0-9_\-.*]*)="([^"\\]*)"\s*$/.exec(member);
    if (match === null) return null;
    Object.defineProperty(position, match[1]!, { value: match[2]!, enumerable: true, writable: true });
  }
  return position;
}

/**
 * Runs `read` with the `sluice-min-position` header of `options.minPosition` (none without one), asking again on
 * `503 POSITION_NOT_REACHED` after its `retry-after` until `options.freshnessTimeoutMs`; every other outcome is
 * `read`'s own.
 */
export async function readFresh<T>(
  options: ReadOptions,
  read: (headers: Record<string, string>) => Promise<T>,
): Promise<T> {
  if (options.minPosition === undefined) return read({});
  const headers = { 'sluice-min-position': minPositionHeader(options.minPosition) };
  const deadline = Date.now() + (options.freshnessTimeoutMs ?? DEFAULT_FRESHNESS_TIMEOUT_MS);
  for (;;) {
    try {
      return await read(headers);
    } catch (err) {
      if (!(err instanceof SluiceClientError) || err.code !== 'POSITION_NOT_REACHED') throw err;
      const left = deadline - Date.now();
      if (left <= 0) throw err;
      await delay(Math.min(err.retryAfterMs ?? RETRY_MS, left), options.signal);
    }
  }
}
