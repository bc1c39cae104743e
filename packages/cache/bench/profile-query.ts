/**
 * CPU profile of the in-process range query (what `pnpm bench`'s range-query row measures):
 *   node --cpu-prof --cpu-prof-dir=DIR --conditions=@sluice/source --import tsx bench/profile-query.ts [records] [queries]
 * Loads `records` (default 200 000) records, then answers [queries] (default 20 000) indexed range queries (limit 50) as stored bytes.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openCacheManager } from '../src/index.js';

const RECORDS = Number(process.argv[2] ?? 200_000);
const QUERIES = Number(process.argv[3] ?? 20_000);
const dir = mkdtempSync(join(tmpdir(), 'sluice-cache-profile-'));
try {
  await using caches = await openCacheManager(join(dir, 'c'));
  const cache = await caches.create({
    endpoint: 'bench',
    schema: {
      fields: { id: 'integer', value: 'integer', category: 'string', name: 'string', price: 'number' },
      primaryKey: ['id'],
      indexes: [['value'], ['category', 'value']],
    },
  });
  for (let start = 0; start < RECORDS; start += 100_000) {
    const ops = [];
    for (let id = start; id < Math.min(RECORDS, start + 100_000); id++)
      ops.push({
        op: 'upsert' as const,
        record: {
          id,
          value: (id * 7919) % 100_000,
          category: `c${id % 50}`,
          name: `item-${id}`,
          price: id % 1000,
        },
      });
    cache.apply(ops);
    await cache.commit(null);
  }
  let sink = 0;
  const t = performance.now();
  const cpu = process.cpuUsage();
  for (let i = 0; i < QUERIES; i++) {
    const from = (i * 7717) % 98_000;
    sink += cache.queryJson({
      filter: { value: { $gte: from, $lt: from + 2000 } },
      orderBy: [{ field: 'value', direction: 'asc' }],
      limit: 50,
      skip: 0,
      after: null,
    }).count;
  }
  const used = process.cpuUsage(cpu);
  console.log(
    `${Math.round(QUERIES / ((performance.now() - t) / 1000))} q/s, ${((used.user + used.system) / QUERIES).toFixed(1)} µs CPU per query (${sink} records)`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
