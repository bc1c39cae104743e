import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type CacheSchema, parseQuery } from '@sluice/core';
import { sleep, spawnProcess, spawnTs, tempDir, tsxLoaderPath } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openCacheManager } from './manager.js';

const fixture = (name: string) => fileURLToPath(new URL(`../test/fixtures/${name}`, import.meta.url));

describe('multi-process', () => {
  it('a read-only child sees every commit and every redirect while the parent writes', {
    timeout: 90_000,
  }, async () => {
    const schema: CacheSchema = {
      fields: { id: 'integer', epoch: 'integer' },
      primaryKey: ['id'],
      indexes: [['epoch']],
    };
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    const blue = await caches.create({ endpoint: 'items', schema });
    await caches.redirect('items', blue.name);

    await using child = spawnTs(fixture('reader.ts'), [dir.path, 'items']);
    await child.waitForLine(/^READY/, 30_000);
    const seen = (cache: string, version: number, epoch: number, count: number) =>
      child.waitForLine(
        new RegExp(`^SEEN ${JSON.stringify({ cache, version, epoch, count }).replace(/[{}[\]]/g, '\\$&')}$`),
        30_000,
      );

    const perEpoch = 100;
    for (let epoch = 1; epoch <= 4; epoch++) {
      const ops = Array.from({ length: perEpoch }, (_, i) => ({
        op: 'insert' as const,
        record: { id: (epoch - 1) * perEpoch + i, epoch },
      }));
      blue.apply(ops);
      await blue.commit({ dag: 'd', epoch, positions: {}, at: new Date().toISOString() });
      await seen(blue.name, 1, epoch, epoch * perEpoch);
    }

    // Blue/green: fill a new generation, then redirect; the child follows the alias.
    const green = await caches.create({ endpoint: 'items', schema });
    green.apply(Array.from({ length: 50 }, (_, id) => ({ op: 'insert' as const, record: { id, epoch: 1 } })));
    await green.commit({ dag: 'd', epoch: 1, positions: {}, at: new Date().toISOString() });
    expect(await caches.redirect('items', green.name)).toEqual({ from: blue.name, version: 2 });
    await seen(green.name, 2, 1, 50);
    green.apply(
      Array.from({ length: 50 }, (_, i) => ({ op: 'insert' as const, record: { id: 50 + i, epoch: 2 } })),
    );
    await green.commit({ dag: 'd', epoch: 2, positions: {}, at: new Date().toISOString() });
    await seen(green.name, 2, 2, 100);

    expect(child.lines.filter((l) => l.startsWith('INCONSISTENT') || l.startsWith('ERROR'))).toEqual([]);
    await child.stop('SIGKILL');
    // Blue is retired, but this process still has it open: kept until closed.
    expect(await caches.gc(new Date(Date.now() + 3_600_000))).toEqual([]);
    await blue.close();
    expect(await caches.gc(new Date(Date.now() + 3_600_000))).toEqual([blue.name]);
  });

  it('processes opening and closing one cache at the same time never break its lock file', {
    timeout: 180_000,
  }, async () => {
    // LMDB destroys the lock file's mutexes when its last user closes; an open racing that close used to find
    // them destroyed and fail every transaction with EINVAL (see env-open-lock.ts). Without the open lock this
    // fails within a few hundred cycles.
    const schema: CacheSchema = { fields: { id: 'integer', n: 'integer' }, primaryKey: ['id'], indexes: [] };
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    const cache = await caches.create({ endpoint: 'items', schema });
    const name = cache.name;
    cache.apply([{ op: 'insert', record: { id: 0, n: 0 } }]);
    await cache.commit({ dag: 'churn', epoch: 0, positions: {}, at: new Date().toISOString() });
    await cache.close();

    const CYCLES = 300;
    const children = [
      spawnTs(fixture('churn.ts'), [dir.path, name, 'rw', String(CYCLES)]),
      spawnTs(fixture('churn.ts'), [dir.path, name, 'ro', String(CYCLES)]),
      spawnTs(fixture('churn.ts'), [dir.path, name, 'ro', String(CYCLES)]),
    ];
    try {
      // Every child started (its module loading takes a while under load), then all go at once: they race.
      await Promise.all(children.map((child) => child.waitForLine(/^READY/, 60_000)));
      await writeFile(join(dir.path, 'go'), '');
      const results = await Promise.all(
        children.map(async (child) =>
          JSON.parse((await child.waitForLine(/^DONE /, 80_000)).slice('DONE '.length)),
        ),
      );
      for (const result of results) {
        expect(result.errors).toEqual([]);
        expect(result.cycles).toBe(CYCLES);
      }
      const reopened = await caches.openRo(name);
      expect(reopened.commitState().checkpoint?.epoch).toBe(results[0].cycles);
      await reopened.close();
    } finally {
      for (const child of children) await child[Symbol.asyncDispose]();
    }
  });

  it('gc keeps a retired cache that another process still has open', { timeout: 60_000 }, async () => {
    const schema: CacheSchema = {
      fields: { id: 'integer', epoch: 'integer' },
      primaryKey: ['id'],
      indexes: [],
    };
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { gcGraceMs: 0 });
    const blue = await caches.create({ endpoint: 'items', schema });
    blue.apply([{ op: 'insert', record: { id: 0, epoch: 1 } }]);
    await blue.commit({ dag: 'd', epoch: 1, positions: {}, at: new Date().toISOString() });
    await blue.close();
    await caches.redirect('items', blue.name);
    // The child pins blue by name (like an api-server still draining requests on it).
    await using child = spawnTs(fixture('reader.ts'), [dir.path, blue.name, 'pin']);
    await child.waitForLine(/"epoch":1,"count":1/, 30_000);
    const green = await caches.create({ endpoint: 'items', schema });
    await caches.redirect('items', green.name);
    await green.close();
    expect((await caches.info(blue.name))!.state).toBe('retired');

    expect(await caches.gc(new Date(Date.now() + 1000))).toEqual([]);
    expect(await caches.info(blue.name)).not.toBeNull();
    await child.stop('SIGKILL');
    expect(await caches.gc(new Date(Date.now() + 1000))).toEqual([blue.name]);
  });

  it('a writer SIGKILLed in the middle of a large commit leaves the previous commit intact (readers never wait for it)', {
    timeout: 90_000,
  }, async () => {
    const schema: CacheSchema = {
      fields: { id: 'integer', value: 'integer', group: 'string', epoch: 'integer', pad: 'string' },
      primaryKey: ['id'],
      indexes: [['value'], ['group', 'value']],
    };
    await using dir = await tempDir();
    let name: string;
    {
      await using caches = await openCacheManager(dir.path);
      const cache = await caches.create({ endpoint: 'crash', schema });
      name = cache.name;
    }
    await using child = spawnTs(fixture('writer.ts'), [dir.path, name, '120000']);
    await child.waitForLine(/^COMMITTED 1/, 60_000);
    await child.waitForLine(/^COMMITTING 2/, 60_000);
    // While the writer is inside its large write transaction, a reader opens the cache and reads the previous
    // commit without waiting for the writer.
    {
      await using reader = await openCacheManager(dir.path, { readOnly: true });
      const ro = await reader.openRo(name);
      expect(ro.count()).toBe(1000);
      expect(ro.commitState().checkpoint?.epoch).toBe(1);
    }
    // Had the reader waited for the writer's lock, the commit would have finished (and said so) by now.
    await sleep(100);
    expect(child.lines.some((l) => l.startsWith('COMMITTED 2'))).toBe(false);
    child.kill('SIGKILL');
    expect((await child.exited).signal).toBe('SIGKILL');
    expect(child.lines.some((l) => l.startsWith('COMMITTED 2'))).toBe(false);

    await using caches = await openCacheManager(dir.path);
    const cache = await caches.openRw(name);
    expect(cache.commitState()).toMatchObject({
      recordCount: 1000,
      checkpoint: { epoch: 1, positions: { src: 1000 } },
    });
    expect(cache.count()).toBe(1000);
    expect(cache.count({ epoch: 2 })).toBe(0);
    expect(cache.get([1000])).toBeUndefined();
    expect(cache.get([999])).toMatchObject({ id: 999, epoch: 1 });
    // Indexes agree with the data.
    const byValue = cache.query(
      parseQuery({ $filter: { value: { $gte: 990 } }, $order_by: { value: 'asc' } }),
    );
    expect(byValue.plan.index).toBe('value');
    expect(byValue.records.map((r) => r.id)).toEqual([990, 991, 992, 993, 994, 995, 996, 997, 998, 999]);
    expect(cache.count({ group: 'g5' })).toBe(27);
    // And the cache still takes writes.
    cache.apply([{ op: 'upsert', record: { id: 5000, value: 1, group: 'g1', epoch: 3, pad: '' } }]);
    await cache.commit({ dag: 'd', epoch: 3, positions: {}, at: new Date().toISOString() });
    expect(cache.count()).toBe(1001);
  });
});

