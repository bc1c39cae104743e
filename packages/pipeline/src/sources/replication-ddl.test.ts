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

  it('defect: a column retyped to its own type USING an expression, or to a smaller numeric scale (values rounded), kept being served with the old values for good', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('ddl_same_type');
    await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int, p numeric(10,2))');
    await sql(url, 'INSERT INTO items SELECT i, i, i + 0.55 FROM generate_series(1, 20) i');
    const caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startEndpointPipeline(ITEMS, replicationContext(caches, url, { nodeId: 'ddl2' }));
    /** The alias's cache and record `id` as served now. */
    const served = async (id: number) => {
      const cache = await caches.openRo('items');
      try {
        return { cache: cache.name, record: cache.get([id]) };
      } finally {
        await cache.close();
      }
    };
    try {
      const first = await pipeline.whenServing({ timeoutMs: 30_000 });
      expect((await served(7)).record).toEqual({ id: 7, v: 7, p: 7.55 });

      // A column's catalog row altered without a value changed (its next row change brings the relation message
      // that records it), then the table rewritten without a value changed: no new generation.
      await sql(url, 'ALTER TABLE items ALTER COLUMN v SET NOT NULL');
      await sql(url, 'INSERT INTO items VALUES (21, 21, 21.55)');
      await waitFor(async () => (await served(21)).record !== undefined, {
        timeoutMs: 20_000,
        what: 'row 21 after SET NOT NULL',
      });
      await sql(url, 'VACUUM FULL items');
      await sql(url, 'UPDATE items SET p = 21.55 WHERE id = 21');
      await new Promise((resolve) => setTimeout(resolve, 2_500)); // two lag probes (lagProbeMs 1 000)
      expect((await served(21)).cache).toBe(first);

      // Same type, new values: a table rewrite, and nothing streams.
      await sql(url, 'ALTER TABLE items ALTER COLUMN v TYPE int USING v * 100');
      // Before: timed out, record 7 still {id: 7, v: 7, p: 7.55} from the first generation.
      const rewritten = await waitFor(
        async () => {
          const now = await served(7);
          return now.record?.v === 700 ? now : null;
        },
        {
          timeoutMs: 20_000,
          what: 'the column rewritten USING an expression to be served with its new values',
        },
      );
      expect(rewritten.cache).not.toBe(first);

      // Same type OID, a smaller scale: PostgreSQL rounds every value.
      await sql(url, 'ALTER TABLE items ALTER COLUMN p TYPE numeric(10,1)');
      const rounded = await waitFor(
        async () => {
          const now = await served(7);
          return now.record?.p === 7.6 ? now : null;
        },
        { timeoutMs: 20_000, what: 'the column rounded by a smaller scale to be served rounded' },
      );
      expect(rounded.cache).not.toBe(rewritten.cache);
      const all = await caches.openRo('items');
      try {
        for (let id = 1; id <= 21; id++) expect(all.get([id])).toEqual({ id, v: id * 100, p: id + 0.6 });
      } finally {
        await all.close();
      }
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});
