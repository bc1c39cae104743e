import { describe, expect, it } from 'vitest';
import { DEFAULT_QUERY_LIMITS, type Filter, filterSchema, type QueryLimits, querySchema } from './query.js';
import { shapedFilter, shapedWireQuery } from './shaped-query.js';

const LIMITS: QueryLimits = { ...DEFAULT_QUERY_LIMITS, maxIn: 3, maxDepth: 2, maxLimit: 100, maxSkip: 10 };

function nested(levels: number): Filter {
  let filter: Filter = { value: 1 };
  for (let i = 0; i < levels; i++) filter = { $and: [filter] };
  return filter;
}

/** Well-formed queries: the fast path must take them, with the schema's result. */
const VALID: unknown[] = [
  {},
  { $limit: 1 },
  { $limit: 100, $skip: 10 },
  { $after: 'c' },
  { $filter: {} },
  { $filter: { value: { $gte: 10, $lt: 20 } }, $order_by: { value: 'desc', id: 'asc' }, $limit: 50 },
  { $filter: { category: 'a', tags: { $contains: 't1' }, name: null, ok: true, n: -1.5 } },
  { $filter: { value: { $in: [1, 'x', null] } } },
  { $filter: { value: { $eq: undefined, $ne: 2 } } },
  { $filter: nested(2) },
  { $filter: { $or: [{ a: 1 }, { b: { $lte: 2 } }], $and: [{ c: 'x' }] } },
  JSON.parse('{"$filter":{"value":{"$gt":1}},"$order_by":{"value":"asc"}}'),
];

/** Malformed (or unusual) queries: the fast path must leave them to the schema. */
const REFUSED: unknown[] = [
  null,
  [],
  'query',
  { $limit: 101 },
  { $limit: 0 },
  { $limit: -1 },
  { $limit: 1.5 },
  { $skip: 11 },
  { $skip: 1, $after: 'c' },
  { $after: '' },
  { $after: 'x'.repeat(4097) },
  { $after: 7 },
  { $limit: '5' },
  { $unknown: 1 },
  { $order_by: { value: 'up' } },
  { $order_by: { $value: 'asc' } },
  { $order_by: { a: 'asc', b: 'asc', c: 'asc', d: 'asc', e: 'asc', f: 'asc', g: 'asc', h: 'asc', i: 'asc' } },
  { $order_by: [] },
  { $filter: [] },
  { $filter: null },
  { $filter: { value: { $regex: 'x' } } },
  { $filter: { value: {} } },
  { $filter: { value: [1, 2] } },
  { $filter: { value: { $in: [1, 2, 3, 4] } } },
  { $filter: { value: { $in: [{ a: 1 }] } } },
  { $filter: { value: { $in: 1 } } },
  { $filter: { value: Number.NaN } },
  { $filter: { value: { $gt: Number.POSITIVE_INFINITY } } },
  { $filter: { value: undefined } },
  { $filter: { value: 'x'.repeat(65_537) } },
  { $filter: { $where: 'x' } },
  { $filter: { '': 1 } },
  { $filter: { constructor: 1 } },
  { $filter: { ['x'.repeat(257)]: 1 } },
  { $filter: nested(3) },
  { $filter: { $and: [] } },
  { $filter: { $and: {} } },
  { $filter: { $and: [1] } },
  { $filter: { value: new Date(0) } },
  { $filter: Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`f${i}`, i])) },
  JSON.parse('{"$filter":{"__proto__":{"$gt":1}}}'),
  JSON.parse('{"$filter":{"value":{"__proto__":1}}}'),
  JSON.parse('{"__proto__":{"$limit":1}}'),
  JSON.parse('{"$order_by":{"__proto__":"asc"}}'),
];

describe('shapedWireQuery: the fast check of wire queries', () => {
  it('takes every well-formed query, with what the schema returns', () => {
    const schema = querySchema(LIMITS);
    for (const input of VALID) {
      const fast = shapedWireQuery(input, LIMITS);
      expect(fast, JSON.stringify(input)).not.toBeNull();
      const parsed = schema.safeParse(input);
      expect(parsed.success).toBe(true);
      const slow = parsed.data as Record<string, unknown>;
      for (const key of ['$filter', '$order_by', '$limit', '$skip', '$after'] as const)
        expect(fast![key], `${key} of ${JSON.stringify(input)}`).toEqual(slow[key]);
    }
  });

  it('leaves every malformed query to the schema, which refuses it', () => {
    const schema = querySchema(LIMITS);
    for (const input of REFUSED) {
      expect(shapedWireQuery(input, LIMITS), String(JSON.stringify(input)).slice(0, 80)).toBeNull();
      expect(schema.safeParse(input).success, String(JSON.stringify(input)).slice(0, 80)).toBe(false);
    }
  });
});

describe('shapedFilter: the fast check of filters', () => {
  it('accepts exactly what the filter schema accepts, on the same inputs', () => {
    const schema = filterSchema(LIMITS);
    const filters = [...VALID, ...REFUSED].map((q) =>
      typeof q === 'object' && q !== null && '$filter' in q ? (q as { $filter: unknown }).$filter : q,
    );
    for (const filter of filters) {
      const fast = shapedFilter(filter, LIMITS);
      if (fast === null) continue;
      const parsed = schema.safeParse(filter);
      expect(parsed.success, JSON.stringify(filter)).toBe(true);
      expect(fast).toEqual(parsed.data);
      expect(fast).not.toBe(filter); // a copy, as the schema returns
    }
  });
});
