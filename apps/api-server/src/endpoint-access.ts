/**
 * Who may read an endpoint, and a lease on what they read: the bearer token's scope, the endpoint check, the
 * token's row filter, and — with `sluice-min-position` — waiting until the leased generation has committed that
 * position. Every endpoint route and the change feed go through here. Moved out of app.ts.
 */
import { checkRowFilter } from '@sluice/cache';
import {
  type Filter,
  ForbiddenError,
  PositionNotReachedError,
  type QueryLimits,
  type ReadableCache,
  SluiceError,
  ValidationError,
} from '@sluice/core';
import { addressClient } from '@sluice/http';
import type { FastifyRequest } from 'fastify';
import { OPEN_SCOPE, type TokenAuthenticator, type TokenScope } from './auth.js';
import type { FeedGrant } from './changes/plugin.js';
import { CommitSignal } from './commit-signal.js';
import {
  bareMismatch,
  formatPositionHeader,
  MIN_POSITION_HEADER,
  parseMinPosition,
  positionReached,
  unreachablePosition,
} from './freshness.js';
import type { EndpointRegistry } from './registry.js';
import type { Lease } from './serving-table.js';

declare module 'fastify' {
  interface FastifyRequest {
    sluiceScope?: TokenScope;
    sluiceEndpoint?: string;
  }
}

/** A lease on an endpoint's current generation (the caller releases it) and the token's row filter for it. */
export interface OpenedEndpoint {
  lease: Lease;
  rowFilter: Filter | undefined;
}

export interface EndpointAccess {
  /** The request's token scope (everything when auth is off). */
  scopeOf(request: FastifyRequest): TokenScope;
  /** Auth check on endpoint `name`; returns the token's row filter for it. */
  authorize(request: FastifyRequest, name: string): Filter | undefined;
  /**
   * The same check for a change feed: the row filter, when the token expires (the feed ends then) and who the
   * client is (its feeds count against `api.changes.maxPerClient`).
   */
  authorizeFeed(request: FastifyRequest, name: string): FeedGrant;
  /** The same check for a bare `authorization` header (requests answered below fastify: fast-lookup.ts). */
  rowFilterFor(authorization: string | string[] | undefined, name: string): Filter | undefined;
  /**
   * Whether a token's row filter fits the leased generation's fields (names fields it has, with operands of their
   * types); a lease whose filter does not is refused 403 by `open`.
   */
  rowFilterFits(lease: Lease, rowFilter: Filter | undefined): boolean;
  /** Auth check + lease on the endpoint's current generation (the caller releases it). */
  open(request: FastifyRequest, name: string): OpenedEndpoint;
  /**
   * `open`, and with `sluice-min-position` only once the leased generation has committed that position: woken by
   * the shared {@link CommitSignal} (a 1 ms look at the commit state while anyone waits) up to
   * `api.freshnessWaitMs`, then 503 POSITION_NOT_REACHED.
   */
  openFresh(request: FastifyRequest, name: string): Promise<OpenedEndpoint>;
  /**
   * The wait of `openFresh` on a lease the caller holds (the change feed's): resolves with a lease on a generation
   * that has committed the request's `sluice-min-position` (`lease` itself without the header, or when it already
   * has; else a lease taken after the wait, `lease` released), or throws — 400 for a malformed or unreachable
   * position, 503 POSITION_NOT_REACHED after `api.freshnessWaitMs`, 403 when `rowFilter` (the token's) does not
   * fit a generation the wait moved to — having released every lease it held.
   */
  awaitPosition(
    request: FastifyRequest,
    name: string,
    lease: Lease,
    rowFilter: Filter | undefined,
  ): Promise<Lease>;
}

/**
 * The access checks of one application: `authenticator` is null when auth is off.
 *
 * @example
 * ```ts
 * const access = endpointAccess({ registry, authenticator, freshnessWaitMs: config.api.freshnessWaitMs, limits });
 * const { lease, rowFilter } = await access.openFresh(request, 'items');
 * try { ... } finally { lease.release(); }
 * ```
 */
