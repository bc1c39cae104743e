/**
 * Rows that reach an endpoint by an UPDATE leaving a TOASTed (large, out-of-line) column unchanged, when the endpoint
 * holds no record of them to take that column from: the row was outside the endpoint's `filter`, or its cache lost it
 * (a bad record deleted it). pgoutput sends no value for such a column, so the value is read from the table by key.
 * The served records are compared with the table, row by row, once the endpoint committed the writes' LSN.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig, EndpointPipeline } from '@sluice/core';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { allRecords } from '../../test/helpers.js';
import {
  cacheRows,
  committedLsn,
  replicationContext,
  tableRows,
  useLogicalPostgres,
} from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';
import { compareLsn } from './replication/lsn.js';

const server = useLogicalPostgres();

const source = { type: 'postgres', connection: 'db', table: 'items' } as const;
const ACTIVE = { status: 'active' };
const ENDPOINTS: EndpointConfig[] = [
  // Rows enter by an update of `status` that leaves `body` (TOASTed) unchanged.
  { name: 'active', source, primaryKey: ['id'], indexes: [], filter: ACTIVE },
  // The same rows without `body`: nothing is missing from them.
  {
    name: 'activeqty',
    source,
    primaryKey: ['id'],
    indexes: [],
    filter: ACTIVE,
    select: ['id', 'status', 'qty'],
  },
  // A filter on `body` that `select` drops: the filter cannot be decided on a record the cache would merge.
  {
    name: 'bodyless',
    source,
    primaryKey: ['id'],
    indexes: [],
    filter: { body: { $ne: '' } },
    select: ['id', 'status'],
  },
  // Every row: one the cache lost (a bad record deleted it) comes back by an update that leaves `body` unchanged.
  { name: 'everything', source, primaryKey: ['id'], indexes: [] },
] as EndpointConfig[];

/** What each endpoint should serve: the rows of the table it mirrors, as a query. */
const MIRRORS: Record<string, string> = {
  active: `(SELECT * FROM items WHERE status = 'active')`,
  activeqty: `(SELECT id, status, qty FROM items WHERE status = 'active')`,
  bodyless: `(SELECT id, status FROM items WHERE body <> '')`,
  everything: 'items',
};

/** A text of `n` × 32 random hex characters: it compresses to about half, so it is still stored out of line (TOASTed). */
const bigText = (n: number) =>
  `(SELECT string_agg(md5(random()::text || g), '') FROM generate_series(1, ${n}) g)`;

async function startAll(root: string, url: string) {
  const caches = await openCacheManager(root);
  const pipelines: EndpointPipeline[] = [];
  for (const endpoint of ENDPOINTS)
    pipelines.push(
      await startEndpointPipeline(endpoint, replicationContext(caches, url, { nodeId: 'unheld' })),
    );
  for (const pipeline of pipelines) await pipeline.whenServing({ timeoutMs: 30_000 });
  const byName = (name: string) => pipelines[ENDPOINTS.findIndex((e) => e.name === name)]!;
  return {
    byName,
    /**
     * How `endpoint`'s records differ from the table once its cache committed PostgreSQL's current WAL position:
     * one line per id missing, extra or different (empty when the mirror is exact).
     */
    async differences(endpoint: string): Promise<string[]> {
      const [{ lsn }] = (await sql<{ lsn: string }>(url, 'SELECT pg_current_wal_lsn()::text AS lsn')) as [
        { lsn: string },
      ];
      await using cache = await caches.openRo(endpoint);
      await waitFor(
        () => {
          const at = committedLsn(cache.commitState().checkpoint, `${endpoint}.source`);
          return at !== null && compareLsn(at, lsn) >= 0;
        },
        { timeoutMs: 20_000, what: `${endpoint} at ${lsn}` },
      );
      const served = cacheRows(allRecords(cache));
      const table = await tableRows(url, MIRRORS[endpoint]!);
      const out: string[] = [];
      for (const [id, row] of table)
        if (!served.has(id)) out.push(`${endpoint}: row ${id} missing`);
        else if (served.get(id) !== row) out.push(`${endpoint}: row ${id} differs`);
      for (const id of served.keys())
        if (!table.has(id)) out.push(`${endpoint}: row ${id} served, not in the table`);
      return out;
    },
    async [Symbol.asyncDispose]() {
      for (const pipeline of pipelines) await pipeline.stop();
      await caches.close();
    },
  };
}

