import { openCacheManager } from '@sluice/cache';
import { type CacheSchema, type Filter, parseQuery } from '@sluice/core';
import { createTestDatabase, type TestDatabase, tempDir } from '@sluice/testkit';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectPostgres, fieldTypeOfPg } from './pg.js';

let db: TestDatabase;
let client: pg.Client;
beforeAll(async () => {
  db = await createTestDatabase('sluice_pipeline_pgts');
  client = await connectPostgres(db.url);
  // 1000 rows 1.613 s apart from the probe's instant (whole seconds, milliseconds or microseconds, which PostgreSQL
  // prints with as many digits as they need), and 200 rows across the end of DST in New York (06:00 UTC on
  // 2026-11-01, when the offset there goes from -04 to -05). `tsn` is the same wall clock without a zone.
  await client.query(`
    CREATE TABLE items (id int PRIMARY KEY, ts timestamptz, tsn timestamp);
    INSERT INTO items (id, ts)
      SELECT id, CASE id % 3 WHEN 0 THEN date_trunc('second', t) WHEN 1 THEN date_trunc('milliseconds', t) ELSE t END
      FROM (SELECT id, CASE WHEN id <= 1000
              THEN '2026-12-05 23:33:49.737383+00'::timestamptz + (id - 1) * interval '1.613001 seconds'
              ELSE '2026-11-01 05:00:00.000001+00'::timestamptz + (id - 1000) * interval '36.5 seconds' END AS t
            FROM generate_series(1, 1200) AS id) AS s;
    UPDATE items SET tsn = ts AT TIME ZONE 'UTC';
  `);
});
afterAll(async () => {
  await client?.end();
  await db?.[Symbol.asyncDispose]();
});

/** The rows as the pipeline reads them on connections whose TimeZone differs, a third of the rows from each. */
async function readMixedZones(): Promise<Array<Record<string, unknown>>> {
  const rows: Array<Record<string, unknown>> = [];
  const zones = ['UTC', 'Asia/Tokyo', 'America/New_York'];
  for (const [k, zone] of zones.entries()) {
    const reader = await connectPostgres(db.url);
    try {
      await reader.query(`SET TimeZone = '${zone}'`);
      const result = await reader.query(`SELECT id, ts, tsn FROM items WHERE id % 3 = ${k} ORDER BY id`);
      expect(result.fields.map((f) => fieldTypeOfPg(f.dataTypeID))).toEqual([
        'integer',
        'timestamp',
        'timestamp',
      ]);
      rows.push(...(result.rows as Array<Record<string, unknown>>));
    } finally {
      await reader.end();
    }
  }
  return rows;
}

const schema: CacheSchema = {
  fields: { id: 'integer', ts: 'timestamp', tsn: 'timestamp' },
  primaryKey: ['id'],
  indexes: [['ts'], ['tsn']],
};

describe('PostgreSQL timestamps in a cache', () => {
  it('defect: timestamp fields compared as text — values read with +00:00, +09:00, -04:00/-05:00 offsets and 0–6 fraction digits answer filters and orders as PostgreSQL does', async () => {
    const rows = await readMixedZones();
    // Really mixed: PostgreSQL's offsets of each session, and its varying precision.
    const texts = rows.map((r) => r.ts as string);
    expect(texts.some((t) => t.endsWith('+09:00'))).toBe(true);
    expect(texts.some((t) => t.endsWith('-05:00'))).toBe(true);
    expect(texts.some((t) => /:\d\d\+/.test(t))).toBe(true); // whole seconds: no fraction at all

    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { maxLimit: 1000 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply(rows.map((record) => ({ op: 'upsert' as const, record })));
    await cache.commit(null);

    // Bounds as clients send them (toISOString()), and PostgreSQL spellings of stored instants.
    const tokyo = await client.query<{ t: string }>(
      `SELECT to_char(ts AT TIME ZONE 'Asia/Tokyo', 'YYYY-MM-DD"T"HH24:MI:SS.US"+09:00"') AS t FROM items WHERE id = 500`,
    );
    const bounds = [
      '2026-12-05T23:33:49.737Z',
      '2026-12-06T00:00:00Z',
      '2026-12-06T00:00:00.000Z',
      '2026-12-05T23:40:00.000Z',
      '2026-11-01T06:00:00.000Z',
      '2026-11-01T01:30:00-05:00',
      tokyo.rows[0]!.t,
    ];
    const sqlOps = { $gt: '>', $gte: '>=', $lt: '<', $lte: '<=', $eq: '=' } as const;
    const mismatches: string[] = [];
    for (const bound of bounds)
      for (const [op, sql] of Object.entries(sqlOps)) {
        for (const field of ['ts', 'tsn'] as const) {
          // `tsn` has no zone: Sluice reads it as UTC, so PostgreSQL compares it with the bound's UTC wall clock.
          const rhs = field === 'ts' ? '$1::timestamptz' : `($1::timestamptz AT TIME ZONE 'UTC')`;
          const expected = await client.query<{ n: string }>(
            `SELECT count(*) AS n FROM items WHERE ${field} ${sql} ${rhs}`,
            [bound],
          );
          const filter: Filter = { [field]: { [op]: bound } };
          const got = cache.count(filter);
          if (got !== Number(expected.rows[0]!.n))
            mismatches.push(`${JSON.stringify(filter)}: cache ${got}, PostgreSQL ${expected.rows[0]!.n}`);
        }
      }
    expect(mismatches).toEqual([]);

    // $order_by across the DST change, paged by cursor, as PostgreSQL orders it.
    for (const direction of ['asc', 'desc'] as const) {
      const expected = await client.query<{ id: number }>(
        `SELECT id FROM items WHERE ts >= '2026-11-01T05:30:00Z' ORDER BY ts ${direction}, id ${direction} LIMIT 150`,
      );
      const got: number[] = [];
      let after: string | null = null;
      while (got.length < 150) {
        const page = cache.query(
          parseQuery({
            $filter: { ts: { $gte: '2026-11-01T05:30:00Z' } },
            $order_by: { ts: direction },
            $limit: 50,
            ...(after ? { $after: after } : {}),
          }),
        );
        got.push(...page.records.map((r) => r.id as number));
        after = page.next;
        if (after === null) break;
      }
      expect(got.slice(0, 150), direction).toEqual(expected.rows.map((r) => r.id));
    }
  });
});
