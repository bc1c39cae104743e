import { type CacheSchema, parseQuery, type Query, type RecordOp } from '@sluice/core';
import { expectSluiceError, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openCacheManager } from './manager.js';

const schema: CacheSchema = {
  fields: {
    id: 'integer',
    value: 'number',
    category: 'string',
    active: 'boolean',
    tags: 'json',
    at: 'timestamp',
  },
  primaryKey: ['id'],
  indexes: [['value'], ['category', 'value']],
};

const rows = (from: number, to: number): RecordOp[] =>
  Array.from({ length: to - from }, (_, i) => {
    const id = from + i;
    return {
      op: 'upsert' as const,
      record: {
        id,
        value: id % 100,
        category: `c${id % 5}`,
        active: id % 2 === 0,
        tags: ['t', `t${id % 3}`],
      },
    };
  });

describe('hostile queries', () => {
  it('answers unknown fields, wrong types, deep nesting, huge $in lists and bad limits with INVALID_QUERY', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { maxLimit: 500 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply(rows(0, 10));
    await cache.commit(null);
    const base: Query = { filter: {}, orderBy: [], limit: 10, skip: 0, after: null };
    let deep: Record<string, unknown> = { value: 1 };
    for (let i = 0; i < 50; i++) deep = { $and: [deep] };
    const hostile: Array<Partial<Query>> = [
      { filter: { nope: 1 } },
      { filter: { $or: [{ value: 1 }, { nope: { $gt: 1 } }] } },
      { filter: { value: 'ten' } },
      { filter: { value: { $gt: 'a' } } },
      { filter: { category: { $lt: 5 } } },
      { filter: { active: { $gt: true } } },
      { filter: { value: { $contains: 1 } } },
      { filter: { value: { $in: ['a'] } } },
      { filter: { value: { $regex: '.*' } } as never },
      { filter: { value: { $gt: { nested: 1 } } } as never },
      { filter: { $where: 'sleep(1000)' } as never },
      { filter: deep as never },
      { filter: { value: { $in: Array.from({ length: 100_000 }, (_, i) => i) } } },
      { filter: JSON.parse('{"__proto__": {"value": 1}}') },
      { orderBy: [{ field: 'nope', direction: 'asc' }] },
      { orderBy: [{ field: 'value', direction: 'sideways' as never }] },
      { limit: -1 },
      { limit: 501 },
      { limit: 1e12 },
      { limit: 1.5 },
      { skip: -5 },
      { skip: 10_000_000 },
      { after: 'not-a-cursor' },
      { after: Buffer.from(JSON.stringify({ c: cache.name, o: '', k: [1, 2, 3] })).toString('base64url') },
      { after: 'x'.repeat(100_000) },
      { filter: 'value = 1' as never },
      { filter: [] as never },
    ];
    for (const query of hostile) {
      expectSluiceError(
        () => cache.query({ ...base, ...query }),
        'INVALID_QUERY',
        JSON.stringify(query).slice(0, 200),
      );
    }
    expectSluiceError(() => cache.query(null as never), 'INVALID_QUERY');
    expectSluiceError(() => cache.count({ nope: 1 }), 'INVALID_QUERY');
    expectSluiceError(
      () => cache.count({ value: { $in: Array.from({ length: 5000 }, (_, i) => i) } }),
      'INVALID_QUERY',
    );
    // The wire form is rejected by core's parser with the same code.
    expectSluiceError(() => parseQuery({ $filter: { value: { $gt: 1 } }, $limit: -1 }), 'INVALID_QUERY');
    // The cache still answers afterwards.
    expect(cache.query(parseQuery({ $filter: { value: { $gte: 5 } } })).records).toHaveLength(5);
  });

  it('defect: a cursor whose values do not fit the sort fields (edited or mangled by a client) answered an empty page, as if the walk had ended — now INVALID_QUERY', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply(rows(0, 20));
    await cache.commit(null);
    const page = cache.query(parseQuery({ $order_by: { value: 'asc' }, $limit: 5 }));
    const body = JSON.parse(Buffer.from(page.next!, 'base64url').toString('utf8'));
    const forged = (k: unknown[]) =>
      Buffer.from(JSON.stringify({ ...body, k }), 'utf8').toString('base64url');
    // The genuine cursor continues.
    expect(
      cache.query(parseQuery({ $order_by: { value: 'asc' }, $limit: 5, $after: page.next! })).records,
    ).toHaveLength(5);
    for (const k of [
      ['zzz', body.k[1]],
      [body.k[0], 'not an id'],
      [{ a: 1 }, body.k[1]],
      [true, body.k[1]],
    ]) {
      let refused: unknown;
      try {
        cache.query(parseQuery({ $order_by: { value: 'asc' }, $limit: 5, $after: forged(k) }));
      } catch (err) {
        refused = err;
      }
      expect(refused, JSON.stringify(k)).toMatchObject({ code: 'INVALID_QUERY' });
    }
    // null sorts as a value of its own: a cursor may hold it.
    expect(
      cache.query(parseQuery({ $order_by: { value: 'asc' }, $after: forged([null, body.k[1]]) })).records
        .length,
    ).toBeGreaterThan(0);
  });

  it('expires a cursor from another generation, and refuses one made for another order or filter', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using blue = await caches.create({ endpoint: 'items', schema });
    await using green = await caches.create({ endpoint: 'items', schema });
    for (const c of [blue, green]) {
      c.apply(rows(0, 20));
      await c.commit(null);
    }
    const page = blue.query(parseQuery({ $order_by: { value: 'asc' }, $limit: 5 }));
    expect(page.next).not.toBeNull();
    expect(
      blue.query(parseQuery({ $order_by: { value: 'asc' }, $limit: 5, $after: page.next! })).records[0]!.id,
    ).toBe(5);
    expectSluiceError(
      () => green.query(parseQuery({ $order_by: { value: 'asc' }, $after: page.next! })),
      'CURSOR_EXPIRED',
    );
    expectSluiceError(
      () => blue.query(parseQuery({ $order_by: { value: 'desc' }, $after: page.next! })),
      'INVALID_QUERY',
    );

    // A cursor belongs to its filter too: the same filter (keys in any order) continues, another one is refused.
    const filtered = blue.query(
      parseQuery({ $filter: { value: { $gte: 1, $lt: 15 } }, $order_by: { value: 'asc' }, $limit: 5 }),
    );
    const reordered = blue.query(
      parseQuery({
        $filter: { value: { $lt: 15, $gte: 1 } },
        $order_by: { value: 'asc' },
        $after: filtered.next!,
      }),
    );
    expect(reordered.records.length).toBeGreaterThan(0);
    let refused: unknown;
    try {
      blue.query(
        parseQuery({ $filter: { value: { $gte: 2 } }, $order_by: { value: 'asc' }, $after: filtered.next! }),
      );
    } catch (err) {
      refused = err;
    }
    expect(refused).toMatchObject({
      code: 'INVALID_QUERY',
      message: expect.stringContaining('another $filter'),
    });
  });
});

