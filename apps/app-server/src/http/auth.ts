import { createHash, timingSafeEqual } from 'node:crypto';
import { UnauthorizedError } from '@sluice/core';
import { parseBearer } from '@sluice/http';

/** How a control-API caller proves who it is: a fixed token list and/or HS256 JWTs. */
export interface AuthSettings {
  tokens?: string[];
  jwtSecret?: string;
}

const digest = (value: string) => createHash('sha256').update(value).digest();

/**
 * Builds the bearer-token check: `verifyJwt` is given the token when it is not in the list. Comparison of
 * listed tokens is constant-time.
 *
 * @example
 * ```ts
 * const check = bearerCheck({ tokens: ['a-long-random-token-1234'] }, async () => false);
 * await check('Bearer a-long-random-token-1234'); // resolves
 * ```
 */
export function bearerCheck(
  settings: AuthSettings,
  verifyJwt: ((token: string) => Promise<boolean>) | null,
): (authorization: string | string[] | undefined) => Promise<void> {
  const allowed = (settings.tokens ?? []).map(digest);
  return async (authorization) => {
    const token = parseBearer(authorization);
    const candidate = digest(token);
    if (allowed.some((known) => timingSafeEqual(known, candidate))) return;
    if (verifyJwt && (await verifyJwt(token))) return;
    throw new UnauthorizedError('The bearer token is not valid');
  };
}