describe('disk full', () => {
  it('a commit that runs out of room fails with CACHE_DISK_FULL, keeps the previous commit, and the cache recovers', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir();
    let name: string;
    {
      await using caches = await openCacheManager(dir.path);
      const cache = await caches.create({
        endpoint: 'full',
        schema: { fields: { id: 'integer', body: 'string' }, primaryKey: ['id'], indexes: [['body']] },
      });
      name = cache.name;
    }
    // The child writes under a 4 MiB file-size limit (what a full disk looks like to LMDB: short writes).
    await using child = spawnProcess('sh', [
      '-c',
      `ulimit -f 8192; exec "${process.execPath}" --conditions=@sluice/source --import "${tsxLoaderPath()}" "${fixture('fill.ts')}" "${dir.path}" "${name}"`,
    ]);
    const failed = await child.waitForLine(/^FAILED /, 60_000);
    await child.waitForLine(/^CLOSED/, 30_000);
    expect((await child.exited).code).toBe(0); // an error, not a crash
    const [, epoch, code] = failed.split(' ');
    expect(code).toBe('CACHE_DISK_FULL');
    const state = JSON.parse(
      child.lines
        .find((l) => l.startsWith('STATE '))!
        .slice(6)
        .split(' PENDING')[0]!,
    );
    expect(state.checkpoint.epoch).toBe(Number(epoch) - 1);
    expect(child.lines.find((l) => l.startsWith('STATE '))).toMatch(/PENDING 200$/); // the batch stays staged

    // With room again (no limit here), the cache is intact and takes the next commit.
    await using caches = await openCacheManager(dir.path);
    const cache = await caches.openRw(name);
    expect(cache.commitState()).toMatchObject({
      checkpoint: { epoch: Number(epoch) - 1 },
      recordCount: state.recordCount,
    });
    expect(cache.count()).toBe(state.recordCount);
    expect(cache.count({ body: 'first' })).toBe(100);
    cache.apply([{ op: 'upsert', record: { id: 1_000_000, body: 'after' } }]);
    await cache.commit(null);
    expect(cache.count()).toBe(state.recordCount + 1);
  });
});
