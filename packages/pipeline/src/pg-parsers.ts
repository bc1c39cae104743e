import { type FieldType, SourceError } from '@sluice/core';
import pg from 'pg';
import { parse as parseArray } from 'postgres-array';
import { parseExactJson } from './json-numbers.js';

/** A PostgreSQL array as JSON: elements, NULLs, and the inner arrays of a multidimensional one. */
export type PgArray<T> = Array<T | null | PgArray<T>>;

function notAnArray(text: string): never {
  const shown = text.length > 60 ? `${text.slice(0, 60)}…` : text;
  throw new SourceError(`not a PostgreSQL array literal: ${JSON.stringify(shown)}`);
}

/**
 * Reads PostgreSQL's text of an array (`{1,NULL,"a b"}`, `{{1,2},{3,4}}`, `[0:1]={7,8}`) into a JSON array,
 * each element's text through `element` (unquoted `NULL` is null; a quoted `"NULL"` is the text). The literal is
 * parsed by `postgres-array` (the parser node-pg's own array types use), called directly because `@types/pg`
 * declares the driver's `arrayParser` with a signature it does not have.
 *
 * @throws SourceError (`SOURCE_FAILED`) when `text` is not an array literal (PostgreSQL never sends one).
 * @example
 * ```ts
 * parsePgArray('{1,NULL,3}', Number); // [1, null, 3]
 * parsePgArray('{"a,b","c\\"d"}', (s) => s); // ['a,b', 'c"d']
 * ```
 */
export function parsePgArray<T>(text: string, element: (text: string) => T): PgArray<T> {
  // postgres-array reads text without braces as one element; an array literal starts with `{` or its bounds.
  if (text[0] !== '{' && text[0] !== '[') notAnArray(text);
  try {
    return parseArray(text, element) as PgArray<T>;
  } catch {
    return notAnArray(text);
  }
}

/** The sign, significant digits and exponent of a decimal (`"10.50"`, `"1e+21"`), to compare two spellings. */
function decimalKey(text: string): string | null {
  const m = /^([-+]?)(\d*)(?:\.(\d*))?(?:[eE]([-+]?\d+))?$/.exec(text);
  if (!m) return null;
  const whole = m[2] ?? '';
  let digits = whole + (m[3] ?? '');
  let exponent = Number(m[4] ?? 0) + whole.length;
  const leading = digits.length - digits.replace(/^0+/, '').length;
  digits = digits.slice(leading).replace(/0+$/, '');
  exponent -= leading;
  return digits === '' ? '0' : `${m[1] === '-' ? '-' : ''}${digits}e${exponent}`;
}

/**
 * PostgreSQL's timestamp text as ISO 8601, keeping its microseconds and zone (`+00` → `+00:00`) — the zone is the
 * session's `TimeZone`, so one instant reads `…+00:00` or `…+09:00` by server setting. Kept as PostgreSQL wrote it
 * (a `string` or `json` field keeps that text); a `timestamp` field's cache canonicalizes it to its UTC instant
 * with core's `canonicalTimestamp` (a zoneless `timestamp` as UTC), which is what makes them compare as instants.
 */
function isoTimestamp(text: string): string {
  return text.replace(' ', 'T').replace(/([+-]\d{2})$/, '$1:00');
}

/** The text itself: for types whose text is their faithful JSON value. */
const asText = (text: string): string => text;

/** `int8`: a number within ±2^53, else its text (a double would change its digits). */
function int8(text: string): number | string {
  const value = Number(text);
  return Number.isSafeInteger(value) ? value : text;
}

/** `numeric`: a number only when a double holds it exactly (`10.50` is 10.5), else its text (`NaN` too). */
function numeric(text: string): number | string {
  const value = Number(text);
  return Number.isFinite(value) && decimalKey(String(value)) === decimalKey(text) ? value : text;
}

/** `float4`/`float8`: a number, except `NaN` and `±Infinity`, which JSON cannot hold (it writes null): their text. */
function float(text: string): number | string {
  const value = Number(text);
  return Number.isFinite(value) ? value : text;
}

/** The driver's text parser of a type whose values it already reads as faithful JSON (booleans, integers, …). */
const driver = (oid: number) => pg.types.getTypeParser(oid, 'text') as (text: string) => unknown;

/** How the pipeline reads one scalar type: its parser, and the field type of what that parser returns. */
interface ScalarReading {
  parse: (text: string) => unknown;
  field: FieldType;
}

/**
 * Every scalar type the pipeline reads as something other than its text. Dates, `bytea`, `interval`, `money`,
 * `time(tz)`, `uuid`, `inet`, enums, domains of text types, … are absent: read as their text (`string`), which is
 * faithful where the driver's objects are not (a `date` as a `Date` at local midnight moves to the previous day
 * east of UTC; infinite and BC dates have no `Date`; a `Buffer` serializes as `{"type":"Buffer",…}`; the driver's
 * interval object is its own shape, not PostgreSQL's).
 */
