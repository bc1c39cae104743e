/**
 * The PostgreSQL mirror under faults, through real app-server and api-server processes sharing one configuration,
 * against a private PostgreSQL with `wal_level=logical` and a short `wal_sender_timeout`: the app-server SIGKILLed
 * while multi-row transactions stream, SIGSTOPped until PostgreSQL drops its walsender, and read-your-writes with
 * `sluice-min-position` of a write that is not the endpoint's table. Every run ends with the api-server's records
 * equal to the table, row for row.
 */
import {
  freePort,
  type LogicalPostgresHandle,
  type SourceTransaction,
  sleep,
  sql,
  startLogicalPostgres,
  startSourceWriter,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, localNode, type NodeProcess, startHostApiServer, startNodeProcess } from './helpers.js';
import { currentLsn, servedRows, tableRows } from './items-rows.js';
import { endpointOf, itemsStreaming, itemsTable, replicatedEndpointYaml } from './replication-node.js';

// Own server rather than logicalPostgresPerFile(): PostgreSQL drops a silent walsender after 2 s here.
let server: LogicalPostgresHandle | undefined;
beforeAll(async () => {
  server = await startLogicalPostgres({ settings: { wal_sender_timeout: '2s' } });
});
afterAll(async () => {
  await server?.[Symbol.asyncDispose]();
});
const postgres = () => {
  if (!server) throw new Error('the logical PostgreSQL of this file is not started');
  return server;
};

/** Waits until `items` streams: a serving generation with a committed position (the writer changes how many rows). */
const waitStreaming = (node: NodeProcess) => itemsStreaming(node, { timeoutMs: 90_000 });

/** Updates (one row twice), a key moved away and back, a delete and re-insert, an insert and a delete: one transaction. */
const mixedTransaction = ({ updates, added, removed }: SourceTransaction) => `DO $$ BEGIN
    UPDATE items SET v = v + 1 WHERE id = ${updates[0]};
    UPDATE items SET v = v + 1, s = md5(random()::text) WHERE id = ${updates[0]};
    UPDATE items SET id = ${added} + 5000000 WHERE id = ${updates[1]};
    UPDATE items SET id = ${updates[1]} WHERE id = ${added} + 5000000;
    DELETE FROM items WHERE id = ${updates[2]};
    INSERT INTO items VALUES (${updates[2]}, -1, 'again') ON CONFLICT DO NOTHING;
    INSERT INTO items VALUES (${added}, 0, 'new');
    DELETE FROM items WHERE id = ${removed};
  END $$`;

/** The usual `items` of 300 rows, all with `s` = 'x', beside a table `other` the endpoint does not read. */
async function faultsTable(name: string): Promise<string> {
  const url = await itemsTable(postgres(), name, { rows: 300, text: "'x'" });
  await sql(url, 'CREATE TABLE other (id serial PRIMARY KEY, v int)');
  return url;
}

