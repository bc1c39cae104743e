/**
 * Numbers a JSON text holds that `JSON.parse` cannot: an integer past ±2^53 comes back with other digits
 * (9007199254740993 → 9007199254740992), so does a number with more digits than a double keeps
 * (12345678901234567.5 → 12345678901234568), a number past ±1.8e308 as Infinity, which JSON writes as `null`, one
 * too small for a double as 0. A copy would change them without a word; a source reports such a record as bad instead (the sender can quote it).
 */

/**
 * Worth a close look: 16 or more digits in a row (a decimal point among them), or an exponent. A number without
 * either has at most 15 significant digits, which a double always gives back as written. Most lines have neither.
 */
const SUSPECT = /\d[\d.]{15}|\d[eE]/;
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/**
 * Why `text` (valid JSON) holds a number that parsing would change, or null: one whose value a double does not hold,
 * so that writing it back (JavaScript's shortest form that reads back as the same double) gives another number —
 * an integer past ±2^53 (9007199254740993 → 9007199254740992), whole digits a double does not keep
 * (12345678901234567.5 → 12345678901234568), a number past ±1.8e308 (Infinity, which JSON writes as `null`) or
 * too small to be told from 0 (1e-400 → 0). A number written back with the same value in another spelling (`1.0`
 * → `1`, `1E2` → `100`, `0.1`) is held, and so is a fraction whose last digits round (`0.10000000000000001`, a
 * 17-digit export of the double 0.1): every JSON reader rounds those alike.
 *
 * @example
 * ```ts
 * inexactNumber('{"id":9007199254740993}'); // 'number 9007199254740993 cannot be held exactly …'
 * inexactNumber('{"id":"9007199254740993"}'); // null (a string)
 * inexactNumber('{"price":0.1}'); // null (written back as 0.1)
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
    const written = String(value);
    // Most numbers are written as JavaScript writes them back (a JSON writer's shortest form): no closer look.
    if (written === token || decimalValue(token) === decimalValue(written)) continue;
    if (/^-?\d+$/.test(token))
      return `number ${clip(token)} cannot be held exactly (integers past ±2^53 lose digits); send it as a string`;
    // A fraction rounds in its last digits as in every JSON reader (`0.10000000000000001`, a 17-digit export of
    // the double 0.1, is that double): only digits before the point that change, or a value lost to 0, are judged.
    if (value === 0 || !sameWholePart(token, value))
      return `number ${clip(token)} cannot be held exactly (a double keeps about 17 significant digits: it would be copied as ${written}); send it as a string`;
  }
  return null;
}

/**
 * Whether the whole part of `token` (a number written without an exponent) is what the double `value` holds:
 * `12345678901234567.5` (→ 12345678901234568) is not. A token with an exponent is judged by its value alone (out of
 * range, or lost to 0), as a fraction is.
 */
function sameWholePart(token: string, value: number): boolean {
  if (/[eE]/.test(token)) return true;
  const point = token.indexOf('.');
  const whole = point < 0 ? token : token.slice(0, point);
  return BigInt(whole) === BigInt(Math.trunc(value));
}

/**
 * A number's text reduced to one spelling of its value — sign, significant digits, exponent (`1.50e1` and `15` →
 * `15e0`; every zero → `0`) — so that two spellings compare equal exactly when they name the same number.
 */
function decimalValue(token: string): string {
  const match = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(token);
  if (match === null) return token;
  const [, sign, whole, fraction = '', exponent = '0'] = match;
  let digits = `${whole}${fraction}`.replace(/^0+/, '');
  if (digits === '') return '0';
  let scale = Number(exponent) - fraction.length;
  const trailing = digits.length - digits.replace(/0+$/, '').length;
  digits = digits.slice(0, digits.length - trailing);
  scale += trailing;
  return `${sign}${digits}e${scale}`;
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
