/**
 * Stored generated columns: `pgoutput` (before PostgreSQL 18) does not publish them, so their values never stream —
 * no relation message names them, no row change carries them. The mirror leaves them out (snapshot and stream
 * alike) rather than take every relation message for a dropped column.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { allRecords } from '../../test/helpers.js';
import { itemsTableEndpoint, replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';

const server = useLogicalPostgres();

describe('replication: stored generated columns', () => {
  it('defect: a table with a stored generated column was rebuilt from scratch (a new generation) at every change, each relation message taken for the column dropped', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('generated');
    await sql(
      url,
      'CREATE TABLE items (id int PRIMARY KEY, qty int, price int, total int GENERATED ALWAYS AS (qty * price) STORED)',
    );
    await sql(url, 'INSERT INTO items (id, qty, price) SELECT i, i, 10 FROM generate_series(1, 20) i');
    const caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startEndpointPipeline(
      itemsTableEndpoint(),
      replicationContext(caches, url, { nodeId: 'gen' }),
    );
    /** The alias's cache and its records as served now. */
    const served = async () => {
      const cache = await caches.openRo('items');
      try {
        return { cache: cache.name, records: allRecords(cache) };
      } finally {
        await cache.close();
      }
    };
    try {
      const first = await pipeline.whenServing({ timeoutMs: 30_000 });

      for (let round = 1; round <= 3; round++) {
        await sql(url, `UPDATE items SET qty = qty + 100 WHERE id = ${round}`);
        await sql(url, `INSERT INTO items (id, qty, price) VALUES (${100 + round}, ${round}, 1)`);
        // Before: each round's first change failed the run (`column "total" was dropped`) and the endpoint
        // switched to a new generation built from scratch.
        const now = await waitFor(
          async () => {
            const state = await served();
            return state.records.some((r) => r.id === 100 + round) ? state : null;
          },
          { timeoutMs: 20_000, what: `round ${round}'s changes to be served` },
        );
        expect(now.cache).toBe(first);
        expect(now.records.find((r) => r.id === round)).toMatchObject({ qty: round + 100, price: 10 });
        expect(now.records.find((r) => r.id === 100 + round)).toMatchObject({ qty: round, price: 1 });
      }
      // The snapshot leaves the generated column out, as the stream must: one shape of record either way, and no
      // field the records never carry.
      const { records } = await served();
      expect(records.find((r) => r.id === 7)).toEqual({ id: 7, qty: 7, price: 10 });
      expect(records.find((r) => r.id === 1)).toEqual({ id: 1, qty: 101, price: 10 });
      expect(records.find((r) => r.id === 101)).toEqual({ id: 101, qty: 1, price: 1 });
      expect(Object.keys((await caches.info(first))!.schema.fields).sort()).toEqual(['id', 'price', 'qty']);
      expect(pipeline.status().error).toBeNull();
      expect(pipeline.status().badRecords.count).toBe(0);
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});
