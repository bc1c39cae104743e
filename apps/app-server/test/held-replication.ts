/**
 * A logical-replication endpoint with a green held (`switch: { mode: manual }`) on a real app-server process, and
 * what tests of its serving generation's follower (docs/generations.md) ask of it. Used by
 * replication-follower.test.ts, replication-outage.test.ts, held-outage.test.ts and console-replication.test.ts;
 * the table, the endpoint's YAML and its status come from replication-node.ts.
 */
import { freePort, type LogicalPostgresHandle, sql, waitFor } from '@sluice/testkit';
import { expect } from 'vitest';
import { call, localNode, type NodeProcess, type NodeSpec, startNodeProcess } from './helpers.js';
import { itemsOf, itemsStreaming, itemsTable, replicatedEndpointYaml } from './replication-node.js';

/**
 * The YAML of endpoint `items` over `url`'s table `items`, read by logical replication, switched by hand (a rebuilt
 * generation is held until promoted), old generations kept an hour; `apiPort`: the api-server's port.
 */
export function heldEndpointYaml(url: string, apiPort: number): string {
  return replicatedEndpointYaml(url, { apiPort, keepGenerations: true, switch: '{ mode: manual }' });
}

/** Starts the node, waits for `items` to stream, rebuilds it and waits for the green to be held. */
export async function startHeld(spec: NodeSpec): Promise<{ node: NodeProcess; blue: string; green: string }> {
  const node = await startNodeProcess(spec);
  try {
    const blue = (await itemsStreaming(node, { records: 100 })).servingCache!;
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

/** A node holding a rebuilt green of `items` (see {@link startHeldItems}); dispose stops the node. */
export interface HeldItems extends AsyncDisposable {
  /** The database holding the table `items`. */
  readonly url: string;
  readonly spec: NodeSpec;
  readonly node: NodeProcess;
  /** The generation serving `items`. */
  readonly blue: string;
  /** The rebuilt generation held until promoted. */
  readonly green: string;
  /** The base URL of the host's api-server, should the test start one (`startHostApiServer(node)`). */
  readonly api: string;
}

/**
 * The setup of the held-green tests: a table `items` of 100 rows in a new database `database`, and an app-server
 * `nodeId` keeping its files under `dir` with {@link heldEndpointYaml} over it, its green held ({@link startHeld}).
 *
 * @example
 * ```ts
 * await using held = await startHeldItems(postgres(), 'heldoutage', 'h1', dir.path);
 * await call(`${held.node.url}/v1/endpoints/items/promote`, { method: 'POST' }); // held.blue → held.green
 * ```
 */
export async function startHeldItems(
  postgres: LogicalPostgresHandle,
  database: string,
  nodeId: string,
  dir: string,
): Promise<HeldItems> {
  const url = await itemsTable(postgres, database);
  const apiPort = await freePort();
  const spec = { ...localNode(nodeId, dir), extraYaml: heldEndpointYaml(url, apiPort) };
  const { node, blue, green } = await startHeld(spec);
  return {
    url,
    spec,
    node,
    blue,
    green,
    api: `http://127.0.0.1:${apiPort}`,
    [Symbol.asyncDispose]: () => node[Symbol.asyncDispose](),
  };
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
