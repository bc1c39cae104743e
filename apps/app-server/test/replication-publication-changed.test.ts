/**
 * An operator changes what an endpoint's logical replication reads, on real app-server and api-server processes and
 * a private PostgreSQL with `wal_level=logical`: its slot dropped (walsender ended first), its table taken out of the
 * publication, the publication dropped — while it streams, and while the app-server is stopped. Each time it must
 * notice: it resumes exactly or builds a new generation from a fresh snapshot (the old one answering meanwhile), ends
 * equal to the table row for row, and never stands green on a stream that no longer carries the table.
 */
import { freePort, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { dropSlotFromUnderIt } from './held-replication.js';
import {
  localNode,
  type NodeProcess,
  type NodeSpec,
  startHostApiServer,
  startNodeProcess,
} from './helpers.js';
import { currentLsn, servedRows, tableRows } from './items-rows.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { itemsOf, itemsStreaming, itemsTable, replicatedEndpointYaml } from './replication-node.js';
import { readContinuously } from './served-positions.js';

const postgres = logicalPostgresPerFile();

/** Changes to `items` an operator's change must not lose: an insert, an update, a delete. */
async function changeItems(url: string, id: number): Promise<void> {
  await sql(url, "INSERT INTO items VALUES ($1, $1, 'written after the change')", [id]);
  await sql(url, "UPDATE items SET v = -v, s = 'updated after the change' WHERE id = $1", [id - 1000]);
  await sql(url, 'DELETE FROM items WHERE id = $1', [id - 1050]);
}

/** Waits until `items` serves a generation other than `blue`, streaming, with nothing building. */
const rebuiltFrom = (node: NodeProcess, blue: string) =>
  waitFor(
    async () => {
      const items = await itemsOf(node);
      return items.servingCache !== blue && items.servingCache !== null && items.buildingCache === null
        ? items
        : null;
    },
    { timeoutMs: 90_000, what: `items to serve a generation other than ${blue}` },
  );

/** An app-server over `items` of a new database, its api-server, and what it served first. */
async function startMirror(database: string, nodeId: string, root: string) {
  const url = await itemsTable(postgres(), database);
  const apiPort = await freePort();
  const spec: NodeSpec = { ...localNode(nodeId, root), extraYaml: replicatedEndpointYaml(url, { apiPort }) };
  const node = await startNodeProcess(spec);
  const blue = (await itemsStreaming(node, { records: 100 })).servingCache!;
  const apiServer = await startHostApiServer(node);
  const api = `http://127.0.0.1:${apiPort}`;
  expect(await servedRows(api, await currentLsn(url))).toEqual(await tableRows(url));
  return { url, api, node, apiServer, blue, slot: `sluice_${nodeId}_items_source` };
}

describe('an operator changes the slot or publication under an endpoint', () => {
  it('its slot dropped while it streams: a new generation from a fresh snapshot, every read answered, equal to the table', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-pub-');
    const m = await startMirror('slotdropped', 'h1', dir.path);
    await using node = m.node;
    await using apiServer = m.apiServer;
    void apiServer;
    await using reader = readContinuously(m.api);

    await dropSlotFromUnderIt(m.url, m.slot);
    await changeItems(m.url, 1060);

    const rebuilt = await rebuiltFrom(node, m.blue);
    expect(rebuilt.decision).toMatchObject({
      decision: 'from-scratch',
      reason: expect.stringContaining(`replication slot ${m.slot} no longer exists`),
    });
    expect(await servedRows(m.api, await currentLsn(m.url))).toEqual(await tableRows(m.url));
    await reader.stop();
    expect(reader.failed).toEqual([]);
  });

  it('its table taken out of the publication while it streams: noticed, rebuilt, equal to the table', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-pub-');
    const m = await startMirror('tableunpublished', 'h2', dir.path);
    await using node = m.node;
    await using apiServer = m.apiServer;
    void apiServer;

    await sql(m.url, `ALTER PUBLICATION ${m.slot} DROP TABLE items`);
    await changeItems(m.url, 1060);

    const rebuilt = await rebuiltFrom(node, m.blue);
    expect(rebuilt.decision?.reason).toContain('no longer in its publication');
    await changeItems(m.url, 1070);
    expect(await servedRows(m.api, await currentLsn(m.url))).toEqual(await tableRows(m.url));
  });

  it('defect: its publication dropped while it streams, the endpoint retried the stream forever instead of rebuilding', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-pub-');
    const m = await startMirror('pubdropped', 'h3', dir.path);
    await using node = m.node;
    await using apiServer = m.apiServer;
    void apiServer;

    await sql(m.url, `DROP PUBLICATION ${m.slot}`);
    await changeItems(m.url, 1060);

    await rebuiltFrom(node, m.blue);
    await changeItems(m.url, 1070);
    expect(await servedRows(m.api, await currentLsn(m.url))).toEqual(await tableRows(m.url));
    const settled = await waitFor(
      async () => {
        const items = await itemsOf(node);
        return items.phase === 'streaming' && items.error === null ? items : null;
      },
      { timeoutMs: 30_000, what: 'items to stream again without an error' },
    );
    expect(settled.retry).toBeNull();
  });

  it('defect: its table taken out of the publication while the app-server was stopped, the changes meanwhile were silently lost', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-pub-');
    const m = await startMirror('unpublishedstopped', 'h4', dir.path);
    await using apiServer = m.apiServer;
    void apiServer;
    await m.node[Symbol.asyncDispose]();

    await sql(m.url, `ALTER PUBLICATION ${m.slot} DROP TABLE items`);
    await changeItems(m.url, 1060);

    await using node = await startNodeProcess(m.node.spec);
    const rebuilt = await rebuiltFrom(node, m.blue);
    expect(rebuilt.decision?.reason).toContain(`table items was taken out of publication ${m.slot}`);
    await changeItems(m.url, 1070);
    expect(await servedRows(m.api, await currentLsn(m.url))).toEqual(await tableRows(m.url));
  });

  it('defect: its publication dropped while the app-server was stopped, the endpoint never served again (a crash loop on the slot)', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-pub-');
    const m = await startMirror('pubdroppedstopped', 'h5', dir.path);
    await using apiServer = m.apiServer;
    void apiServer;
    await m.node[Symbol.asyncDispose]();

    await sql(m.url, `DROP PUBLICATION ${m.slot}`);
    await changeItems(m.url, 1060);

    await using node = await startNodeProcess(m.node.spec);
    await changeItems(m.url, 1070);
    expect(await servedRows(m.api, await currentLsn(m.url), 60_000)).toEqual(await tableRows(m.url));
    const settled = await waitFor(
      async () => {
        const items = await itemsOf(node);
        return items.phase === 'streaming' && items.error === null ? items : null;
      },
      { timeoutMs: 30_000, what: 'items to stream again without an error' },
    );
    expect(settled.decision?.reason).toContain(`publication ${m.slot} was dropped`);
  });
});
