/**
 * `ALTER TYPE … RENAME VALUE` changes what every row holding that value reads — in an enum column, an array of the
 * enum, a domain over it — and streams nothing: no row changes, no relation message names the table. The generation
 * must not keep serving the old label.
 */
import { join } from 'node:path';
import { type CacheManager, openCacheManager } from '@sluice/cache';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { aliasRecords } from '../../test/helpers.js';
import { itemsTableEndpoint, replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';

const server = useLogicalPostgres();

/** The table's rows as the endpoint should serve them (enum arrays read as their text, README § PostgreSQL values). */
async function tableRecords(url: string): Promise<Record<string, unknown>[]> {
  return sql(url, 'SELECT id, m::text AS m, ms::text AS ms, dm::text AS dm FROM items ORDER BY id');
}

describe('replication: an enum value renamed', () => {
  it('defect: an enum value renamed (ALTER TYPE … RENAME VALUE) kept being served under its old label, while streaming and across a restart', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('enumrename');
    await sql(url, "CREATE TYPE mood AS ENUM ('sad', 'ok')");
    await sql(url, 'CREATE DOMAIN calm AS mood');
    await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, m mood, ms mood[], dm calm)');
    await sql(url, "INSERT INTO items SELECT i, 'ok', '{ok,sad}', 'ok' FROM generate_series(1, 10) i");
    const root = join(dir.path, 'data');
    const context = (caches: CacheManager) => replicationContext(caches, url, { nodeId: 'enumren' });

    {
      const caches = await openCacheManager(root);
      const pipeline = await startEndpointPipeline(itemsTableEndpoint(), context(caches));
      try {
        const first = await pipeline.whenServing({ timeoutMs: 30_000 });
        // A value added changes no row: the generation goes on.
        await sql(url, "ALTER TYPE mood ADD VALUE 'great'");
        await sql(url, "UPDATE items SET m = 'great' WHERE id = 1");
        await waitFor(async () => (await aliasRecords(caches, 'items'))[0]?.m === 'great', {
          timeoutMs: 20_000,
          what: 'the added value to stream',
        });
        expect(pipeline.status().servingCache).toBe(first);

        await sql(url, "ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'");
        const want = await tableRecords(url);
        expect(want[1]).toEqual({ id: 2, m: 'fine', ms: '{fine,sad}', dm: 'fine' });
        // Before: timed out, every row but 1 still served with 'ok'.
        let served: Record<string, unknown>[] = [];
        await waitFor(
          async () => {
            served = await aliasRecords(caches, 'items');
            return JSON.stringify(served) === JSON.stringify(want);
          },
          { timeoutMs: 20_000, what: 'the renamed value to be served' },
        ).catch(() => expect(served).toEqual(want));
        expect(pipeline.status().servingCache).not.toBe(first);
      } finally {
        await pipeline.stop();
        await caches.close();
      }
    }

    // Renamed while the endpoint is stopped: the restart must not continue the generation.
    await sql(url, "ALTER TYPE mood RENAME VALUE 'sad' TO 'blue'");
    const caches = await openCacheManager(root);
    const pipeline = await startEndpointPipeline(itemsTableEndpoint(), context(caches));
    try {
      // Before: { decision: 'resume', … }.
      expect(pipeline.decision).toMatchObject({
        decision: 'from-scratch',
        reason: expect.stringMatching(/'sad' of type .*mood.* was renamed to 'blue'/),
      });
      const want = await tableRecords(url);
      await waitFor(
        async () => JSON.stringify(await aliasRecords(caches, 'items')) === JSON.stringify(want),
        {
          timeoutMs: 30_000,
          what: 'the rebuilt generation to serve the renamed value',
        },
      );
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});
