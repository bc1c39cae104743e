/**
 * Numbers a JSON text holds that `JSON.parse` cannot: an integer past ±2^53 comes back with other digits
 * (9007199254740993 → 9007199254740992), a number past ±1.8e308 as Infinity, which JSON writes as `null`. A copy
 * would change them without a word; a source reports such a record as bad instead (the sender can quote it).
 */

/** Worth a close look: a run of 16 digits, or a digit right before an exponent. Most lines have neither. */
const SUSPECT = /\d{16}|\d[eE][+-]?\d/;
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/**
 * Why `text` (valid JSON) holds a number that parsing would change, or null. Decimal fractions are not judged
 * (`0.1` is never exact in binary; every JSON reader rounds them alike): integers past 2^53 and numbers out of
 * range are.
 *
 * @example
 * ```ts
 * inexactNumber('{"id":9007199254740993}'); // 'number 9007199254740993 cannot be held exactly …'
 * inexactNumber('{"id":"9007199254740993"}'); // null (a string)
 * ```
 */
export function inexactNumber(text: string): string | null {
  if (!SUSPECT.test(text)) return null;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // A string: skip to its closing quote (escapes skip the next character).
      for (i++; i < text.length; i++) {
        const s = text.charCodeAt(i);
        if (s === 0x5c) i++;
        else if (s === 0x22) break;
      }
      continue;
    }
    if (c !== 0x2d && (c < 0x30 || c > 0x39)) continue;
    NUMBER.lastIndex = i;
    const match = NUMBER.exec(text);
    if (match === null) continue;
    const token = match[0];
    i += token.length - 1;
    const value = Number(token);
    if (!Number.isFinite(value)) return `number ${clip(token)} is out of range (JSON holds up to ±1.8e308)`;
    if (/^-?\d+$/.test(token) && !Number.isSafeInteger(value) && BigInt(token) !== BigInt(value))
      return `number ${clip(token)} cannot be held exactly (integers past ±2^53 lose digits); send it as a string`;
  }
  return null;
}

function clip(token: string): string {
  return token.length > 40 ? `${token.slice(0, 40)}…` : token;
}

/**
 * A JSON value read from a source (a PostgreSQL `json`/`jsonb` column) whose text holds a number `JSON.parse` would
 * change ({@link inexactNumber}): it stands in for the value so that the run reports the record as bad, naming the
 * field and the number, instead of copying other digits (run.ts, {@link inexactFieldProblem}). Never written: it
 * throws when serialized.
 */
export class InexactJson {
  constructor(readonly reason: string) {}
  toJSON(): never {
    throw new Error(`an inexact JSON value reached a sink: ${this.reason}`);
  }
}

/**
 * The JSON text `text` parsed, or an {@link InexactJson} when it holds a number parsing would change.
 *
 * @example
 * ```ts
 * parseExactJson('{"a":1}'); // { a: 1 }
 * parseExactJson('{"a":12345678901234567890}'); // InexactJson { reason: 'number 12345678901234567890 cannot …' }
 * ```
 */
export function parseExactJson(text: string): unknown {
  const reason = inexactNumber(text);
  return reason === null ? JSON.parse(text) : new InexactJson(reason);
}

/** Why a value (an array of them included) is an {@link InexactJson}, or null. */
function inexactIn(value: unknown): string | null {
  if (value instanceof InexactJson) return value.reason;
  if (Array.isArray(value))
    for (const item of value) {
      const reason = inexactIn(item);
      if (reason !== null) return reason;
    }
  return null;
}

/**
 * Why a record read from a source holds a value it could not read exactly (an {@link InexactJson}, at the top level
 * or in an array of them), naming the field; null for every other record.
 *
 * @example
 * ```ts
 * inexactFieldProblem({ id: 1, doc: parseExactJson('{"a":12345678901234567890}') });
 * // 'field "doc": number 12345678901234567890 cannot be held exactly …'
 * ```
 */
export function inexactFieldProblem(record: Record<string, unknown>): string | null {
  for (const name in record) {
    const value = record[name];
    if (typeof value !== 'object' || value === null) continue;
    const reason = inexactIn(value);
    if (reason !== null) return `field "${name}": ${reason}`;
  }
  return null;
}