describe('the PostgreSQL mirror under faults', () => {
  it('SIGKILLed at random moments while multi-row transactions stream: after each restart it resumes in place, and serves the table exactly', {
    timeout: 400_000,
  }, async () => {
    await using dir = await tempDir('sluice-faults-');
    const url = await faultsTable('killed');
    const apiPort = await freePort();
    let node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: replicatedEndpointYaml(url, { apiPort }),
    });
    try {
      await waitStreaming(node);
      await using api = await startHostApiServer(node);
      await using writer = startSourceWriter(url, { transaction: mixedTransaction, pauseMs: 2 });
      for (let round = 0; round < 3; round++) {
        await sleep(1_000 + Math.random() * 2_000);
        node.child.kill('SIGKILL');
        await node.child.exited;
        node = await startNodeProcess(node.spec);
        await waitStreaming(node);
      }
      await writer.stop();
      expect(writer.written).toBeGreaterThan(0);
      expect(await servedRows(`http://127.0.0.1:${apiPort}`, await currentLsn(url))).toEqual(
        await tableRows(url),
      );
      // Every restart continued the one generation: nothing needed a rebuild.
      const { generations } = (await call(`${node.url}/v1/endpoints/items/generations`)).body;
      expect(generations.map((g: { state: string }) => g.state)).toEqual(['serving']);
      void api;
    } finally {
      await node[Symbol.asyncDispose]();
    }
  });

  it('SIGSTOPped until PostgreSQL drops its walsender (wal_sender_timeout), then SIGCONT: the stream recovers and loses nothing', {
    timeout: 300_000,
  }, async () => {
    await using dir = await tempDir('sluice-faults-');
    const url = await faultsTable('stopped');
    const apiPort = await freePort();
    await using node = await startNodeProcess({
      ...localNode('h2', dir.path),
      extraYaml: replicatedEndpointYaml(url, { apiPort }),
    });
    await waitStreaming(node);
    await using api = await startHostApiServer(node);
    await using writer = startSourceWriter(url, { transaction: mixedTransaction, pauseMs: 2 });
    await sleep(1_000);
    const slot = 'sluice_h2_items_source';
    const walsender = async () =>
      (
        await sql<{ pid: number | null }>(
          url,
          'SELECT active_pid AS pid FROM pg_replication_slots WHERE slot_name = $1',
          [slot],
        )
      )[0]?.pid ?? null;
    const before = await waitFor(walsender, { what: 'the walsender of the slot' });
    node.child.kill('SIGSTOP');
    try {
      await waitFor(async () => (await walsender()) !== before, {
        timeoutMs: 60_000,
        what: 'PostgreSQL to drop the silent walsender',
      });
    } finally {
      node.child.kill('SIGCONT');
    }
    await waitFor(async () => (await walsender()) !== null, { timeoutMs: 60_000, what: 'a new walsender' });
    await sleep(1_000);
    await writer.stop();
    expect(await servedRows(`http://127.0.0.1:${apiPort}`, await currentLsn(url))).toEqual(
      await tableRows(url),
    );
    const { generations } = (await call(`${node.url}/v1/endpoints/items/generations`)).body;
    expect(generations.map((g: { state: string }) => g.state)).toEqual(['serving']);
    void api;
  });

  it('defect: sluice-min-position of a write to another table answered 503 POSITION_NOT_REACHED though the endpoint had every change (a keepalive position waited for commitEveryMs)', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-faults-');
    const url = await faultsTable('freshness');
    const apiPort = await freePort();
    // Records are committed at least once a minute: a position with nothing of the table behind it must not wait
    // for that.
    await using node = await startNodeProcess({
      ...localNode('h3', dir.path),
      pipeline: { commitEveryRecords: 10_000, commitEveryMs: 60_000 },
      extraYaml: replicatedEndpointYaml(url, { apiPort }),
    });
    await waitStreaming(node);
    await using api = await startHostApiServer(node);
    const answers: Array<[number, unknown]> = [];
    for (let i = 0; i < 3; i++) {
      // The application wrote elsewhere in the database and reads the mirror "as of now".
      await sql(url, `INSERT INTO other (v) VALUES (${i})`);
      const reply = await call(`http://127.0.0.1:${apiPort}/v1/endpoints/items/records/1`, {
        headers: { 'sluice-min-position': await currentLsn(url) },
      });
      answers.push([reply.status, reply.status === 200 ? reply.body : reply.body.code]);
    }
    expect(answers).toEqual([
      [200, { id: 1, v: 1, s: 'x' }],
      [200, { id: 1, v: 1, s: 'x' }],
      [200, { id: 1, v: 1, s: 'x' }],
    ]);
    void api;
  });

  it("defect: a second app-server with the same node id (a copied configuration) terminated the first one's stream, and the two rebuilt each other's endpoint again and again", {
    timeout: 240_000,
  }, async () => {
    await using first = await tempDir('sluice-faults-a-');
    await using second = await tempDir('sluice-faults-b-');
    const url = await faultsTable('twins');
    const apiPort = await freePort();
    const extraYaml = replicatedEndpointYaml(url, { apiPort });
    await using a = await startNodeProcess({ ...localNode('h4', first.path), extraYaml });
    await waitStreaming(a);
    await using api = await startHostApiServer(a);
    await using writer = startSourceWriter(url, {
      transaction: ({ updates }) => `UPDATE items SET v = v + 1 WHERE id IN (${updates.join(', ')})`,
      pauseMs: 20,
    });
    // Another host's app-server, configured from a copy of the first one's file: same node id, same slot name.
    await using b = await startNodeProcess({ ...localNode('h4', second.path), extraYaml });
    const generationsOf = async (node: NodeProcess) =>
      (await call(`${node.url}/v1/endpoints/items/generations`)).body.generations as Array<{ state: string }>;
    // Until the second one has either taken the slot over or said why it cannot.
    await waitFor(
      async () =>
        (await endpointOf(b)).error !== null ||
        (await endpointOf(b)).servingCache !== null ||
        (await generationsOf(a)).length > 1,
      { timeoutMs: 120_000, intervalMs: 250, what: 'the second app-server to try the slot' },
    );
    await writer.stop();
    // The first one kept its stream and its one generation; the second one says what to fix.
    expect((await generationsOf(a)).map((g) => g.state)).toEqual(['serving']);
    const refused = await endpointOf(b);
    expect(refused.servingCache).toBeNull();
    expect(refused.error?.message).toMatch(
      /sluice_h4_items_source is streamed by another app-server .*node\.id/,
    );
    expect(await servedRows(`http://127.0.0.1:${apiPort}`, await currentLsn(url))).toEqual(
      await tableRows(url),
    );
    void api;
  });
});