export function endpointAccess(options: {
  registry: EndpointRegistry;
  authenticator: TokenAuthenticator | null;
  freshnessWaitMs: number;
  /** The query limits the authenticator read the token's claims with (a row filter is held to them). */
  limits: QueryLimits;
}): EndpointAccess {
  const { registry, authenticator, freshnessWaitMs, limits } = options;
  const commits = new CommitSignal((alias) => registry.current(alias)?.cache ?? null);
  const scopeOf = (request: FastifyRequest): TokenScope => {
    if (!authenticator) return OPEN_SCOPE;
    const scope = authenticator.authenticate(request.headers.authorization);
    request.sluiceScope = scope;
    return scope;
  };
  const rowFilterIn = (scope: TokenScope, name: string): Filter | undefined => {
    authenticator?.authorize(scope, name);
    return scope.rowFilter(name);
  };
  const authorize = (request: FastifyRequest, name: string): Filter | undefined => {
    request.sluiceEndpoint = name;
    return rowFilterIn(scopeOf(request), name);
  };
  const authorizeFeed = (request: FastifyRequest, name: string): FeedGrant => {
    const rowFilter = authorize(request, name);
    const scope = request.sluiceScope;
    const client = scope?.client ?? addressClient(request.socket.remoteAddress);
    return { rowFilter, expiresAt: scope?.expiresAt ?? null, client };
  };
  const rowFilterFor = (authorization: string | string[] | undefined, name: string): Filter | undefined =>
    rowFilterIn(authenticator ? authenticator.authenticate(authorization) : OPEN_SCOPE, name);
  const open = (request: FastifyRequest, name: string): OpenedEndpoint => {
    const rowFilter = authorize(request, name);
    const lease = registry.acquire(name);
    try {
      assertRowFilterFits(lease, rowFilter, name, limits);
    } catch (err) {
      lease.release();
      throw err;
    }
    return { lease, rowFilter };
  };
  const awaitPosition = async (
    request: FastifyRequest,
    name: string,
    held: Lease,
    rowFilter: Filter | undefined,
  ): Promise<Lease> => {
    const header = request.headers[MIN_POSITION_HEADER];
    if (header === undefined) return held;
    let lease = held;
    try {
      const wanted = parseMinPosition(Array.isArray(header) ? header.join(', ') : header);
      const deadline = Date.now() + freshnessWaitMs;
      for (;;) {
        // Each generation the wait looks at, not only the first: a switch meanwhile may have moved the alias to
        // one whose fields the token's row filter does not fit, and that is the 403 a request without the wait
        // gets, not a query error nor a lookup that finds nothing (memoized per filter and schema: cheap).
        assertRowFilterFits(lease, rowFilter, name, limits);
        // servingState: the memoized state of the latest commit (decoded once per commit, not per look).
        const state = lease.cache.servingState();
        const checkpoint = state.checkpoint;
        if (positionReached(checkpoint, wanted)) return lease;
        const unreachable = unreachablePosition(checkpoint, wanted);
        if (unreachable !== null)
          throw new ValidationError(`Endpoint "${name}": ${unreachable}`, [
            { path: `headers.${MIN_POSITION_HEADER}`, message: unreachable },
          ]);
        if (bareMismatch(checkpoint, wanted))
          throw new ValidationError(
            `Endpoint "${name}" has several sources: name them in ${MIN_POSITION_HEADER}`,
            [
              {
                path: `headers.${MIN_POSITION_HEADER}`,
                message: 'a bare position needs a one-source endpoint',
              },
            ],
          );
        const remaining = deadline - Date.now();
        if (remaining <= 0)
          throw new PositionNotReachedError(
            `Endpoint "${name}" has not committed ${MIN_POSITION_HEADER} ${String(header).slice(0, 200)} within ${freshnessWaitMs} ms (it is at ${formatPositionHeader(checkpoint) ?? 'no position'})`,
            Math.max(1, Math.ceil(freshnessWaitMs / 1000)),
          );
        // Not holding the generation while waiting (a switch may retire it); woken at its next commit or switch.
        const seen = { cache: lease.cache, state };
        lease.release();
        await commits.next(name, seen, remaining);
        lease = registry.acquire(name);
      }
    } catch (err) {
      lease.release();
      throw err;
    }
  };
  const openFresh = async (request: FastifyRequest, name: string): Promise<OpenedEndpoint> => {
    const opened = open(request, name);
    return { ...opened, lease: await awaitPosition(request, name, opened.lease, opened.rowFilter) };
  };
  const rowFilterFits = (lease: Lease, rowFilter: Filter | undefined) =>
    rowFilter === undefined || rowFilterProblem(lease.cache, rowFilter, limits) === null;
  return {
    scopeOf,
    authorize,
    authorizeFeed,
    rowFilterFor,
    rowFilterFits,
    open,
    openFresh,
    awaitPosition,
  };
}

/**
 * Per row filter (a cached token's scope hands out the same object) and generation schema: why it does not fit, or
 * null. Keyed by the schema object, not the generation: a generation's schema gains fields (a column added to its
 * source), and a filter naming one fits from then on.
 */
const rowFilterProblems = new WeakMap<Filter, WeakMap<object, string | null>>();

function rowFilterProblem(cache: ReadableCache, rowFilter: Filter, limits: QueryLimits): string | null {
  let bySchema = rowFilterProblems.get(rowFilter);
  if (bySchema === undefined) {
    bySchema = new WeakMap();
    rowFilterProblems.set(rowFilter, bySchema);
  }
  const schema = cache.schema;
  const known = bySchema.get(schema);
  if (known !== undefined) return known;
  let problem: string | null = null;
  try {
    // As queries check it (the cache's `checkRowFilter`): a filter that fits here never fails a query.
    checkRowFilter(rowFilter, schema, limits);
  } catch (err) {
    if (!SluiceError.isInstance(err)) throw err;
    problem = err.message;
  }
  bySchema.set(schema, problem);
  return problem;
}

/**
 * Refuses (403) a token whose row filter does not fit the endpoint's fields: the filter is the token issuer's,
 * not the caller's, so it is neither the caller's 400 nor silently a view of nothing.
 *
 * @example
 * ```ts
 * const lease = registry.acquire(name);
 * assertRowFilterFits(lease, rowFilter, name, limits); // throws FORBIDDEN
 * ```
 */
export function assertRowFilterFits(
  lease: Lease,
  rowFilter: Filter | undefined,
  name: string,
  limits: QueryLimits,
): void {
  assertRowFilterFitsIn(lease.cache, rowFilter, name, limits);
}

/** {@link assertRowFilterFits} for a generation held otherwise (a change feed following one the alias left). */
export function assertRowFilterFitsIn(
  cache: ReadableCache,
  rowFilter: Filter | undefined,
  name: string,
  limits: QueryLimits,
): void {
  if (rowFilter === undefined) return;
  const problem = rowFilterProblem(cache, rowFilter, limits);
  if (problem !== null)
    throw new ForbiddenError(
      `The bearer token's row filter does not fit endpoint "${name}" (${problem}); ask for a token whose filter names its fields`,
    );
}
