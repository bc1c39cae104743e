import { join } from 'node:path';
import { type CacheSchema, type ChangeEntry, type RecordOp, SluiceError } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { cachePath } from './generation-files.js';
import { acquireEnv, releaseEnv } from './lmdb-env.js';
import { openCacheManager } from './manager.js';

const schema: CacheSchema = {
  fields: { id: 'integer', value: 'number', category: 'string' },
  primaryKey: ['id'],
  indexes: [['value'], ['category', 'value']],
};

const checkpoint = (epoch: number) => ({
  dag: 'd1',
  epoch,
  positions: { src: epoch * 10 },
  at: new Date().toISOString(),
});

const upsert = (id: number, value: number, category = 'a'): RecordOp => ({
  op: 'upsert',
  record: { id, value, category },
});

/** Every log entry after `after`. */
function logAfter(cache: { changeLog(): { read(after: number, limit: number): ChangeEntry[] } }, after = 0) {
  return cache.changeLog().read(after, 100_000);
}

/** Runs `fn` on the staging database of the generation at `path` (through this process's shared environment). */
async function withStaging<T>(
  path: string,
  fn: (db: import('lmdb').Database<unknown, Buffer>) => T,
): Promise<T> {
  const env = await acquireEnv(path, false);
  try {
    return fn(env.db<unknown, Buffer>('staging', { keyEncoding: 'binary' }));
  } finally {
    await releaseEnv(path);
  }
}

/** Entries of the staging database of the generation at `path` (what a writer left there). */
function stagingEntries(path: string): Promise<number> {
  return withStaging(path, (db) => db.getCount());
}

