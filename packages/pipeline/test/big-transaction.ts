/**
 * What the big-transaction tests of a replication source (src/sources/replication-big-transaction.test.ts, in
 * process, and replication-big-transaction-memory.test.ts, in a heap-capped child) share: the endpoint `items` and
 * the table it starts from. Kept here, with the other test support, rather than next to them in src/, which the
 * package ships.
 */
import type { EndpointConfig } from '@sluice/core';
import { sql } from '@sluice/testkit';
import type { SharedLogicalPostgres } from './replication.js';

/** Endpoint `items` over the table of {@link bigTransactionItems}, indexed as well so a big commit writes indexes too. */
export const BIG_TRANSACTION_ENDPOINT = {
  name: 'items',
  source: { type: 'postgres', connection: 'db', table: 'items' },
  primaryKey: ['id'],
  fields: { id: 'integer', v: 'integer', name: 'string' },
  indexes: [['v'], ['name']],
} as EndpointConfig;

/**
 * A new database `database` on `server` with table `items (id, v, name)` of 100 rows: ids 1…100, `v` = id % 10,
 * `name` = 'n' || id. Ids from 1 001 up are free for the big transaction. Resolves with its URL.
 *
 * @example
 * ```ts
 * const url = await bigTransactionItems(server, 'bigtx');
 * await sql(url, 'INSERT INTO items SELECT i, i % 10, \'n\' || i FROM generate_series(1001, 151000) i');
 * ```
 */
export async function bigTransactionItems(server: SharedLogicalPostgres, database: string): Promise<string> {
  const url = await server.createDatabase(database);
  await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, name text)');
  await sql(url, "INSERT INTO items SELECT i, i % 10, 'n' || i FROM generate_series(1, 100) i");
  return url;
}
