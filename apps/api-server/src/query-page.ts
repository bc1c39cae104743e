/**
 * One page of a query, as both query routes answer it (the fastify route in app.ts and the fast route in
 * fast-query.ts): the parsed body checked by core's query parser with the configured limits, the cursor unwrapped
 * for the leased generation, the token's row filter passed beside the caller's filter (the cache checks each on its
 * own, then ANDs them), and the records' stored bytes framed as the response body with the cursor wrapped for that
 * generation — sealed under a row filter (position-seal.ts: a cursor may point at a record the reader may not see).
 */
import { type Filter, InternalError, type JsonPage, parseQuery, type QueryLimits } from '@sluice/core';
import { unwrapCursor } from './cursor.js';
import { pageFrame, sealedPageFrame } from './page-body.js';
import type { PositionSeal } from './position-seal.js';
import { queryBody } from './query-body.js';
import type { Lease } from './serving-table.js';

/**
 * The page `body` asks for, read in one snapshot of the leased generation (its commit state is `page.state`).
 *
 * @example
 * ```ts
 * const page = queryPage(lease, JSON.parse(text), rowFilter, limits, seal);
 * response.end(page.json); // {"records":[…],"next":…}
 * ```
 */
export function queryPage(
  lease: Lease,
  body: unknown,
  rowFilter: Filter | undefined,
  limits: QueryLimits,
  /** Seals the cursors of row-filtered readers (null when auth is off: then there are no row filters). */
  seal: PositionSeal | null,
): JsonPage {
  const generation = lease.generation.name;
  const query = parseQuery(queryBody(body), limits);
  // The row filter goes apart from the caller's $filter (core's ReadScope): checked on its own and ANDed in by the
  // cache, so the caller's query is held to the limits and named at the paths it was written with.
  if (rowFilter === undefined) {
    if (query.after !== null) query.after = unwrapCursor(query.after, generation, { seal, required: false });
    return lease.cache.queryJson(query, pageFrame(generation));
  }
  // Fails closed: a row filter comes from a verified token, so a server with row filters has a secret to seal with.
  if (seal === null) throw new InternalError('a row-filtered query needs the cursor seal (api.auth)');
  if (query.after !== null) query.after = unwrapCursor(query.after, generation, { seal, required: true });
  return lease.cache.queryJson(query, sealedPageFrame(generation, seal), { rowFilter });
}
