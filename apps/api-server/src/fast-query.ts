/**
 * Range queries answered below fastify, as point lookups are (fast-lookup.ts). Over HTTP a query cost about three
 * times what the query itself costs in process: fastify's request path (routing, the content-type parser, hooks,
 * the reply) and the api-server's own hooks around a handler whose work is one `queryJson`. The http server hands
 * each request to {@link FastRoute}s first; this one takes a plain JSON query to a known path, reads its body, and
 * answers the successful case itself. Why and what was measured: docs/performance.md § Queries below fastify.
 *
 * Taken: `POST /v1/endpoints/<name>/query` with no query string, `content-type: application/json`, a
 * `content-length` within the body limit (no chunked bodies), no `sluice-min-position` (that may wait), no
 * `origin` when CORS is on, and a token the endpoint accepts. Once the body is read, anything but a page —
 * malformed JSON, an invalid query, an expired cursor, an unknown endpoint, a generation closing under a switch —
 * is handed to fastify whole with `inject` (the same method, URL, headers and body), and fastify's answer is sent
 * as it is: problem details, auth and limits keep one definition.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Filter, QueryLimits } from '@sluice/core';
import { jsonBodyText, refusedJsonCharset } from '@sluice/http';
import type { CheckpointStamps } from './checkpoint-headers.js';
import type { EndpointAccess } from './endpoint-access.js';
import { type FastRoute, leftToFastify, okHeaders } from './fast-route.js';
import type { InFlight } from './in-flight.js';
import type { PositionSeal } from './position-seal.js';
import { queryPage } from './query-page.js';
import type { EndpointRegistry } from './registry.js';
import type { RequestRecorder } from './request-metrics.js';
import type { Lease } from './serving-table.js';

/** The fastify route pattern the fast queries stand in for (their metrics label). */
export const QUERY_ROUTE = '/v1/endpoints/:name/query';

// Endpoint names with characters a URL would percent-encode are left to fastify (it decodes route params).
const QUERY_PATH = /^\/v1\/endpoints\/([A-Za-z0-9_.-]{1,256})\/query$/;
/** Headers of a connection, not of an answer: never copied from an injected reply. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'date']);

/** What a request handed over to fastify comes back as (fastify's `inject`). */
export interface InjectedReply {
  statusCode: number;
  headers: Record<string, string | string[] | number | undefined>;
  rawPayload: Buffer;
}

export interface FastQueryOptions {
  registry: EndpointRegistry;
  access: Pick<EndpointAccess, 'rowFilterFor'>;
  limits: QueryLimits;
  /** Seals row-filtered readers' cursors (`queryPage`); null when auth is off. */
  seal: PositionSeal | null;
  headersOf: CheckpointStamps['headersOf'];
  record: RequestRecorder;
  /** Largest request body in bytes (`http.bodyBytes`); a larger one is fastify's to refuse (413). */
  bodyLimit: number;
  /** CORS is configured: requests with an `origin` go to fastify (the CORS plugin answers them). */
  cors: boolean;
  /** True once the server is shutting down: fastify refuses requests then (503 NODE_SHUTTING_DOWN). */
  isStopping: () => boolean;
  /** Where taken requests are counted, so that shutdown waits for them before fastify closes. */
  inFlight: InFlight;
  /** Runs a request through fastify in full (`app.inject`): how a taken request that is not a page is answered. */
  inject: (request: {
    method: 'POST';
    url: string;
    headers: IncomingMessage['headers'];
    payload: Buffer;
  }) => Promise<InjectedReply>;
}

/**
 * True for `application/json` this route may read: no parameters, or parameters @sluice/http's body rule accepts
 * (no charset but UTF-8). Anything else is fastify's to answer, so a refused charset gets the same 415.
 */
function isJson(contentType: string | undefined): boolean {
  if (contentType === undefined || !contentType.startsWith('application/json')) return false;
  if (contentType.length === 16) return true;
  return contentType.charCodeAt(16) === 0x3b /* ; */ && refusedJsonCharset(contentType) === null;
}

