import type { Filter, WireQuery } from '@sluice/core';
import { disposable } from './disposable.js';
import { ClientErrorCode, SluiceClientError } from './errors.js';
import { type ConnectionLoss, openEventStream } from './event-stream.js';
import {
  DEFAULT_FRESHNESS_TIMEOUT_MS,
  type MinPosition,
  minPositionHeader,
  parsePositionHeader,
  type ReadOptions,
  readFresh,
} from './freshness.js';
import { type HttpTarget, requestJson } from './http.js';

/** A query of the query language, on the wire (core's `WireQuery`: `$filter`, `$order_by`, `$limit`, `$skip` | `$after`). */
export type { WireQuery };

/** A page of records and the `$after` cursor of the next one. */
export interface Page<Row> {
  records: Row[];
  next: string | null;
  /** The cache generation that answered (`sluice-cache`). */
  cache: string | null;
  /**
   * What that generation had committed, per replication source (`sluice-position`: source handle → LSN); null for
   * an endpoint without one. A later read with this as `minPosition` never sees an older state.
   */
  position: Record<string, string> | null;
}

/** What a change feed yields (each `token` is what `changes({ after })` resumes from). */
export type ChangeEvent<Row> =
  | { type: 'upsert'; key: unknown[]; record: Row; token?: string }
  | { type: 'delete'; key: unknown[]; token: string }
  | { type: 'commit'; position: Record<string, unknown> | null; epoch: number | null; token: string }
  | { type: 'live'; generation: string; token: string }
  | { type: 'switch'; from: string; to: string; token: string }
  /**
   * Drop the local copy: a snapshot follows. `reason` is the server's (`retention`, `generation-gone`,
   * `unknown-position`, `filter-changed`: resumed with another `filter` or a token with another row filter) or
   * `reconnected-during-snapshot` (the client lost the connection before `live`).
   */
  | { type: 'reset'; reason: string };

export interface ChangesOptions {
  /** Resume after this token (from a previous event). */
  after?: string | undefined;
  /** A `$filter` the feed applies (a record leaving it arrives as a `delete`). */
  filter?: Filter | undefined;
  /** Start with a snapshot even with a token. */
  snapshot?: boolean | undefined;
  /**
   * Read your writes: the feed starts from a generation that has committed at least this position, so its snapshot
   * (or the changes after `after`, up to `live`) holds the write. Sent as `sluice-min-position` on every connection
   * until the first `live` event; a `503 POSITION_NOT_REACHED` is asked again after its `retry-after` until
   * `freshnessTimeoutMs` has passed, then the feed ends with it. A malformed position ends it at once (`400`).
   */
  minPosition?: MinPosition | undefined;
  /** How long a feed with `minPosition` keeps asking before its first `live` (default 10 000 ms). */
  freshnessTimeoutMs?: number | undefined;
  /** Stops the iterator (it also stops when the loop breaks). */
  signal?: AbortSignal | undefined;
  /** Reconnect backoff (default 250 ms doubling to 10 s, jittered). */
  backoff?: { initialMs?: number | undefined; maxMs?: number | undefined } | undefined;
  /**
   * Reconnect (resuming from the last token) when the connection delivers nothing, not even a heartbeat, for this
   * long (default 45 000 ms: three of the server's default `api.changes.heartbeatMs`; keep it above the server's
   * heartbeat; 0 = never). A stopped server or a lost network path otherwise leaves the feed waiting forever.
   */
  idleTimeoutMs?: number | undefined;
  /** Called once a connection is accepted (the feed is live again after a loss). */
  onOpen?: (() => void) | undefined;
  /**
   * Called when a connection attempt fails or the open connection is lost (`unreachable`, `refused`, `closed`); the
   * feed reconnects by itself and resumes from its last token, and `onOpen` says when it is up again. A refused
   * connection comes with the server's refusal (`429 QUEUE_FULL` names the bound reached), to say why.
   */
  onConnectionLost?: ((why: ConnectionLoss, refusal?: SluiceClientError) => void) | undefined;
}

/**
 * Formats primary-key values as the URL segment of `/records/:key` (components joined by `,`, each
 * percent-encoded). A `Date` (a `timestamp` key) is sent as its ISO instant — the server reads ISO text, not the
 * quoted JSON string other objects (a `json` key) are sent as.
 *
 * @example
 * ```ts
 * keySegment(['eu', new Date('2026-12-01T10:20:30Z')]); // 'eu,2026-12-01T10%3A20%3A30.000Z'
 * ```
 */
