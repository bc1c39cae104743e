/**
 * Positions of `next` cursors whose sort values are too long to carry whole (a prefix and a hash, and the record's
 * key): the walk goes on exactly after the position whatever happened to that record between the pages.
 */
import { type CacheSchema, parseQuery } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openCacheManager } from './manager.js';
import type { RwCache } from './rw-cache.js';

const schema: CacheSchema = {
  fields: { id: 'integer', n: 'number', s: 'string', j: 'json' },
  primaryKey: ['id'],
  indexes: [['s']],
};

/** Longer than what a cursor carries whole (48 characters), so every cursor of these walks is abbreviated. */
const MID = 'm'.repeat(60);

/** Follows `next` from `after` to the end; the ids in the order answered. */
function rest(cache: RwCache, body: Record<string, unknown>, after: string): number[] {
  const ids: number[] = [];
  let next: string | null = after;
  for (let guard = 0; next !== null && guard < 100; guard++) {
    const page = cache.query(parseQuery({ ...body, $after: next }));
    ids.push(...page.records.map((r) => r.id as number));
    next = page.next;
  }
  return ids;
}

describe('cursors over long sort values', () => {
  it('defect: a walk ordered by a long string repeated the records sharing its 48-character prefix when the record its cursor pointed at was deleted', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'walks', schema });
    cache.apply(
      [1, 2, 3, 4, 5, 6].map((id) => ({ op: 'upsert' as const, record: { id, n: id, s: `${MID}${id}` } })),
    );
    await cache.commit(null);
    for (const direction of ['asc', 'desc'] as const) {
      const body = { $order_by: { s: direction }, $limit: 2 };
      const first = cache.query(parseQuery(body));
      const firstIds = first.records.map((r) => r.id as number);
      expect(firstIds).toEqual(direction === 'asc' ? [1, 2] : [6, 5]);
      cache.apply([{ op: 'delete', key: [firstIds[1]!] }]);
      await cache.commit(null);
      expect(rest(cache, body, first.next!), direction).toEqual(
        direction === 'asc' ? [3, 4, 5, 6] : [4, 3, 2, 1],
      );
      // Put it back for the other direction.
      const id = firstIds[1]!;
      cache.apply([{ op: 'upsert', record: { id, n: id, s: `${MID}${id}` } }]);
      await cache.commit(null);
    }
  });

  it('defect: a cursor over a long value took the other sort values from the record as it is now, so a record whose short sort value changed moved the position (records skipped)', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'walks', schema });
    cache.apply(
      [1, 2, 3, 4, 5, 6].map((id) => ({ op: 'upsert' as const, record: { id, n: id, s: MID, j: [MID] } })),
    );
    await cache.commit(null);
    for (const field of ['s', 'j']) {
      const body = { $order_by: { [field]: 'asc', n: 'asc' }, $limit: 3 };
      const first = cache.query(parseQuery(body));
      expect(first.records.map((r) => r.id)).toEqual([1, 2, 3]);
      // The cursor's record keeps its long value and moves on by its number: 4, 5 and 6 are still after the position.
      cache.apply([{ op: 'upsert', record: { id: 3, n: 10, s: MID, j: [MID] } }]);
      await cache.commit(null);
      expect(rest(cache, body, first.next!), field).toEqual([4, 5, 6, 3]);
      cache.apply([{ op: 'upsert', record: { id: 3, n: 3, s: MID, j: [MID] } }]);
      await cache.commit(null);
    }
  });

  it('goes on after a position whose record was deleted, then written again with another long value', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'walks', schema });
    cache.apply(
      [1, 2, 3, 4, 5, 6].map((id) => ({
        op: 'upsert' as const,
        record: { id, n: id, j: { k: `${MID}${id}` } },
      })),
    );
    await cache.commit(null);
    const body = { $order_by: { j: 'desc' }, $limit: 3 };
    const first = cache.query(parseQuery(body));
    expect(first.records.map((r) => r.id)).toEqual([6, 5, 4]);
    // Several changes of that record since the cursor was cut: the first one logged replaced the value it had.
    cache.apply([{ op: 'delete', key: [4] }]);
    await cache.commit(null);
    cache.apply([{ op: 'upsert', record: { id: 4, n: 4, j: { k: `${MID}0` } } }]);
    await cache.commit(null);
    cache.apply([{ op: 'upsert', record: { id: 4, n: 4, j: { k: `${MID}9` } } }]);
    await cache.commit(null);
    expect(rest(cache, body, first.next!)).toEqual([3, 2, 1]);
  });

  it("goes on from the value's prefix once the change log no longer holds the position: it may repeat records, skips none, and is not refused", async () => {
    await using dir = await tempDir();
    // A log of a couple of entries: the cursor's record's change is trimmed away by the next commits.
    await using caches = await openCacheManager(dir.path, { changes: { retainRecords: 2, retainMs: 0 } });
    await using cache = await caches.create({ endpoint: 'walks', schema });
    cache.apply(
      [1, 2, 3, 4, 5, 6].map((id) => ({
        op: 'upsert' as const,
        record: { id, n: id, s: `${MID}${id}`, j: { k: `${MID}${id}` } },
      })),
    );
    await cache.commit(null);
    for (const field of ['s', 'j'])
      for (const direction of ['asc', 'desc'] as const) {
        const body = { $filter: { n: { $gte: 1 } }, $order_by: { [field]: direction }, $limit: 3 };
        const first = cache.query(parseQuery(body));
        const firstIds = first.records.map((r) => r.id as number);
        const cut = firstIds[2]!;
        cache.apply([{ op: 'delete', key: [cut] }]);
        await cache.commit(null);
        for (let i = 0; i < 3; i++) {
          cache.apply([{ op: 'upsert', record: { id: 100 + i, n: 0, s: 'a', j: ['a'] } }]);
          await cache.commit(null);
        }
        const after = rest(cache, body, first.next!);
        const context = `${field} ${direction}`;
        // Every record after the position is there, once past the records the walk may repeat.
        const expected = direction === 'asc' ? [4, 5, 6].filter((id) => id !== cut) : [3, 2, 1];
        expect(after.slice(after.length - expected.length), context).toEqual(expected);
        expect(
          after.every((id) => id <= 6),
          context,
        ).toBe(true);
        cache.apply([
          { op: 'upsert', record: { id: cut, n: cut, s: `${MID}${cut}`, j: { k: `${MID}${cut}` } } },
          ...[0, 1, 2].map((i) => ({ op: 'delete' as const, key: [100 + i] })),
        ]);
        await cache.commit(null);
      }
  });
});
