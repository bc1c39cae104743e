import type { CacheManager, RwCache } from '@sluice/cache';
import { ITEMS_SCHEMA, item } from '../test/fixtures/data.js';

/**
 * The benchmarks' data: a new generation of `items` holding `item(id, 1)` for ids 1..`records`, with the query
 * benchmark's indexes, committed every 10 000 records — as the app-server would build it. One definition, so that
 * `run.ts` (over HTTP) and `profile-handler.ts` (in process) measure the same cache. The alias is left alone.
 *
 * @example
 * ```ts
 * const cache = await createItemsGeneration(manager, 200_000);
 * await manager.redirect('items', cache.name);
 * ```
 */
export async function createItemsGeneration(manager: CacheManager, records: number): Promise<RwCache> {
  const cache = await manager.create({
    endpoint: 'items',
    schema: {
      fields: { ...ITEMS_SCHEMA.fields },
      primaryKey: ['id'],
      indexes: [['value'], ['category', 'value']],
    },
  });
  for (let start = 1; start <= records; start += 10_000) {
    const ops = [];
    for (let id = start; id < Math.min(start + 10_000, records + 1); id += 1)
      ops.push({ op: 'upsert' as const, record: item(id, 1) });
    cache.apply(ops);
    await cache.commit({ dag: 'bench', epoch: start, positions: {}, at: new Date().toISOString() });
  }
  return cache;
}