export function keySegment(key: unknown | unknown[]): string {
  const values = Array.isArray(key) ? key : [key];
  return values.map((v) => encodeURIComponent(keyText(v))).join(',');
}

/**
 * The path of the record with this primary key under an endpoint: `/records/<segment>`, or `/records?key=` for a
 * single-field key that is the empty string — its segment is empty, and a path's empty segment names nothing (the
 * api-server refuses it), so the query API takes the segment as the `key` parameter there.
 *
 * @example
 * ```ts
 * recordPath(['eu', 42]); // '/records/eu,42'
 * recordPath(''); // '/records?key='
 * ```
 */
export function recordPath(key: unknown | unknown[]): string {
  const segment = keySegment(key);
  return segment === '' ? '/records?key=' : `/records/${segment}`;
}

function keyText(value: unknown): string {
  if (value instanceof Date) return value.toISOString();
  return typeof value === 'object' && value !== null ? JSON.stringify(value) : String(value);
}

/**
 * One endpoint of the query API, typed by its rows.
 *
 * @example
 * ```ts
 * const cities = client.endpoint<{ id: number; name: string; country: string }>('cities');
 * await cities.get(42);
 * for await (const city of cities.scan({ $filter: { country: 'NO' } })) console.log(city.name);
 * for await (const change of cities.changes()) apply(change);
 * ```
 */
export class EndpointClient<Row extends object = Record<string, unknown>> {
  constructor(
    readonly name: string,
    private readonly target: HttpTarget,
  ) {}

  private path(suffix: string): string {
    return `/v1/endpoints/${encodeURIComponent(this.name)}${suffix}`;
  }

  /**
   * The record with this primary key (values in primary-key order for a composite key), or undefined. With
   * `minPosition`, as of at least that position (read your writes).
   *
   * @example
   * ```ts
   * // after the application's INSERT … COMMIT, and SELECT pg_current_wal_insert_lsn() → lsn:
   * const row = await items.get(42, { minPosition: lsn }); // never older than that write
   * ```
   */
  async get(key: unknown | unknown[], options: ReadOptions = {}): Promise<Row | undefined> {
    try {
      return await readFresh(options, async (headers) => {
        const { body } = await requestJson<Row>(
          this.target,
          'GET',
          this.path(recordPath(key)),
          undefined,
          headers,
          options.signal,
        );
        return body;
      });
    } catch (err) {
      if (err instanceof SluiceClientError && err.code === 'RECORD_NOT_FOUND') return undefined;
      throw err;
    }
  }

  /**
   * One page of a query (with `minPosition`, as of at least that position). `$limit` is 1 to the server's
   * `query.maxLimit`; `0` is refused (`INVALID_QUERY` at `$limit`): use {@link EndpointClient.count} to count.
   *
   * @example
   * ```ts
   * const page = await cities.query({ $filter: { country: 'NO' }, $order_by: { name: 'asc' }, $limit: 50 });
   * if (page.next !== null) await cities.query({ $filter: { country: 'NO' }, $order_by: { name: 'asc' }, $after: page.next });
   * ```
   */
  async query(query: WireQuery = {}, options: ReadOptions = {}): Promise<Page<Row>> {
    return readFresh(options, async (extra) => {
      const { body, headers } = await requestJson<{ records: Row[]; next: string | null }>(
        this.target,
        'POST',
        this.path('/query'),
        query,
        extra,
        options.signal,
      );
      return {
        records: body.records,
        next: body.next,
        cache: headers.get('sluice-cache'),
        position: parsePositionHeader(headers.get('sluice-position')),
      };
    });
  }

  /** How many records match `filter` (with `minPosition`, as of at least that position). */
  async count(filter: Filter = {}, options: ReadOptions = {}): Promise<number> {
    return readFresh(options, async (headers) => {
      const { body } = await requestJson<{ count: number }>(
        this.target,
        'POST',
        this.path('/count'),
        { $filter: filter },
        headers,
        options.signal,
      );
      return body.count;
    });
  }

  /**
   * Every record matching the query, page by page (`$after`). A walk that crosses a blue/green switch fails
   * with `CURSOR_EXPIRED` (it never skips or repeats silently): start it again. `await using` ends it too.
   */
  scan(query: Omit<WireQuery, '$after' | '$skip'> = {}, options: ReadOptions = {}): AsyncGenerator<Row> {
    return disposable(this.pages(query, options));
  }