describe('planner', () => {
  it('defect: a query ordered by the primary key was refused "add an index [id]" when the planner took another index for its filter and the matches outgrew cache.scanCap', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { scanCap: 50 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply(rows(0, 400));
    await cache.commit(null);
    // `value` bounds the filter (the index [value] narrows it to 200 records, more than the cap); the order is the
    // primary key's, which the data itself is kept in: pages come in that order, each scan within the cap.
    const ids: number[] = [];
    let after: string | null = null;
    let pages = 0;
    do {
      const page = cache.query(
        parseQuery({
          $filter: { value: { $gte: 50 } },
          $order_by: { id: 'asc' },
          $limit: 20,
          ...(after === null ? {} : { $after: after }),
        }),
      );
      expect(page.plan.scanned).toBeLessThanOrEqual(50);
      ids.push(...page.records.map((r) => Number(r.id)));
      after = page.next;
      pages += 1;
    } while (after !== null && pages < 100);
    const expected = Array.from({ length: 400 }, (_, id) => id).filter((id) => id % 100 >= 50);
    expect(ids).toEqual(expected);
  });

  it('uses an index for equality, range and order, and scans up to the cap otherwise, saying so', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { scanCap: 300 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply(rows(0, 1000));
    await cache.commit(null);

    const eqRange = cache.query(
      parseQuery({ $filter: { category: 'c1', value: { $gte: 50 } }, $order_by: { value: 'asc' } }),
    );
    expect(eqRange.plan).toMatchObject({ index: 'category,value', capped: false });
    expect(eqRange.plan.scanned).toBeLessThanOrEqual(51); // only what the page needs
    expect(eqRange.records.map((r) => r.value)).toEqual(
      eqRange.records.map((r) => r.value).sort((a, b) => Number(a) - Number(b)),
    );
    expect(eqRange.records.every((r) => r.category === 'c1' && Number(r.value) >= 50)).toBe(true);

    const range = cache.query(parseQuery({ $filter: { value: { $gt: 97 } } }));
    expect(range.plan.index).toBe('value');
    expect(range.plan.scanned).toBe(20);
    expect(range.records).toHaveLength(20);

    const ordered = cache.query(parseQuery({ $order_by: { value: 'desc' }, $limit: 3 }));
    expect(ordered.plan).toMatchObject({ index: 'value', capped: false });
    expect(ordered.records.map((r) => r.id)).toEqual([999, 899, 799]);

    const inList = cache.query(
      parseQuery({ $filter: { value: { $in: [3, 1] } }, $order_by: { value: 'asc' }, $limit: 100 }),
    );
    expect(inList.plan.index).toBe('value');
    expect(inList.records.map((r) => r.value)).toEqual([...Array(10).fill(1), ...Array(10).fill(3)]);

    const byKey = cache.query(parseQuery({ $filter: { id: { $gte: 10, $lt: 13 } } }));
    expect(byKey.plan).toMatchObject({ index: 'primary', scanned: 3 });

    // No index fits: a scan capped at 300 records, reported, with a cursor that continues the scan.
    const scan = cache.query(
      parseQuery({ $filter: { active: true, tags: { $contains: 't2' } }, $limit: 1000 }),
    );
    expect(scan.plan).toMatchObject({ index: null, scanned: 300, capped: true });
    expect(scan.records.length).toBeGreaterThan(0);
    expect(scan.next).not.toBeNull();
    const found = [...scan.records];
    let next = scan.next;
    while (next) {
      const more = cache.query({
        ...parseQuery({ $filter: { active: true, tags: { $contains: 't2' } }, $limit: 1000 }),
        after: next,
      });
      found.push(...more.records);
      next = more.next;
    }
    const expected = Array.from({ length: 1000 }, (_, id) => id).filter((id) => id % 2 === 0 && id % 3 === 2);
    expect(found.map((r) => r.id)).toEqual(expected);

    // An unindexable sort beyond the cap is refused: the records it did not see may come first.
    expect(() => cache.query(parseQuery({ $order_by: { active: 'asc' }, $limit: 5 }))).toThrow(
      expect.objectContaining({
        code: 'INVALID_QUERY',
        errors: [expect.objectContaining({ path: '$order_by' })],
      }),
    );
    // One within the cap is sorted whole: 300 records an index narrows to, in the asked order.
    const sorted = cache.query(
      parseQuery({ $filter: { id: { $lt: 300 } }, $order_by: { active: 'asc' }, $limit: 5 }),
    );
    expect(sorted.plan).toMatchObject({ index: 'primary', capped: false, scanned: 300 });
    expect(sorted.records.map((r) => r.active)).toEqual([false, false, false, false, false]);
    expect(sorted.next).not.toBeNull();
    // A count checks at most the cap's records one by one too (it has no `next`): beyond, refused at $filter …
    expect(() => cache.count({ active: true })).toThrow(
      expect.objectContaining({
        code: 'INVALID_QUERY',
        errors: [expect.objectContaining({ path: '$filter' })],
      }),
    );
    expect(cache.countWithinCap({ active: true })).toBeNull();
    // … within it, exact; and what an index answers whole is counted by LMDB, whatever the cap.
    expect(cache.count({ id: { $lt: 300 }, active: true })).toBe(150);
    expect(cache.count({ id: { $gte: 100 } })).toBe(900);
    expect(cache.count()).toBe(1000);
  });
});

