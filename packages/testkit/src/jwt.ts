import { createHmac } from 'node:crypto';

/**
 * An HS256 JWT with exactly `claims` as its payload, signed with `secret`: what an operator's identity provider
 * issues, for tests of the servers' bearer-token auth (which verify it with the same shared secret). Nothing is
 * added: a test that wants `iat` or `exp` puts it in `claims`.
 *
 * @example
 * ```ts
 * const token = signJwt('a-test-secret-of-32-characters!!', { endpoints: ['items'], exp: Math.floor(Date.now() / 1000) + 60 });
 * await fetch(url, { headers: { authorization: `Bearer ${token}` } });
 * ```
 */
export function signJwt(secret: string, claims: Record<string, unknown>): string {
  return signJwtPayload(secret, JSON.stringify(claims));
}

/**
 * An HS256 JWT whose payload is exactly the JSON text `payload`, signed with `secret`: for claims `JSON.stringify`
 * cannot write (`1e309`, which parses to Infinity; a number written in exponent form).
 *
 * @example
 * ```ts
 * const token = signJwtPayload('a-test-secret-of-32-characters!!', '{"endpoints":"*","exp":1e309}');
 * ```
 */
export function signJwtPayload(secret: string, payload: string): string {
  const part = (text: string) => Buffer.from(text).toString('base64url');
  const head = `${part(JSON.stringify({ alg: 'HS256', typ: 'JWT' }))}.${part(payload)}`;
  return `${head}.${createHmac('sha256', secret).update(head).digest('base64url')}`;
}
