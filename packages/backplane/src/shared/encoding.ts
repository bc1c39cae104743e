/**
 * Injective encodings of arbitrary strings into the restricted alphabets NATS allows for subject tokens,
 * KV keys and bucket names. Letters, digits, `-` and `_` stay readable; every other UTF-8 byte becomes
 * `<escape>HH`, and the escape character itself is always escaped, so two different inputs never share an
 * encoding (a transfer id like `a.b` can never address the subject of `a` + `b`).
 */

const SAFE = /^[A-Za-z0-9_-]$/;
const SAFE_NO_UNDERSCORE = /^[A-Za-z0-9-]$/;
const encoder = new TextEncoder();

function escapeWith(value: string, marker: string, safe: RegExp): string {
  let out = '';
  for (const char of value) {
    if (char !== marker && safe.test(char)) {
      out += char;
      continue;
    }
    for (const byte of encoder.encode(char))
      out += `${marker}${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/**
 * Encodes `value` as one NATS subject token (no `.`, `*`, `>` or whitespace can survive).
 *
 * @example
 * ```ts
 * subjectToken('orders.2026:12') // 'orders~2E2026~3A12'
 * ```
 */
export function subjectToken(value: string): string {
  if (value.length === 0) throw new RangeError('a subject token cannot be empty');
  return escapeWith(value, '~', SAFE);
}

/** Encodes `value` as a JetStream KV key (`[-/_=.a-zA-Z0-9]`; `=` is the escape). */
export function kvKey(value: string): string {
  if (value.length === 0) throw new RangeError('a KV key cannot be empty');
  return escapeWith(value, '=', SAFE);
}

/** Encodes `value` for a KV bucket name (`[-_a-zA-Z0-9]`; `_` is the escape). */
export function bucketSafe(value: string): string {
  return escapeWith(value, '_', SAFE_NO_UNDERSCORE);
}
