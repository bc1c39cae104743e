/**
 * A lookup by key answers what a query answers: a record the token's row filter hides is 404, as if it did not
 * exist. The lookup reads the row filter as the cache's queries read it — checked against the generation's fields,
 * its timestamp operands as instants — not as the token spells it.
 */
import { openCacheManager } from '@sluice/cache';
import { signJwt, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { startQuietApiServer } from './helpers.js';

const SECRET = 'row-filter-lookups-secret-0123456789';

/** An `events` endpoint whose records carry a timestamp, `at`, one hour apart from 18:00 UTC on 2025-12-31. */
async function writeEvents(root: string): Promise<void> {
  await using manager = await openCacheManager(root, { gcGraceMs: 3_600_000 });
  const cache = await manager.create({
    endpoint: 'events',
    schema: {
      fields: { id: 'integer', at: 'timestamp', region: 'string' },
      primaryKey: ['id'],
      indexes: [['at']],
    },
  });
  cache.apply(
    [1, 2, 3, 4].map((id) => ({
      op: 'upsert' as const,
      record: { id, at: new Date(Date.UTC(2025, 11, 31, 17 + id)).toISOString(), region: 'eu' },
    })),
  );
  await cache.commit({ dag: 'test-dag', epoch: 1, positions: {}, at: new Date().toISOString() });
  const name = cache.name;
  await cache.close();
  await manager.redirect('events', name);
}

describe('row filters and lookups by key', () => {
  it('defect: a lookup read a timestamp row filter as text, not as instants, and returned records the filter hides', async () => {
    await using dir = await tempDir('rowauth-lookups-');
    await writeEvents(dir.path);
    await using server = await startQuietApiServer(dir.path, { api: { auth: { jwtSecret: SECRET } } });
    // Before 2026-01-01T00:00+05:00, i.e. before 19:00 UTC on 2025-12-31: only record 1 (18:00 UTC).
    const scoped = signJwt(SECRET, {
      endpoints: ['events'],
      filters: { events: { at: { $lt: '2026-01-01T00:00:00+05:00' } } },
    });
    const headers = { authorization: `Bearer ${scoped}`, 'content-type': 'application/json' };
    const query = await fetch(`${server.url}/v1/endpoints/events/query`, {
      method: 'POST',
      headers,
      body: '{}',
    });
    expect(((await query.json()) as { records: Array<{ id: number }> }).records.map((r) => r.id)).toEqual([
      1,
    ]);
    const lookups: Array<[number, number]> = [];
    for (const id of [1, 2, 3, 4]) {
      const response = await fetch(`${server.url}/v1/endpoints/events/records/${id}`, { headers });
      await response.arrayBuffer();
      lookups.push([id, response.status]);
    }
    expect(lookups).toEqual([
      [1, 200],
      [2, 404],
      [3, 404],
      [4, 404],
    ]);
  }, 60_000);
});
