import { ErrorCode, SluiceError, UnauthorizedError } from '@sluice/core';

/**
 * Longest bearer token accepted (a JWT with generous claims fits; a runaway header does not).
 *
 * @example
 * ```ts
 * parseBearer(`Bearer ${'a'.repeat(MAX_BEARER_LENGTH + 1)}`); // throws UNAUTHORIZED "The bearer token is too long: …"
 * ```
 */
export const MAX_BEARER_LENGTH = 8192;

// Visible ASCII only: a header is read as latin-1, so no other character could match a configured token anyway.
// The length is checked after the form, so an over-long token is refused as too long, not as malformed.
const BEARER = /^Bearer[ \t]+([\x21-\x7E]+)$/i;

/**
 * Reads the token of an `Authorization: Bearer <token>` header (RFC 6750). A missing header is `UNAUTHORIZED`
 * ("A valid bearer token is required"); any other scheme, a repeated header, an empty or non-ASCII token is
 * `UNAUTHORIZED` saying the expected form; a token over {@link MAX_BEARER_LENGTH} characters is `UNAUTHORIZED` saying
 * it is too long, with the limit (`details: { reason: 'too-long', maxLength, length }`). Surrounding whitespace is ignored; checking the token is the
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
  const token = match[1]!;
  if (token.length > MAX_BEARER_LENGTH) throw tooLongTokenError(token.length);
  return token;
}

/** The 401 of a token over {@link MAX_BEARER_LENGTH}: it names the limit, so the caller knows what to change. */
function tooLongTokenError(length: number): SluiceError {
  return new SluiceError({
    code: ErrorCode.UNAUTHORIZED,
    message: `The bearer token is too long: ${length} characters, at most ${MAX_BEARER_LENGTH} are accepted`,
    details: { reason: 'too-long', maxLength: MAX_BEARER_LENGTH, length },
  });
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

/**
 * Latest NumericDate (seconds since 1970) a date can hold: ±8.64e15 ms is the range of an ECMAScript `Date`.
 * Anything beyond is no instant, and an `exp` there (or `1e309`, which JSON parses to Infinity) would read as
 * "never expires".
 */
export const MAX_NUMERIC_DATE = 8.64e12;

/** The registered time claims of a JWT (RFC 7519 § 4.1.4–4.1.6), each a NumericDate when present. */
const TIME_CLAIMS = ['exp', 'nbf', 'iat'] as const;

/** Why `value` is not a NumericDate this server can use, or null when it is one. */
function numericDateProblem(value: unknown): string | null {
  if (typeof value !== 'number')
    return `got ${value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value}`;
  if (!Number.isFinite(value)) return `got ${value}`;
  if (Math.abs(value) > MAX_NUMERIC_DATE) return `got ${value}, beyond any date`;
  return null;
}

/**
 * The expiry of a verified JWT's `claims` (its `exp` as epoch milliseconds), or null when it has none; the one
 * reading both apps make of a token's time claims. `exp`, `nbf` and `iat`, when present, must each be a NumericDate
 * (RFC 7519 § 2: seconds since 1970, fractions allowed) within the range of a date — else `UNAUTHORIZED` (401)
 * naming the claim. The verifier compares them with the clock but lets through an `exp` of `1e309` (Infinity) or
 * `1e300`, which would make a token that never expires: a change feed opened with it would never end.
 *
 * @example
 * ```ts
 * const expiresAt = jwtExpiry(app.jwt.verify(token)); // 1893456000000, null, or throws UNAUTHORIZED
 * ```
 */
export function jwtExpiry(claims: unknown): number | null {
  const record = (typeof claims === 'object' && claims !== null ? claims : {}) as Record<string, unknown>;
  for (const claim of TIME_CLAIMS) {
    if (!Object.hasOwn(record, claim)) continue;
    const problem = numericDateProblem(record[claim]);
    if (problem !== null)
      throw new UnauthorizedError(
        `The bearer token's claim "${claim}" is invalid: it must be a NumericDate (seconds since 1970) within the range of a date, ${problem}`,
      );
  }
  return typeof record.exp === 'number' ? record.exp * 1000 : null;
}
