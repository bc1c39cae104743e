import pg from 'pg';
import { textParser } from './pg-parsers.js';

// Where the value mapping lives; re-exported so the pipeline has one PostgreSQL module to import from.
export { fieldTypeOfPg, textParser } from './pg-parsers.js';

/**
 * The driver's hook for type parsers: the pipeline's for text values (every value `pg` reads unless a query asks
 * for binary), the driver's own for binary ones.
 */
const types = {
  getTypeParser(oid: number, format?: string) {
    return format === 'binary' ? pg.types.getTypeParser(oid, 'binary') : textParser(oid);
  },
};

/** A pg client with the pipeline's type parsers. */
export async function connectPostgres(url: string): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: url,
    types: types as never,
    connectionTimeoutMillis: 10_000,
  });
  // A dropped connection surfaces on the next query. Listening before `connect`: a server shutting down (`pg_ctl
  // restart -m fast`) can send its FATAL 57P01 in the same read as the ReadyForQuery that resolves `connect`, and the
  // client emits it before any code after `await client.connect()` runs — with no listener, an uncaught exception.
  client.on('error', () => {});
  await client.connect();
  return client;
}

/**
 * Quotes one identifier — a column, a publication, a slot — as it is, dots and all: a column may be named
 * `order.id`, and splitting it would name a table `order` instead.
 *
 * @example
 * ```ts
 * quoteIdent('order.id'); // '"order.id"'
 * quoteIdent('say "hi"'); // '"say ""hi"""'
 * ```
 */
export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/**
 * Quotes a table name as configured: `schema.table` is split at its dot and each part quoted (core's address
 * schema allows plain identifiers only, so a dot can only separate the schema from the table).
 *
 * @example
 * ```ts
 * quoteTableName('App.Orders'); // '"App"."Orders"'
 * ```
 */
export function quoteTableName(table: string): string {
  return table.split('.').map(quoteIdent).join('.');
}

/** The primary-key columns of a table, in order. */
export async function primaryKeyOf(client: pg.Client, table: string): Promise<string[]> {
  const result = await client.query<{ attname: string }>(
    `SELECT a.attname FROM pg_index i
       JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
      WHERE i.indrelid = $1::regclass AND i.indisprimary
      ORDER BY array_position(i.indkey, a.attnum)`,
    [quoteTableName(table)],
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

/**
 * Creates a table Sluice keeps in a database it writes (`CREATE TABLE IF NOT EXISTS name (columns)`), outside any
 * transaction. `IF NOT EXISTS` does not make two sessions creating the table at one moment safe: the one that loses
 * the race fails with a duplicate key of `pg_type` (23505), a duplicate table (42P07) or type "already exists"
 * (42710, duplicate_object) — several sinks opening a fresh destination database together did. Each means the table
 * is there now.
 *
 * @example
 * ```ts
 * await createTableIfAbsent(client, 'sluice_sink_fences', 'writer text PRIMARY KEY, epoch bigint NOT NULL');
 * ```
 */
export async function createTableIfAbsent(client: pg.Client, name: string, columns: string): Promise<void> {
  try {
    await client.query(`CREATE TABLE IF NOT EXISTS ${name} (${columns})`);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code !== '23505' && code !== '42P07' && code !== '42710') throw err;
  }
}
