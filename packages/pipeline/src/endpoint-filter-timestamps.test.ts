/**
 * An endpoint's own `filter` on a `timestamp` field compares instants, as the cache's queries do: operands and
 * values are spelled many ways (PostgreSQL prints its session's zone, files hold any ISO offset, a configuration
 * names `Z` without a fraction) and their text order is not time order.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig } from '@sluice/core';
import { createTestDatabase, sql, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { allRecords } from '../test/helpers.js';
import { type EndpointContext, startEndpointPipeline } from './endpoint.js';

const events = { publish: async () => {} };

/** Builds `endpoint` in a cache under `root` and answers the ids it serves then, sorted. */
async function servedIds(
  root: string,
  endpoint: EndpointConfig,
  connections: EndpointContext['connections'],
) {
  await using caches = await openCacheManager(root);
  const pipeline = await startEndpointPipeline(endpoint, { caches, events, connections, commitEveryMs: 50 });
  try {
    await pipeline.whenServing({ timeoutMs: 30_000 });
    const cache = await caches.openRo(endpoint.name);
    try {
      return allRecords(cache)
        .map((r) => r.id as number)
        .sort((a, b) => a - b);
    } finally {
      await cache.close();
    }
  } finally {
    await pipeline.stop();
  }
}

/** From the first instant of 2026 (inclusive) to 09:00 on Jan 2nd in Tokyo (exclusive), spelled two ways. */
const NEW_YEARS_DAY = { ts: { $gte: '2026-01-01T00:00:00Z', $lt: '2026-01-02T09:00:00+09:00' } };

describe('defect: an endpoint filter compared timestamp values as text', () => {
  it('PostgreSQL timestamptz in a Tokyo session: a row a second before the range was kept', async () => {
    await using db = await createTestDatabase('sluice_filter_ts');
    await using dir = await tempDir();
    // PostgreSQL prints timestamptz in the session's zone: "2026-01-01T08:59:59+09:00" for 23:59:59Z.
    await sql(
      db.url,
      `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET timezone = %L', current_database(), 'Asia/Tokyo'); END $$`,
    );
    await sql(db.url, 'CREATE TABLE ev (id int PRIMARY KEY, ts timestamptz NOT NULL)');
    await sql(
      db.url,
      `INSERT INTO ev VALUES (1, '2025-12-31T23:59:59Z'), (2, '2026-01-01T00:00:00Z'),
         (3, '2026-01-01T00:00:00.5Z'), (4, '2026-01-02T00:00:00Z'), (5, '2026-01-01T23:59:59.999999Z')`,
    );
    const endpoint = {
      name: 'ev',
      source: { type: 'postgres', connection: 'db', table: 'ev', capture: 'poll', cursor: 'ts' },
      primaryKey: ['id'],
      indexes: [],
      filter: NEW_YEARS_DAY,
    } as EndpointConfig;
    const connections = { db: { type: 'postgres' as const, url: db.url } };
    // Before: [1, 2, 3, 5] — row 1 ("2026-01-01T08:59:59+09:00") sorted after the `Z` operand as text.
    expect(await servedIds(join(dir.path, 'data'), endpoint, connections)).toEqual([2, 3, 5]);
  });

  it('a JSONL file with a declared timestamp field: instants spelled with offsets and fractions', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'ev.jsonl');
    const rows = [
      { id: 1, ts: '2026-01-01T08:59:59+09:00' }, // 2025-12-31T23:59:59Z: before
      { id: 2, ts: '2026-01-01T00:00:00.000Z' }, // the first instant: kept ($gte)
      { id: 3, ts: '2025-12-31T19:00:00-05:00' }, // 2026-01-01T00:00:00Z again: kept
      { id: 4, ts: '2026-01-02T00:00:00Z' }, // 09:00 in Tokyo: excluded ($lt)
      { id: 5, ts: '2026-01-02T08:59:59.999+09:00' }, // just before: kept
    ];
    await writeFile(path, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
    const endpoint = {
      name: 'evfile',
      source: { type: 'file', path, format: 'jsonl' },
      primaryKey: ['id'],
      fields: { id: 'integer', ts: 'timestamp' },
      indexes: [],
      filter: NEW_YEARS_DAY,
    } as EndpointConfig;
    // Before: [2, 4, 5] as text ("2025-12-31T19…" < "2026…"; "2026-01-02T00:00:00Z" < "2026-01-02T09…").
    expect(await servedIds(join(dir.path, 'data'), endpoint, {})).toEqual([2, 3, 5]);
  });
});
