/**
 * A long-running host builds, serves and retires generations for months: every generation opened and closed must
 * leave nothing behind in the process. lmdb-js registers every store it opens in its module-wide `allDbs` map
 * (keyed by the environment directory's basename, unique per generation) and never removes it on close, so each
 * closed generation used to stay reachable — its stores, encoders and buffers — for the life of the process.
 */

import type { CacheSchema } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import * as lmdb from 'lmdb';
import { describe, expect, it } from 'vitest';
import { openCacheManager } from './manager.js';

const schema: CacheSchema = {
  fields: { id: 'integer', value: 'number' },
  primaryKey: ['id'],
  indexes: [['value']],
};
const checkpoint = { dag: 'd', epoch: 1, positions: { src: 1 }, at: '2026-12-02T10:00:00.000Z' };

/** lmdb-js's registry of every store opened in this process (not in its type declarations). */
const openedStores = (lmdb as unknown as { allDbs: Map<string, unknown> }).allDbs;

describe('generation churn', () => {
  it('defect: every generation opened and closed stayed registered in lmdb-js for the life of the process', async () => {
    await using dir = await tempDir('sluice-cache-churn-');
    await using caches = await openCacheManager(dir.path, { gcGraceMs: 0 });
    const cycle = async (i: number) => {
      const green = await caches.create({ endpoint: 'items', schema });
      green.apply([{ op: 'insert', record: { id: i, value: i } }]);
      await green.commit(checkpoint);
      await green.close();
      await caches.redirect('items', green.name);
      // A reader of the serving generation (as an api-server request is) opens it and closes it again.
      const reader = await caches.openRo('items');
      expect(reader.get([i])).toEqual({ id: i, value: i });
      await reader.close();
      await caches.gc(new Date(Date.now() + 1_000));
    };
    for (let i = 1; i <= 5; i++) await cycle(i);
    const afterFew = openedStores.size;
    for (let i = 6; i <= 45; i++) await cycle(i);
    // A leak of one store per generation would add 40 here.
    expect(openedStores.size).toBeLessThanOrEqual(afterFew + 5);
  });
});
