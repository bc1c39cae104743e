import { type CacheSchema, parseQuery, type RecordOp, SluiceError } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openCacheManager } from './manager.js';
import type { PatchUpsert } from './patch.js';

const schema: CacheSchema = {
  fields: { id: 'integer', qty: 'integer', name: 'string' },
  primaryKey: ['id'],
  indexes: [['name']],
};
const checkpoint = (epoch: number) => ({
  dag: 'd',
  epoch,
  positions: { src: epoch },
  at: new Date().toISOString(),
});
const patch = (record: Record<string, unknown>, unchanged: string[], where?: PatchUpsert['where']) =>
  ({ op: 'upsert', record, unchanged, ...(where ? { where } : {}) }) as PatchUpsert as RecordOp;

describe('RwCache patch upserts (fields left unchanged)', () => {
  it('fills unchanged fields from the stored record at commit, from a staged one before it, and logs the merged record', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([{ op: 'upsert', record: { id: 1, qty: 1, name: 'big' } }]);
    await cache.commit(checkpoint(1));
    cache.apply([patch({ id: 1, qty: 2 }, ['name']), patch({ id: 1, qty: 3 }, ['name'])], {
      onConflict: 'fail',
    });
    cache.apply([{ op: 'upsert', record: { id: 2, qty: 1, name: 'other' } }]);
    cache.apply([patch({ id: 2, qty: 5 }, ['name'])], { onConflict: 'fail' });
    await cache.commit(checkpoint(2));
    expect(cache.get([1])).toEqual({ id: 1, qty: 3, name: 'big' });
    expect(cache.get([2])).toEqual({ id: 2, qty: 5, name: 'other' });
    // The index still finds it by the field the patch did not send.
    expect(cache.query(parseQuery({ $filter: { name: 'big' } })).records).toEqual([
      { id: 1, qty: 3, name: 'big' },
    ]);
    const log = cache.changeLog();
    const upserts = log.read(0, 100).filter((e) => e.op === 'upsert');
    expect(upserts.at(-2)).toMatchObject({ key: [1], record: { id: 1, qty: 3, name: 'big' } });
  });

  it('refuses a patch of an absent record under onConflict fail, and deletes the key when the merged record fails `where`', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    let error: unknown;
    try {
      cache.apply([patch({ id: 9, qty: 1 }, ['name'])], { onConflict: 'fail' });
    } catch (err) {
      error = err;
    }
    expect(SluiceError.hasCode(error, 'CACHE_CONFLICT')).toBe(true);
    cache.apply([patch({ id: 9, qty: 1 }, ['name'])], { onConflict: 'overwrite' }); // skipped: nothing to fill from
    cache.apply([{ op: 'upsert', record: { id: 1, qty: 1, name: 'hidden' } }]);
    await cache.commit(checkpoint(1));
    expect(cache.get([9])).toBeUndefined();
    cache.apply([patch({ id: 1, qty: 2 }, ['name'], { name: { $ne: 'hidden' } })], { onConflict: 'fail' });
    await cache.commit(checkpoint(2));
    expect(cache.get([1])).toBeUndefined();
    expect(cache.commitState().recordCount).toBe(0);
  });

  it("defect: a `where` naming a timestamp field compared the patch's value as text (PostgreSQL's zone) with the filter's", async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    const timed: CacheSchema = {
      fields: { id: 'integer', ts: 'timestamp', doc: 'string' },
      primaryKey: ['id'],
      indexes: [],
    };
    await using cache = await caches.create({ endpoint: 'docs', schema: timed });
    cache.apply([
      { op: 'upsert', record: { id: 1, ts: '2026-01-02T00:00:00Z', doc: 'big' } },
      { op: 'upsert', record: { id: 2, ts: '2026-01-02T00:00:00Z', doc: 'big' } },
    ]);
    await cache.commit(checkpoint(1));
    // The endpoint keeps 2026 onwards; each update leaves the TOASTed `doc` unchanged and moves `ts`, spelled in a
    // Tokyo session's zone: 1 to a second before the range (as text it sorts after "2026-01-01T00…Z"), 2 into it.
    const where = { doc: { $ne: null }, ts: { $gte: '2026-01-01T00:00:00Z' } };
    cache.apply([patch({ id: 1, ts: '2026-01-01T08:59:59+09:00' }, ['doc'], where)], { onConflict: 'fail' });
    await cache.commit(checkpoint(2));
    cache.apply([patch({ id: 2, ts: '2026-01-01T09:00:00+09:00' }, ['doc'], where)], { onConflict: 'fail' });
    // Merged before the commit too: a staged whole record, then a patch on it.
    cache.apply([{ op: 'upsert', record: { id: 3, ts: '2026-01-05T00:00:00Z', doc: 'new' } }]);
    cache.apply([patch({ id: 3, ts: '2025-12-31T19:00:00-05:00' }, ['doc'], where)], { onConflict: 'fail' });
    await cache.commit(checkpoint(3));
    // Before: record 1 kept, { id: 1, ts: '2025-12-31T23:59:59.000000Z', … }.
    expect(cache.get([1])).toBeUndefined();
    expect(cache.get([2])).toEqual({ id: 2, ts: '2026-01-01T00:00:00.000000Z', doc: 'big' });
    expect(cache.get([3])).toEqual({ id: 3, ts: '2026-01-01T00:00:00.000000Z', doc: 'new' });
  });

  it('defect: a patch whose key changed (`from`) found no record to fill from and was refused — the row was lost', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([{ op: 'upsert', record: { id: 1, qty: 1, name: 'big' } }]);
    await cache.commit(checkpoint(1));
    // From the stored record, then from one staged in the same apply, each before the old key's delete.
    cache.apply(
      [
        { ...patch({ id: 2, qty: 5 }, ['name']), from: [1] } as RecordOp,
        { op: 'delete', key: [1] },
        { op: 'upsert', record: { id: 3, qty: 3, name: 'three' } },
        { ...patch({ id: 4, qty: 4 }, ['name']), from: [3] } as RecordOp,
        { op: 'delete', key: [3] },
      ],
      { onConflict: 'fail' },
    );
    await cache.commit(checkpoint(2));
    expect([cache.get([1]), cache.get([2]), cache.get([3]), cache.get([4])]).toEqual([
      undefined,
      { id: 2, qty: 5, name: 'big' },
      undefined,
      { id: 4, qty: 4, name: 'three' },
    ]);
    // From a key that holds nothing (its delete came first): a conflict, nothing written.
    cache.apply([{ op: 'delete', key: [2] }]);
    const err = (() => {
      try {
        cache.apply([{ ...patch({ id: 5, qty: 1 }, ['name']), from: [2] } as RecordOp], {
          onConflict: 'fail',
        });
      } catch (e) {
        return e;
      }
    })();
    expect(SluiceError.hasCode(err, 'CACHE_CONFLICT')).toBe(true);
    await cache.commit(checkpoint(3));
    expect(cache.get([5])).toBeUndefined();
  });
});