describe('pagination while the cache is being written', () => {
  it('never skips or repeats a record, with $after and with $skip', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply(rows(0, 300));
    await cache.commit(null);
    const stable = new Set(Array.from({ length: 300 }, (_, id) => id).filter((id) => id % 7 !== 0));

    for (const order of [{ value: 'asc' }, { value: 'desc' }, { category: 'asc' }, {}] as const) {
      // $after: between pages, the writer inserts (with ids before and after), deletes and rewrites records.
      const seen: number[] = [];
      let after: string | null = null;
      let round = 0;
      const query = parseQuery({ $order_by: order, $limit: 17 });
      do {
        const page = cache.query({ ...query, after });
        seen.push(...page.records.map((r) => Number(r.id)));
        after = page.next;
        round++;
        cache.apply([
          ...rows(1000 + round * 3, 1003 + round * 3),
          { op: 'upsert', record: { id: -round, value: round % 100, category: 'c0' } },
          ...rows(0, 300).filter((_, i) => i % 7 === 0 && i % 14 !== 0),
        ]);
        if (round % 2 === 0) cache.apply([{ op: 'delete', key: [round * 7] }], { onConflict: 'skip' });
        await cache.commit(null);
      } while (after);
      expect(new Set(seen).size, JSON.stringify(order)).toBe(seen.length); // no repeats
      for (const id of stable) expect(seen.includes(id), `${JSON.stringify(order)} missing ${id}`).toBe(true);
    }

    // $skip: offsets are stable when writes only change non-sort fields and add records after the page.
    const seen: number[] = [];
    for (let skip = 0; skip < 320; skip += 25) {
      const page = cache.query(
        parseQuery({
          $filter: { id: { $lt: 300, $gte: 0 } },
          $order_by: { id: 'asc' },
          $limit: 25,
          $skip: skip,
        }),
      );
      seen.push(...page.records.map((r) => Number(r.id)));
      cache.apply([
        { op: 'upsert', record: { id: 5000 + skip, value: 1, category: 'c0' } },
        { op: 'upsert', record: { id: skip, value: 42, category: 'changed', active: false } },
      ]);
      await cache.commit(null);
    }
    const present = cache
      .query(parseQuery({ $filter: { id: { $lt: 300, $gte: 0 } }, $limit: 1000 }))
      .records.map((r) => Number(r.id));
    expect(seen).toEqual(present);
  });
});

