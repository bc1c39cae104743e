import { MalformedJsonError } from '@sluice/core';
import type { FastifyInstance } from 'fastify';
import { EMPTY_BODY_MESSAGE } from './normalize.js';

/**
 * The media types read as JSON: `application/json` and the `+json` structured suffix (RFC 6839).
 *
 * @example
 * ```ts
 * JSON_MEDIA_TYPES.some((type) => (typeof type === 'string' ? type === mediaType : type.test(mediaType)));
 * ```
 */
export const JSON_MEDIA_TYPES = ['application/json', /^application\/[a-z0-9.-]+\+json$/] as const;

/**
 * Parses a JSON body with plain `JSON.parse`: a `"__proto__"` key becomes an ordinary own property, never a
 * prototype, so the route's own parser can refuse reserved keys naming their path instead of a vague
 * "not valid JSON". An empty or malformed body is `MALFORMED_JSON`.
 */
function parseJsonBody(
  _request: unknown,
  body: string | Buffer,
  done: (err: Error | null, value?: unknown) => void,
): void {
  const text = typeof body === 'string' ? body : body.toString('utf8');
  if (text.trim() === '') {
    done(new MalformedJsonError(EMPTY_BODY_MESSAGE), undefined);
    return;
  }
  try {
    done(null, JSON.parse(text));
  } catch (err) {
    done(new MalformedJsonError(`The body is not valid JSON: ${(err as Error).message}`), undefined);
  }
}

/**
 * Makes JSON the only body an instance reads: every other media type is 415 (fastify would otherwise accept
 * `text/plain`), and a body over `bodyLimit` bytes is 413.
 */
export function useJsonBodies(app: FastifyInstance, bodyLimit: number): void {
  app.removeAllContentTypeParsers();
  for (const mediaType of JSON_MEDIA_TYPES)
    app.addContentTypeParser(mediaType, { parseAs: 'string', bodyLimit }, parseJsonBody);
}