/** The table `items`: rows 1–6, all `draft` but row 1, each with a 100 KB `body`. */
async function createItems(url: string): Promise<void> {
  await sql(
    url,
    'CREATE TABLE items (id int PRIMARY KEY, status text NOT NULL, qty int, amount numeric, body text)',
  );
  await sql(
    url,
    `INSERT INTO items SELECT i, CASE WHEN i = 1 THEN 'active' ELSE 'draft' END, i, i + 0.5, ${bigText(3200)}
       FROM generate_series(1, 6) i`,
  );
  const [stored] = await sql<{ inline: number; text: number }>(
    url,
    'SELECT pg_column_size(body) AS inline, length(body) AS text FROM items WHERE id = 2',
  );
  // Out of line indeed (a 100 KB text of hex digits compresses to about half, never under TOAST's 2 KB threshold).
  expect(stored!.text).toBe(102_400);
  expect(stored!.inline).toBeGreaterThan(2_000);
}

describe('replication: unchanged TOAST values of rows the endpoint does not hold', () => {
  it('defect: a row entering a filtered endpoint by an UPDATE that left its TOASTed column unchanged became a bad record and stayed missing for good', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('unheld');
    await createItems(url);
    await using all = await startAll(join(dir.path, 'data'), url);
    for (const name of Object.keys(MIRRORS)) expect(await all.differences(name)).toEqual([]);

    // Row 2 enters the filter; `body` is left unchanged (pgoutput: 'u', no value).
    await sql(url, `UPDATE items SET status = 'active' WHERE id = 2`);
    // Row 6 enters it under a new key: the value would come from the record under the old key, which is not held.
    await sql(url, `UPDATE items SET status = 'active', id = 60 WHERE id = 6`);
    // Row 5 leaves `everything` (an amount its schema cannot hold: a bad record deletes it), then comes back.
    await sql(url, 'UPDATE items SET amount = 12345678901234567890.123 WHERE id = 5');
    await sql(url, 'UPDATE items SET amount = 5.25 WHERE id = 5');

    expect([
      ...(await all.differences('active')),
      ...(await all.differences('activeqty')),
      ...(await all.differences('bodyless')),
      ...(await all.differences('everything')),
    ]).toEqual([]);
    for (const name of ['active', 'activeqty', 'bodyless'])
      expect(all.byName(name).status().badRecords).toEqual({ count: 0, last: null });
    // Only the amount no number holds is a bad record.
    expect(all.byName('everything').status().badRecords.count).toBe(1);
    expect(all.byName('everything').status().badRecords.last?.reason).not.toMatch(/TOAST/);
  });

  it('a row deleted, changed again, or inserted in the same transaction before the update is applied: served as the table holds it', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('unheld');
    await createItems(url);
    const root = join(dir.path, 'data');
    {
      await using all = await startAll(root, url);
      for (const name of Object.keys(MIRRORS)) expect(await all.differences(name)).toEqual([]);
    }
    // While the endpoints are stopped, so each update is applied after what followed it happened in the table.
    // Row 3 enters the filter, then is deleted: when the update is applied, there is no row to read.
    await sql(url, `UPDATE items SET status = 'active' WHERE id = 3`);
    await sql(url, 'DELETE FROM items WHERE id = 3');
    // Row 4 enters the filter, then its body changes: the value read is the later one, which the stream then brings.
    await sql(url, `UPDATE items SET status = 'active' WHERE id = 4`);
    await sql(url, `UPDATE items SET body = ${bigText(3200)} WHERE id = 4`);
    // Row 7 is inserted outside the filter and enters it in the same transaction.
    await sql(
      url,
      `BEGIN; INSERT INTO items VALUES (7, 'draft', 7, 7.5, ${bigText(3200)});
       UPDATE items SET status = 'active' WHERE id = 7; COMMIT`,
    );
    // Row 2 enters the filter, then leaves the table under another key.
    await sql(url, `UPDATE items SET status = 'active' WHERE id = 2`);
    await sql(url, 'UPDATE items SET id = 20 WHERE id = 2');
    {
      await using all = await startAll(root, url);
      expect(all.byName('active').decision.decision).toBe('resume');
      expect([
        ...(await all.differences('active')),
        ...(await all.differences('activeqty')),
        ...(await all.differences('bodyless')),
        ...(await all.differences('everything')),
      ]).toEqual([]);
      for (const name of Object.keys(MIRRORS))
        expect(all.byName(name).status().badRecords).toEqual({ count: 0, last: null });
    }
  });
});
