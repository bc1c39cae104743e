import type { FieldType } from '@sluice/core';
import pg from 'pg';

/** pg type OIDs the pipeline reads differently from the driver's defaults. */
const INT8 = 20;
const NUMERIC = 1700;
const TIMESTAMP = 1114;
const TIMESTAMPTZ = 1184;

/**
 * The field type of each column type whose values the pipeline's parsers turn into something other than text:
 * `int8` and `numeric` are numbers when a double holds them exactly (else their text, which these types refuse),
 * timestamps ISO 8601 strings.
 */
const FIELD_TYPES: Record<number, FieldType> = {
  16: 'boolean', // bool
  20: 'integer', // int8
  21: 'integer', // int2
  23: 'integer', // int4
  26: 'integer', // oid
  700: 'number', // float4
  701: 'number', // float8
  1700: 'number', // numeric
  1114: 'timestamp', // timestamp
  1184: 'timestamp', // timestamptz
  114: 'json', // json
  3802: 'json', // jsonb
};

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

/** PostgreSQL's timestamp text as ISO 8601, keeping its microseconds and zone (`+00` → `+00:00`). */
function isoTimestamp(text: string): string {
  return text.replace(' ', 'T').replace(/([+-]\d{2})$/, '$1:00');
}

/**
 * Type parsers that keep records JSON-friendly: 64-bit integers become numbers when they fit, timestamps
 * ISO 8601 strings (full precision), and nothing becomes a `Date`.
 */
const types = {
  getTypeParser(oid: number, format?: string) {
    if (oid === INT8)
      return (text: string) => {
        const value = Number(text);
        return Number.isSafeInteger(value) ? value : text;
      };
    if (oid === NUMERIC)
      return (text: string) => {
        // Only when exact: `10.50` (numeric(10,2)) is 10.5, more digits than a double holds stay text.
        const value = Number(text);
        return Number.isFinite(value) && decimalKey(String(value)) === decimalKey(text) ? value : text;
      };
    if (oid === TIMESTAMPTZ || oid === TIMESTAMP) return isoTimestamp;
    return pg.types.getTypeParser(oid, format as 'text');
  },
};

/**
 * The pipeline's parser of a column's text value by type OID, so rows streamed by logical replication read
 * exactly like rows a query returned.
 */
export function textParser(oid: number): (text: string) => unknown {
  return types.getTypeParser(oid, 'text') as (text: string) => unknown;
}

/** What the driver returns for a type it has no parser for (text's own: the text itself). */
const NO_PARSER = pg.types.getTypeParser(pg.types.builtins.TEXT, 'text');

/**
 * The field type of the values the pipeline reads from a column of PostgreSQL type `oid` (a result's
 * `fields[].dataTypeID`, a relation message's column `typeOid`): what its parser returns. A type the driver has no
 * parser for (text, varchar, uuid, enums, domains, time, …) is read as its text: `string`. Arrays and the other
 * types the driver turns into objects (bytea, date, interval, point, …) are `json`.
 *
 * @example
 * ```ts
 * fieldTypeOfPg(1700); // 'number' (numeric)
 * fieldTypeOfPg(25); // 'string' (text)
 * ```
 */
export function fieldTypeOfPg(oid: number): FieldType {
  const known = FIELD_TYPES[oid];
  if (known) return known;
  return pg.types.getTypeParser(oid, 'text') === NO_PARSER ? 'string' : 'json';
}

/** A pg client with the pipeline's type parsers. */
export async function connectPostgres(url: string): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: url,
    types: types as never,
    connectionTimeoutMillis: 10_000,
  });
  await client.connect();
  client.on('error', () => {}); // a dropped connection surfaces on the next query
  return client;
}

/** Quotes an identifier (`schema.table` is split and quoted per part). */
export function quoteIdent(name: string): string {
  return name
    .split('.')
    .map((part) => `"${part.replace(/"/g, '""')}"`)
    .join('.');
}

/** The primary-key columns of a table, in order. */
export async function primaryKeyOf(client: pg.Client, table: string): Promise<string[]> {
  const result = await client.query<{ attname: string }>(
    `SELECT a.attname FROM pg_index i
       JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
      WHERE i.indrelid = $1::regclass AND i.indisprimary
      ORDER BY array_position(i.indkey, a.attnum)`,
    [quoteIdent(table)],
  );
  return result.rows.map((r) => r.attname);
}

/**
 * SQLSTATE classes and codes that mean the connection went away rather than the statement being wrong: class 08
 * (connection exception), 57P01–57P03 (the server shutting down, crashed or starting), 53300 (too many
 * connections).
 */
const CONNECTION_LOSS_CODES = new Set(['57P01', '57P02', '57P03', '53300']);
/** Socket-level errors of node and of `pg` itself when the server went away. */
const SOCKET_ERRORS = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTCONN',
]);

/**
 * Whether `err` from a `pg` query means the connection was lost (PostgreSQL restarting, a network cut) — worth
 * retrying from the last checkpoint — rather than a statement PostgreSQL refused (which a retry repeats).
 *
 * @example
 * ```ts
 * try { await client.query(sql); } catch (err) {
 *   throw new SourceError('…', { cause: err, details: { retryable: isConnectionLoss(err) } });
 * }
 * ```
 */
export function isConnectionLoss(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (
    typeof code === 'string' &&
    (code.startsWith('08') || CONNECTION_LOSS_CODES.has(code) || SOCKET_ERRORS.has(code))
  )
    return true;
  // pg reports a socket closed under a query, and any query on a client whose socket failed, without a code.
  return (
    /^Connection terminated/.test(err.message) ||
    err.message === 'Client has encountered a connection error and is not queryable'
  );
}
