/**
 * A logical-replication endpoint with a green held (`switch: { mode: manual }`) on a real app-server process, and
 * what tests of its serving generation's follower (docs/generations.md) ask of it. Used by
 * replication-follower.test.ts and console-replication.test.ts.
 */
import { type LogicalPostgresHandle, sql, waitFor } from '@sluice/testkit';
import { expect } from 'vitest';
import { call, type NodeProcess, type NodeSpec, startNodeProcess } from './helpers.js';

/** `items` as `GET /v1/endpoints` reports it (the members these tests read). */
export interface ItemsView {
  servingCache: string | null;
  follower: {
    cache: string;
    phase: string;
    reason: string | null;
    error: { code: string; message: string } | null;
    recordsWritten: number;
    lastCommit: { lsn: string; at: string } | null;
  } | null;
  records: number | null;
  held: { cache: string; reason: string } | null;
  replication: {
    slot: string;
    committedLsn: string | null;
    lagBytes: number | null;
    following: { cache: string; committedLsn: string | null; lagBytes: number | null } | null;
  } | null;
}

/** `items` as `GET /v1/endpoints` on `node` reports it now. */
export const itemsOf = async (node: NodeProcess): Promise<ItemsView> =>
  (await call(`${node.url}/v1/endpoints`)).body.endpoints.find((e: { name: string }) => e.name === 'items');

/** True when `lsn` is at or past `target` (PostgreSQL compares them). */
export const lsnReached = async (url: string, lsn: string, target: string) =>
  (await sql<{ ok: boolean }>(url, 'SELECT $1::pg_lsn >= $2::pg_lsn AS ok', [lsn, target]))[0]!.ok;

/**
 * The YAML of endpoint `items` over `url`'s table `items`, read by logical replication, switched by hand (a rebuilt
 * generation is held until promoted), old generations kept an hour; `apiPort`: the api-server's port.
 */
export function heldEndpointYaml(url: string, apiPort: number): string {
  return [
    'connections:',
    `  db: { type: postgres, url: "${url}" }`,
    `api: { port: ${apiPort}, freshnessWaitMs: 5000 }`,
    'cache: { gcGraceMs: 3600000 }',
    'endpoints:',
    '  - name: items',
    '    source: { type: postgres, connection: db, table: items }',
    '    primaryKey: [id]',
    '    fields: { id: integer, v: integer, s: string }',
    '    switch: { mode: manual }',
  ].join('\n');
}

/** Starts the node, waits for `items` to stream, rebuilds it and waits for the green to be held. */
export async function startHeld(spec: NodeSpec): Promise<{ node: NodeProcess; blue: string; green: string }> {
  const node = await startNodeProcess(spec);
  try {
    const blue = (
      await waitFor(
        async () => {
          const items = await itemsOf(node);
          return items?.servingCache && items.records === 100 && items.replication?.committedLsn
            ? items
            : null;
        },
        { timeoutMs: 60_000, what: 'items to stream' },
      )
    ).servingCache!;
    expect((await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    const green = (
      await waitFor(async () => (await itemsOf(node)).held, {
        timeoutMs: 60_000,
        what: 'the rebuilt generation to be held (manual switch)',
      })
    ).cache;
    expect(green).not.toBe(blue);
    return { node, blue, green };
  } catch (err) {
    await node[Symbol.asyncDispose]();
    throw err;
  }
}

/** A table `items` (id, v, s) of 100 rows in a new database `database` of `postgres`. */
export async function itemsTable(postgres: LogicalPostgresHandle, database: string): Promise<string> {
  const url = await postgres.createDatabase(database);
  await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, s text)');
  await sql(url, "INSERT INTO items SELECT g, g, 'x' || g FROM generate_series(1, 100) g");
  return url;
}

/**
 * Drops replication slot `slot` of `url` from under the app-server streaming it: its walsender is ended first (and
 * again, should the app-server take the slot back before the drop), then the slot goes.
 */
export async function dropSlotFromUnderIt(url: string, slot: string): Promise<void> {
  await sql(
    url,
    `DO $$ BEGIN
      LOOP
        PERFORM pg_terminate_backend(active_pid, 10000) FROM pg_replication_slots
          WHERE slot_name = '${slot}' AND active_pid IS NOT NULL;
        BEGIN
          PERFORM pg_drop_replication_slot('${slot}');
          EXIT;
        EXCEPTION WHEN object_in_use THEN PERFORM pg_sleep(0.05);
        END;
      END LOOP;
    END $$`,
  );
}