describe('staging area (changes beyond stagedInMemory wait on disk for their commit)', () => {
  it('a transaction far bigger than stagedInMemory commits whole: records, indexes, count and its change log in order', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { stagedInMemory: 7 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([upsert(1, 1), upsert(2, 2), upsert(3, 3)]);
    await cache.commit(checkpoint(1));
    const before = cache.changeLog().head().last;

    // Transaction 1 (small), then transaction 2 (big: inserts, updates of committed and staged keys, deletes).
    cache.apply([upsert(1, 100)]);
    cache.markTransaction({ src: 11 });
    for (let i = 10; i < 110; i += 10)
      cache.apply(Array.from({ length: 10 }, (_, j) => upsert(i + j, i + j, j % 2 ? 'odd' : 'even')));
    cache.apply([{ op: 'delete', key: [2] }, upsert(15, 1500, 'moved'), { op: 'delete', key: [16] }]);
    cache.apply([upsert(15, 1501, 'moved')]);
    // Staged, not visible: readers still see the last commit.
    expect(cache.count({})).toBe(3);
    await cache.commit(checkpoint(2));

    const expected = new Map<number, unknown>([
      [1, { id: 1, value: 100, category: 'a' }],
      [3, { id: 3, value: 3, category: 'a' }],
    ]);
    for (let id = 10; id < 110; id++)
      if (id !== 16) expected.set(id, { id, value: id, category: (id - 10) % 2 ? 'odd' : 'even' });
    expected.set(15, { id: 15, value: 1501, category: 'moved' });
    expect(cache.count({})).toBe(expected.size);
    expect(cache.commitState().recordCount).toBe(expected.size);
    for (const [id, record] of expected) expect(cache.get([id])).toEqual(record);
    expect(cache.get([2])).toBeUndefined();
    // Both indexes agree with the records (old entries of changed records gone).
    expect(cache.count({ category: 'moved' })).toBe(1);
    expect(cache.count({ value: { $gte: 1000 } })).toBe(1);
    expect(cache.count({ value: 15 })).toBe(0);
    expect(cache.count({ category: 'odd' })).toBe(49);

    // The log: transaction 1, its marker at its own position, then transaction 2's changes in order, its marker.
    const log = logAfter(cache, before);
    expect(log[0]).toMatchObject({ op: 'upsert', key: [1], record: { value: 100 } });
    expect(log[1]).toMatchObject({ op: 'commit', position: { src: 11 } });
    const second = log.slice(2);
    expect(second.at(-1)).toMatchObject({ op: 'commit', position: { src: 20 } });
    expect(second.filter((e) => e.op === 'commit')).toHaveLength(1);
    const changes = second.slice(0, -1).map((e) => `${e.op}:${(e as { key: unknown[] }).key[0]}`);
    expect(changes.slice(0, 3)).toEqual(['upsert:10', 'upsert:11', 'upsert:12']);
    expect(changes.slice(-4)).toEqual(['delete:2', 'upsert:15', 'delete:16', 'upsert:15']);
    // Each change says what it replaced: the record before it in this very commit.
    const last15 = second.filter((e) => e.op === 'upsert' && e.key[0] === 15).at(-1)!;
    expect((last15 as { before?: unknown }).before).toEqual({ id: 15, value: 1500, category: 'moved' });
    // Nothing is left in the staging area.
    await cache.close();
    expect(await stagingEntries(cachePath(caches.rootDir, cache.name))).toBe(0);
  });

  it("a spilled transaction committed with changeLog: 'commits' applies every change and logs only its marker", async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { stagedInMemory: 5 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    // 40 inserts, then updates and a delete staged after them: most of it waits on disk for the commit.
    cache.apply(Array.from({ length: 40 }, (_, i) => upsert(i + 1, i + 1)));
    cache.apply([upsert(3, 300, 'b'), { op: 'delete', key: [4] }, upsert(41, 41)]);
    expect(cache.pendingCount).toBeLessThanOrEqual(5);
    await cache.commit(checkpoint(1), { changeLog: 'commits' });

    expect(cache.count({})).toBe(40);
    expect(cache.commitState().recordCount).toBe(40);
    expect(cache.get([3])).toEqual({ id: 3, value: 300, category: 'b' });
    expect(cache.get([4])).toBeUndefined();
    expect(cache.get([41])).toEqual({ id: 41, value: 41, category: 'a' });
    expect(cache.count({ category: 'b' })).toBe(1);
    expect(cache.count({ value: 3 })).toBe(0);
    expect(logAfter(cache).map((e) => e.op)).toEqual(['commit']);
    await cache.close();
    expect(await stagingEntries(cachePath(caches.rootDir, cache.name))).toBe(0);
  });

  it('conflicts, patches and truncate see changes that went to disk', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { stagedInMemory: 3 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([upsert(1, 1, 'keep')]);
    await cache.commit(checkpoint(1));
    cache.apply(Array.from({ length: 10 }, (_, i) => upsert(100 + i, i)));
    // An insert of a spilled key conflicts; an update of one does not.
    expect(() => cache.apply([{ op: 'insert', record: { id: 100, value: 0, category: 'a' } }])).toThrow(
      /already exists/,
    );
    cache.apply([{ op: 'update', record: { id: 101, value: 42, category: 'a' } }], { onConflict: 'fail' });
    // A patch of a spilled record fills its unchanged fields from that record.
    cache.apply([{ op: 'upsert', record: { id: 102, value: 7 }, unchanged: ['category'] } as RecordOp], {
      onConflict: 'fail',
    });
    for (let i = 0; i < 4; i++) cache.apply([upsert(200 + i, i)]);
    await cache.commit(checkpoint(2));
    expect(cache.get([101])).toEqual({ id: 101, value: 42, category: 'a' });
    expect(cache.get([102])).toEqual({ id: 102, value: 7, category: 'a' });
    expect(cache.count({})).toBe(15);

    // A truncate inside a transaction: committed and staged (spilled) keys go, what follows it stays.
    for (let i = 0; i < 8; i++) cache.apply([upsert(300 + i, i)]);
    cache.truncate();
    cache.apply([upsert(400, 4)]);
    expect(cache.count({})).toBe(15);
    await cache.commit(checkpoint(3));
    expect(cache.count({})).toBe(1);
    expect(cache.get([400])).toEqual({ id: 400, value: 4, category: 'a' });
    expect(cache.commitState().recordCount).toBe(1);
  });

  it('a writer that closes (or crashes) without committing leaves nothing visible, and the next writer drops its leftovers', async () => {
    await using dir = await tempDir();
    const root = join(dir.path, 'data');
    let name: string;
    {
      await using caches = await openCacheManager(root, { stagedInMemory: 2 });
      await using cache = await caches.create({ endpoint: 'items', schema });
      name = cache.name;
      cache.apply([upsert(1, 1)]);
      await cache.commit(checkpoint(1));
      for (let i = 0; i < 10; i++) cache.apply([upsert(10 + i, i)]);
      expect(await stagingEntries(cachePath(root, name))).toBeGreaterThan(0);
      // Readers see only the commit.
      await using reader = await openCacheManager(root, { readOnly: true });
      const ro = await reader.openRo(name);
      expect(ro.count({})).toBe(1);
      expect(
        ro
          .changeLog()
          .read(0, 100)
          .filter((e) => e.op !== 'commit'),
      ).toHaveLength(1);
      await ro.close();
    }
    // A crash leaves the staging area as it was: put some there as a crashed writer would have.
    await withStaging(cachePath(root, name), (db) =>
      db.putSync(Buffer.from([0x53, 0, 0, 0, 1, 0, 0, 0, 0]), { p: [9], j: null, x: null }),
    );
    expect(await stagingEntries(cachePath(root, name))).toBe(1);
    await using caches = await openCacheManager(root);
    await using cache = await caches.openRw(name);
    expect(await stagingEntries(cachePath(root, name))).toBe(0);
    cache.apply([upsert(2, 2)]);
    await cache.commit(checkpoint(2));
    expect(cache.count({})).toBe(2);
  });

  it("an apply that names holdInMemory keeps that many staged in memory (a commit's worth never spills), and spills past it", async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { stagedInMemory: 10 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    const path = cachePath(caches.rootDir, cache.name);
    const batch = (from: number) => Array.from({ length: 10 }, (_, i) => upsert(from + i, from + i));

    // Five batches of 10, each under a hold of 55: 50 staged, all in memory, nothing in the staging database.
    for (let from = 0; from < 50; from += 10) cache.apply(batch(from), { holdInMemory: 55 });
    expect(cache.pendingCount).toBe(50);
    expect(await stagingEntries(path)).toBe(0);
    await cache.commit(checkpoint(1));
    expect(cache.count({})).toBe(50);

    // The same past the hold: the sixth batch crosses 55, and what memory held moves to the staging database.
    for (let from = 100; from < 160; from += 10) cache.apply(batch(from), { holdInMemory: 55 });
    expect(cache.pendingCount).toBe(0);
    expect(await stagingEntries(path)).toBeGreaterThan(0);
    await cache.commit(checkpoint(2));
    expect(cache.count({})).toBe(110);
    expect(await stagingEntries(path)).toBe(0);
  });

  it("defect: a commit of a transaction spilled to the staging area blocked the writer's event loop for its whole length", async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { stagedInMemory: 1_000 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    const size = 60_000;
    for (let i = 0; i < size; i += 1_000)
      cache.apply(Array.from({ length: 1_000 }, (_, j) => upsert(i + j, i + j, j % 2 ? 'odd' : 'even')));
    // The event loop turns counted while the commit is under way: an app-server's HTTP requests, lease heartbeats
    // and replication keepalives run on those turns.
    let landed = false;
    let turnsWhileCommitting = 0;
    const spin = () => {
      if (landed) return;
      turnsWhileCommitting += 1;
      setImmediate(spin);
    };
    setImmediate(spin);
    await cache.commit(checkpoint(1));
    landed = true;
    expect(turnsWhileCommitting).toBeGreaterThan(20);
    // And the commit is whole.
    expect(cache.commitState().recordCount).toBe(size);
    expect(cache.count({})).toBe(size);
    expect(cache.get([size - 1])).toEqual({ id: size - 1, value: size - 1, category: 'odd' });
    expect(cache.query({ filter: { category: 'even' }, limit: 1 }).records).toEqual([
      { id: 0, value: 0, category: 'even' },
    ]);
    expect(await stagingEntries(cachePath(caches.rootDir, cache.name))).toBe(0);
  });

  it('changes spilled while a spilled commit runs on the commit thread are kept for the next commit', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { stagedInMemory: 500 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    for (let i = 0; i < 20_000; i += 500)
      cache.apply(Array.from({ length: 500 }, (_, j) => upsert(i + j, i + j)));
    const first = cache.commit(checkpoint(1));
    // Applied (and spilled into a newer set) while the first commit's transaction runs on the other thread.
    for (let i = 20_000; i < 23_000; i += 500)
      cache.apply(Array.from({ length: 500 }, (_, j) => upsert(i + j, i + j, 'second')));
    cache.apply([upsert(0, -1, 'second')]);
    await first;
    expect(cache.commitState()).toMatchObject({ checkpoint: { epoch: 1 }, recordCount: 20_000 });
    expect(cache.get([0])).toEqual({ id: 0, value: 0, category: 'a' });
    expect(await stagingEntries(cachePath(caches.rootDir, cache.name))).toBeGreaterThan(0);
    await cache.commit(checkpoint(2));
    expect(cache.commitState()).toMatchObject({ checkpoint: { epoch: 2 }, recordCount: 23_000 });
    expect(cache.count({ category: 'second' })).toBe(3_001);
    expect(cache.get([0])).toEqual({ id: 0, value: -1, category: 'second' });
    expect(await stagingEntries(cachePath(caches.rootDir, cache.name))).toBe(0);
  });

  it("a fenced-off writer's spilled commit is refused with STALE_EPOCH on the commit thread: nothing lands, its sets are dropped", async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { stagedInMemory: 100 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    cache.apply([upsert(1, 1, 'new-owner')]);
    await cache.commit(null, { keepCheckpoint: true, fence: { writer: 't-1', epoch: 2 } });
    for (let i = 10; i < 1_010; i += 100)
      cache.apply(Array.from({ length: 100 }, (_, j) => upsert(i + j, i + j, 'stale')));
    const refused = await cache
      .commit(null, { keepCheckpoint: true, fence: { writer: 't-1', epoch: 1 } })
      .catch((e: unknown) => e);
    expect(SluiceError.hasCode(refused, 'STALE_EPOCH')).toBe(true);
    expect((refused as SluiceError).details).toMatchObject({ epoch: 2 });
    expect(cache.commitState()).toMatchObject({ fences: { 't-1': 2 }, recordCount: 1 });
    expect(await stagingEntries(cachePath(caches.rootDir, cache.name))).toBe(0);
    await cache.commit(checkpoint(3));
    expect(cache.count({ category: 'stale' })).toBe(0);
    expect(cache.commitState()).toMatchObject({ checkpoint: { epoch: 3 }, recordCount: 1 });
  });
});
