/**
 * A column dropped and added again under the same name and type: every row now holds NULL (or the new column's
 * default) there, and no change of theirs streams. By name and type the table looks as before, so only the
 * column's identity (its `attnum`) tells the generation it is another column — in the lag probe while streaming,
 * and in the restart check after a stop.
 */
import { join } from 'node:path';
import { type CacheManager, openCacheManager } from '@sluice/cache';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { itemsTableEndpoint, replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';

const server = useLogicalPostgres();

const ITEMS = itemsTableEndpoint();

/** Record `id` as the alias serves it now, and the generation that serves it. */
async function served(caches: CacheManager, id: number) {
  const cache = await caches.openRo('items');
  try {
    return { cache: cache.name, record: cache.get([id]) };
  } finally {
    await cache.close();
  }
}

describe('replication: a column dropped and added again', () => {
  it("defect: a column dropped and re-added with the same name and type kept every row's old value (PostgreSQL holds NULL), while streaming and across a restart", {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('readded');
    await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int, secret text)');
    await sql(url, "INSERT INTO items SELECT i, i, 's' || i FROM generate_series(1, 20) i");
    const root = join(dir.path, 'data');
    const context = (caches: CacheManager) => replicationContext(caches, url, { nodeId: 'readd' });

    {
      const caches = await openCacheManager(root);
      const pipeline = await startEndpointPipeline(ITEMS, context(caches));
      try {
        const first = await pipeline.whenServing({ timeoutMs: 30_000 });
        expect((await served(caches, 7)).record).toEqual({ id: 7, v: 7, secret: 's7' });
        await sql(url, 'ALTER TABLE items DROP COLUMN secret');
        await sql(url, 'ALTER TABLE items ADD COLUMN secret text');
        // Before: timed out, record 7 still {id: 7, v: 7, secret: 's7'} from the first generation.
        const readded = await waitFor(
          async () => {
            const now = await served(caches, 7);
            return now.record?.secret === null ? now : null;
          },
          { timeoutMs: 20_000, what: 'the re-added column to be served as PostgreSQL holds it (NULL)' },
        );
        expect(readded.cache).not.toBe(first);
        for (let id = 1; id <= 20; id++)
          expect((await served(caches, id)).record).toEqual({ id, v: id, secret: null });
        await sql(url, "UPDATE items SET secret = 'again' || id");
        await waitFor(async () => (await served(caches, 20)).record?.secret === 'again20', {
          timeoutMs: 20_000,
          what: 'the new generation to follow the table',
        });
      } finally {
        await pipeline.stop();
        await caches.close();
      }
    }

    // Dropped and re-added while the endpoint is stopped: the restart must not continue the generation.
    await sql(url, 'ALTER TABLE items DROP COLUMN secret');
    await sql(url, 'ALTER TABLE items ADD COLUMN secret text');
    const caches = await openCacheManager(root);
    const before = caches.resolveAlias('items')?.cache;
    const pipeline = await startEndpointPipeline(ITEMS, context(caches));
    try {
      // Before: { decision: 'resume', reason: 'consistent checkpoint at epoch …' }.
      expect(pipeline.decision).toMatchObject({
        decision: 'from-scratch',
        reason: expect.stringMatching(/"secret" was dropped and added again/),
      });
      const rebuilt = await waitFor(
        async () => {
          const now = await served(caches, 7);
          return now.cache !== before && now.record?.secret === null ? now : null;
        },
        { timeoutMs: 30_000, what: 'the rebuilt generation to serve the re-added column' },
      );
      expect(rebuilt.record).toEqual({ id: 7, v: 7, secret: null });
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});
