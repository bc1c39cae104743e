/**
 * Updates that leave a TOASTed (large, out-of-line) column unchanged: pgoutput sends such a column as 'u' (no value),
 * and the endpoint fills it from the record its cache already holds, in the commit's write transaction.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig, EndpointPipeline } from '@sluice/core';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { committedLsn, replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';
import { compareLsn } from './replication/lsn.js';

const server = useLogicalPostgres();

const source = { type: 'postgres', connection: 'db', table: 'items' } as const;
const ENDPOINTS: EndpointConfig[] = [
  // The whole row.
  { name: 'items', source, primaryKey: ['id'], indexes: [] },
  // Without the TOASTed columns: nothing is missing.
  { name: 'itemqty', source, primaryKey: ['id'], indexes: [], select: ['id', 'qty'] },
  // A filter on a TOASTed column, and a rename of it: the filter is evaluated on the merged record.
  {
    name: 'titled',
    source,
    primaryKey: ['id'],
    indexes: [['qty']],
    filter: { name: { $ne: 'hidden' } },
    select: { id: 'id', title: 'name', qty: 'qty' },
  },
  // Rows enter by an update that leaves the TOASTed columns unchanged: no stored record to fill them from, so the
  // values are read from the table (replication-toast-unheld.test.ts has more of these).
  { name: 'cheap', source, primaryKey: ['id'], indexes: [], filter: { qty: { $lt: 1000 } } },
] as EndpointConfig[];

/** A text of `n` × 32 random hex characters: compresses badly, so over ~2 KB it is stored out of line. */
const bigText = (n: number) => `(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, ${n}))`;

/** The record with `big` (a 96 KB value) shown as 'BIG', so a failure prints something readable. */
function short(record: Record<string, unknown> | undefined, big: string) {
  if (record === undefined) return undefined;
  return Object.fromEntries(Object.entries(record).map(([k, v]) => [k, v === big ? 'BIG' : v]));
}

async function startAll(root: string, url: string) {
  const caches = await openCacheManager(root);
  const pipelines: EndpointPipeline[] = [];
  for (const endpoint of ENDPOINTS)
    pipelines.push(
      await startEndpointPipeline(endpoint, replicationContext(caches, url, { nodeId: 'toast' })),
    );
  for (const pipeline of pipelines) await pipeline.whenServing({ timeoutMs: 30_000 });
  const byName = (name: string) => pipelines[ENDPOINTS.findIndex((e) => e.name === name)]!;
  return {
    caches,
    byName,
    /** The record `id` of `endpoint` once its cache committed `lsn` (what `sluice-min-position` waits for). */
    async recordAt(endpoint: string, id: number, lsn: string) {
      const cache = await caches.openRo(endpoint);
      try {
        await waitFor(
          () => {
            const at = committedLsn(cache.commitState().checkpoint, `${endpoint}.source`);
            return at !== null && compareLsn(at, lsn) >= 0;
          },
          { timeoutMs: 20_000, what: `${endpoint} at ${lsn}` },
        );
        return cache.get([id]);
      } finally {
        await cache.close();
      }
    },
    async [Symbol.asyncDispose]() {
      for (const pipeline of pipelines) await pipeline.stop();
      await caches.close();
    },
  };
}