/**
 * The fast query route of one application.
 *
 * @example
 * ```ts
 * const fast = fastQueryRoute({ registry, access, limits, seal: null, headersOf, record, bodyLimit, cors: false, isStopping,
 *   inject: (request) => app.inject(request), inFlight: new InFlight() });
 * http.createServer((req, res) => { if (!fast(req, res)) fastifyHandler(req, res); });
 * ```
 */
export function fastQueryRoute(options: FastQueryOptions): FastRoute {
  const { registry, access, limits, seal, headersOf, record, bodyLimit, cors, isStopping, inject, inFlight } =
    options;

  /** Hands a taken request to fastify and sends its answer. */
  const handOver = (request: IncomingMessage, response: ServerResponse, body: Buffer) => {
    inject({ method: 'POST', url: request.url ?? '', headers: request.headers, payload: body }).then(
      (reply) => {
        const headers: Array<string> = [];
        for (const [name, value] of Object.entries(reply.headers)) {
          if (value === undefined || HOP_BY_HOP.has(name)) continue;
          if (Array.isArray(value)) for (const item of value) headers.push(name, item);
          else headers.push(name, String(value));
        }
        response.writeHead(reply.statusCode, headers);
        response.end(reply.rawPayload);
      },
      () => response.destroy(),
    );
  };

  /** Answers a taken request whose body was read: the page, or fastify's answer. */
  const answer = (
    request: IncomingMessage,
    response: ServerResponse,
    name: string,
    rowFilter: Filter | undefined,
    body: Buffer,
    started: number,
  ) => {
    let lease: Lease | undefined;
    let raw: string[];
    let json: Uint8Array;
    try {
      // Bytes that are not UTF-8 throw here too: fastify's parser then answers them MALFORMED_JSON.
      const parsed: unknown = JSON.parse(jsonBodyText(body));
      lease = registry.acquire(name);
      const page = queryPage(lease, parsed, rowFilter, limits, seal);
      raw = okHeaders(lease.generation.name, headersOf(page.state), page.json.length);
      json = page.json;
    } catch {
      // Whatever failed, fastify's route meets it again with the same request and answers it as the problem it is.
      handOver(request, response, body);
      return;
    } finally {
      lease?.release();
    }
    response.writeHead(200, raw);
    response.end(json);
    record(QUERY_ROUTE, name, 200, performance.now() - started);
  };

  return (request, response) => {
    if (request.method !== 'POST' || isStopping()) return false;
    const match = QUERY_PATH.exec(request.url ?? '');
    if (match === null) return false;
    const headers = request.headers;
    if (leftToFastify(request, cors)) return false;
    if (!isJson(headers['content-type']) || headers['transfer-encoding'] !== undefined) return false;
    const length = Number(headers['content-length']);
    if (!Number.isInteger(length) || length <= 0 || length > bodyLimit) return false;
    const name = match[1]!;
    let rowFilter: Filter | undefined;
    try {
      // A token the endpoint refuses is fastify's to answer (401/403), before any body is read.
      rowFilter = access.rowFilterFor(headers.authorization, name);
    } catch {
      return false;
    }
    const started = performance.now();
    inFlight.track(response);
    // Taken: from here on this route answers, with the page or with fastify's answer to the same request.
    // Node frames the body by content-length (never more than `length` bytes); a small one is one chunk, used as
    // it comes.
    let first: Buffer | null = null;
    let more: Buffer[] | null = null;
    request.on('data', (chunk: Buffer) => {
      if (first === null) first = chunk;
      else if (more === null) more = [first, chunk];
      else more.push(chunk);
    });
    request.on('end', () => {
      const body = more !== null ? Buffer.concat(more) : (first ?? Buffer.alloc(0));
      answer(request, response, name, rowFilter, body, started);
    });
    // An aborted upload: nothing to answer (the socket is gone).
    request.on('error', () => response.destroy());
    return true;
  };
}
