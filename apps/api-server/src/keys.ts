import { type CacheSchema, canonicalTimestamp, ValidationError } from '@sluice/core';

/** Longest raw key segment accepted in a URL. */
export const MAX_KEY_SEGMENT = 8_192;

function bad(message: string, path = 'key'): ValidationError {
  return new ValidationError(`Invalid key: ${message}`, [{ path, message }]);
}

function decode(raw: string, path: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw bad('not valid percent-encoding', path);
  }
}

/**
 * `value` when `text` is its canonical spelling (`String(value)`, what `@sluice/client`'s `keySegment` sends);
 * otherwise a refusal naming the spelling to use. One record, one URL: `01`, `+1`, `1.0` or `-0` answered as record 1
 * (or 0) would let an HTTP cache hold one record under several URLs, each going stale on its own.
 */
function canonicalNumber(text: string, value: number, path: string): number {
  const canonical = String(value);
  if (text !== canonical)
    throw bad(
      `"${text.slice(0, 64)}" is not the canonical spelling of the key: write it as "${canonical}"`,
      path,
    );
  return value;
}

/**
 * Converts one decoded key component to the primary key field's declared type. Numbers are taken in their
 * canonical spelling only (see `canonicalNumber`); a timestamp in any ISO 8601 spelling or as epoch milliseconds.
 */
export function convertKeyComponent(text: string, type: string | undefined, path = 'key'): unknown {
  switch (type) {
    case 'integer': {
      if (!/^[-+]?\d{1,16}$/.test(text)) throw bad(`"${text.slice(0, 64)}" is not an integer`, path);
      const value = Number(text);
      if (!Number.isSafeInteger(value)) throw bad(`"${text.slice(0, 64)}" is out of range`, path);
      return canonicalNumber(text, value, path);
    }
    case 'number': {
      const value = text.trim() === '' ? Number.NaN : Number(text);
      if (!Number.isFinite(value)) throw bad(`"${text.slice(0, 64)}" is not a number`, path);
      return canonicalNumber(text, value, path);
    }
    case 'boolean':
      if (text === 'true') return true;
      if (text === 'false') return false;
      throw bad(`"${text.slice(0, 64)}" is not true or false`, path);
    case 'json':
      try {
        return JSON.parse(text);
      } catch {
        throw bad('not valid JSON', path);
      }
    case 'timestamp': {
      // ISO 8601 text with any offset, or digits (epoch milliseconds): the cache keys the instant (core's
      // canonical UTC text), so every spelling of it finds the record.
      const instant = canonicalTimestamp(/^-?\d{1,16}(\.\d+)?$/.test(text) ? Number(text) : text);
      if (instant === null) throw bad(`"${text.slice(0, 64)}" is not a timestamp`, path);
      return instant;
    }
    default:
      // string and untyped fields.
      return text;
  }
}

/**
 * Decodes the `:key` segment of `/v1/endpoints/:name/records/:key` (still percent-encoded, as it appears in
 * the URL) into primary-key values in `primaryKey` order, each converted to its field's type.
 *
 * Encoding: a single-field key is the percent-encoded value (`/records/42`, `/records/a%2Fb`). A composite key
 * joins its percent-encoded components with a literal comma in primary-key order (`/records/eu,42`); a comma
 * inside a component is sent as `%2C` (`encodeURIComponent` does this), so splitting is never ambiguous. The same
 * segment may be sent as the `key` query parameter (`/records?key=…`), the one form of the empty string (`?key=`).
 *
 * @example
 * ```ts
 * parseKeySegment('eu,42', { fields: { region: 'string', id: 'integer' }, primaryKey: ['region', 'id'], indexes: [] });
 * // → ['eu', 42]
 * ```
 */
export function parseKeySegment(raw: string, schema: CacheSchema): unknown[] {
  // An empty segment is the empty string as a single-field key (sent as `?key=`: a path cannot carry it), and a
  // value of any other type or a composite key refuses it below, naming why.
  if (raw.length > MAX_KEY_SEGMENT) throw bad(`longer than ${MAX_KEY_SEGMENT} characters`);
  const fields = schema.primaryKey;
  if (fields.length === 1) return [convertKeyComponent(decode(raw, 'key'), schema.fields[fields[0]!], 'key')];
  const parts = raw.split(',');
  if (parts.length !== fields.length)
    throw bad(
      `expected ${fields.length} comma-separated components (${fields.join(', ')}), got ${parts.length}`,
    );
  return parts.map((part, i) => {
    const path = `key.${fields[i]}`;
    return convertKeyComponent(decode(part, path), schema.fields[fields[i]!], path);
  });
}

/**
 * Encodes primary-key values as the `:key` URL segment (the inverse of {@link parseKeySegment}).
 *
 * @example
 * ```ts
 * formatKeySegment(['eu, west', 42]); // 'eu%2C%20west,42'
 * ```
 */
export function formatKeySegment(values: unknown[]): string {
  return values
    .map((value) => encodeURIComponent(typeof value === 'string' ? value : JSON.stringify(value)))
    .join(',');
}

/**
 * The raw (undecoded) key segment of a request URL: everything after the last `/records/`, before `?`.
 * Fastify hands route parameters over already decoded, which would make `%2C` indistinguishable from `,`.
 */
export function rawKeySegment(url: string): string {
  const end = url.indexOf('?');
  const path = end === -1 ? url : url.slice(0, end);
  const marker = path.lastIndexOf('/records/');
  return marker === -1 ? '' : path.slice(marker + '/records/'.length);
}

/**
 * The raw (undecoded) value of the `key` query parameter of `GET /v1/endpoints/:name/records?key=…`, or undefined
 * when the URL has none. The value is a key segment as in the path (components percent-encoded, joined by `,`), read
 * raw for the same reason as {@link rawKeySegment}; a `+` is a space there, as in every query string
 * (`URLSearchParams`), so it is read as `%20`. The route's schema has already refused a repeated `key`.
 *
 * @example
 * ```ts
 * rawKeyParameter('/v1/endpoints/codes/records?key='); // '' (the empty key, which a path segment cannot carry)
 * rawKeyParameter('/v1/endpoints/orders/records?key=eu%2C%20west,42'); // 'eu%2C%20west,42'
 * ```
 */
export function rawKeyParameter(url: string): string | undefined {
  const start = url.indexOf('?');
  if (start === -1) return undefined;
  for (const pair of url.slice(start + 1).split('&')) {
    const eq = pair.indexOf('=');
    const name = eq === -1 ? pair : pair.slice(0, eq);
    if (name !== 'key' && safeDecodeName(name) !== 'key') continue;
    return eq === -1 ? '' : pair.slice(eq + 1).replaceAll('+', '%20');
  }
  return undefined;
}

function safeDecodeName(name: string): string | null {
  try {
    return decodeURIComponent(name.replaceAll('+', ' '));
  } catch {
    return null;
  }
}