const SCALARS: Record<number, ScalarReading> = {
  16: { parse: driver(16), field: 'boolean' }, // bool
  20: { parse: int8, field: 'integer' }, // int8
  21: { parse: driver(21), field: 'integer' }, // int2
  23: { parse: driver(23), field: 'integer' }, // int4
  26: { parse: driver(26), field: 'integer' }, // oid
  700: { parse: float, field: 'number' }, // float4
  701: { parse: float, field: 'number' }, // float8
  1700: { parse: numeric, field: 'number' }, // numeric
  1114: { parse: isoTimestamp, field: 'timestamp' }, // timestamp
  1184: { parse: isoTimestamp, field: 'timestamp' }, // timestamptz
  // A document holding a number JSON.parse would change is read as an InexactJson: the run reports the row as bad.
  114: { parse: parseExactJson, field: 'json' }, // json
  3802: { parse: parseExactJson, field: 'json' }, // jsonb
  600: { parse: driver(600), field: 'json' }, // point: {x, y}
  718: { parse: driver(718), field: 'json' }, // circle: {x, y, radius}
};

/**
 * The element type of each built-in array type the pipeline reads as a JSON array (each element read like its
 * scalar type). Arrays of other types (enums, `box[]` with its `;` delimiter, …) are read as their text.
 */
const ARRAY_ELEMENTS: Record<number, number> = {
  1000: 16, // bool[]
  1001: 17, // bytea[]
  1002: 18, // "char"[]
  1003: 19, // name[]
  1005: 21, // int2[]
  1007: 23, // int4[]
  1008: 24, // regproc[]
  1009: 25, // text[]
  1014: 1042, // bpchar[]
  1015: 1043, // varchar[]
  1016: 20, // int8[]
  1017: 600, // point[]
  1021: 700, // float4[]
  1022: 701, // float8[]
  1028: 26, // oid[]
  1040: 829, // macaddr[]
  1041: 869, // inet[]
  651: 650, // cidr[]
  143: 142, // xml[]
  199: 114, // json[]
  719: 718, // circle[]
  791: 790, // money[]
  1115: 1114, // timestamp[]
  1182: 1082, // date[]
  1183: 1083, // time[]
  1185: 1184, // timestamptz[]
  1187: 1186, // interval[]
  1231: 1700, // numeric[]
  1270: 1266, // timetz[]
  1561: 1560, // bit[]
  1563: 1562, // varbit[]
  2951: 2950, // uuid[]
  3807: 3802, // jsonb[]
  3905: 3904, // int4range[]
  3907: 3906, // numrange[]
  3909: 3908, // tsrange[]
  3911: 3910, // tstzrange[]
  3913: 3912, // daterange[]
  3927: 3926, // int8range[]
};

/** Parsers built so far, by type OID (one closure per array type, not per value). */
const parsers = new Map<number, (text: string) => unknown>();

/**
 * The pipeline's parser of PostgreSQL's text of a value of type `oid`: a JSON value, never a `Date`, a `Buffer` or
 * a driver object — the same for a query's rows (`connectPostgres`) and for rows streamed by logical replication,
 * which PostgreSQL sends as the same text, so both read exactly alike. The mapping is in the README, "PostgreSQL
 * values".
 *
 * @example
 * ```ts
 * textParser(1082)('2024-03-01'); // '2024-03-01' (date: its text, in any time zone)
 * textParser(1185)('{"2024-03-01 10:00:00.5+00",NULL}'); // ['2024-03-01T10:00:00.5+00:00', null]
 * textParser(17)('\\x0102'); // '\\x0102' (bytea: its hex text)
 * textParser(20)('9007199254740993'); // '9007199254740993' (int8 past 2^53: its text)
 * ```
 */
export function textParser(oid: number): (text: string) => unknown {
  let parser = parsers.get(oid);
  if (parser === undefined) {
    const element = ARRAY_ELEMENTS[oid];
    if (element !== undefined) {
      const parseElement = textParser(element);
      parser = (text) => parsePgArray(text, parseElement);
    } else parser = SCALARS[oid]?.parse ?? asText;
    parsers.set(oid, parser);
  }
  return parser;
}

/**
 * The field type of the values the pipeline reads from a column of PostgreSQL type `oid` (a result's
 * `fields[].dataTypeID`, a relation message's column `typeOid`): the type of what {@link textParser} returns, so
 * an endpoint schema typed by its columns holds their values. JSON arrays and objects are `json`; a type read as
 * its text (text, varchar, uuid, `date`, `bytea`, `interval`, `time`, enums, any type not listed here) is `string`.
 *
 * @example
 * ```ts
 * fieldTypeOfPg(1700); // 'number' (numeric)
 * fieldTypeOfPg(1082); // 'string' (date)
 * fieldTypeOfPg(1007); // 'json' (int4[])
 * ```
 */
export function fieldTypeOfPg(oid: number): FieldType {
  if (ARRAY_ELEMENTS[oid] !== undefined) return 'json';
  return SCALARS[oid]?.field ?? 'string';
}
