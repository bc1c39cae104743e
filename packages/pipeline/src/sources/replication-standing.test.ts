/**
 * One replication slot feeds one generation: while a rebuild fills a green (or a green is held), the serving
 * generation stands at its last commit. Its status must say so — lag of what readers get, and how far the fed
 * generation is — rather than describe the green as if it were served.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig } from '@sluice/core';
import { type LogicalPostgresHandle, sql, startLogicalPostgres, tempDir, waitFor } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEndpointPipeline } from '../endpoint.js';

let server: LogicalPostgresHandle;
beforeAll(async () => {
  server = await startLogicalPostgres();
});
afterAll(async () => {
  await server?.[Symbol.asyncDispose]();
});

describe('replication status while the slot feeds a generation that does not serve', () => {
  it("defect: while a green was held, the serving generation stood still yet its lag read 0 (the green's)", {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('standing');
    await sql(url, 'CREATE TABLE orders (id int PRIMARY KEY, note text)');
    await sql(url, "INSERT INTO orders SELECT g, 'n' || g FROM generate_series(1, 20) g");
    const caches = await openCacheManager(join(dir.path, 'data'));
    const config = {
      name: 'orders',
      source: { type: 'postgres', connection: 'db', table: 'orders' },
      primaryKey: ['id'],
      fields: { id: 'integer', note: 'string' },
      indexes: [],
      switch: { mode: 'manual' },
    } as EndpointConfig;
    const pipeline = await startEndpointPipeline(config, {
      caches,
      events: { publish: async () => {} },
      connections: { db: { type: 'postgres', url } },
      nodeId: 't1',
      commitEveryMs: 50,
      retryMs: 100,
      replication: { keepaliveMs: 200 },
    });
    try {
      const blue = await pipeline.whenServing({ timeoutMs: 30_000 });
      await sql(url, "INSERT INTO orders VALUES (21, 'before the rebuild')");
      const servedLsn = await waitFor(
        () => {
          const r = pipeline.status().replication;
          return r && r.lagBytes === 0 && r.committedLsn !== null ? r.committedLsn : null;
        },
        { timeoutMs: 20_000, what: 'the serving generation to catch up' },
      );
      expect(pipeline.status().replication?.following).toBeNull();

      await pipeline.rebuild();
      const held = await waitFor(() => pipeline.status().held, {
        timeoutMs: 30_000,
        what: 'the rebuilt generation to be held (manual switch)',
      });
      await sql(url, "INSERT INTO orders SELECT g, 'during the hold' FROM generate_series(100, 140) g");
      // The held green follows the slot and catches up; the serving generation does not move.
      const status = await waitFor(
        () => {
          const s = pipeline.status();
          return s.replication?.following?.lagBytes === 0 && (s.replication.lagBytes ?? 0) > 0 ? s : null;
        },
        {
          timeoutMs: 20_000,
          what: `the serving generation's lag to show (${JSON.stringify(pipeline.status().replication)})`,
        },
      );
      expect(status.servingCache).toBe(blue);
      expect(status.replication).toMatchObject({
        committedLsn: servedLsn,
        following: { cache: held.cache, lagBytes: 0 },
      });
      expect(status.replication?.lagSeconds).toBeGreaterThan(0);
      // Promoted, the fed generation serves: one figure again.
      await pipeline.promote();
      await waitFor(
        () => {
          const r = pipeline.status().replication;
          return r?.following === null && r.lagBytes === 0 ? r : null;
        },
        { timeoutMs: 20_000, what: 'the promoted generation to be the one reported' },
      );
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});
