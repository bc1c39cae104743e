/**
 * Point lookups answered below fastify. A lookup is the cheapest thing the api-server does (one LMDB get of
 * stored bytes), so fastify's per-request machinery (routing, hooks, the reply object, its promise) was most of
 * its cost: 23 µs of user CPU per lookup against 11 µs for a bare fastify route returning a fixed record. The
 * http server hands each request to {@link FastRoute} first; it answers only the plain successful case and
 * otherwise leaves the request untouched for fastify, which then handles it in full. Why and what was measured:
 * docs/performance.md § Lookups below fastify.
 *
 * Only these are answered here: `GET /v1/endpoints/<name>/records/<key>` with no query string, no
 * `sluice-min-position` (that may wait), no `origin` when CORS is on (the CORS plugin's headers), a token the
 * endpoint accepts, and a record that exists for it. Everything else — errors above all (401, 403, 404, 400,
 * 503 while stopping) — goes to the fastify route, so problem details, CORS and auth have one definition.
 */
import type { CheckpointStamps } from './checkpoint-headers.js';
import type { EndpointAccess } from './endpoint-access.js';
import { type FastRoute, leftToFastify, okHeaders } from './fast-route.js';
import type { RecordReader } from './record-read.js';
import type { EndpointRegistry } from './registry.js';
import type { RequestRecorder } from './request-metrics.js';
import type { Lease } from './serving-table.js';

/** The fastify route pattern the fast lookups stand in for (their metrics label). */
export const LOOKUP_ROUTE = '/v1/endpoints/:name/records/:key';

// Endpoint names with characters a URL would percent-encode are left to fastify (it decodes route params).
const LOOKUP_PATH = /^\/v1\/endpoints\/([A-Za-z0-9_.-]{1,256})\/records\/([^/?#]+)$/;

export interface FastLookupOptions {
  registry: EndpointRegistry;
  access: Pick<EndpointAccess, 'rowFilterFor' | 'rowFilterFits'>;
  readRecord: RecordReader;
  headersOf: CheckpointStamps['headersOf'];
  record: RequestRecorder;
  /** CORS is configured: requests with an `origin` go to fastify (the CORS plugin answers them). */
  cors: boolean;
  /** True once the server is shutting down: fastify refuses requests then (503 NODE_SHUTTING_DOWN). */
  isStopping: () => boolean;
}

/**
 * The fast lookup route of one application.
 *
 * @example
 * ```ts
 * const fast = fastLookupRoute({ registry, access, readRecord, headersOf, record, cors: false, isStopping });
 * http.createServer((req, res) => { if (!fast(req, res)) fastifyHandler(req, res); });
 * ```
 */
export function fastLookupRoute(options: FastLookupOptions): FastRoute {
  const { registry, access, readRecord, headersOf, record, cors, isStopping } = options;
  return (request, response) => {
    if (request.method !== 'GET' || isStopping()) return false;
    const match = LOOKUP_PATH.exec(request.url ?? '');
    if (match === null) return false;
    const headers = request.headers;
    if (leftToFastify(request, cors)) return false;
    const started = performance.now();
    const name = match[1]!;
    let lease: Lease | undefined;
    let raw: string[];
    let body: Uint8Array;
    try {
      const rowFilter = access.rowFilterFor(headers.authorization, name);
      lease = registry.acquire(name);
      // A token whose row filter does not fit the endpoint is fastify's to refuse (403).
      if (!access.rowFilterFits(lease, rowFilter)) return false;
      const { state, bytes } = readRecord(lease, match[2]!, rowFilter);
      if (bytes === undefined) return false;
      raw = okHeaders(lease.generation.name, headersOf(state), bytes.length);
      body = bytes;
    } catch {
      // Whatever failed (token, unknown endpoint, key, a generation closing under a switch) fastify's route
      // meets again and answers as the problem it is.
      return false;
    } finally {
      lease?.release();
    }
    // Nothing is written before this point, so every `return false` above leaves the response untouched.
    response.writeHead(200, raw);
    response.end(body);
    record(LOOKUP_ROUTE, name, 200, performance.now() - started);
    return true;
  };
}