describe('replication: unchanged TOAST values', () => {
  it('defect: an update leaving a TOASTed column unchanged was skipped (a bad record), so the row stayed stale for good — even where the endpoint does not keep the column — while read-your-writes said it was fresh', async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('toast');
    await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, name text, qty int, meta jsonb)');
    await sql(
      url,
      `INSERT INTO items SELECT i, 'n' || i, i, jsonb_build_object('i', i) FROM generate_series(1, 20) i`,
    );
    // Row 11 starts outside `cheap`'s filter, with large values.
    await sql(url, `UPDATE items SET qty = 5000, name = ${bigText(3000)} WHERE id = 11`);
    const root = join(dir.path, 'data');
    let bigName: string;
    {
      await using all = await startAll(root, url);

      await sql(
        url,
        `UPDATE items SET name = ${bigText(3000)}, meta = jsonb_build_object('blob', ${bigText(3000)}) WHERE id = 10`,
      );
      const [row] = await sql<{ name: string; meta: unknown }>(
        url,
        'SELECT name, meta FROM items WHERE id = 10',
      );
      bigName = row!.name;
      expect(bigName.length).toBe(96_000);
      // Out of line indeed: the stored datum is far smaller than the text (compressed in a TOAST table or not,
      // pgoutput sends it only when it changed).
      await sql(url, 'UPDATE items SET qty = 4242 WHERE id = 10');
      await sql(url, 'UPDATE items SET qty = 7 WHERE id = 11'); // enters `cheap`: nothing stored to fill from
      const [{ lsn }] = (await sql<{ lsn: string }>(url, 'SELECT pg_current_wal_lsn()::text AS lsn')) as [
        { lsn: string },
      ];

      // The full record: the update applied, the unchanged values kept.
      const item = await all.recordAt('items', 10, lsn);
      expect(item?.qty).toBe(4242);
      expect(item?.name === bigName && JSON.stringify(item?.meta) === JSON.stringify(row!.meta)).toBe(true);
      // An endpoint without the TOASTed columns: nothing was missing.
      expect(await all.recordAt('itemqty', 10, lsn)).toEqual({ id: 10, qty: 4242 });
      // A filter naming the TOASTed column, renamed by `select`: evaluated on the merged record.
      expect(short(await all.recordAt('titled', 10, lsn), bigName)).toEqual({
        id: 10,
        title: 'BIG',
        qty: 4242,
      });
      // Row 11 entered `cheap` with an unchanged TOAST value and no stored record: its value is read from the table.
      // (Before: a bad record, and the row missing from `cheap` for good — this test expected that.)
      const [row11] = await sql<{ name: string }>(url, 'SELECT name FROM items WHERE id = 11');
      expect(short(await all.recordAt('cheap', 11, lsn), row11!.name)).toEqual({
        id: 11,
        name: 'BIG',
        qty: 7,
        meta: { i: 11 },
      });
      expect(await all.recordAt('cheap', 10, lsn)).toBeUndefined(); // left the filter (4242 ≥ 1000)
      for (const name of ['items', 'itemqty', 'titled', 'cheap'])
        expect(all.byName(name).status().badRecords).toEqual({ count: 0, last: null });

      // The change log carries the full merged record (an upsert), like any update.
      const itemqty = await all.caches.openRo('itemqty');
      const log = itemqty.changeLog();
      const entries = log.read(log.head().first - 1, 1000);
      await itemqty.close();
      expect(entries.filter((e) => e.op !== 'commit' && e.key[0] === 10).at(-1)).toMatchObject({
        op: 'upsert',
        record: { id: 10, qty: 4242 },
      });

      // One source transaction: two updates of row 10 leaving its values unchanged (the second fills from the first,
      // staged in the same commit), a large value written then left unchanged (row 13), a row leaving `titled`.
      await sql(
        url,
        `UPDATE items SET qty = 1 WHERE id = 10; UPDATE items SET qty = 2 WHERE id = 10;
         UPDATE items SET name = 'hidden' WHERE id = 12;
         UPDATE items SET name = ${bigText(3000)} WHERE id = 13; UPDATE items SET qty = 99 WHERE id = 13`,
      );
      const [{ lsn: lsn2 }] = (await sql<{ lsn: string }>(
        url,
        'SELECT pg_current_wal_lsn()::text AS lsn',
      )) as [{ lsn: string }];
      const [row13] = await sql<{ name: string }>(url, 'SELECT name FROM items WHERE id = 13');
      expect(short(await all.recordAt('titled', 10, lsn2), bigName)).toEqual({
        id: 10,
        title: 'BIG',
        qty: 2,
      });
      expect(await all.recordAt('titled', 12, lsn2)).toBeUndefined();
      expect(short(await all.recordAt('items', 13, lsn2), row13!.name)).toMatchObject({
        id: 13,
        qty: 99,
        name: 'BIG',
      });
      // Row 10 re-enters `cheap` twice with nothing stored: the first read from the table, the second filled from it.
      // (Before: two more bad records, and the row missing.)
      expect(short(await all.recordAt('cheap', 10, lsn2), bigName)).toMatchObject({
        id: 10,
        name: 'BIG',
        qty: 2,
      });
      expect(all.byName('cheap').status().badRecords).toEqual({ count: 0, last: null });

      // A record no field can hold exactly (a JSON integer past 2^53) is still a bad record.
      await sql(url, `UPDATE items SET meta = '{"n": 12345678901234567890}' WHERE id = 5`);
      const [{ lsn: lsn3 }] = (await sql<{ lsn: string }>(
        url,
        'SELECT pg_current_wal_lsn()::text AS lsn',
      )) as [{ lsn: string }];
      expect(await all.recordAt('cheap', 5, lsn3)).toBeUndefined();
      expect(all.byName('cheap').status().badRecords.count).toBe(1);
    }

    // The bad-record evidence survives a restart (resumed in place): its count and its last reason.
    {
      await using again = await startAll(root, url);
      expect(again.byName('cheap').decision.decision).toBe('resume');
      const cheap = again.byName('cheap').status().badRecords;
      expect(cheap.count).toBe(1);
      expect(cheap.last?.reason).toMatch(/cannot be held exactly/);
    }
  });
});
