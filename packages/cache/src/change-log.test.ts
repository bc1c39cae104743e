import { join } from 'node:path';
import { type CacheSchema, type ChangeEntry, SluiceError } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { open } from 'lmdb';
import { describe, expect, it, vi } from 'vitest';
import { openCacheManager } from './manager.js';

const schema: CacheSchema = {
  fields: { id: 'integer', value: 'number', category: 'string' },
  primaryKey: ['id'],
  indexes: [['value']],
};

const checkpoint = (epoch: number) => ({
  dag: 'd1',
  epoch,
  positions: { src: epoch * 10 },
  at: new Date().toISOString(),
});

/** Applies log entries to a map by primary key (what a feed subscriber does). */
function applyLog(entries: ChangeEntry[], into = new Map<number, unknown>()): Map<number, unknown> {
  for (const entry of entries) {
    if (entry.op === 'upsert') into.set(entry.key[0] as number, entry.record);
    if (entry.op === 'delete') into.delete(entry.key[0] as number);
  }
  return into;
}

describe('change log', () => {
  it('defect: several source transactions in one commit were logged as one, each key once with its last state', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([{ op: 'insert', record: { id: 1, value: 10, category: 'a' } }]);
    await cache.commit(checkpoint(1));
    // Three source transactions reach one commit (group commit): 1 → 11, then 2 appears and 1 → 12, then 2 goes.
    cache.apply([{ op: 'upsert', record: { id: 1, value: 11, category: 'a' } }]);
    cache.markTransaction({ src: 11 });
    cache.apply([
      { op: 'upsert', record: { id: 2, value: 20, category: 'b' } },
      { op: 'upsert', record: { id: 1, value: 12, category: 'a' } },
    ]);
    cache.markTransaction({ src: 12 });
    cache.apply([{ op: 'delete', key: [2] }]);
    cache.markTransaction({ src: 13 });
    await cache.commit({ ...checkpoint(2), positions: { src: 13 } });
    const entries = cache.changeLog().read(2, 100);
    expect(
      entries.map((e) =>
        e.op === 'commit'
          ? ['commit', e.position]
          : [e.op, e.key[0], e.op === 'upsert' ? e.record.value : null],
      ),
    ).toEqual([
      ['upsert', 1, 11],
      ['commit', { src: 11 }],
      ['upsert', 2, 20],
      ['upsert', 1, 12],
      ['commit', { src: 12 }],
      ['delete', 2, null],
      ['commit', { src: 13 }],
    ]);
    // The records are the last state, as before.
    expect(cache.get([1])).toEqual({ id: 1, value: 12, category: 'a' });
    expect(cache.get([2])).toBeUndefined();
    // Changes after the last mark are the commit's own last transaction.
    cache.apply([{ op: 'upsert', record: { id: 3, value: 30, category: 'c' } }]);
    cache.markTransaction({ src: 14 });
    cache.apply([{ op: 'upsert', record: { id: 4, value: 40, category: 'c' } }]);
    await cache.commit({ ...checkpoint(3), positions: { src: 15 } });
    expect(
      cache
        .changeLog()
        .read(9, 100)
        .map((e) => (e.op === 'commit' ? ['commit', e.position, e.epoch] : [e.op, e.key[0]])),
    ).toEqual([
      ['upsert', 3],
      ['commit', { src: 14 }, 3],
      ['upsert', 4],
      ['commit', { src: 15 }, 3],
    ]);
  });

  it('keeps what each upsert and delete replaced (null: nothing), chained through the transactions of one commit', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    const befores = (after: number) =>
      cache
        .changeLog()
        .read(after, 100)
        .flatMap((e) => (e.op === 'commit' ? [] : [[e.op, e.key[0], e.before?.value ?? e.before]]));
    cache.apply([
      { op: 'insert', record: { id: 1, value: 10, category: 'a' } },
      { op: 'insert', record: { id: 2, value: 20, category: 'b' } },
    ]);
    await cache.commit(checkpoint(1));
    // A snapshot's first load replaces nothing.
    expect(befores(0)).toEqual([
      ['upsert', 1, null],
      ['upsert', 2, null],
    ]);
    cache.apply([
      { op: 'upsert', record: { id: 1, value: 11, category: 'a' } },
      { op: 'delete', key: [2] },
      { op: 'upsert', record: { id: 3, value: 30, category: 'c' } },
    ]);
    await cache.commit(checkpoint(2));
    expect(befores(3)).toEqual([
      ['upsert', 1, 10],
      ['delete', 2, 20],
      ['upsert', 3, null],
    ]);
    // Grouped: 1 → 12 → 11 (back to what is stored) and 3 → deleted → 33, each change replacing the one before.
    cache.apply([
      { op: 'upsert', record: { id: 1, value: 12, category: 'a' } },
      { op: 'delete', key: [3] },
    ]);
    cache.markTransaction({ src: 21 });
    cache.apply([
      { op: 'upsert', record: { id: 1, value: 11, category: 'a' } },
      { op: 'upsert', record: { id: 3, value: 33, category: 'c' } },
    ]);
    cache.markTransaction({ src: 22 });
    await cache.commit({ ...checkpoint(3), positions: { src: 22 } });
    expect(befores(7)).toEqual([
      ['upsert', 1, 11],
      ['delete', 3, 30],
      ['upsert', 1, 12],
      ['upsert', 3, null],
    ]);
    // Not enumerable: an entry still reads as before.
    expect(Object.keys(cache.changeLog().read(7, 1)[0]!)).toEqual(['seq', 'op', 'key', 'record']);
  });

  it("records each commit's upserts and deletes, then a commit marker with the positions, in the data's transaction", async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    const log = cache.changeLog();
    expect(log.head()).toEqual({ first: 1, last: 0 });

    cache.apply([
      { op: 'insert', record: { id: 1, value: 10, category: 'a' } },
      { op: 'insert', record: { id: 2, value: 20, category: 'b' } },
    ]);
    await cache.commit(checkpoint(1));
    cache.apply([
      { op: 'update', record: { id: 1, value: 11, category: 'a' } },
      { op: 'delete', key: [2] },
    ]);
    await cache.commit(checkpoint(2));

    const entries = log.read(0, 100);
    expect(entries.map((e) => [e.seq, e.op])).toEqual([
      [1, 'upsert'],
      [2, 'upsert'],
      [3, 'commit'],
      [4, 'upsert'],
      [5, 'delete'],
      [6, 'commit'],
    ]);
    expect(entries[3]).toMatchObject({ key: [1], record: { id: 1, value: 11, category: 'a' } });
    expect(entries[4]).toEqual({ seq: 5, op: 'delete', key: [2] });
    expect(entries[5]).toMatchObject({ op: 'commit', position: { src: 20 }, epoch: 2 });
    expect(log.head()).toEqual({ first: 1, last: 6 });
    expect(log.read(3, 2).map((e) => e.seq)).toEqual([4, 5]);
    // Replaying the log gives the cache's records.
    expect([...applyLog(entries).values()]).toEqual([cache.get([1])]);
  });

  it("defect: a re-read of unchanged records (a polled source's overlap window) logged every one as an upsert again — only changes are logged", async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    const log = cache.changeLog();
    cache.apply([
      { op: 'upsert', record: { id: 1, value: 10, category: 'a' } },
      { op: 'upsert', record: { id: 2, value: 20, category: 'b' } },
    ]);
    await cache.commit(checkpoint(1));
    // The same two records again (field order aside: the stored text is canonical), one of them changed, and a
    // new one.
    cache.apply([
      { op: 'upsert', record: { category: 'a', value: 10, id: 1 } },
      { op: 'upsert', record: { id: 2, value: 21, category: 'b' } },
      { op: 'upsert', record: { id: 3, value: 30, category: 'c' } },
    ]);
    await cache.commit(checkpoint(2));
    // Nothing at all changed: only the commit marker (its position moved).
    cache.apply([{ op: 'upsert', record: { id: 3, value: 30, category: 'c' } }]);
    await cache.commit(checkpoint(3));
    const entries = log.read(0, 100);
    expect(entries.map((e) => [e.seq, e.op, e.op === 'commit' ? null : e.key])).toEqual([
      [1, 'upsert', [1]],
      [2, 'upsert', [2]],
      [3, 'commit', null],
      [4, 'upsert', [2]],
      [5, 'upsert', [3]],
      [6, 'commit', null],
      [7, 'commit', null],
    ]);
    expect(entries[6]).toMatchObject({ op: 'commit', position: { src: 30 } });
    expect(cache.commitState().recordCount).toBe(3);
    expect([...applyLog(entries).values()]).toEqual([cache.get([1]), cache.get([2]), cache.get([3])]);
  });

  it("changeLog: 'commits' logs only the commit marker, and later full commits log their changes after it", async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    for (let c = 0; c < 3; c++) {
      cache.apply(
        Array.from({ length: 100 }, (_, i) => ({
          op: 'insert' as const,
          record: { id: c * 100 + i, value: i, category: 'a' },
        })),
      );
      await cache.commit(checkpoint(1), { bulk: true, changeLog: 'commits' });
    }
    await cache.markSnapshottingDone('src');
    cache.apply([{ op: 'update', record: { id: 7, value: 70, category: 'b' } }]);
    await cache.commit(checkpoint(2));

    const log = cache.changeLog();
    expect(log.head()).toEqual({ first: 1, last: 5 });
    expect(log.read(0, 100).map((e) => [e.seq, e.op])).toEqual([
      [1, 'commit'],
      [2, 'commit'],
      [3, 'commit'],
      [4, 'upsert'],
      [5, 'commit'],
    ]);
    expect(log.read(3, 1)[0]).toMatchObject({ key: [7], record: { id: 7, value: 70, category: 'b' } });
    // The records themselves are all there, and the deferred index answers once built.
    expect(cache.count()).toBe(300);
    expect(cache.get([7])).toEqual({ id: 7, value: 70, category: 'b' });
  });

  it('a commit that fails writes nothing to the log', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([{ op: 'upsert', record: { id: 1, value: 1, category: 'a' } }]);
    await cache.commit(checkpoint(1), { fence: { writer: 't1', epoch: 5 } });
    cache.apply([{ op: 'upsert', record: { id: 2, value: 2, category: 'a' } }]);
    const err = await cache.commit(checkpoint(2), { fence: { writer: 't1', epoch: 4 } }).catch((e) => e);
    expect(SluiceError.hasCode(err, 'STALE_EPOCH')).toBe(true);
    expect(cache.changeLog().head()).toEqual({ first: 1, last: 2 });
    expect(
      cache
        .changeLog()
        .read(0, 10)
        .map((e) => e.op),
    ).toEqual(['upsert', 'commit']);
  });

  it('keepCheckpoint commits log the checkpoint the cache keeps', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([{ op: 'upsert', record: { id: 1, value: 1, category: 'a' } }]);
    await cache.commit(checkpoint(3));
    cache.apply([{ op: 'upsert', record: { id: 2, value: 2, category: 'a' } }]);
    await cache.commit(checkpoint(9), { keepCheckpoint: true });
    const last = cache.changeLog().read(3, 10).at(-1);
    expect(last).toMatchObject({ op: 'commit', epoch: 3, position: { src: 30 } });
  });

  it('trims whole transactions past retainRecords, oldest first, never the newest', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { changes: { retainRecords: 5 } });
    await using cache = await caches.create({ endpoint: 'items', schema });
    const commitIds = async (ids: number[], epoch: number) => {
      cache.apply(ids.map((id) => ({ op: 'upsert' as const, record: { id, value: epoch, category: 'a' } })));
      await cache.commit(checkpoint(epoch));
    };
    await commitIds([1, 2], 1); // seq 1-3
    await commitIds([3], 2); // seq 4-5
    expect(cache.changeLog().head()).toEqual({ first: 1, last: 5 });
    await commitIds([4], 3); // seq 6-7: 7 entries > 5 → the first transaction (3 entries) goes
    expect(cache.changeLog().head()).toEqual({ first: 4, last: 7 });
    expect(cache.changeLog().read(0, 100)[0]?.seq).toBe(4);
    // A transaction larger than the whole retention is kept whole (it is the newest).
    await commitIds([10, 11, 12, 13, 14, 15, 16], 4); // seq 8-15
    expect(cache.changeLog().head()).toEqual({ first: 8, last: 15 });
    expect(cache.changeLog().read(0, 100)).toHaveLength(8);
  });

  it("reads the oldest transaction once to trim, not on every commit (a snapshot's is every record)", async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { changes: { retainRecords: 3_000 } });
    await using cache = await caches.create({ endpoint: 'items', schema });
    const upserts = (from: number, n: number) =>
      Array.from({ length: n }, (_, i) => ({
        op: 'upsert' as const,
        record: { id: from + i, value: i, category: 'a' },
      }));
    cache.apply(upserts(0, 2_000)); // seq 1-2001: what a snapshot commits
    await cache.commit(checkpoint(1));
    const log = (
      cache as unknown as { dbs: { env: { db(name: string, options: object): object } } }
    ).dbs.env.db('changes', { encoder: { useRecords: false } }) as {
      getRange: (...args: never[]) => unknown;
    };
    const getRange = vi.spyOn(log, 'getRange');
    for (let epoch = 2; epoch <= 6; epoch++) {
      cache.apply(upserts(10_000 + epoch, 1));
      await cache.commit(checkpoint(epoch));
    }
    // The first of these commits finds where the big transaction ends; the others know.
    expect(getRange).toHaveBeenCalledTimes(1);
    expect(cache.changeLog().head()).toEqual({ first: 1, last: 2011 });
    // Past retainRecords it still goes, whole, oldest first.
    cache.apply(upserts(20_000, 1_000)); // seq 2012-3012: 3 012 entries > 3 000
    await cache.commit(checkpoint(7));
    expect(cache.changeLog().head()).toEqual({ first: 2002, last: 3012 });
    expect(cache.changeLog().read(2001, 1)[0]).toMatchObject({ seq: 2002, op: 'upsert' });
  });

  it('trims transactions older than retainMs', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { changes: { retainMs: 100 } });
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([{ op: 'upsert', record: { id: 1, value: 1, category: 'a' } }]);
    await cache.commit(checkpoint(1));
    await new Promise((resolve) => setTimeout(resolve, 250));
    cache.apply([{ op: 'upsert', record: { id: 2, value: 2, category: 'a' } }]);
    await cache.commit(checkpoint(2));
    expect(cache.changeLog().head()).toEqual({ first: 3, last: 4 });
  });

  it('clear() forgets the log (older positions are past retention)', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([{ op: 'upsert', record: { id: 1, value: 1, category: 'a' } }]);
    await cache.commit(checkpoint(1));
    await cache.clear();
    expect(cache.changeLog().head()).toEqual({ first: 3, last: 2 });
    expect(cache.changeLog().read(0, 10)).toEqual([]);
    cache.apply([{ op: 'upsert', record: { id: 5, value: 1, category: 'a' } }]);
    await cache.commit(checkpoint(2));
    expect(
      cache
        .changeLog()
        .read(0, 10)
        .map((e) => e.seq),
    ).toEqual([3, 4]);
  });

  it('a pinned snapshot keeps its records, head and log while later commits land', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([3, 1, 2].map((id) => ({ op: 'upsert' as const, record: { id, value: id, category: 'a' } })));
    await cache.commit(checkpoint(1));
    using pinned = cache.changeLog().pin();
    cache.apply([
      { op: 'delete', key: [1] },
      { op: 'upsert', record: { id: 4, value: 4, category: 'a' } },
    ]);
    await cache.commit(checkpoint(2));
    expect(pinned.head).toEqual({ first: 1, last: 4 });
    expect([...pinned.records()].map((r) => r.record.id)).toEqual([1, 2, 3]);
    const [, second] = [...pinned.records()];
    expect([...pinned.records(second?.dataKey)].map((r) => r.record.id)).toEqual([3]);
    expect(pinned.read(0, 100)).toHaveLength(4);
    // The latest commit is visible outside the pin.
    expect(cache.changeLog().head().last).toBe(7);
  });

  it('logs an upsert as the stored JSON text, and still reads upserts logged as MessagePack records', async () => {
    await using dir = await tempDir();
    let name: string;
    {
      await using caches = await openCacheManager(dir.path);
      await using cache = await caches.create({ endpoint: 'items', schema });
      name = cache.name;
      cache.apply([{ op: 'upsert', record: { category: 'a', id: 1, value: 10 } }]);
      await cache.commit(checkpoint(1));
    }
    const env = open({ path: join(dir.path, 'caches', name), maxDbs: 64 });
    const changes = env.openDB<Record<string, unknown>, number>({
      name: 'changes',
      encoder: { useRecords: false },
    } as never);
    const data = env.openDB<Buffer, Buffer>({ name: 'data', keyEncoding: 'binary', encoding: 'binary' });
    const [stored] = [...data.getRange({})].map((e) => e.value);
    // The log entry holds exactly the data entry's bytes (canonical field order), not a re-encoded record.
    expect(Buffer.from(changes.get(1)!.j as Uint8Array).equals(stored!)).toBe(true);
    // An entry as an earlier version wrote it: the record itself, MessagePack-encoded.
    await changes.put(1, { o: 'u', k: [1], r: { id: 1, value: 9, category: 'old' } });
    await env.close();

    await using caches = await openCacheManager(dir.path);
    await using served = await caches.openRo(name);
    expect(served.changeLog().read(0, 10)).toMatchObject([
      { seq: 1, op: 'upsert', key: [1], record: { id: 1, value: 9, category: 'old' } },
      { seq: 2, op: 'commit', epoch: 1 },
    ]);
  });
});
