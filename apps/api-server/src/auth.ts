import {
  andFilters,
  type Filter,
  ForbiddenError,
  parseFilter,
  type QueryLimits,
  refuseProtoKey,
  SluiceError,
  UnauthorizedError,
} from '@sluice/core';
import { expiredTokenError, isExpiredJwt, jwtExpiry, parseBearer, tokenClient } from '@sluice/http';
import { z } from 'zod';

/** Why a claim holding an own `__proto__` key is refused. */
const PROTO_KEY = 'it holds a "__proto__" key, which names no field or endpoint';

/**
 * The claims an api-server token carries (HS256 JWT signed with `api.auth.jwtSecret`):
 * - `endpoints`: the endpoints it may read, or `"*"` for all;
 * - `filter`: an optional row filter ANDed into every query of every endpoint;
 * - `filters`: optional row filters per endpoint name, ANDed as well.
 *
 * @example
 * ```json
 * { "sub": "eu-analyst", "endpoints": ["orders"], "filters": { "orders": { "region": "eu" } }, "exp": 1893456000 }
 * ```
 */
export const TokenClaimsSchema = z.object({
  endpoints: z.union([z.literal('*'), z.array(z.string().min(1).max(256)).max(1024)]),
  // A record skips an own `__proto__` key (JSON may hold one): skipped, `{"__proto__": {…}}` read as the empty filter
  // — every record. Refused instead (claimsProblem names the claim); deeper keys are core's parseFilter's to refuse.
  filter: refuseProtoKey(z.record(z.string(), z.unknown()), PROTO_KEY).optional(),
  filters: refuseProtoKey(
    z.record(z.string(), refuseProtoKey(z.record(z.string(), z.unknown()), PROTO_KEY)),
    PROTO_KEY,
  ).optional(),
});
export type TokenClaims = z.output<typeof TokenClaimsSchema>;

/** What a verified token lets a request do. */
export interface TokenScope {
  readonly subject: string | null;
  /**
   * Who holds the token, for per-client bounds (`api.changes.maxPerClient`): `sub:<sub>`, else `jti:<jti>`, else a
   * hash of the token itself; null without auth (the caller is then its remote address). A renewed token of one
   * subject is the same client.
   */
  readonly client: string | null;
  allows(endpoint: string): boolean;
  /** The row filter to AND into queries of `endpoint` (`undefined` when none). */
  rowFilter(endpoint: string): Filter | undefined;
  /** When the token expires (its `exp`, epoch ms), or null: a change feed opened with it ends then. */
  readonly expiresAt: number | null;
}

/** Everything, for servers running without auth. */
export const OPEN_SCOPE: TokenScope = {
  subject: null,
  client: null,
  allows: () => true,
  rowFilter: () => undefined,
  expiresAt: null,
};

function scopeOf(
  claims: TokenClaims,
  subject: string | null,
  client: string,
  limits: QueryLimits,
  expiresAt: number | null,
): TokenScope {
  const all = claims.endpoints === '*';
  const allowed = new Set(all ? [] : (claims.endpoints as string[]));
  const common = claims.filter ? parseFilter(claims.filter, limits) : undefined;
  const perEndpoint = new Map<string, Filter | undefined>();
  for (const [endpoint, filter] of Object.entries(claims.filters ?? {}))
    perEndpoint.set(endpoint, andFilters(common, parseFilter(filter, limits)));
  const commonOnly = common === undefined ? undefined : andFilters(common);
  return {
    subject,
    client,
    allows: (endpoint) => all || allowed.has(endpoint),
    rowFilter: (endpoint) => (perEndpoint.has(endpoint) ? perEndpoint.get(endpoint) : commonOnly),
    expiresAt,
  };
}

/**
 * Turns an `Authorization` header into a {@link TokenScope}: no or malformed header, bad signature, expired
 * token or claims that are not Sluice claims → `UNAUTHORIZED` (401). Verified scopes are cached per token.
 *
 * @example
 * ```ts
 * const auth = new TokenAuthenticator((token) => app.jwt.verify(token), limits);
 * const scope = auth.authenticate(request.headers.authorization);
 * auth.authorize(scope, 'items'); // throws FORBIDDEN when out of scope
 * ```
 */
export class TokenAuthenticator {
  private readonly cache = new Map<string, { scope: TokenScope; expiresAt: number }>();

  constructor(
    private readonly verify: (token: string) => unknown,
    private readonly limits: QueryLimits,
    private readonly maxCached = 10_000,
  ) {}

