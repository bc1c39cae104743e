import { fileURLToPath } from 'node:url';
import { type CacheSchema, parseQuery } from '@sluice/core';
import { spawnTs, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { finishIndexBuild, INDEX_BUILD_KEY, pendingBuild, runsDb } from './index-build.js';
import { openCacheManager } from './manager.js';
import type { RwCache } from './rw-cache.js';

const schema: CacheSchema = {
  fields: { id: 'integer', value: 'number', category: 'string' },
  primaryKey: ['id'],
  indexes: [['value'], ['category', 'value']],
};

const checkpoint = (epoch: number) => ({
  dag: 'd',
  epoch,
  positions: { src: epoch },
  at: new Date().toISOString(),
});

/** Record `id` in load `round`: values in scrambled order, so every commit's index entries interleave. */
const record = (id: number, round = 0) => ({
  id,
  value: ((id * 7919 + round * 13) % 1000) / 10,
  category: `c${(id + round) % 7}`,
});

/** Every bulk load defers its index entries (the default defers only past 500 000 records). */
const DEFER_ALL = { deferIndexesFrom: 0 };

/** Loads `ids` in commits of `per`, as a snapshot does (bulk). */
async function bulkLoad(cache: RwCache, ids: number[], per: number, round = 0): Promise<void> {
  for (let i = 0; i < ids.length; i += per) {
    cache.apply(ids.slice(i, i + per).map((id) => ({ op: 'upsert' as const, record: record(id, round) })));
    await cache.commit(checkpoint(i + 1), { bulk: true });
  }
}

/** Every index entry of the cache, per index, as [index key hex, record JSON]. */
function indexEntries(cache: RwCache): string[][] {
  const dbs = (cache as unknown as { dbs: import('./cache-dbs.js').CacheDbs }).dbs;
  return dbs.indexes.map((index) =>
    [...index.db.getRange({})].map(({ value }) => (value as Buffer).toString('utf8')),
  );
}

const dbsOf = (cache: RwCache) => (cache as unknown as { dbs: import('./cache-dbs.js').CacheDbs }).dbs;

/** The page an index answers, next to the same records sorted in memory from `expected`. */
function expectIndexAnswers(cache: RwCache, expected: Array<ReturnType<typeof record>>): void {
  const byValue = cache.query(
    parseQuery({ $filter: { value: { $gte: 20, $lt: 40 } }, $order_by: { value: 'asc' }, $limit: 1000 }),
  );
  expect(byValue.plan.index).toBe('value');
  const want = expected
    .filter((r) => r.value >= 20 && r.value < 40)
    .sort((a, b) => a.value - b.value || a.id - b.id)
    .map((r) => r.id);
  expect(byValue.records.map((r) => r.id)).toEqual(want);
  const inCategory = cache.query(
    parseQuery({ $filter: { category: 'c3' }, $order_by: { value: 'desc' }, $limit: 1000 }),
  );
  expect(inCategory.plan.index).toBe('category,value');
  expect(inCategory.records.map((r) => r.id)).toEqual(
    expected
      .filter((r) => r.category === 'c3')
      .sort((a, b) => b.value - a.value || b.id - a.id)
      .map((r) => r.id),
  );
}

describe('deferred index builds (bulk loads)', () => {
  it('a bulk load writes no index entry until the snapshot is done, answers by primary key meanwhile, then builds every index exactly', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, DEFER_ALL);
    await using cache = await caches.create({ endpoint: 'items', schema });
    const ids = Array.from({ length: 2_000 }, (_, i) => i);
    await bulkLoad(cache, ids, 300);

    expect(pendingBuild(dbsOf(cache))).toEqual({ runs: 7, stale: false, withBytes: true });
    // Each run entry carries its record's stored text: the merge copies it instead of reading `data` again.
    const firstRun = [...runsDb(dbsOf(cache)).getRange({ limit: 1 })][0]!.value;
    expect(firstRun.toString('utf8')).toMatch(/\{"id":\d+,.*\}$/);
    expect(indexEntries(cache)).toEqual([[], []]);
    // Records are visible at each commit; a filter on an indexed field is answered without the indexes.
    const meanwhile = cache.query(parseQuery({ $filter: { value: { $gte: 20, $lt: 40 } }, $limit: 1000 }));
    expect(meanwhile.plan.index).toBeNull();
    expect(meanwhile.records).toHaveLength(
      ids.filter((id) => record(id).value >= 20 && record(id).value < 40).length,
    );
    expect(cache.count({ category: 'c3' })).toBe(ids.filter((id) => record(id).category === 'c3').length);

    await cache.markSnapshottingDone('src');
    expect(pendingBuild(dbsOf(cache))).toBeNull();
    const entries = indexEntries(cache);
    expect(entries.map((e) => e.length)).toEqual([2_000, 2_000]);
    expectIndexAnswers(
      cache,
      ids.map((id) => record(id)),
    );
    expect(cache.commitState()).toMatchObject({ recordCount: 2_000, snapshottingDone: ['src'] });
  });

  it('records replaced or deleted during a bulk load leave no stale index entry', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, DEFER_ALL);
    await using cache = await caches.create({ endpoint: 'items', schema });
    const ids = Array.from({ length: 1_000 }, (_, i) => i);
    await bulkLoad(cache, ids, 250);
    // Half reloaded with new values (round 1), a tenth deleted, and some reloaded with the same bytes.
    await bulkLoad(
      cache,
      ids.filter((id) => id % 2 === 0),
      200,
      1,
    );
    cache.apply(ids.filter((id) => id % 10 === 5).map((id) => ({ op: 'delete' as const, key: [id] })));
    await cache.commit(checkpoint(99), { bulk: true });
    await bulkLoad(
      cache,
      ids.filter((id) => id % 3 === 1 && id % 2 === 1 && id % 10 !== 5),
      100,
    );
    expect(pendingBuild(dbsOf(cache))?.stale).toBe(true);

    await cache.markSnapshottingDone('src');
    const expected = ids.filter((id) => id % 10 !== 5).map((id) => record(id, id % 2 === 0 ? 1 : 0));
    expect(indexEntries(cache).map((e) => e.length)).toEqual([expected.length, expected.length]);
    expect(indexEntries(cache)[0]!.sort()).toEqual(expected.map((r) => JSON.stringify(r)).sort());
    expectIndexAnswers(cache, expected);
  });

  it('a bulk load writes its index entries directly while under deferIndexesFrom, defers the rest onto them once past it, and a commit that is not a bulk one builds the pending indexes first', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { deferIndexesFrom: 5 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    await bulkLoad(cache, [1, 2, 3, 4], 2);
    // 4 records, under the limit: every entry is in the indexes, nothing is pending, the indexes plan queries.
    expect(pendingBuild(dbsOf(cache))).toBeNull();
    expect(indexEntries(cache).map((e) => e.length)).toEqual([4, 4]);
    expectIndexAnswers(
      cache,
      [1, 2, 3, 4].map((id) => record(id)),
    );
    // The next bulk commit takes the generation to 6 records: its entries go to a run, onto the entries there.
    await bulkLoad(cache, [5, 6], 2);
    expect(pendingBuild(dbsOf(cache))).toEqual({ runs: 1, stale: false, withBytes: true, onto: true });
    expect(indexEntries(cache).map((e) => e.length)).toEqual([4, 4]);
    cache.apply([{ op: 'upsert', record: record(7) }]);
    await cache.commit(checkpoint(10));
    expect(pendingBuild(dbsOf(cache))).toBeNull();
    expect(indexEntries(cache).map((e) => e.length)).toEqual([7, 7]);
    expectIndexAnswers(
      cache,
      [1, 2, 3, 4, 5, 6, 7].map((id) => record(id)),
    );
  });

  it('a load that outgrows deferIndexesFrom, with records replaced and deleted before and after, leaves exactly its final records in the indexes', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { deferIndexesFrom: 500 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    const ids = Array.from({ length: 1_000 }, (_, i) => i);
    // 250 records directly; then some of them replaced (new values) and deleted while still under the limit.
    await bulkLoad(cache, ids.slice(0, 250), 250);
    await bulkLoad(
      cache,
      ids.filter((id) => id < 250 && id % 4 === 0),
      100,
      1,
    );
    cache.apply(
      ids.filter((id) => id < 250 && id % 10 === 7).map((id) => ({ op: 'delete' as const, key: [id] })),
    );
    await cache.commit(checkpoint(50), { bulk: true });
    expect(pendingBuild(dbsOf(cache))).toBeNull();
    // Past the limit: the rest is deferred onto the direct entries. Records of both phases are then replaced
    // (their old entries in the indexes or in runs) and deleted.
    await bulkLoad(cache, ids.slice(250), 250);
    expect(pendingBuild(dbsOf(cache))).toMatchObject({ onto: true, stale: false });
    await bulkLoad(
      cache,
      ids.filter((id) => id % 4 === 2),
      200,
      1,
    );
    cache.apply(ids.filter((id) => id % 10 === 5).map((id) => ({ op: 'delete' as const, key: [id] })));
    await cache.commit(checkpoint(99), { bulk: true });
    expect(pendingBuild(dbsOf(cache))).toMatchObject({ onto: true, stale: true });

    await cache.markSnapshottingDone('src');
    expect(pendingBuild(dbsOf(cache))).toBeNull();
    const expected = ids
      .filter((id) => id % 10 !== 5 && !(id < 250 && id % 10 === 7))
      .map((id) => record(id, (id < 250 && id % 4 === 0) || id % 4 === 2 ? 1 : 0));
    expect(indexEntries(cache).map((e) => e.length)).toEqual([expected.length, expected.length]);
    expect(indexEntries(cache)[0]!.sort()).toEqual(expected.map((r) => JSON.stringify(r)).sort());
    expect(indexEntries(cache)[1]!.sort()).toEqual(expected.map((r) => JSON.stringify(r)).sort());
    expectIndexAnswers(cache, expected);
  });

  it('a build begun with runs that hold only the data key (an earlier version) completes exactly', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, DEFER_ALL);
    await using cache = await caches.create({ endpoint: 'items', schema });
    // The state an earlier version wrote when its load began: no withBytes, so its runs keep that form.
    dbsOf(cache).meta.putSync(INDEX_BUILD_KEY, { runs: 0, stale: false });
    const ids = Array.from({ length: 1_500 }, (_, i) => i);
    await bulkLoad(cache, ids, 400);
    expect(pendingBuild(dbsOf(cache))).toEqual({ runs: 4, stale: false });
    const firstRun = [...runsDb(dbsOf(cache)).getRange({ limit: 1 })][0]!.value;
    expect(firstRun.toString('utf8')).not.toContain('"id"');

    await cache.markSnapshottingDone('src');
    expect(pendingBuild(dbsOf(cache))).toBeNull();
    const expected = ids.map((id) => record(id));
    expect(indexEntries(cache)[0]!.sort()).toEqual(expected.map((r) => JSON.stringify(r)).sort());
    expectIndexAnswers(cache, expected);
  });

  it('a clear drops a pending build', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, DEFER_ALL);
    await using cache = await caches.create({ endpoint: 'items', schema });
    await bulkLoad(cache, [1, 2, 3], 2);
    await cache.clear();
    expect(pendingBuild(dbsOf(cache))).toBeNull();
    await bulkLoad(cache, [7, 8], 5);
    await cache.markSnapshottingDone('src');
    expect(indexEntries(cache).map((e) => e.length)).toEqual([2, 2]);
    expectIndexAnswers(
      cache,
      [7, 8].map((id) => record(id)),
    );
  });

  for (const { deferIndexesFrom, direct, runs } of [
    { deferIndexesFrom: 0, direct: 0, runs: 8 },
    { deferIndexesFrom: 1_000, direct: 800, runs: 6 },
  ])
    it(`defect guard: a writer killed in the middle of the merge leaves a build that the next writer completes exactly (${direct} entries written directly before the build)`, {
      timeout: 60_000,
    }, async () => {
      await using dir = await tempDir();
      const ids = Array.from({ length: 3_000 }, (_, i) => i);
      let name: string;
      {
        await using caches = await openCacheManager(dir.path, { deferIndexesFrom });
        await using cache = await caches.create({ endpoint: 'items', schema });
        name = cache.name;
        await bulkLoad(cache, ids, 400);
        expect(indexEntries(cache)[0]!.length).toBe(direct);
      }
      // A child merges in transactions of 500 entries and is SIGKILLed after its second one landed.
      {
        await using child = spawnTs(
          fileURLToPath(new URL('../test/fixtures/merge-and-hang.ts', import.meta.url)),
          [dir.path, name, '500', '2'],
        );
        await child.waitForLine(/^HANGING merged=1000/, 30_000);
        child.kill('SIGKILL');
        await child.exited;
      }
      await using caches = await openCacheManager(dir.path);
      await using cache = await caches.openRw(name);
      const dbs = dbsOf(cache);
      expect(pendingBuild(dbs)).toEqual({
        runs,
        stale: false,
        withBytes: true,
        ...(direct > 0 ? { onto: true } : {}),
      });
      // Part of a first index is there (a merge onto direct entries keeps them), and still unplannable.
      expect(indexEntries(cache)[0]!.length).toBe(direct + 1_000);
      expect(cache.query(parseQuery({ $filter: { value: { $gte: 20 } }, $limit: 5 })).plan.index).toBeNull();
      await finishIndexBuild(dbs, ['id'], { chunk: 700 });
      expect(indexEntries(cache).map((e) => e.length)).toEqual([3_000, 3_000]);
      expectIndexAnswers(
        cache,
        ids.map((id) => record(id)),
      );
    });
});
