import { ControlClient } from './control.js';
import { EndpointClient } from './endpoint.js';
import type { HttpTarget, TokenSource } from './http.js';
import { TransfersClient } from './transfers.js';

export interface ClientOptions {
  /** The app-server's control API, e.g. `http://10.0.0.5:7070` (transfers, endpoints, nodes); `''` = same origin. */
  controlUrl?: string;
  /** An api-server, e.g. `http://10.0.0.5:8080` (endpoints). */
  queryUrl?: string;
  /**
   * Bearer token for both APIs (`controlToken` / `queryToken` override it per API): a string, or a function asked
   * before each request and each stream connection (tokens that expire: a change feed continues with the renewed
   * one, resuming from its last event).
   */
  token?: TokenSource;
  controlToken?: TokenSource;
  queryToken?: TokenSource;
  /** The fetch to use (default: the global one). */
  fetch?: typeof globalThis.fetch;
}

/** A client of both Sluice HTTP APIs. */
export interface SluiceClient {
  /** An endpoint of the query API, typed by its rows. */
  endpoint<Row extends Record<string, unknown> = Record<string, unknown>>(name: string): EndpointClient<Row>;
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
): HttpTarget {
  if (url === undefined)
    return {
      baseUrl: '',
      token,
      fetch: () => Promise.reject(new TypeError(`createClient was given no ${what}`)),
    };
  return { baseUrl: url.replace(/\/+$/, ''), token, fetch: f };
}

/**
 * Creates a client. Runs in Node 20+ and browsers (fetch and web streams only).
 *
 * @example
 * ```ts
 * import { createClient } from '@sluice/client';
 * const client = createClient({ controlUrl: 'http://localhost:7070', queryUrl: 'http://localhost:8080', token });
 * const items = client.endpoint<{ id: number; value: number }>('items');
 * console.log(await items.count({ value: { $gte: 10 } }));
 * ```
 */
export function createClient(options: ClientOptions): SluiceClient {
  const f = options.fetch ?? globalThis.fetch.bind(globalThis);
  const query = target(options.queryUrl, 'queryUrl', options.queryToken ?? options.token, f);
  const control = target(options.controlUrl, 'controlUrl', options.controlToken ?? options.token, f);
  return {
    endpoint: <Row extends Record<string, unknown>>(name: string) => new EndpointClient<Row>(name, query),
    transfers: new TransfersClient(control),
    control: new ControlClient(control),
  };
}
