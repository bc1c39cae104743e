import { createHash, timingSafeEqual } from 'node:crypto';
import { UnauthorizedError } from '@sluice/core';
import { jwtExpiry, parseBearer, tokenClient } from '@sluice/http';

/** How a control-API caller proves who it is: a fixed token list and/or HS256 JWTs. */
export interface AuthSettings {
  tokens?: string[];
  jwtSecret?: string;
}

/**
 * What an accepted token grants: until when (epoch ms; `null` for a listed token or a JWT without `exp`) — a request
 * that lasts, the endpoint stream, ends then, as any request after it would be refused — and who holds it.
 */
export interface BearerGrant {
  expiresAt: number | null;
  /**
   * The client the token identifies (`@sluice/http`'s `tokenClient`: `sub:<sub>`, else `jti:<jti>`, else a hash of
   * the token), whose endpoint streams count against `control.maxStreamsPerClient`. A renewed JWT of one subject is
   * the same client; each listed token is its own.
   */
  client: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The grant of the request's bearer token (`null` when control auth is off or the path is open). */
    bearerGrant: BearerGrant | null;
  }
}

const digest = (value: string) => createHash('sha256').update(value).digest();

/**
 * Builds the bearer-token check: `verifyJwt` is given the token when it is not in the list, and answers its grant,
 * `null` when it is not valid, or throws the 401 that says why (`@sluice/http`'s `expiredTokenError`). Comparison of listed
 * tokens is constant-time. A listed token does not expire (the list changes with a restart, which ends every
 * connection anyway).
 *
 * @example
 * ```ts
 * const check = bearerCheck({ tokens: ['a-long-random-token-1234'] }, async () => null);
 * await check('Bearer a-long-random-token-1234'); // resolves { expiresAt: null, client: 'token:…' }
 * ```
 */
export function bearerCheck(
  settings: AuthSettings,
  verifyJwt: ((token: string) => Promise<BearerGrant | null>) | null,
): (authorization: string | string[] | undefined) => Promise<BearerGrant> {
  const allowed = (settings.tokens ?? []).map(digest);
  return async (authorization) => {
    const token = parseBearer(authorization);
    const candidate = digest(token);
    if (allowed.some((known) => timingSafeEqual(known, candidate)))
      return { expiresAt: null, client: tokenClient(token, null) };
    const grant = verifyJwt ? await verifyJwt(token) : null;
    if (grant) return grant;
    throw new UnauthorizedError('The bearer token is not valid');
  };
}

/**
 * The grant of a verified JWT (`token`) from its claims: `exp` (seconds) as epoch ms, and its client. A time claim
 * that is no usable NumericDate (an `exp` of 1e309, which parses to Infinity) is `UNAUTHORIZED` naming it
 * (`@sluice/http`'s `jwtExpiry`), never a grant that does not expire.
 */
export function jwtGrant(token: string, claims: unknown): BearerGrant {
  return { expiresAt: jwtExpiry(claims), client: tokenClient(token, claims) };
}
