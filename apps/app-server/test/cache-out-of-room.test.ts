/**
 * The LMDB cache running out of room, as an operator meets it: the app-server runs under a file-size limit
 * (`RLIMIT_FSIZE`: to LMDB a write past it is a short write, exactly what a full disk gives) and its endpoints grow
 * past it. The failure must show (`CACHE_DISK_FULL`, retrying with back-off, the process alive), nothing past the last
 * good commit may be taken as done — a replication slot is never confirmed beyond what the cache committed — and once
 * the operator gives room and restarts, every source change is there exactly once, without a rebuild.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, type NodeSpec, startHostApiServer, startNodeProcess } from './helpers.js';
import { currentLsn, servedRows, tableRows } from './items-rows.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import {
  type EndpointView,
  itemsOf,
  itemsStreaming,
  itemsTable,
  lsnReached,
  replicatedEndpointYaml,
} from './replication-node.js';

const postgres = logicalPostgresPerFile();
const MiB = 1024 * 1024;

/** Waits until `items` on `node` retries after a full disk; resolves with what `GET /v1/endpoints` said then. */
const outOfRoom = (node: { url: string }): Promise<EndpointView> =>
  waitFor(
    async () => {
      const items = await itemsOf(node);
      return items?.phase === 'retrying' && items.error?.code === 'CACHE_DISK_FULL' ? items : null;
    },
    { timeoutMs: 60_000, intervalMs: 200, what: 'items to retry on CACHE_DISK_FULL' },
  );

describe('an endpoint cache running out of room', () => {
  it('a replicated endpoint that fills the disk keeps its slot at its last commit, and serves every change once after room is given', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir('sluice-cdc-out-of-room-');
    const url = await itemsTable(postgres(), 'out_of_room', { rows: 200, text: "repeat('x', 400)" });
    const apiPort = await freePort();
    const spec: NodeSpec = {
      ...localNode('h1', dir.path),
      extraYaml: replicatedEndpointYaml(url, { apiPort }),
    };
    {
      await using node = await startNodeProcess({ ...spec, fileSizeLimitBytes: 4 * MiB });
      spec.port = node.port;
      await itemsStreaming(node, { records: 200 });
      // ~8 MB of inserts (twice the limit) and an update of the first rows after each: a lost or replayed
      // transaction would show in the rows' `v`.
      for (let t = 0; t < 40; t++) {
        const from = 1_000 + t * 500;
        await sql(
          url,
          `INSERT INTO items SELECT g, g, repeat('y', 400) FROM generate_series(${from}, ${from + 499}) g`,
        );
        await sql(url, 'UPDATE items SET v = v + 1 WHERE id <= 200');
      }
      const stuck = await outOfRoom(node);
      expect(stuck.error!.message).toMatch(/no room left to write.*nothing was written/);
      expect(stuck.retry?.attempts).toBeGreaterThanOrEqual(1);
      // The slot is confirmed no further than what the cache committed (nothing it never wrote is acknowledged).
      const committed = stuck.replication!.committedLsn!;
      const [slot] = await sql<{ confirmed: string }>(
        url,
        'SELECT confirmed_flush_lsn::text AS confirmed FROM pg_replication_slots',
      );
      expect(await lsnReached(url, committed, slot!.confirmed)).toBe(true);
      expect(await lsnReached(url, committed, await currentLsn(url))).toBe(false);
      expect(node.child.child.exitCode).toBeNull();
    }

    // Room again (no limit): the same generation continues from its checkpoint and catches up.
    await using node = await startNodeProcess(spec);
    await using _api = await startHostApiServer(node);
    const served = await servedRows(`http://127.0.0.1:${apiPort}`, await currentLsn(url));
    const table = await tableRows(url);
    expect(served.length).toBe(table.length);
    expect(served).toEqual(table);
    const items = await itemsOf(node);
    expect(items.decision).toMatchObject({ decision: 'resume' });
    expect((await call(`${node.url}/v1/endpoints/items/generations`)).body.generations).toHaveLength(1);
  });

  it('a green rebuild that runs out of room keeps blue serving and the alias in place, and switches once there is room', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir('sluice-green-out-of-room-');
    const source = join(dir.path, 'items.jsonl');
    const body = 'x'.repeat(400);
    await writeFile(
      source,
      Array.from(
        { length: 8_000 },
        (_, i) => `${JSON.stringify({ id: i + 1, body: `${body}${i + 1}` })}\n`,
      ).join(''),
    );
    const apiPort = await freePort();
    const endpointYaml = (indexes: string) =>
      [
        `api: { port: ${apiPort} }`,
        'endpoints:',
        '  - name: items',
        `    source: { type: file, path: "${source}", format: jsonl }`,
        '    primaryKey: [id]',
        '    fields: { id: integer, body: string }',
        indexes,
      ].join('\n');
    const spec: NodeSpec = { ...localNode('h1', dir.path), extraYaml: endpointYaml('') };
    let blue: string;
    {
      await using node = await startNodeProcess(spec);
      spec.port = node.port;
      blue = (
        await waitFor(async () => ((await itemsOf(node))?.records === 8_000 ? itemsOf(node) : null), {
          timeoutMs: 30_000,
          what: 'blue to serve',
        })
      ).servingCache!;
    }
    // Blue is ~4 MB; the new index set makes the green ~30 MB, past an 8 MiB limit.
    const indexed: NodeSpec = { ...spec, extraYaml: endpointYaml('    indexes: [[body], [body, id]]') };
    {
      await using node = await startNodeProcess({ ...indexed, fileSizeLimitBytes: 8 * MiB });
      const stuck = await outOfRoom(node);
      expect(stuck.servingCache).toBe(blue);
      expect(stuck.buildingCache).not.toBeNull();
      expect(stuck.buildingCache).not.toBe(blue);
      const { generations, history } = (await call(`${node.url}/v1/endpoints/items/generations`)).body;
      expect(
        generations
          .map((g: { name: string; state: string }) => [g.name === blue ? 'blue' : 'green', g.state])
          .sort(),
      ).toEqual([
        ['blue', 'serving'],
        ['green', 'building'],
      ]);
      expect(history).toHaveLength(1); // the alias never moved to the partial green
      // The host's api-server serves blue, whole.
      await using _api = await startHostApiServer(node);
      const count = await call(`http://127.0.0.1:${apiPort}/v1/endpoints/items/count`, { json: {} });
      expect({ status: count.status, body: count.body }).toEqual({ status: 200, body: { count: 8_000 } });
      expect(node.child.child.exitCode).toBeNull();
    }

    await using node = await startNodeProcess(indexed);
    const switched = await waitFor(
      async () => {
        const items = await itemsOf(node);
        return items?.servingCache !== blue && items?.records === 8_000 && items.buildingCache === null
          ? items
          : null;
      },
      { timeoutMs: 60_000, what: 'the green to finish and switch once there is room' },
    );
    expect(switched.error).toBeNull();
    const { history } = (await call(`${node.url}/v1/endpoints/items/generations`)).body;
    expect(history).toContainEqual(expect.objectContaining({ from: blue, to: switched.servingCache }));
  });
});
