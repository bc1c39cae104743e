import { join } from 'node:path';
import { type CacheSchema, parseQuery, SluiceError } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { open } from 'lmdb';
import { describe, expect, it } from 'vitest';
import { openCacheManager } from './manager.js';

const schema: CacheSchema = {
  fields: { id: 'integer', value: 'number', category: 'string', tags: 'json' },
  primaryKey: ['id'],
  indexes: [['value'], ['category', 'value']],
};

describe('records stored as their served JSON text', () => {
  it('stores each record once in canonical field order (declared fields, then extras) and serves those bytes', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([
      // Fields in another order, an extra field, an undefined one (dropped, as JSON does).
      {
        op: 'upsert',
        record: { extra: 'x', tags: ['a', 1], category: 'c', value: 2.5, id: 1, gone: undefined },
      },
      { op: 'upsert', record: { id: 2, category: 'é "quoted"', value: -1 } },
    ]);
    await cache.commit(null);
    expect(cache.getJson([1])?.toString('utf8')).toBe(
      '{"id":1,"value":2.5,"category":"c","tags":["a",1],"extra":"x"}',
    );
    expect(cache.getJson([2])?.toString('utf8')).toBe('{"id":2,"value":-1,"category":"é \\"quoted\\""}');
    expect(cache.getJson([3])).toBeUndefined();
    expect(cache.get([1])).toEqual({ id: 1, value: 2.5, category: 'c', tags: ['a', 1], extra: 'x' });

    // A query answers with the same bytes, in the same order as the decoded answer.
    const query = parseQuery({ $filter: { value: { $gte: -5 } }, $order_by: { value: 'asc' } });
    const page = cache.queryJson(query);
    expect(page.json.toString('utf8')).toBe(
      `[${cache.getJson([2])!.toString('utf8')},${cache.getJson([1])!.toString('utf8')}]`,
    );
    expect(page.count).toBe(2);
    expect(JSON.parse(page.json.toString('utf8'))).toEqual(cache.query(query).records);
    expect(page.plan).toEqual({ index: 'value', scanned: 2, capped: false });
  });

  it('answers exactly when the index answers the filter and when a residual condition needs the fields', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    const all = Array.from({ length: 200 }, (_, i) => ({
      id: i,
      value: i % 17,
      category: ['a', 'b', 'c'][i % 3]!,
      tags: i % 2 === 0 ? ['even'] : [],
    }));
    cache.apply(all.map((record) => ({ op: 'upsert' as const, record })));
    await cache.commit(null);
    const pageText = (filter: Record<string, unknown>) =>
      cache
        .queryJson(parseQuery({ $filter: filter, $order_by: { value: 'asc' }, $limit: 1000 }))
        .json.toString('utf8');
    const ids = (filter: Record<string, unknown>) =>
      (JSON.parse(pageText(filter)) as Array<{ id: number }>).map((r) => r.id);
    const reference = (keep: (r: (typeof all)[number]) => boolean) =>
      all
        .filter(keep)
        .sort((x, y) => x.value - y.value || x.id - y.id)
        .map((r) => r.id);
    // Fully answered by the `value` index.
    expect(ids({ value: { $gt: 3, $lte: 9 } })).toEqual(reference((r) => r.value > 3 && r.value <= 9));
    // Fully answered by `category,value` (equality, then a range).
    expect(ids({ category: 'b', value: { $lt: 5 } })).toEqual(
      reference((r) => r.category === 'b' && r.value < 5),
    );
    // Residual conditions: $ne, a field outside the index, two equalities on one field, an $or.
    expect(ids({ value: { $gte: 2, $ne: 4 } })).toEqual(reference((r) => r.value >= 2 && r.value !== 4));
    expect(ids({ value: { $lt: 6 }, tags: { $contains: 'even' } })).toEqual(
      reference((r) => r.value < 6 && r.tags.includes('even')),
    );
    expect(ids({ $and: [{ category: 'a' }, { category: 'b' }] })).toEqual([]);
    expect(ids({ value: { $lt: 3 }, $or: [{ category: 'a' }, { id: 5 }] })).toEqual(
      reference((r) => r.value < 3 && (r.category === 'a' || r.id === 5)),
    );
  });

  it('writes a framed page as one body, and a page handed out is never overwritten by later reads', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply(
      Array.from({ length: 3000 }, (_, i) => ({
        op: 'upsert' as const,
        record: { id: i, value: i % 500, category: ['a', 'b'][i % 2]!, tags: [`t${i}`] },
      })),
    );
    await cache.commit(null);
    const frame = { head: '{"records":', tail: (next: string | null) => `,"next":${JSON.stringify(next)}}` };
    const queries = [
      { $filter: { value: { $gte: 10 } }, $order_by: { value: 'asc' }, $limit: 50 },
      // A residual condition: the page's rows are not consecutive entries of the scan.
      { $filter: { value: { $gte: 10 }, id: { $ne: 12 } }, $order_by: { value: 'asc' }, $limit: 40 },
      { $filter: { category: 'b' }, $order_by: { value: 'desc' }, $limit: 70, $skip: 3 },
      { $order_by: { id: 'asc' }, $limit: 5 },
    ];
    const kept: Array<{ body: Buffer; text: string }> = [];
    // Enough reads that the arena moves on to new buffers several times.
    for (let round = 0; round < 40; round++)
      for (const q of queries) {
        const query = parseQuery(q);
        const plain = cache.queryJson(query);
        const framed = cache.queryJson(query, frame);
        const expected = `{"records":${plain.json.toString('utf8')},"next":${JSON.stringify(framed.next)}}`;
        expect(framed.json.toString('utf8')).toBe(expected);
        expect(JSON.parse(plain.json.toString('utf8'))).toEqual(cache.query(query).records);
        kept.push({ body: framed.json, text: expected });
      }
    for (const { body, text } of kept) expect(body.toString('utf8')).toBe(text);
  });

  it('hands out one frozen commit state per commit, read in the snapshot of the records', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([{ op: 'upsert', record: { id: 1, value: 1, category: 'a' } }]);
    await cache.commit({ dag: 'd', epoch: 1, positions: {}, at: new Date().toISOString() });
    const first = cache.queryJson(parseQuery({}));
    expect(first.state).toEqual(cache.commitState());
    expect(Object.isFrozen(first.state)).toBe(true);
    expect(cache.queryJson(parseQuery({})).state).toBe(first.state);
    expect(cache.servingState()).toBe(first.state);
    cache.apply([{ op: 'upsert', record: { id: 2, value: 2, category: 'a' } }]);
    await cache.commit({ dag: 'd', epoch: 2, positions: {}, at: new Date().toISOString() });
    const second = cache.queryJson(parseQuery({}));
    expect(second.state).not.toBe(first.state);
    expect(second.state).toMatchObject({ recordCount: 2, checkpoint: { epoch: 2 } });
    expect(second.count).toBe(2);
  });

  it('keeps covering index entries equal to the records: updates in place, moved keys, deletes, same bytes', async () => {
    await using dir = await tempDir();
    let name: string;
    const records = new Map<number, Record<string, unknown>>();
    {
      await using caches = await openCacheManager(dir.path);
      await using cache = await caches.create({ endpoint: 'items', schema });
      name = cache.name;
      const put = (record: Record<string, unknown>) => {
        records.set(record.id as number, record);
        return { op: 'upsert' as const, record };
      };
      cache.apply([1, 2, 3, 4].map((id) => put({ id, value: id * 10, category: 'a', tags: [id] })));
      await cache.commit(null);
      // Same index keys, new bytes (only `tags` changes); a moved key; a delete; an unchanged upsert.
      cache.apply([
        put({ id: 1, value: 10, category: 'a', tags: ['changed'] }),
        put({ id: 2, value: 35, category: 'b', tags: [2] }),
        { op: 'delete', key: [3] },
        put({ id: 4, value: 40, category: 'a', tags: [4] }),
      ]);
      records.delete(3);
      await cache.commit(null);
      const bytesOf = (ids: number[]) =>
        `[${ids.map((id) => cache.getJson([id])!.toString('utf8')).join(',')}]`;
      const byValue = cache.queryJson(
        parseQuery({ $filter: { value: { $gte: 0 } }, $order_by: { value: 'asc' } }),
      );
      expect(byValue.plan.index).toBe('value');
      expect(byValue.json.toString('utf8')).toBe(bytesOf([1, 2, 4]));
      expect(JSON.parse(byValue.json.toString('utf8'))[0]).toEqual({
        id: 1,
        value: 10,
        category: 'a',
        tags: ['changed'],
      });
      const inA = cache.queryJson(parseQuery({ $filter: { category: 'a' }, $order_by: { value: 'desc' } }));
      expect(inA.plan.index).toBe('category,value');
      expect(inA.json.toString('utf8')).toBe(bytesOf([4, 1]));
      expect(cache.count({ category: 'a' })).toBe(2);
      // A `next` cursor cut from an index scan (its data key encoded from the record) continues the walk.
      const first = cache.queryJson(parseQuery({ $order_by: { value: 'asc' }, $limit: 2 }));
      expect(first.next).not.toBeNull();
      const rest = cache.queryJson(parseQuery({ $order_by: { value: 'asc' }, $after: first.next! }));
      expect(`${first.json.toString('utf8').slice(0, -1)},${rest.json.toString('utf8').slice(1)}`).toBe(
        bytesOf([1, 2, 4]),
      );
    }
    // On disk: every index entry's value is its record's stored text, and nothing else is there.
    const env = open({ path: join(dir.path, 'caches', name), maxDbs: 64, readOnly: true });
    const data = env.openDB<Buffer, Buffer>({ name: 'data', keyEncoding: 'binary', encoding: 'binary' });
    const stored = new Set([...data.getRange()].map(({ value }) => value.toString('utf8')));
    expect(stored.size).toBe(records.size);
    const indexDbs = [...env.getKeys()].map(String).filter((db) => db.startsWith('index:'));
    expect(indexDbs).toHaveLength(2);
    for (const db of indexDbs) {
      const index = env.openDB<Buffer, Buffer>({ name: db, keyEncoding: 'binary', encoding: 'binary' });
      const values = [...index.getRange()].map(({ value }) => value.toString('utf8'));
      expect(new Set(values)).toEqual(stored);
      expect(values).toHaveLength(records.size);
    }
    await env.close();
  });

  it('lookup answers held together stay intact: each is a copy, of every size (in the read buffer, past it, past a slab)', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    const sizes = [10, 70_000, 10, 40_000, 3_000_000, 200_000, 10, 5];
    const text = (i: number) => `{"id":${i},"value":${i},"category":"a","tags":["${'x'.repeat(sizes[i]!)}"]}`;
    cache.apply(sizes.map((_, i) => ({ op: 'upsert' as const, record: JSON.parse(text(i)) })));
    await cache.commit(null);
    // Held, as responses still being written are, while later lookups read through the same LMDB buffers.
    const held = [];
    for (let round = 0; round < 3; round++)
      for (let i = 0; i < sizes.length; i++) held.push([i, cache.getJson([i])!] as const);
    for (const [i, bytes] of held) expect(bytes.toString('utf8')).toBe(text(i));
  });

  it('serves records of any size through an index scan (small, past the read buffer, past the scan arena)', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    const sizes = [10, 70_000, 10, 3_000_000, 200_000, 10];
    cache.apply(
      sizes.map((size, i) => ({
        op: 'upsert' as const,
        record: { id: i, value: i, category: 'a', tags: ['x'.repeat(size)] },
      })),
    );
    await cache.commit(null);
    const expected = `[${sizes.map((_, i) => cache.getJson([i])!.toString('utf8')).join(',')}]`;
    for (let round = 0; round < 2; round++) {
      const page = cache.queryJson(
        parseQuery({ $filter: { value: { $gte: 0 } }, $order_by: { value: 'asc' } }),
      );
      expect(page.plan.index).toBe('value');
      expect(page.json.toString('utf8')).toBe(expected);
      const desc = cache.queryJson(parseQuery({ $filter: { category: 'a' }, $order_by: { value: 'desc' } }));
      expect(desc.plan.index).toBe('category,value');
      expect(JSON.parse(desc.json.toString('utf8')).map((r: { id: number }) => r.id)).toEqual([
        5, 4, 3, 2, 1, 0,
      ]);
      expect(cache.query(parseQuery({ $filter: { value: { $gte: 3 } } })).records[0]!.tags).toEqual([
        'x'.repeat(3_000_000),
      ]);
    }
  });

  it('serves a record-format-2 generation (index entries holding the data key) read-only, and refuses to write it', async () => {
    // What the previous version wrote: the same data entries, index entries whose value is the data key. An
    // api-server keeps serving it while the app-server rebuilds the endpoint in the current format.
    await using dir = await tempDir();
    let name: string;
    const records = Array.from({ length: 40 }, (_, i) => ({
      id: i + 1,
      value: (i * 7) % 13,
      category: i % 2 === 0 ? 'a' : 'b',
    }));
    const queries = [
      { $filter: { value: { $gte: 3, $lt: 9 } }, $order_by: { value: 'asc' }, $limit: 7 },
      { $filter: { category: 'b' }, $order_by: { value: 'desc' } },
      { $filter: { category: 'a', value: { $gt: 4 } } },
    ];
    const expected: unknown[] = [];
    {
      await using caches = await openCacheManager(dir.path);
      await using cache = await caches.create({ endpoint: 'items', schema });
      name = cache.name;
      cache.apply(records.map((record) => ({ op: 'upsert' as const, record })));
      await cache.commit(null);
      for (const q of queries)
        expected.push(JSON.parse(cache.queryJson(parseQuery(q)).json.toString('utf8')));
    }
    const env = open({ path: join(dir.path, 'caches', name), maxDbs: 64 });
    const data = env.openDB<Buffer, Buffer>({ name: 'data', keyEncoding: 'binary', encoding: 'binary' });
    const byBytes = new Map<string, Buffer>();
    for (const { key, value } of data.getRange({})) byBytes.set(value.toString('latin1'), Buffer.from(key));
    const meta = env.openDB<Record<string, unknown>, string>({ name: 'meta' });
    // The root database lists the named ones (lmdb's typings do not allow its null name or utf8 keys).
    const root = env.openDB({ name: null, keyEncoding: 'utf8' } as unknown as { name: string });
    const indexNames = [...root.getKeys()];
    let rewritten = 0;
    for (const dbName of indexNames) {
      if (typeof dbName !== 'string' || !dbName.startsWith('index:')) continue;
      const index = env.openDB<Buffer, Buffer>({ name: dbName, keyEncoding: 'binary', encoding: 'binary' });
      for (const { key, value } of [...index.getRange({})]) {
        const key2 = byBytes.get(value.toString('latin1'));
        expect(key2).toBeDefined();
        await index.put(key, key2!);
        rewritten++;
      }
    }
    expect(rewritten).toBe(records.length * schema.indexes.length);
    await meta.put('schema', { ...meta.get('schema')!, recordFormat: 2 });
    await env.close();

    await using caches = await openCacheManager(dir.path);
    await using served = await caches.openRo(name);
    for (const [i, q] of queries.entries())
      expect(JSON.parse(served.queryJson(parseQuery(q)).json.toString('utf8')), JSON.stringify(q)).toEqual(
        expected[i],
      );
    expect(served.get([5])).toEqual(records[4]);
    expect(served.count({ category: 'a' })).toBe(20);
    const err = await caches.openRw(name).then(
      () => null,
      (e: unknown) => e,
    );
    expect(SluiceError.hasCode(err, 'CACHE_SCHEMA_MISMATCH')).toBe(true);
    expect((err as Error).message).toMatch(/record format 2.*format 4 \(JSON text.*covering/);
  });

  it('refuses a cache stored as MessagePack (before format 2) with CACHE_SCHEMA_MISMATCH, so it is rebuilt', async () => {
    await using dir = await tempDir();
    let name: string;
    {
      await using caches = await openCacheManager(dir.path);
      await using cache = await caches.create({ endpoint: 'items', schema });
      name = cache.name;
      cache.apply([{ op: 'upsert', record: { id: 1, value: 1, category: 'a' } }]);
      await cache.commit(null);
    }
    // What an older version wrote: its schema entry had no record format.
    const env = open({ path: join(dir.path, 'caches', name), maxDbs: 64 });
    const meta = env.openDB<Record<string, unknown>, string>({ name: 'meta' });
    const { recordFormat, ...old } = meta.get('schema')!;
    expect(recordFormat).toBe(4);
    await meta.put('schema', old);
    await env.close();

    await using caches = await openCacheManager(dir.path);
    for (const opening of [() => caches.openRo(name), () => caches.openRw(name)]) {
      const err = await opening().then(
        () => null,
        (e: unknown) => e,
      );
      expect(SluiceError.hasCode(err, 'CACHE_SCHEMA_MISMATCH')).toBe(true);
      expect((err as Error).message).toMatch(/MessagePack records \(format 1\).*format 4 \(JSON text/);
    }
  });
});
