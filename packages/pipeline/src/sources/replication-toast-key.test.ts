/**
 * A primary-key update of a row whose large (TOASTed, out-of-line) column it leaves unchanged: pgoutput sends the new
 * row without that column ('u') and, under the default replica identity, only the old key — so the value can come
 * only from the record the cache holds under the OLD key.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig } from '@sluice/core';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { committedLsn, replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';
import { compareLsn } from './replication/lsn.js';

const server = useLogicalPostgres();

const ITEMS = {
  name: 'items',
  source: { type: 'postgres', connection: 'db', table: 'items' },
  primaryKey: ['id'],
  indexes: [],
} as EndpointConfig;

describe('replication: key changes of TOASTed rows', () => {
  it('defect: a primary-key update of a row with an unchanged TOASTed column lost the row (a bad record), while read-your-writes answered 404 as fresh', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('toastkey');
    await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, qty int, blob text)');
    await sql(
      url,
      `INSERT INTO items SELECT i, i, (SELECT string_agg(md5(random()::text || g), '') FROM generate_series(1, 400) g) FROM generate_series(1, 5) i`,
    );
    const caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startEndpointPipeline(ITEMS, replicationContext(caches, url, { nodeId: 'tk' }));
    try {
      await pipeline.whenServing({ timeoutMs: 30_000 });
      await sql(url, 'UPDATE items SET id = 100 WHERE id = 3');
      const [{ lsn }] = (await sql<{ lsn: string }>(url, 'SELECT pg_current_wal_lsn()::text AS lsn')) as [
        { lsn: string },
      ];
      const [row] = await sql<{ qty: number; blob: string }>(
        url,
        'SELECT qty, blob FROM items WHERE id = 100',
      );
      const cache = await caches.openRo('items');
      try {
        await waitFor(
          () => {
            const at = committedLsn(cache.commitState().checkpoint, 'items.source');
            return at !== null && compareLsn(at, lsn) >= 0;
          },
          { timeoutMs: 20_000, what: `items at ${lsn}` },
        );
        expect(cache.get([3])).toBeUndefined();
        const moved = cache.get([100]) as { id: number; qty: number; blob: string } | undefined;
        expect({ id: moved?.id, qty: moved?.qty, blobIntact: moved?.blob === row!.blob }).toEqual({
          id: 100,
          qty: 3,
          blobIntact: true,
        });
        expect(pipeline.status().badRecords.count).toBe(0);
      } finally {
        await cache.close();
      }
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});