describe('RwCache lifecycle', () => {
  it('records snapshotting-done per source, clears from scratch, and refuses use after close', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    const cache = await caches.create({ endpoint: 'items', schema });
    cache.apply(rows(0, 10));
    await cache.commit({ dag: 'd', epoch: 1, positions: {}, at: '2026-01-01T00:00:00.000Z' });
    await cache.markSnapshottingDone('source:a');
    await cache.markSnapshottingDone('source:a');
    await cache.markSnapshottingDone('source:b');
    expect(cache.commitState()).toMatchObject({
      snapshottingDone: ['source:a', 'source:b'],
      recordCount: 10,
    });
    await expect(cache.markSnapshottingDone('')).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });

    cache.apply(rows(10, 20)); // staged, dropped by clear
    await cache.clear();
    expect(cache.commitState()).toMatchObject({ checkpoint: null, recordCount: 0, snapshottingDone: [] });
    expect(cache.count()).toBe(0);
    expect(cache.query(parseQuery({ $filter: { value: 1 } })).records).toEqual([]);
    await cache.commit(null);
    expect(cache.count()).toBe(0);
    cache.apply(rows(0, 3));
    await cache.commit(null);
    expect(cache.query(parseQuery({ $order_by: { value: 'desc' } })).records.map((r) => r.id)).toEqual([
      2, 1, 0,
    ]);

    await cache.close();
    expectSluiceError(() => cache.get([1]), 'CACHE_CLOSED');
    expectSluiceError(() => cache.apply(rows(0, 1)), 'CACHE_CLOSED');
    await expect(cache.commit(null)).rejects.toMatchObject({ code: 'CACHE_CLOSED' });
  });
});