  private async *pages(query: Omit<WireQuery, '$after' | '$skip'>, options: ReadOptions) {
    let after: string | null = null;
    do {
      const page: Page<Row> = await this.query({ ...query, ...(after ? { $after: after } : {}) }, options);
      for (const record of page.records) yield record;
      after = page.next;
    } while (after !== null);
  }

  /**
   * The endpoint's change feed. Reconnects on its own (backoff) and resumes from the last token, so the
   * events it yields have no gap and no duplicate; apply them in order to a local copy. Ending it — `break`,
   * `return()`, the `signal`, or the end of an `await using` block — closes its connection.
   *
   * @example
   * ```ts
   * {
   *   await using feed = items.changes();
   *   for await (const change of feed) if (apply(change) === 'enough') break;
   * } // the connection is closed here, whichever way the block was left
   * ```
   */
  changes(options: ChangesOptions = {}): AsyncGenerator<ChangeEvent<Row>> {
    return disposable(this.feed(options));
  }

  private async *feed(options: ChangesOptions): AsyncGenerator<ChangeEvent<Row>> {
    let token = options.after;
    let snapshot = options.snapshot === true;
    let inSnapshot = false;
    // Until the first `live` the feed has not shown a state at least as new as `minPosition`: every connection
    // before it asks for that position (a reconnect mid-snapshot may reach a server further behind).
    let fresh = options.minPosition === undefined;
    const minPosition: Record<string, string> =
      options.minPosition === undefined
        ? {}
        : { 'sluice-min-position': minPositionHeader(options.minPosition) };
    const deadline = Date.now() + (options.freshnessTimeoutMs ?? DEFAULT_FRESHNESS_TIMEOUT_MS);
    yield* openEventStream<ChangeEvent<Row>>(this.target, {
      what: 'The change feed',
      ...(options.signal ? { signal: options.signal } : {}),
      ...(options.backoff ? { backoff: options.backoff } : {}),
      ...(options.idleTimeoutMs !== undefined ? { idleTimeoutMs: options.idleTimeoutMs } : {}),
      beforeConnect: () => {
        if (!inSnapshot) return null;
        // Snapshot records carry no token, so the last token (the one asked with, or one before a server's
        // reset) says nothing of how far the snapshot got: resuming after it would skip every record not yet
        // received that has not changed since. Ask for a fresh snapshot; what was received of the interrupted one
        // may include records deleted since, so the consumer drops its copy first.
        inSnapshot = false;
        snapshot = true;
        return { type: 'reset', reason: 'reconnected-during-snapshot' };
      },
      path: () => {
        const params = new URLSearchParams();
        if (token !== undefined) params.set('after', token);
        if (snapshot) params.set('snapshot', 'true');
        if (options.filter !== undefined) params.set('filter', JSON.stringify(options.filter));
        const query = params.size > 0 ? `?${params}` : '';
        return `${this.path('/changes')}${query}`;
      },
      headers: () => (fresh ? {} : minPosition),
      giveUp: (refusal) => !fresh && refusal.code === 'POSITION_NOT_REACHED' && Date.now() >= deadline,
      onOpen: () => {
        snapshot = false;
        options.onOpen?.();
      },
      ...(options.onConnectionLost ? { onConnectionLost: options.onConnectionLost } : {}),
      decode: (message) => {
        const event = toEvent<Row>(message.event, message.data, message.id);
        if (event === null) return null;
        if (event.type === 'reset' || (event.type === 'upsert' && message.id === undefined))
          inSnapshot = true;
        if (event.type === 'live') {
          inSnapshot = false;
          fresh = true;
        }
        if (message.id !== undefined) token = message.id;
        return event;
      },
      endOnBadEvent: false,
    });
  }
}

function toEvent<Row>(type: string, data: string, id: string | undefined): ChangeEvent<Row> | null {
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(data) as Record<string, unknown>;
  } catch {
    throw new SluiceClientError(ClientErrorCode.BAD_RESPONSE, `Change feed event "${type}" is not JSON`);
  }
  const token = id as string;
  switch (type) {
    case 'upsert':
      return { type, key: body.key as unknown[], record: body.record as Row, ...(id ? { token } : {}) };
    case 'delete':
      return { type, key: body.key as unknown[], token };
    case 'commit':
      return {
        type,
        position: (body.position ?? null) as Record<string, unknown> | null,
        epoch: (body.epoch ?? null) as number | null,
        token,
      };
    case 'live':
      return { type, generation: String(body.generation), token };
    case 'switch':
      return { type, from: String(body.from), to: String(body.to), token };
    case 'reset':
      return { type, reason: String(body.reason) };
    default:
      return null; // an event type this client does not know: skip it
  }
}
