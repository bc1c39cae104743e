/**
 * Table changes that rewrite what every row reads without a single row change to stream: a dropped column, a column
 * retyped `USING` an expression. pgoutput sends no DDL and no relation message until some row of the table changes,
 * so the lag probe has to notice them (as it does a column added with a default), or the generation serves the old
 * shape for as long as the table stays quiet — while `sluice-min-position` calls it fresh.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { itemsTableEndpoint, replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';

const server = useLogicalPostgres();

const ITEMS = itemsTableEndpoint();

describe('replication: table changes no row change streams', () => {
  it('defect: a dropped column, and a column retyped USING an expression, kept being served as before for as long as no row of the table changed', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('ddl');
    await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int, secret text)');
    await sql(url, "INSERT INTO items SELECT i, i, 's' || i FROM generate_series(1, 20) i");
    const caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startEndpointPipeline(ITEMS, replicationContext(caches, url, { nodeId: 'ddl' }));
    try {
      const first = await pipeline.whenServing({ timeoutMs: 30_000 });
      /** Record `id` as the alias serves it now. */
      const served = async (id: number) => {
        const cache = await caches.openRo('items');
        try {
          return { cache: cache.name, record: cache.get([id]) };
        } finally {
          await cache.close();
        }
      };
      expect((await served(7)).record).toEqual({ id: 7, v: 7, secret: 's7' });

      // Dropped (say, for privacy): every row loses it at once, and nothing streams.
      await sql(url, 'ALTER TABLE items DROP COLUMN secret');
      // Before: timed out, record 7 still {id: 7, v: 7, secret: 's7'} from the first generation.
      const dropped = await waitFor(
        async () => {
          const now = await served(7);
          return now.record !== undefined && !Object.hasOwn(now.record, 'secret') ? now : null;
        },
        { timeoutMs: 20_000, what: 'the dropped column to leave the served records' },
      );
      expect(dropped.cache).not.toBe(first);
      expect(dropped.record).toEqual({ id: 7, v: 7 });

      // Retyped with new values for every row (a table rewrite, which streams nothing either).
      await sql(url, "ALTER TABLE items ALTER COLUMN v TYPE text USING 'v' || v");
      const retyped = await waitFor(
        async () => {
          const now = await served(7);
          return now.record?.v === 'v7' ? now : null;
        },
        { timeoutMs: 20_000, what: 'the retyped column to be served with its new values' },
      );
      expect(retyped.cache).not.toBe(dropped.cache);
      expect((await caches.info(retyped.cache))?.schema.fields.v).toBe('string');
      const all = await caches.openRo('items');
      try {
        for (let id = 1; id <= 20; id++) expect(all.get([id])).toEqual({ id, v: `v${id}` });
      } finally {
        await all.close();
      }
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});
