import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** The server tests use; `SLUICE_TEST_PG_URL` overrides. */
export function testPostgresUrl(): string {
  return process.env.SLUICE_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
}

export interface TestDatabase extends AsyncDisposable {
  /** URL of the fresh database. */
  readonly url: string;
  readonly name: string;
  drop(): Promise<void>;
}

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/**
 * Creates a fresh, empty PostgreSQL database for one test file and drops it on dispose. Fails loudly
 * when the server is unreachable (tests never skip silently).
 *
 * @example
 * ```ts
 * await using db = await createTestDatabase();
 * const store = await openStore(db.url);
 * ```
 */
export async function createTestDatabase(prefix = 'sluice_test'): Promise<TestDatabase> {
  const adminUrl = testPostgresUrl();
  const name = `${prefix}_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`.toLowerCase();
  const admin = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 5_000 });
  try {
    await admin.connect();
  } catch (err) {
    throw new Error(
      `PostgreSQL is not reachable at ${adminUrl} (${(err as Error).message}); start it or set SLUICE_TEST_PG_URL`,
    );
  }
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  let dropped = false;
  const drop = async () => {
    if (dropped) return;
    dropped = true;
    const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 5_000 });
    await client.connect();
    try {
      await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    } finally {
      await client.end();
    }
  };
  return { url: withDatabase(adminUrl, name), name, drop, [Symbol.asyncDispose]: drop };
}

/**
 * Runs one statement on a fresh connection and returns its rows (test setup and assertions against a database).
 *
 * @example
 * ```ts
 * const [{ n }] = await sql<{ n: number }>(db.url, 'SELECT count(*)::int AS n FROM items');
 * ```
 */
export async function sql<R extends pg.QueryResultRow = pg.QueryResultRow>(
  url: string,
  text: string,
  params: unknown[] = [],
): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  // A server shutting down (a test restarting PostgreSQL) sends FATAL 57P01 to idle sessions too; with no
  // listener that is an uncaught exception failing the whole test run. A query's own failure still rejects.
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<R>(text, params)).rows;
  } finally {
    await client.end();
  }
}

/**
 * The keys whose physical writes in the destination differ from "once per initial row plus once per source change"
 * (at most 10, empty when every change landed exactly once). `writes` is a table a trigger fills with the id of
 * every destination insert/update, `changes` one the source's writer fills with the id of every change it made;
 * ids `1..initialRows` were in the source before the snapshot.
 *
 * @example
 * ```ts
 * expect(await perKeyWriteMismatches(url, { initialRows: 300, changes: 'src_changes', writes: 'dst_writes' })).toEqual([]);
 * ```
 */
export function perKeyWriteMismatches(
  url: string,
  tables: { initialRows: number; changes: string; writes: string },
): Promise<Array<{ id: number; expected: number | null; actual: number | null }>> {
  return sql(
    url,
    `WITH expected AS (
       SELECT id, count(*) AS n FROM (
         SELECT id FROM generate_series(1, $1::int) id UNION ALL SELECT id FROM ${tables.changes}) e GROUP BY id),
     actual AS (SELECT id, count(*) AS n FROM ${tables.writes} GROUP BY id)
     SELECT coalesce(e.id, a.id) AS id, e.n AS expected, a.n AS actual
       FROM expected e FULL JOIN actual a ON a.id = e.id
      WHERE e.n IS DISTINCT FROM a.n ORDER BY 1 LIMIT 10`,
    [tables.initialRows],
  );
}
