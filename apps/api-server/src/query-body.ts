/**
 * The body of a query or a count as core's parsers are given it. Both routes read it (the fastify routes in app.ts,
 * the fast query route through `queryPage`), so a body answers the same whichever of them takes the request.
 */
import { InvalidQueryError } from '@sluice/core';

/** What a JSON value that is not an object is, for the message. */
function kindOf(value: unknown): string {
  if (value === null) return 'null';
  return Array.isArray(value) ? 'array' : typeof value;
}

/**
 * `body` when it is a JSON object, `undefined` when there is none (no content type: the empty query); anything
 * else is `400 INVALID_QUERY` at `(root)`. core's parsers read a missing body as `{}` and so would read `null` too
 * — a request that sent `null` got a first page, or a count of everything, instead of an error.
 *
 * @example
 * ```ts
 * parseQuery(queryBody(request.body), limits);
 * queryBody(null); // throws INVALID_QUERY: the body must be a JSON object
 * ```
 */
export function queryBody(body: unknown): object | undefined {
  if (body === undefined || (typeof body === 'object' && body !== null && !Array.isArray(body))) return body;
  throw new InvalidQueryError('Invalid query: the body must be a JSON object', [
    { path: '(root)', message: `expected an object, received ${kindOf(body)}` },
  ]);
}
