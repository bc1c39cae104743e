import { ErrorCode, SluiceError, UnauthorizedError } from '@sluice/core';

/**
 * Longest bearer token accepted (a JWT with generous claims fits; a runaway header does not).
 *
 * @example
 * ```ts
 * parseBearer(`Bearer ${'a'.repeat(MAX_BEARER_LENGTH + 1)}`); // throws UNAUTHORIZED
 * ```
 */
export const MAX_BEARER_LENGTH = 8192;

// Visible ASCII only: a header is read as latin-1, so no other character could match a configured token anyway.
const BEARER = new RegExp(`^Bearer[ \\t]+([\\x21-\\x7E]{1,${MAX_BEARER_LENGTH}})$`, 'i');

/**
 * Reads the token of an `Authorization: Bearer <token>` header (RFC 6750). A missing header is `UNAUTHORIZED`
 * ("A valid bearer token is required"); any other scheme, a repeated header, an empty, over-long or non-ASCII
 * token is `UNAUTHORIZED` saying the expected form. Surrounding whitespace is ignored; checking the token is the
 * caller's job.
 *
 * @example
 * ```ts
 * const token = parseBearer(request.headers.authorization); // 'eyJhbGciOi…' or throws UNAUTHORIZED
 * ```
 */
export function parseBearer(header: string | string[] | undefined): string {
  if (header === undefined || header === '') throw new UnauthorizedError();
  const match = typeof header === 'string' ? BEARER.exec(header.trim()) : null;
  if (!match) throw new UnauthorizedError('The Authorization header must be "Bearer <token>"');
  return match[1]!;
}

/**
 * One definition for both apps' 401s (control API and query API).
 */
/**
 * The 401 of a JWT past its `exp`: said to be expired (`reason: "expired"` in the problem body), so a caller — the
 * console reloaded with yesterday's token, a client whose feed ended at `exp` — can ask for a renewed token rather than report a refused one. Whether
 * a token expired says nothing a caller could not read from the token itself.
 *
 * @example
 * ```ts
 * try { app.jwt.verify(token) } catch (err) { if (isExpiredJwt(err)) throw expiredTokenError(); }
 * ```
 */
export function expiredTokenError(): SluiceError {
  return new SluiceError({
    code: ErrorCode.UNAUTHORIZED,
    message: 'The bearer token is not valid: expired',
    details: { reason: 'expired' },
  });
}

/** True for the error fast-jwt (`@fastify/jwt`, the api-server's verifier) throws for a token past its `exp`. */
export function isExpiredJwt(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === 'FAST_JWT_EXPIRED';
}
