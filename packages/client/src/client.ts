import type { CacheSchema, PipelineCheckpoint } from '@sluice/core';
import { ControlClient } from './control.js';
import { EndpointClient } from './endpoint.js';
import { ClientErrorCode, SluiceClientError } from './errors.js';
import { DEFAULT_TIMEOUT_MS, type HttpTarget, requestJson, type TokenSource } from './http.js';
import { TransfersClient } from './transfers.js';

export interface ClientOptions {
  /** The app-server's control API, e.g. `http://10.0.0.5:7070` (transfers, endpoints, nodes); `''` = same origin. */
  controlUrl?: string | undefined;
  /** An api-server, e.g. `http://10.0.0.5:8080` (endpoints). */
  queryUrl?: string | undefined;
  /**
   * Bearer token for both APIs (`controlToken` / `queryToken` override it per API): a string, or a function asked
   * before each request and each stream connection (tokens that expire: a change feed continues with the renewed
   * one, resuming from its last event). An empty string is refused (`INVALID_TOKEN`): leave the option out (or
   * return `undefined`) to send no token.
   */
  token?: TokenSource | undefined;
  controlToken?: TokenSource | undefined;
  queryToken?: TokenSource | undefined;
  /** The fetch to use (default: the global one). */
  fetch?: typeof globalThis.fetch | undefined;
  /**
   * How long one request may take to be answered in full (default 30 000 ms; 0 = no limit): past it the request is
   * abandoned with `TIMEOUT` — a server that accepted the connection and stopped would otherwise hold the caller
   * for minutes (Node) or forever (browsers). Keep it above the server's own waits: `api.freshnessWaitMs` for reads
   * with `minPosition`, `switch.handoverWaitMs` for a promote. Streams (`changes`, `watchEndpoints`) are bounded by
   * their `idleTimeoutMs` instead.
   */
  timeoutMs?: number | undefined;
}

/**
 * Endpoint name → the type of its records, e.g. the `Endpoints` interface `sluice-client types` writes from the
 * serving schemas.
 */
export type EndpointTypes = object;

/** No endpoint known by name: every `endpoint(name)` takes its row type as a type argument (or is a plain record). */
export type NoEndpointTypes = Record<never, never>;

/**
 * The record type of endpoint `N` in `E`, when it is an object type — a type alias or an interface (an interface has
 * no index signature, so it is not a `Record<string, unknown>`; asking for one turned interfaces into plain records).
 */
type RowOf<E, N extends keyof E> = E[N] extends object ? E[N] : Record<string, unknown>;

/** An endpoint as the query API describes it (`GET /v1/endpoints`): its serving generation and schema. */
export interface EndpointDescription {
  name: string;
  /** The cache generation serving it. */
  cache: string;
  /** The alias-table version of its alias. */
  version: number;
  checkpoint: PipelineCheckpoint | null;
  committedAt: string | null;
  /**
   * The records this caller may read; null for a token whose row filter no index narrows to the server's
   * `cache.scanCap` records (the server does not count those one by one; `count()` is refused for them too).
   */
  recordCount: number | null;
  /** The fields queries may name (the serving generation's, as of its latest commit), its key and indexes. */
  schema: CacheSchema;
}

/** A client of both Sluice HTTP APIs; `E` types the endpoints it knows by name (see {@link createClient}). */
export interface SluiceClient<E extends EndpointTypes = NoEndpointTypes> {
  /** An endpoint `E` names, typed by its record type there. */
  endpoint<N extends keyof E & string>(name: N): EndpointClient<RowOf<E, N>>;
  /** An endpoint of the query API, typed by its rows (`Row` given — a type alias or an interface —, or a plain record). */
  endpoint<Row extends object = Record<string, unknown>>(name: string): EndpointClient<Row>;
  /** The endpoints the query API serves to this client's token, with their schemas. */
  endpoints(options?: { signal?: AbortSignal | undefined }): Promise<EndpointDescription[]>;
  /** Transfers of the control API. */
  readonly transfers: TransfersClient;
  /** Endpoints (status, generations, rebuild, promote, rollback, the live stream) and nodes of the control API. */
  readonly control: ControlClient;
}

function target(
  url: string | undefined,
  what: string,
  token: TokenSource | undefined,
  f: typeof fetch,
  timeoutMs: number,
): HttpTarget {
  if (url === undefined)
    return {
      baseUrl: '',
      token,
      fetch: () => Promise.reject(new TypeError(`createClient was given no ${what}`)),
      timeoutMs,
    };
  return { baseUrl: url.replace(/\/+$/, ''), token, fetch: f, timeoutMs };
}

/**
 * Refuses a token option given as `''`: `??` would keep it over `token`, and it would send requests with no
 * credentials — silently unauthenticated against a server without auth. Leaving the option out is how to say "none".
 */
function refuseEmptyToken(options: ClientOptions, option: 'token' | 'queryToken' | 'controlToken'): void {
  if (options[option] === '')
    throw new SluiceClientError(
      ClientErrorCode.INVALID_TOKEN,
      `createClient: ${option} is an empty string, which would send requests with no token; give the token, or leave ${option} out`,
    );
}

/**
 * Creates a client. Runs in Node 20+ and browsers (fetch and web streams only). `E` (optional) maps endpoint names
 * to their record types — generate it from the serving schemas with `sluice-client types` — so
 * `client.endpoint('items')` is typed without naming the type at each call.
 *
 * @example
 * ```ts
 * import { createClient } from '@sluice/client';
 * import type { Endpoints } from './sluice-types.js'; // npx sluice-client types --url http://localhost:8080 --out src/sluice-types.ts
 * const client = createClient<Endpoints>({ controlUrl: 'http://localhost:7070', queryUrl: 'http://localhost:8080', token });
 * const items = client.endpoint('items'); // EndpointClient<Items>
 * console.log(await items.count({ value: { $gte: 10 } }));
 * const other = client.endpoint<{ id: number; value: number }>('other'); // or name the row type yourself
 * ```
 */
export function createClient<E extends EndpointTypes = NoEndpointTypes>(
  options: ClientOptions,
): SluiceClient<E> {
  const f = options.fetch ?? globalThis.fetch.bind(globalThis);
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isFinite(timeoutMs) || timeoutMs < 0)
    throw new RangeError(
      `createClient: timeoutMs must be a number of ms ≥ 0 (0 = no limit), got ${timeoutMs}`,
    );
  for (const option of ['token', 'queryToken', 'controlToken'] as const) refuseEmptyToken(options, option);
  const query = target(options.queryUrl, 'queryUrl', options.queryToken ?? options.token, f, timeoutMs);
  const control = target(
    options.controlUrl,
    'controlUrl',
    options.controlToken ?? options.token,
    f,
    timeoutMs,
  );
  return {
    endpoint: (name: string) => new EndpointClient(name, query),
    endpoints: async (opts = {}) => {
      const { body } = await requestJson<{ endpoints: EndpointDescription[] }>(
        query,
        'GET',
        '/v1/endpoints',
        undefined,
        {},
        opts.signal,
      );
      return body.endpoints;
    },
    transfers: new TransfersClient(control),
    control: new ControlClient(control),
  };
}
