/**
 * What a replication endpoint reports and logs beyond its records: a slot feeds one generation, so with one slot
 * configured (`slot:`: no slot per generation, docs/generations.md) the serving generation stands at its last commit
 * while a rebuild fills a green (or a green is held), and its status must say so; and one cache commit may hold several source transactions (group commit), which its change log — what a
 * change feed sends — must still show apart.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig } from '@sluice/core';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';

const server = useLogicalPostgres();

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
      // One slot configured: one generation fed at a time (the serving one cannot follow beside the green).
      source: { type: 'postgres', connection: 'db', table: 'orders', slot: 'orders_one_slot' },
      primaryKey: ['id'],
      fields: { id: 'integer', note: 'string' },
      indexes: [],
      switch: { mode: 'manual' },
    } as EndpointConfig;
    const pipeline = await startEndpointPipeline(config, replicationContext(caches, url));
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

  it('defect: source transactions committed together reached the change log as one (each key once, one commit)', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('grouped');
    await sql(url, 'CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)');
    await sql(url, 'INSERT INTO accounts VALUES (1, 0), (2, 0)');
    const caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startEndpointPipeline(
      {
        name: 'accounts',
        source: { type: 'postgres', connection: 'db', table: 'accounts' },
        primaryKey: ['id'],
        fields: { id: 'integer', balance: 'integer' },
        indexes: [],
      } as EndpointConfig,
      replicationContext(caches, url),
    );
    try {
      await pipeline.whenServing({ timeoutMs: 30_000 });
      const cache = await caches.openRo('accounts');
      try {
        const from = cache.changeLog().head().last;
        // 100 transactions in one round trip: they reach the stream faster than a commit is written.
        const transactions = Array.from(
          { length: 100 },
          (_, i) => `BEGIN; UPDATE accounts SET balance = ${i + 1} WHERE id = ${(i % 2) + 1}; COMMIT;`,
        );
        await sql(url, transactions.join('\n'));
        await waitFor(() => (cache.get([2]) as { balance: number } | undefined)?.balance === 100, {
          timeoutMs: 20_000,
          what: 'the last transaction to be served',
        });
        const entries = cache.changeLog().read(from, 10_000);
        // Each transaction apart, in source order: its upsert, then a commit marker at its position.
        const upserts = entries
          .filter((e) => e.op === 'upsert')
          .map((e) => (e.op === 'upsert' ? e.record.balance : null));
        expect(upserts).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
        expect(entries.map((e) => e.op)).toEqual(
          Array.from({ length: 100 }, () => ['upsert', 'commit']).flat(),
        );
        const lsns = entries.flatMap((e) =>
          e.op === 'commit' ? [(e.position?.['accounts.source'] as { lsn: string } | undefined)?.lsn] : [],
        );
        expect(new Set(lsns).size).toBe(100);
      } finally {
        await cache.close();
      }
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});
