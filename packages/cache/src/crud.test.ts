import { type CacheSchema, parseQuery, SluiceError } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openCacheManager } from './manager.js';

const schema: CacheSchema = {
  fields: { id: 'integer', value: 'number', category: 'string' },
  primaryKey: ['id'],
  indexes: [['value'], ['category', 'value']],
};

const checkpoint = (epoch: number) => ({
  dag: 'd1',
  epoch,
  positions: { src: epoch },
  at: new Date().toISOString(),
});

describe('RwCache CRUD', () => {
  it('stages writes until commit, then reads them with the checkpoint', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([
      { op: 'insert', record: { id: 1, value: 10, category: 'a' } },
      { op: 'insert', record: { id: 2, value: 20, category: 'b' } },
    ]);
    expect(cache.get([1])).toBeUndefined();
    expect(cache.commitState().recordCount).toBe(0);
    await cache.commit(checkpoint(1));
    expect(cache.get([1])).toEqual({ id: 1, value: 10, category: 'a' });
    expect(cache.commitState()).toMatchObject({ recordCount: 2, checkpoint: { epoch: 1 } });
    expect(cache.commitState().committedAt).not.toBeNull();

    cache.apply([
      { op: 'update', record: { id: 1, value: 11, category: 'a' } },
      { op: 'upsert', record: { id: 3, value: 30, category: 'c' } },
      { op: 'delete', key: [2] },
    ]);
    await cache.commit(checkpoint(2));
    expect(cache.get([1])?.value).toBe(11);
    expect(cache.get([2])).toBeUndefined();
    expect(cache.get([3])?.value).toBe(30);
    expect(cache.count()).toBe(2);
    const { records } = cache.query(parseQuery({ $order_by: { value: 'asc' } }));
    expect(records.map((r) => r.id)).toEqual([1, 3]);
  });

  it('applies conflict policies all-or-nothing', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([{ op: 'insert', record: { id: 1, value: 1, category: 'a' } }]);
    await cache.commit(null);

    const err = (() => {
      try {
        cache.apply([
          { op: 'insert', record: { id: 5, value: 5, category: 'x' } },
          { op: 'insert', record: { id: 1, value: 2, category: 'a' } },
        ]);
      } catch (e) {
        return e;
      }
    })();
    expect(SluiceError.hasCode(err, 'CACHE_CONFLICT')).toBe(true);
    expect(cache.pendingCount).toBe(0); // nothing of the batch was staged

    expect(() => cache.apply([{ op: 'update', record: { id: 9, value: 1, category: 'a' } }])).toThrow(
      expect.objectContaining({ code: 'CACHE_CONFLICT' }),
    );
    expect(() => cache.apply([{ op: 'delete', key: [9] }])).toThrow(
      expect.objectContaining({ code: 'CACHE_CONFLICT' }),
    );

    cache.apply(
      [
        { op: 'insert', record: { id: 1, value: 99, category: 'a' } },
        { op: 'update', record: { id: 9, value: 9, category: 'a' } },
        { op: 'delete', key: [8] },
      ],
      { onConflict: 'skip' },
    );
    await cache.commit(null);
    expect(cache.get([1])?.value).toBe(1);
    expect(cache.get([9])).toBeUndefined();

    cache.apply(
      [
        { op: 'insert', record: { id: 1, value: 99, category: 'a' } },
        { op: 'update', record: { id: 9, value: 9, category: 'a' } },
      ],
      { onConflict: 'overwrite' },
    );
    await cache.commit(null);
    expect(cache.get([1])?.value).toBe(99);
    expect(cache.get([9])?.value).toBe(9);
    expect(cache.count()).toBe(2);

    // Conflicts see staged (uncommitted) state too.
    cache.apply([{ op: 'insert', record: { id: 20, value: 1, category: 'z' } }]);
    expect(() => cache.apply([{ op: 'insert', record: { id: 20, value: 2, category: 'z' } }])).toThrow(
      expect.objectContaining({ code: 'CACHE_CONFLICT' }),
    );
    cache.apply([{ op: 'delete', key: [20] }]);
    await cache.commit(null);
    expect(cache.get([20])).toBeUndefined();
    expect(cache.count()).toBe(2);
  });

  it('commits what was staged when commit was called, even if more is applied before it lands', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([{ op: 'insert', record: { id: 1, value: 1, category: 'a' } }]);
    const first = cache.commit(checkpoint(1));
    // The in-flight batch counts for conflicts; the new op belongs to the next commit.
    expect(() => cache.apply([{ op: 'insert', record: { id: 1, value: 9, category: 'a' } }])).toThrow(
      expect.objectContaining({ code: 'CACHE_CONFLICT' }),
    );
    cache.apply([{ op: 'insert', record: { id: 2, value: 2, category: 'b' } }]);
    await first;
    expect(cache.commitState()).toMatchObject({ recordCount: 1, checkpoint: { epoch: 1 } });
    expect(cache.get([2])).toBeUndefined();
    expect(cache.pendingCount).toBe(1);
    await cache.commit(checkpoint(2));
    expect(cache.commitState()).toMatchObject({ recordCount: 2, checkpoint: { epoch: 2 } });
  });

  it('rejects bad records and keys with typed errors and writes nothing', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    const bad: unknown[] = [
      { op: 'insert', record: { value: 1 } }, // no key
      { op: 'insert', record: { id: 'x', value: 1 } }, // wrong key type
      { op: 'insert', record: { id: 1.5 } }, // not an integer
      { op: 'insert', record: { id: 1, value: 'ten' } },
      { op: 'insert', record: null },
      { op: 'delete', key: [] },
      { op: 'delete', key: ['1'] },
      { op: 'nope', record: { id: 1 } },
    ];
    for (const op of bad) {
      expect(() => cache.apply([{ op: 'upsert', record: { id: 100 } }, op as never])).toThrow(
        expect.objectContaining({ code: 'BAD_RECORD' }),
      );
    }
    await cache.commit(null);
    expect(cache.count()).toBe(0);
    expect(() => cache.get(['1'])).toThrow(expect.objectContaining({ code: 'INVALID_QUERY' }));
    expect(() => cache.get([1, 2])).toThrow(expect.objectContaining({ code: 'INVALID_QUERY' }));
    await expect(cache.commit({ dag: '', epoch: -1 } as never)).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    });
  });

  it('supports composite primary keys', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({
      endpoint: 'pairs',
      schema: {
        fields: { tenant: 'string', seq: 'integer', flag: 'boolean', note: 'string' },
        primaryKey: ['tenant', 'seq'],
        indexes: [['flag']],
      },
    });
    cache.apply([
      { op: 'insert', record: { tenant: 'b', seq: 1, flag: true } },
      { op: 'insert', record: { tenant: 'a', seq: 2, flag: false } },
      { op: 'insert', record: { tenant: 'a', seq: 10, flag: true } },
      { op: 'insert', record: { tenant: 'a', seq: -1, flag: true, note: 'neg' } },
    ]);
    await cache.commit(null);
    expect(cache.get(['a', 10])).toEqual({ tenant: 'a', seq: 10, flag: true });
    expect(cache.get(['a', 1])).toBeUndefined();
    expect(() => cache.apply([{ op: 'insert', record: { tenant: 'a', seq: 10 } }])).toThrow(
      expect.objectContaining({ code: 'CACHE_CONFLICT' }),
    );
    const all = cache.query(parseQuery({}));
    expect(all.records.map((r) => [r.tenant, r.seq])).toEqual([
      ['a', -1],
      ['a', 2],
      ['a', 10],
      ['b', 1],
    ]);
    const tenantA = cache.query(parseQuery({ $filter: { tenant: 'a' }, $order_by: { seq: 'desc' } }));
    expect(tenantA.records.map((r) => r.seq)).toEqual([10, 2, -1]);
    expect(tenantA.plan.index).toBe('primary');
    const flagged = cache.query(parseQuery({ $filter: { flag: true } }));
    expect(flagged.plan.index).toBe('flag');
    expect(flagged.records.map((r) => [r.tenant, r.seq])).toEqual([
      ['a', -1],
      ['a', 10],
      ['b', 1],
    ]);
    cache.apply([{ op: 'delete', key: ['a', 10] }]);
    await cache.commit(null);
    expect(cache.count({ flag: true })).toBe(2);
  });

  it('stores values of any size and index keys beyond the LMDB key limit', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({
      endpoint: 'docs',
      schema: {
        fields: { id: 'string', title: 'string', body: 'json' },
        primaryKey: ['id'],
        indexes: [['title']],
      },
    });
    const prefix = 'p'.repeat(5000);
    const big = { blob: 'x'.repeat(8_000_000), list: Array.from({ length: 1000 }, (_, i) => i) };
    const titles = ['z', `${prefix}c`, `${prefix}a`, `${prefix}b`, prefix, 'a'];
    cache.apply(
      titles.map((title, i) => ({
        op: 'insert' as const,
        record: { id: `${prefix}-${i}`, title, body: i === 0 ? big : null },
      })),
    );
    await cache.commit(null);
    expect(cache.get([`${prefix}-0`])?.body).toEqual(big);
    expect(cache.get([`${prefix}-9`])).toBeUndefined();
    const sorted = cache.query(parseQuery({ $order_by: { title: 'asc' } }));
    expect(sorted.plan.index).toBe('title');
    expect(sorted.records.map((r) => r.title)).toEqual([...titles].sort());
    const desc = cache.query(parseQuery({ $order_by: { title: 'desc' } }));
    expect(desc.records.map((r) => r.title)).toEqual([...titles].sort().reverse());
    const eq = cache.query(parseQuery({ $filter: { title: `${prefix}b` } }));
    expect(eq.records.map((r) => r.title)).toEqual([`${prefix}b`]);
    const range = cache.query(
      parseQuery({
        $filter: { title: { $gt: `${prefix}a`, $lte: `${prefix}c` } },
        $order_by: { title: 'asc' },
      }),
    );
    expect(range.records.map((r) => r.title)).toEqual([`${prefix}b`, `${prefix}c`]);
    // Paging through a cluster of truncated keys with a cursor.
    const seen: unknown[] = [];
    let after: string | null = null;
    do {
      const page = cache.query(
        parseQuery({ $order_by: { title: 'asc' }, $limit: 1, ...(after ? { $after: after } : {}) }),
      );
      seen.push(...page.records.map((r) => r.title));
      after = page.next;
    } while (after);
    expect(seen).toEqual([...titles].sort());
  });

  it('a transfer commit is fenced by its epoch in the write transaction and keeps the cache checkpoint', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    await cache.commit(checkpoint(7)); // the endpoint pipeline's own checkpoint
    cache.apply([{ op: 'upsert', record: { id: 1, value: 1, category: 'new-owner' } }]);
    await cache.commit(null, { keepCheckpoint: true, fence: { writer: 't-1', epoch: 2 } });
    expect(cache.commitState()).toMatchObject({
      checkpoint: { epoch: 7 },
      fences: { 't-1': 2 },
      recordCount: 1,
    });
    // The stale owner (epoch 1) wakes up and commits: refused, nothing of it lands, now or with a later commit.
    cache.apply([{ op: 'upsert', record: { id: 1, value: 99, category: 'stale' } }]);
    cache.apply([{ op: 'upsert', record: { id: 2, value: 2, category: 'stale' } }]);
    const refused = await cache
      .commit(null, { keepCheckpoint: true, fence: { writer: 't-1', epoch: 1 } })
      .catch((e) => e);
    expect(SluiceError.hasCode(refused, 'STALE_EPOCH')).toBe(true);
    await cache.commit(checkpoint(8));
    expect(cache.get([1])).toEqual({ id: 1, value: 1, category: 'new-owner' });
    expect(cache.get([2])).toBeUndefined();
    expect(cache.commitState()).toMatchObject({
      checkpoint: { epoch: 8 },
      fences: { 't-1': 2 },
      recordCount: 1,
    });
  });
});
