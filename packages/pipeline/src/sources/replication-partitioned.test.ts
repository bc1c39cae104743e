import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig } from '@sluice/core';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { allRecords } from '../../test/helpers.js';
import { cacheRows, replicationContext, tableRows, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';

const server = useLogicalPostgres();

const endpoint: EndpointConfig = {
  name: 'events',
  source: { type: 'postgres', connection: 'db', table: 'events' },
  primaryKey: ['id', 'region'],
  fields: { id: 'integer', region: 'string', v: 'integer' },
  indexes: [],
} as EndpointConfig;

async function partitionedTable(url: string) {
  await sql(
    url,
    `CREATE TABLE events (id int NOT NULL, region text NOT NULL, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
     CREATE TABLE events_eu PARTITION OF events FOR VALUES IN ('eu');
     CREATE TABLE events_us PARTITION OF events FOR VALUES IN ('us');
     INSERT INTO events SELECT i, CASE WHEN i % 2 = 0 THEN 'eu' ELSE 'us' END, i FROM generate_series(1, 20) i`,
  );
}

async function start(root: string, url: string) {
  const caches = await openCacheManager(root);
  const pipeline = await startEndpointPipeline(endpoint, replicationContext(caches, url));
  const served = async () => {
    const cache = await caches.openRo('events');
    try {
      return cacheRows(allRecords(cache));
    } finally {
      await cache.close();
    }
  };
  return {
    pipeline,
    served,
    /** Waits until the endpoint serves exactly the table's rows (ids are unique across regions here). */
    mirrored: (what: string) =>
      waitFor(
        async () => {
          const [table, cache] = await Promise.all([tableRows(url, 'events'), served()]);
          return cache.size === table.size && [...table].every(([id, row]) => cache.get(id) === row);
        },
        { timeoutMs: 30_000, what },
      ),
    async [Symbol.asyncDispose]() {
      await pipeline.stop();
      await caches.close();
    },
  };
}

describe('replication of a partitioned table', () => {
  it('defect: a partitioned table is rebuilt from scratch again and again, its changes never streamed', async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('partitioned');
    await partitionedTable(url);
    await using started = await start(join(dir.path, 'data'), url);
    const { pipeline, served } = started;
    await pipeline.whenServing({ timeoutMs: 30_000 });
    expect((await served()).size).toBe(20);
    const first = pipeline.status().servingCache;
    await sql(url, `INSERT INTO events VALUES (21, 'eu', 21), (22, 'us', 22)`);
    await sql(url, `UPDATE events SET v = 100 WHERE id = 2`);
    await sql(url, `DELETE FROM events WHERE id = 3`);
    await started.mirrored('the changes to the partitions');
    // Streamed into the generation that served, not found by building new ones from fresh snapshots.
    expect(pipeline.status().servingCache).toBe(first);
    const rows = await served();
    expect(rows.size).toBe(21);
    expect(JSON.parse(rows.get(2)!)).toEqual({ id: 2, region: 'eu', v: 100 });

    // TRUNCATE of the table reaches pgoutput as its leaves: the endpoint empties in place.
    await sql(url, 'TRUNCATE events');
    await started.mirrored('the truncate');
    expect((await served()).size).toBe(0);
    expect(pipeline.status().servingCache).toBe(first);
  }, 120_000);

  it('a partition truncated alone, detached or attached: the endpoint serves exactly the rows the table has', async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('partitions_moved');
    await partitionedTable(url);
    await using started = await start(join(dir.path, 'data'), url);
    const { pipeline, served } = started;
    await pipeline.whenServing({ timeoutMs: 30_000 });
    expect((await served()).size).toBe(20);

    // Only the eu rows go: the cache cannot tell them, so a new generation is built from what is left.
    await sql(url, 'TRUNCATE events_eu');
    await started.mirrored('a partition truncated');
    expect([...(await served()).values()].map((r) => JSON.parse(r).region)).toEqual(Array(10).fill('us'));

    // Detaching takes the us rows out of the table, streaming nothing.
    await sql(url, 'ALTER TABLE events DETACH PARTITION events_us');
    await started.mirrored('a partition detached');
    expect((await served()).size).toBe(0);

    // Attaching a filled table brings its rows, streaming nothing.
    await sql(
      url,
      `CREATE TABLE events_ap (LIKE events); INSERT INTO events_ap VALUES (30, 'ap', 30), (31, 'ap', 31)`,
    );
    await sql(url, `ALTER TABLE events ATTACH PARTITION events_ap FOR VALUES IN ('ap')`);
    await started.mirrored('a partition attached');
    expect((await served()).size).toBe(2);

    // And the generation built for it streams the new partition's changes.
    const now = pipeline.status().servingCache;
    await sql(url, `UPDATE events SET v = 300 WHERE id = 30`);
    await started.mirrored('a change in the attached partition');
    expect(JSON.parse((await served()).get(30)!)).toEqual({ id: 30, region: 'ap', v: 300 });
    expect(pipeline.status().servingCache).toBe(now);
  }, 180_000);
});
