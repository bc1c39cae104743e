/**
 * What the routes answered below fastify (fast-lookup.ts, fast-query.ts) share: their signature, the requests every
 * one of them leaves to fastify, and the headers of a successful answer — one definition, so a lookup and a page
 * answered below fastify carry exactly what fastify's routes would (docs/performance.md § Lookups below fastify).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { headerLinesProblem } from '@sluice/http';
import { CACHE_HEADER, CHECKPOINT_HEADER, type CheckpointHeaderValues } from './checkpoint-headers.js';
import { MIN_POSITION_HEADER, POSITION_HEADER } from './freshness.js';

/** Answers the request and returns true, or returns false having written nothing (fastify answers it). */
export type FastRoute = (request: IncomingMessage, response: ServerResponse) => boolean;

const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

/**
 * True when fastify must answer a request whatever it asks: `sluice-min-position` (the answer may wait for a
 * commit), no `Host` (refused as a problem in HTTP/1.1), header lines `@sluice/http` refuses (two `Host`,
 * `Content-Type` or `Authorization` lines, an `Expect` other than 100-continue: `headerLinesProblem`) and, while CORS
 * is configured, an `origin` (the CORS plugin's headers).
 *
 * @example
 * ```ts
 * if (request.method !== 'GET' || leftToFastify(request, cors)) return false;
 * ```
 */
export function leftToFastify(request: IncomingMessage, cors: boolean): boolean {
  const headers = request.headers;
  return (
    headers[MIN_POSITION_HEADER] !== undefined ||
    headers.host === undefined ||
    (cors && headers.origin !== undefined) ||
    headerLinesProblem(headers, request.rawHeaders) !== null
  );
}

/**
 * The headers of a 200 carrying `length` bytes of JSON read from `generation` at the commit `checkpoint` describes,
 * as `writeHead` takes them (name, value, …).
 *
 * @example
 * ```ts
 * response.writeHead(200, okHeaders(lease.generation.name, headersOf(state), bytes.length));
 * ```
 */
export function okHeaders(generation: string, checkpoint: CheckpointHeaderValues, length: number): string[] {
  const raw = [CACHE_HEADER, generation, CHECKPOINT_HEADER, checkpoint.header];
  if (checkpoint.position !== null) raw.push(POSITION_HEADER, checkpoint.position);
  raw.push('content-type', JSON_CONTENT_TYPE, 'content-length', String(length));
  return raw;
}
