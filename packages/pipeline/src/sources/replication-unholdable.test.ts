/**
 * Values an endpoint's schema cannot hold (a `numeric` with more digits than a double holds reads as text, which a
 * `number` field refuses): the row is a bad record. The mirror must then not hold the row at all — never the
 * value PostgreSQL replaced.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { allRecords } from '../../test/helpers.js';
import { itemsTableEndpoint, replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';

const server = useLogicalPostgres();

describe('replication: rows whose new values the endpoint cannot hold', () => {
  it('defect: an UPDATE to a value the schema refuses (numeric beyond a double) left the row served with the value PostgreSQL replaced', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('unholdable');
    await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, amount numeric)');
    await sql(url, 'INSERT INTO items SELECT i, i + 0.5 FROM generate_series(1, 5) i');
    const caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startEndpointPipeline(
      itemsTableEndpoint(),
      replicationContext(caches, url, { nodeId: 'unh' }),
    );
    /** The records served now, by id. */
    const served = async () => {
      const cache = await caches.openRo('items');
      try {
        return new Map(allRecords(cache).map((r) => [r.id as number, r]));
      } finally {
        await cache.close();
      }
    };
    /** Runs `statement`, then a marker transaction, and waits until the marker is served (all before it is too). */
    let marker = 1000;
    const applied = async (statement: string) => {
      await sql(url, statement);
      const id = ++marker;
      await sql(url, `INSERT INTO items VALUES (${id}, 0)`);
      await waitFor(async () => (await served()).has(id), { timeoutMs: 20_000, what: `marker ${id}` });
    };
    try {
      await pipeline.whenServing({ timeoutMs: 30_000 });
      expect((await served()).get(2)).toEqual({ id: 2, amount: 2.5 });

      await applied('UPDATE items SET amount = 12345678901234567890.123 WHERE id = 2');
      expect(pipeline.status().badRecords.count).toBe(1);
      // Before: { id: 2, amount: 2.5 } — a value PostgreSQL no longer holds, served as fresh.
      expect((await served()).has(2)).toBe(false);
      expect((await served()).get(3)).toEqual({ id: 3, amount: 3.5 });

      // An INSERT of such a row is missing too; and once its value fits again, the row is back.
      await applied('INSERT INTO items VALUES (50, 98765432109876543210.5)');
      expect((await served()).has(50)).toBe(false);
      await applied('UPDATE items SET amount = 7.25 WHERE id IN (2, 50)');
      const now = await served();
      expect(now.get(2)).toEqual({ id: 2, amount: 7.25 });
      expect(now.get(50)).toEqual({ id: 50, amount: 7.25 });
      expect(pipeline.status().badRecords.count).toBe(2);
      expect(pipeline.status().error).toBeNull();
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});