  authenticate(header: string | string[] | undefined): TokenScope {
    const token = parseBearer(header);
    const cached = this.cache.get(token);
    if (cached && cached.expiresAt > Date.now()) return cached.scope;
    let payload: unknown;
    try {
      payload = this.verify(token);
    } catch (err) {
      // Expired says so where a client reads it (`reason`), as the control API does; the rest only in the text.
      if (isExpiredJwt(err)) throw expiredTokenError();
      // The verifier refuses a time claim it cannot read (a string `exp`, or a `nbf` of 1e309: a RangeError with no
      // code) without naming it; the token's own claims say which one — read unverified, only to name it.
      if (refusedClaim(err)) jwtExpiry(unverifiedClaims(token));
      throw new UnauthorizedError(`The bearer token is not valid: ${tokenProblem(err)}`);
    }
    const claims = TokenClaimsSchema.safeParse(payload);
    if (!claims.success) throw new UnauthorizedError(claimsProblem(payload, claims.error));
    // An `exp` of 1e309 (Infinity) or past any date passes the verifier: refused here, not kept as "never expires".
    const expiresAt = jwtExpiry(payload);
    let scope: TokenScope;
    try {
      const sub = (payload as { sub?: unknown }).sub;
      const subject = typeof sub === 'string' ? sub : null;
      scope = scopeOf(claims.data, subject, tokenClient(token, payload), this.limits, expiresAt);
    } catch (err) {
      if (SluiceError.isInstance(err))
        throw new UnauthorizedError(`The bearer token's row filter is invalid: ${err.message}`);
      throw err;
    }
    // Cached at most 60 s and never past the token's own expiry.
    const cachedUntil = Math.min(Date.now() + 60_000, expiresAt ?? Number.POSITIVE_INFINITY);
    if (this.cache.size >= this.maxCached) this.cache.clear();
    this.cache.set(token, { scope, expiresAt: cachedUntil });
    return scope;
  }

  /** Throws `FORBIDDEN` (403) when the scope does not include `endpoint`. */
  authorize(scope: TokenScope, endpoint: string): void {
    if (!scope.allows(endpoint))
      throw new ForbiddenError(`The token does not grant access to endpoint "${endpoint}"`);
  }
}

const FILTER_OBJECT = 'it must be a filter object (e.g. {"region": "eu"})';

/** What a claim's value is, for a message: `null`, `array`, or its `typeof`. */
function kindOf(value: unknown): string {
  if (value === null) return 'null';
  return Array.isArray(value) ? 'array' : typeof value;
}

/**
 * Why verified claims are not Sluice claims, naming the claim that is wrong (`endpoints`, `filter`, `filters` or
 * `filters.<endpoint>`): the token's issuer has to fix that claim, and a message naming another one sends them to
 * look in the wrong place.
 */
function claimsProblem(payload: unknown, error: z.ZodError): string {
  const path = error.issues[0]?.path ?? [];
  const claims = (typeof payload === 'object' && payload !== null ? payload : {}) as Record<string, unknown>;
  const invalid = (claim: string, rule: string, value: unknown) =>
    `The bearer token's claim "${claim}" is invalid: ${rule}, got ${kindOf(value)}`;
  if (path.length > 1 && path[path.length - 1] === '__proto__') {
    const claim = path
      .slice(0, -1)
      .map((part) => String(part).slice(0, 64))
      .join('.');
    return `The bearer token's claim "${claim}" is invalid: ${PROTO_KEY}`;
  }
  if (path[0] === 'filter') return invalid('filter', FILTER_OBJECT, claims.filter);
  if (path[0] === 'filters') {
    if (path.length === 1)
      return invalid('filters', 'it must be an object of endpoint name → filter object', claims.filters);
    const endpoint = String(path[1]);
    return invalid(
      `filters.${endpoint.slice(0, 64)}`,
      FILTER_OBJECT,
      (claims.filters as Record<string, unknown>)[endpoint],
    );
  }
  return 'The bearer token does not carry Sluice claims: claim "endpoints" must be "*" or a list of endpoint names';
}

/** Whether the verifier refused a claim's value or type — or failed reading one (no code of its own). */
function refusedClaim(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return (
    code === undefined || code === 'FAST_JWT_INVALID_CLAIM_TYPE' || code === 'FAST_JWT_INVALID_CLAIM_VALUE'
  );
}

/** The payload of a compact JWT as sent, not verified; `{}` when it is not a JSON object. */
function unverifiedClaims(token: string): unknown {
  try {
    return JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8'));
  } catch {
    return {};
  }
}

function tokenProblem(err: unknown): string {
  const code = (err as { code?: unknown }).code;
  // fast-jwt's own words name the claim ("The exp claim must be a number.").
  if (code === 'FAST_JWT_INVALID_CLAIM_TYPE') return String((err as Error).message);
  if (code === 'FAST_JWT_EXPIRED') return 'expired';
  if (code === 'FAST_JWT_INVALID_SIGNATURE') return 'bad signature';
  if (code === 'FAST_JWT_INVALID_ALGORITHM') return 'algorithm not allowed';
  if (code === 'FAST_JWT_INACTIVE') return 'not active yet';
  if (code === 'FAST_JWT_INVALID_CLAIM_VALUE' || code === 'FAST_JWT_MISSING_REQUIRED_CLAIM')
    return 'issuer or audience not accepted';
  return 'malformed';
}
