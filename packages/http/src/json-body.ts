import { isUtf8 } from 'node:buffer';
import { MalformedJsonError, UnsupportedMediaTypeError } from '@sluice/core';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { EMPTY_BODY_MESSAGE } from './normalize.js';

/**
 * The media types read as JSON: `application/json` and the `+json` structured suffix (RFC 6839). fastify tests a
 * pattern against the whole header (parameters included), so the suffix may be followed by parameters: their charset
 * is {@link refusedJsonCharset}'s to judge, not a reason to refuse a `+json` body as not JSON.
 *
 * @example
 * ```ts
 * JSON_MEDIA_TYPES.some((type) => (typeof type === 'string' ? type === mediaType : type.test(mediaType)));
 * ```
 */
export const JSON_MEDIA_TYPES = ['application/json', /^application\/[a-z0-9.-]+\+json(?:;|$)/] as const;

/**
 * The text of a JSON body: its bytes decoded as UTF-8, or `MALFORMED_JSON` when they are not UTF-8 — never U+FFFD
 * read in their place (`Buffer#toString` alone does): JSON text is UTF-8 (RFC 8259 § 8.1), and a replaced byte
 * changes what a filter means — `{"$ne": "<0xFF>"}` would match every record. A byte order mark is kept, so
 * JSON.parse refuses it as before. (`isUtf8` is a vectorized check, so the query route's hot path pays ~nothing.)
 *
 * @example
 * ```ts
 * JSON.parse(jsonBodyText(Buffer.from('{"a":1}'))); // { a: 1 }
 * jsonBodyText(Buffer.from([0x22, 0xff, 0x22])); // throws MALFORMED_JSON: the body is not valid UTF-8
 * ```
 */
export function jsonBodyText(body: Uint8Array): string {
  if (!isUtf8(body))
    throw new MalformedJsonError('The body is not valid UTF-8: JSON text must be UTF-8 (RFC 8259)');
  return Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
}

/** Longest charset name echoed in a refusal (a header may carry a huge one). */
const MAX_CHARSET_CHARS = 64;

/** One `; name=value` parameter of a media type; the value a token or a quoted-string (RFC 9110 § 5.6.6). */
const MEDIA_TYPE_PARAMETER = /;\s*([^\s;=]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)/g;

/**
 * The charset a JSON body's `content-type` declares when it is not UTF-8, or `null` when the body may be read as
 * JSON text: no charset, or `utf-8` in any case, quoted or not. JSON text is UTF-8 (RFC 8259 § 8.1): a body declared
 * in another charset read as UTF-8 anyway is either refused as malformed (latin1's `é` is the byte 0xE9) or, worse,
 * silently read as other text than its sender wrote — so it is refused whole, 415 naming the charset. The one rule
 * for every JSON body: the body parser and the api-server's fast query route both ask it.
 *
 * @example
 * ```ts
 * refusedJsonCharset('application/json; charset="UTF-8"'); // null
 * refusedJsonCharset('application/json; charset=latin1'); // 'latin1'
 * ```
 */
export function refusedJsonCharset(contentType: string | undefined): string | null {
  if (contentType === undefined || !contentType.includes(';')) return null;
  for (const [, name, raw] of contentType.matchAll(MEDIA_TYPE_PARAMETER)) {
    if (name!.toLowerCase() !== 'charset') continue;
    const value = raw!.startsWith('"') ? raw!.slice(1, -1).replace(/\\(.)/g, '$1') : raw!.trim();
    if (value.toLowerCase() !== 'utf-8') return value.slice(0, MAX_CHARSET_CHARS);
  }
  return null;
}

/** The longest content coding named back in a 415. */
const MAX_ENCODING_CHARS = 64;

/**
 * The content coding a request body declares (`content-encoding`) when it is not `identity`, or `null`: a body is
 * read as it arrives, never decompressed, so a gzip-compressed JSON body was read as its compressed bytes and
 * refused as "not valid UTF-8" (400) — RFC 9110 § 8.4.1 says 415 for a coding the server does not accept. The one
 * rule for every JSON body: the body parser and the api-server's fast query route both ask it.
 *
 * @example
 * ```ts
 * refusedContentEncoding(undefined); // null
 * refusedContentEncoding('gzip'); // 'gzip'
 * ```
 */
export function refusedContentEncoding(contentEncoding: string | string[] | undefined): string | null {
  if (contentEncoding === undefined) return null;
  const value = (Array.isArray(contentEncoding) ? contentEncoding.join(', ') : contentEncoding).trim();
  if (value === '' || value.toLowerCase() === 'identity') return null;
  return value.slice(0, MAX_ENCODING_CHARS);
}

/**
 * Parses a JSON body with plain `JSON.parse`: a `"__proto__"` key becomes an ordinary own property, never a
 * prototype, so the route's own parser can refuse reserved keys naming their path instead of a vague
 * "not valid JSON". An empty or malformed body, or one that is not UTF-8, is `MALFORMED_JSON`; one declared in
 * another charset, or in a content coding (compressed), is `UNSUPPORTED_MEDIA_TYPE` ({@link refusedJsonCharset},
 * {@link refusedContentEncoding}).
 */
function parseJsonBody(
  request: FastifyRequest,
  body: string | Buffer,
  done: (err: Error | null, value?: unknown) => void,
): void {
  const contentType = request.headers['content-type'];
  const encoding = refusedContentEncoding(request.headers['content-encoding']);
  if (encoding !== null) {
    done(new UnsupportedMediaTypeError(contentType?.slice(0, 128), { encoding }), undefined);
    return;
  }
  const charset = refusedJsonCharset(contentType);
  if (charset !== null) {
    done(new UnsupportedMediaTypeError(contentType?.slice(0, 128), { charset }), undefined);
    return;
  }
  let text: string;
  try {
    text = typeof body === 'string' ? body : jsonBodyText(body);
  } catch (err) {
    done(err as Error, undefined);
    return;
  }
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
  // As bytes: fastify's `string` decodes leniently (U+FFFD for what is not UTF-8); jsonBodyText refuses it.
  for (const mediaType of JSON_MEDIA_TYPES)
    app.addContentTypeParser(mediaType, { parseAs: 'buffer', bodyLimit }, parseJsonBody);
}
