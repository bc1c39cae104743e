/**
 * Test helpers for replication sources: the context an endpoint pipeline on a test database runs with, the served
 * rows of an endpoint, its committed LSN, and the slot's confirmed position (SQL against a database is testkit's
 * `sql`).
 */
import type { EndpointConfig, WritableCacheCatalog } from '@sluice/core';
import {
  type LogicalPostgresHandle,
  type LogicalPostgresOptions,
  sql,
  startLogicalPostgres,
} from '@sluice/testkit';
import { afterAll, beforeAll } from 'vitest';
import type { EndpointContext } from '../src/endpoint.js';

/**
 * What an endpoint pipeline reading the test database at `url` (connection `db`) runs with in these tests: events
 * dropped, commits every 50 ms, retries after 100 ms, keepalives every 200 ms.
 */
export function replicationContext(
  caches: WritableCacheCatalog,
  url: string,
  overrides: Partial<EndpointContext> = {},
): EndpointContext {
  return {
    caches,
    events: { publish: async () => {} },
    connections: { db: { type: 'postgres', url } },
    nodeId: 't1',
    commitEveryMs: 50,
    retryMs: 100,
    replication: { keepaliveMs: 200 },
    ...overrides,
  };
}

/** The table's rows as JSON text per id, for a row-by-row comparison with the cache. */
export async function tableRows(url: string, table: string): Promise<Map<number, string>> {
  const rows = await sql<{ id: number; row: string }>(
    url,
    `SELECT id, row_to_json(t)::text AS row FROM ${table} t ORDER BY id`,
  );
  return new Map(rows.map((r) => [r.id, canonical(JSON.parse(r.row))]));
}

/** The cache's records as JSON text per id (fields sorted). */
export function cacheRows(records: Record<string, unknown>[]): Map<number, string> {
  return new Map(records.map((r) => [Number(r.id), canonical(r)]));
}

/** Fields sorted, nulls left out (a column added later is absent from older records, null in the table). */
function canonical(record: Record<string, unknown>): string {
  return JSON.stringify(
    Object.fromEntries(
      Object.entries(record)
        .filter(([, value]) => value !== null && value !== undefined)
        .sort(([a], [b]) => (a < b ? -1 : 1)),
    ),
  );
}

/** The LSN a replication source committed with the cache (its checkpoint position), or null. */
export function committedLsn(
  checkpoint: { positions: Record<string, unknown> } | null,
  source: string,
): string | null {
  const position = checkpoint?.positions[source] as { lsn?: string } | undefined;
  return position?.lsn ?? null;
}

/** The slot's `confirmed_flush_lsn`, or null when there is no such slot. */
export async function confirmedFlush(url: string, slot: string): Promise<string | null> {
  const rows = await sql<{ lsn: string | null }>(
    url,
    'SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots WHERE slot_name = $1',
    [slot],
  );
  return rows[0]?.lsn ?? null;
}

/** The private logical PostgreSQL of one test file (see {@link useLogicalPostgres}). */
export interface SharedLogicalPostgres {
  /** The running server (throws before the file's `beforeAll` started it). */
  readonly handle: LogicalPostgresHandle;
  /** Creates a fresh database on it and returns its URL. */
  createDatabase(prefix?: string): Promise<string>;
  /** Restarts it (same port and data directory). */
  restart(mode?: 'fast' | 'immediate'): Promise<void>;
}

/**
 * Starts a private PostgreSQL with `wal_level=logical` (testkit's `startLogicalPostgres`) before the calling file's
 * tests and stops it after them (with `options`: e.g. extra server `settings`). Call at the top level of a test file.
 *
 * @example
 * ```ts
 * const server = useLogicalPostgres();
 * it('…', async () => { const url = await server.createDatabase('items'); … });
 * ```
 */
export function useLogicalPostgres(options: LogicalPostgresOptions = {}): SharedLogicalPostgres {
  let server: LogicalPostgresHandle | undefined;
  beforeAll(async () => {
    server = await startLogicalPostgres(options);
  });
  afterAll(async () => {
    await server?.[Symbol.asyncDispose]();
  });
  const running = (): LogicalPostgresHandle => {
    if (server === undefined) throw new Error('the logical PostgreSQL of this test file is not started');
    return server;
  };
  return {
    get handle() {
      return running();
    },
    createDatabase: (prefix) => running().createDatabase(prefix),
    restart: (mode) => running().restart(mode),
  };
}

/** The endpoint `items` of these tests: the table `items` of connection `db`, keyed by `id`, no index. */
export function itemsTableEndpoint(): EndpointConfig {
  return {
    name: 'items',
    source: { type: 'postgres', connection: 'db', table: 'items' },
    primaryKey: ['id'],
    indexes: [],
  } as EndpointConfig;
}
