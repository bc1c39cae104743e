import {
  type CacheSchema,
  compareScalars,
  compileFilter,
  type Filter,
  parseQuery,
  type RecordOp,
  type SortDirection,
} from '@sluice/core';
import { type SeededRandom, seededRandom, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openCacheManager } from './manager.js';

type Rng = SeededRandom;

const schema: CacheSchema = {
  fields: { id: 'integer', a: 'integer', b: 'number', s: 'string', flag: 'boolean', tags: 'json' },
  primaryKey: ['id'],
  indexes: [['a'], ['s'], ['a', 'b'], ['flag', 's'], ['b']],
};
const LONG = 'L'.repeat(1200);
const STRINGS = [
  '',
  'a',
  'ab',
  'b',
  'B',
  'ba',
  'é',
  '😀',
  '\uE000',
  'a\u0000',
  'a\u0001b',
  `${LONG}x`,
  `${LONG}y`,
  LONG,
];
const TAGS = ['red', 'green', 'blue'];

function randomRecord(rng: Rng, id: number): Record<string, unknown> {
  const record: Record<string, unknown> = { id };
  if (rng.chance(0.9)) record.a = rng.chance(0.1) ? null : rng.int(-3, 6);
  if (rng.chance(0.9)) record.b = rng.chance(0.1) ? null : rng.pick([-1.5, -0, 0, 0.25, 1, 2.5, 1e9, -1e-9]);
  if (rng.chance(0.9)) record.s = rng.pick(STRINGS);
  if (rng.chance(0.8)) record.flag = rng.chance(0.5);
  if (rng.chance(0.7)) record.tags = TAGS.filter(() => rng.chance(0.4));
  return record;
}

const OPERANDS: Record<string, () => unknown[]> = {
  a: () => [-3, -1, 0, 2, 5, 6, 7],
  b: () => [-1.5, 0, 0.25, 1, 2.5, 1e9],
  s: () => STRINGS,
  flag: () => [true, false],
  id: () => [0, 10, 50, 120, 199],
};

function randomCondition(rng: Rng, field: string): unknown {
  const values = OPERANDS[field]!();
  const value = () => rng.pick(values);
  const orNull = () => (rng.chance(0.1) ? null : value());
  switch (rng.int(0, 8)) {
    case 0:
      return orNull();
    case 1:
      return { $eq: orNull() };
    case 2:
      return { $ne: orNull() };
    case 3:
      return { $in: [orNull(), value(), value()].slice(0, rng.int(0, 3)) };
    case 4:
      return field === 'flag' ? { $ne: value() } : { [rng.pick(['$lt', '$lte', '$gt', '$gte'])]: value() };
    case 5:
      return field === 'flag'
        ? value()
        : { [rng.pick(['$gt', '$gte'])]: value(), [rng.pick(['$lt', '$lte'])]: value() };
    case 6:
      return field === 's' ? { $contains: rng.pick(['a', 'b', 'L', '😀', '']) } : orNull();
    default:
      return orNull();
  }
}

function randomFilter(rng: Rng, depth = 0): Filter {
  const filter: Record<string, unknown> = {};
  const n = rng.int(0, 2);
  for (let i = 0; i < n; i++) {
    if (rng.chance(0.1)) {
      filter.tags = { $contains: rng.pick(TAGS) };
      continue;
    }
    const field = rng.pick(['a', 'b', 's', 'flag', 'id']);
    filter[field] = randomCondition(rng, field);
  }
  if (depth < 2 && rng.chance(0.25))
    filter[rng.pick(['$and', '$or'])] = Array.from({ length: rng.int(1, 3) }, () =>
      randomFilter(rng, depth + 1),
    );
  return filter as Filter;
}

function randomOrder(rng: Rng): Record<string, SortDirection> {
  const order: Record<string, SortDirection> = {};
  const n = rng.int(0, 2);
  for (let i = 0; i < n; i++)
    order[rng.pick(['a', 'b', 's', 'flag', 'id'])] = rng.pick(['asc', 'desc'] as const);
  return order;
}

/** The reference: filter with core's compileFilter, sort by the order then by id (last sort direction). */
function bruteForce(
  records: Map<number, Record<string, unknown>>,
  filter: Filter,
  order: Record<string, SortDirection>,
) {
  const keep = compileFilter(filter);
  const entries = Object.entries(order);
  const tie = entries.length > 0 && entries[entries.length - 1]![1] === 'desc' ? -1 : 1;
  const value = (r: Record<string, unknown>, f: string) => (Object.hasOwn(r, f) ? r[f] : null);
  return [...records.values()]
    .filter(keep)
    .sort((x, y) => {
      for (const [f, dir] of entries) {
        const c = compareScalars(value(x, f), value(y, f));
        if (c !== 0) return dir === 'desc' ? -c : c;
      }
      return tie * compareScalars(x.id, y.id);
    })
    .map((r) => r.id);
}

describe('queries against a brute-force reference', () => {
  it('answers many random filters, orders, skips and cursors exactly like compileFilter + sort', {
    timeout: 90_000,
  }, async () => {
    const rng = seededRandom(20261202);
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { scanCap: 1_000_000, maxLimit: 1000 });
    await using cache = await caches.create({ endpoint: 'prop', schema });
    const truth = new Map<number, Record<string, unknown>>();
    // Several commits with inserts, updates and deletes, so indexes are maintained through changes.
    for (let round = 0; round < 4; round++) {
      const ops: RecordOp[] = [];
      for (let i = 0; i < 120; i++) {
        const id = rng.int(0, 199);
        if (truth.has(id) && rng.chance(0.2)) {
          ops.push({ op: 'delete', key: [id] });
          truth.delete(id);
        } else {
          const record = randomRecord(rng, id);
          ops.push({ op: 'upsert', record });
          truth.set(id, record);
        }
      }
      cache.apply(ops);
      await cache.commit(null);
    }
    expect(cache.count()).toBe(truth.size);

    let usedIndex = 0;
    for (let q = 0; q < 250; q++) {
      const filter = randomFilter(rng);
      const order = randomOrder(rng);
      const expected = bruteForce(truth, filter, order);
      const context = JSON.stringify({ q, filter, order });
      expect(cache.count(filter), context).toBe(expected.length);

      const limit = rng.int(1, 12); // a page holds at least one record ($limit 0 is refused)
      const skip = rng.chance(0.3) ? rng.int(0, 10) : 0;
      const result = cache.query(
        parseQuery({ $filter: filter, $order_by: order, $limit: limit, $skip: skip }),
      );
      expect(result.plan.capped).toBe(false);
      if (result.plan.index !== null) usedIndex++;
      expect(
        result.records.map((r) => r.id),
        context,
      ).toEqual(expected.slice(skip, skip + limit));
      expect(result.next === null, context).toBe(expected.length <= skip + limit);

      // Following `next` from the first page visits every match once, in order.
      const pageSize = rng.int(1, 7);
      const base = parseQuery({ $filter: filter, $order_by: order, $limit: pageSize });
      const seen: unknown[] = [];
      let after: string | null = null;
      for (let guard = 0; guard < 1000; guard++) {
        const page = cache.query({ ...base, after });
        seen.push(...page.records.map((r) => r.id));
        after = page.next;
        if (!after) break;
      }
      expect(seen, context).toEqual(expected);
    }
    expect(usedIndex).toBeGreaterThan(60);
  });
});
