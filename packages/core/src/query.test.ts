import { describe, expect, it } from 'vitest';
import { thrown } from '../test/helpers.js';
import { InvalidQueryError } from './errors.js';
import {
  andFilters,
  COMPARISON_OPERATORS,
  canonicalFilter,
  compareScalars,
  compileFilter,
  DEFAULT_QUERY_LIMITS,
  type Filter,
  filterSchema,
  LIMIT_AT_LEAST_ONE,
  parseCountQuery,
  parseFilter,
  parseQuery,
  type QueryLimits,
  querySchema,
} from './query.js';

/** The issues of a query that must be refused as INVALID_QUERY (400). */
function queryIssues(input: unknown, limits?: QueryLimits) {
  const err = thrown(() => parseQuery(input, limits));
  expect(err).toBeInstanceOf(InvalidQueryError);
  expect((err as InvalidQueryError).code).toBe('INVALID_QUERY');
  expect((err as InvalidQueryError).status).toBe(400);
  return (err as InvalidQueryError).errors;
}

function queryPaths(input: unknown, limits?: QueryLimits): string[] {
  return [...new Set(queryIssues(input, limits).map((e) => e.path))];
}

/** `{ $and: [ { $and: [ ... leaf ... ] } ] }` with `levels` nested lists. */
function nested(levels: number, op: '$and' | '$or' = '$and'): Filter {
  let filter: Filter = { value: 1 };
  for (let i = 0; i < levels; i++) filter = { [op]: [filter] };
  return filter;
}

describe('parseQuery: valid queries', () => {
  it('applies defaults to an empty query', () => {
    const empty = { filter: {}, orderBy: [], limit: 50, skip: 0, after: null };
    expect(parseQuery({})).toEqual(empty);
    expect(parseQuery(undefined)).toEqual(empty);
    expect(parseQuery(null)).toEqual(empty);
    expect(DEFAULT_QUERY_LIMITS).toEqual({
      maxLimit: 1000,
      defaultLimit: 50,
      maxIn: 1000,
      maxDepth: 8,
      maxSkip: 100_000,
    });
  });

  it('parses every part of the wire form', () => {
    const q = parseQuery({
      $filter: {
        category: { $ne: 'hidden' },
        value: { $gte: 10, $lt: 20 },
        $or: [{ tag: { $in: ['a', 'b', null] } }, { name: { $contains: 'x' } }],
        flag: true,
      },
      $order_by: { value: 'desc', id: 'asc' },
      $limit: 5,
      $skip: 10,
    });
    expect(q).toEqual({
      filter: {
        category: { $ne: 'hidden' },
        value: { $gte: 10, $lt: 20 },
        $or: [{ tag: { $in: ['a', 'b', null] } }, { name: { $contains: 'x' } }],
        flag: true,
      },
      orderBy: [
        { field: 'value', direction: 'desc' },
        { field: 'id', direction: 'asc' },
      ],
      limit: 5,
      skip: 10,
      after: null,
    });
  });

  it('takes a cursor, limits at their bounds, and every comparison operator', () => {
    expect(parseQuery({ $after: 'opaque-cursor', $limit: 1 })).toMatchObject({
      after: 'opaque-cursor',
      limit: 1,
      skip: 0,
    });
    expect(parseQuery({ $limit: 1000, $skip: 100_000 })).toMatchObject({ limit: 1000, skip: 100_000 });
    // An empty page could not say whether records follow: 0 is refused, naming the count route.
    expect(queryIssues({ $limit: 0 })).toEqual([{ path: '$limit', message: LIMIT_AT_LEAST_ONE }]);
    const filter = Object.fromEntries(
      COMPARISON_OPERATORS.map((op, i) => [`f${i}`, { [op]: op === '$in' ? [1, 'a', true, null] : 1 }]),
    );
    expect(parseQuery({ $filter: filter }).filter).toEqual(filter);
    expect(COMPARISON_OPERATORS).toEqual(['$eq', '$ne', '$lt', '$lte', '$gt', '$gte', '$in', '$contains']);
  });

  it('accepts $in with exactly maxIn values and nesting exactly maxDepth deep', () => {
    expect(
      parseQuery({ $filter: { a: { $in: Array.from({ length: 1000 }, (_, i) => i) } } }).filter,
    ).toBeDefined();
    expect(parseQuery({ $filter: nested(8) }).filter).toEqual(nested(8));
    expect(parseQuery({ $filter: nested(8, '$or') }).filter).toEqual(nested(8, '$or'));
  });

  it('accepts field names that merely look odd', () => {
    const filter = { 'a.b': 1, 'with space': 2, toString: 3, ünï: 4, ['k'.repeat(256)]: 5 };
    expect(parseQuery({ $filter: filter }).filter).toEqual(filter);
  });

  it('honours custom limits', () => {
    const limits: QueryLimits = { maxLimit: 10, defaultLimit: 3, maxIn: 2, maxDepth: 1, maxSkip: 5 };
    expect(parseQuery({}, limits).limit).toBe(3);
    expect(queryPaths({ $limit: 11 }, limits)).toEqual(['$limit']);
    expect(queryPaths({ $skip: 6 }, limits)).toEqual(['$skip']);
    expect(queryPaths({ $filter: { a: { $in: [1, 2, 3] } } }, limits)).toEqual(['$filter.a.$in']);
    expect(parseQuery({ $filter: nested(1) }, limits).filter).toEqual(nested(1));
    expect(queryPaths({ $filter: nested(2) }, limits)).toEqual(['$filter.$and[0].$and']);
  });
});

describe('parseQuery: refused queries name the failing path', () => {
  it('refuses unknown query parameters', () => {
    expect(queryIssues({ $where: 'this.a > 1' })).toEqual([
      { path: '$where', message: 'Unrecognized key: "$where"' },
    ]);
    expect(queryPaths({ filter: {}, limit: 1 })).toEqual(['filter', 'limit']);
    expect(queryPaths({ $orderBy: { a: 'asc' } })).toEqual(['$orderBy']);
  });

  it('refuses a query that is not an object', () => {
    for (const input of ['x', 5, true, [], [{}]]) expect(queryPaths(input)).toEqual(['(root)']);
  });

  it('refuses unknown operators, with the path of the field', () => {
    expect(queryIssues({ $filter: { $regex: 'a.*' } })).toEqual([
      { path: '$filter.$regex', message: 'unknown operator "$regex"' },
    ]);
    expect(queryIssues({ $filter: { name: { $regex: 'a.*' } } })).toEqual([
      { path: '$filter.name', message: 'unknown operator "$regex"' },
    ]);
    expect(queryIssues({ $filter: { value: { $gte: 1, $between: [1, 2] } } })).toEqual([
      { path: '$filter.value', message: 'unknown operator "$between"' },
    ]);
    expect(queryPaths({ $filter: { $or: [{ a: 1 }, { b: { $where: 'x' } }] } })).toEqual([
      '$filter.$or[1].b',
    ]);
    expect(queryPaths({ $filter: { $not: { a: 1 } } })).toEqual(['$filter.$not']);
    expect(queryPaths({ $filter: { $nor: [{ a: 1 }] } })).toEqual(['$filter.$nor']);
  });

  it('clips huge operator names in messages', () => {
    const [issue] = queryIssues({ $filter: { [`$${'x'.repeat(100_000)}`]: 1 } });
    expect(issue!.message.length).toBeLessThan(200);
    expect(issue!.path.length).toBeLessThan(200);
  });

  it('refuses operands of the wrong type', () => {
    expect(queryPaths({ $filter: { a: { $in: 'x' } } })).toEqual(['$filter.a.$in']);
    expect(queryPaths({ $filter: { a: { $in: [{ x: 1 }] } } })).toEqual(['$filter.a.$in[0]']);
    expect(queryPaths({ $filter: { a: { $in: [[1]] } } })).toEqual(['$filter.a.$in[0]']);
    expect(queryIssues({ $filter: { a: { $eq: { b: 1 } } } })).toEqual([
      { path: '$filter.a.$eq', message: 'expected a string, number, boolean or null' },
    ]);
    expect(queryPaths({ $filter: { a: { $gt: [1] } } })).toEqual(['$filter.a.$gt']);
    expect(queryPaths({ $filter: { a: { $contains: {} } } })).toEqual(['$filter.a.$contains']);
    expect(queryIssues({ $filter: { a: [1, 2] } })).toEqual([
      { path: '$filter.a', message: 'expected a string, number, boolean, null or an operator object' },
    ]);
    expect(queryPaths({ $filter: { a: 'x'.repeat(65_537) } })).toEqual(['$filter.a']);
    expect(queryPaths({ $filter: { a: { $eq: 'x'.repeat(65_537) } } })).toEqual(['$filter.a.$eq']);
    expect(queryIssues({ $filter: { a: {} } })).toEqual([
      { path: '$filter.a', message: 'expected at least one operator' },
    ]);
    expect(queryPaths({ $filter: 'a = 1' })).toEqual(['$filter']);
    expect(queryPaths({ $filter: [{ a: 1 }] })).toEqual(['$filter']);
  });

  it('refuses malformed $and / $or lists', () => {
    expect(queryPaths({ $filter: { $and: [] } })).toEqual(['$filter.$and']);
    expect(queryPaths({ $filter: { $or: { a: 1 } } })).toEqual(['$filter.$or']);
    expect(queryPaths({ $filter: { $and: [1] } })).toEqual(['$filter.$and[0]']);
    expect(queryPaths({ $filter: { $and: [{ a: 1 }, null] } })).toEqual(['$filter.$and[1]']);
    expect(queryPaths({ $filter: { $or: Array.from({ length: 257 }, () => ({ a: 1 })) } })).toEqual([
      '$filter.$or',
    ]);
  });

  it('refuses bad $limit, $skip and $after values', () => {
    for (const $limit of [-1, 1.5, 1001, '10', null, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(queryPaths({ $limit }), String($limit)).toEqual(['$limit']);
    }
    for (const $skip of [-1, 0.5, 100_001, '1']) expect(queryPaths({ $skip })).toEqual(['$skip']);
    for (const $after of ['', 5, {}, 'c'.repeat(4097)]) expect(queryPaths({ $after })).toEqual(['$after']);
    expect(queryIssues({ $limit: 1001 })).toEqual([{ path: '$limit', message: 'must be at most 1000' }]);
  });

  it('refuses $skip together with $after', () => {
    expect(queryIssues({ $skip: 0, $after: 'cursor' })).toEqual([
      { path: '$after', message: '"$skip" and "$after" cannot be combined' },
    ]);
  });

  it('refuses bad $order_by', () => {
    expect(queryPaths({ $order_by: { a: 'up' } })).toEqual(['$order_by.a']);
    expect(queryPaths({ $order_by: { a: 1 } })).toEqual(['$order_by.a']);
    expect(queryPaths({ $order_by: ['a'] })).toEqual(['$order_by']);
    expect(queryPaths({ $order_by: 'a' })).toEqual(['$order_by']);
    expect(queryIssues({ $order_by: { $natural: 'asc' } })).toEqual([
      { path: '$order_by.$natural', message: 'invalid key: unknown operator' },
    ]);
    const nine = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`f${i}`, 'asc']));
    expect(queryIssues({ $order_by: nine })).toEqual([
      { path: '$order_by', message: 'at most 8 sort fields' },
    ]);
  });

  it('refuses nesting deeper than maxDepth', () => {
    expect(queryIssues({ $filter: nested(9) })).toEqual([
      { path: `$filter${'.$and[0]'.repeat(8)}.$and`, message: 'nesting deeper than 8' },
    ]);
    expect(queryPaths({ $filter: nested(9, '$or') })).toEqual([`$filter${'.$or[0]'.repeat(8)}.$or`]);
  });

  it('refuses absurdly deep nesting quickly, without overflowing the stack', () => {
    const started = performance.now();
    expect(queryPaths({ $filter: nested(10_000) })).toHaveLength(1);
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it('refuses a huge $in list', () => {
    expect(queryIssues({ $filter: { a: { $in: Array.from({ length: 1001 }, (_, i) => i) } } })).toEqual([
      { path: '$filter.a.$in', message: 'at most 1000 values' },
    ]);
    const started = performance.now();
    expect(queryPaths({ $filter: { a: { $in: new Array(100_000).fill('x') } } })).toEqual(['$filter.a.$in']);
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it('refuses too many keys in one filter object', () => {
    const wide = Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`f${i}`, i]));
    expect(queryIssues({ $filter: wide })).toEqual([
      { path: '$filter', message: 'at most 256 keys in one filter object' },
    ]);
  });

  it('refuses reserved and malformed field names, including __proto__ from JSON.parse', () => {
    expect(queryIssues(JSON.parse('{"$filter": {"__proto__": {"$or": [{"a": 1}]}}}'))).toEqual([
      { path: '$filter.__proto__', message: 'reserved field name' },
    ]);
    expect(queryPaths(JSON.parse('{"$filter": {"$or": [{"a": 1}, {"__proto__": {"b": 1}}]}}'))).toEqual([
      '$filter.$or[1].__proto__',
    ]);
    expect(queryIssues(JSON.parse('{"$filter": {"constructor": 1}}'))).toEqual([
      { path: '$filter.constructor', message: 'reserved field name' },
    ]);
    expect(queryPaths({ $filter: { prototype: 1 } })).toEqual(['$filter.prototype']);
    expect(queryPaths({ $filter: { '': 1 } })).toEqual(['$filter[""]']);
    expect(queryPaths({ $filter: { ['k'.repeat(257)]: 1 } })).toHaveLength(1);
    expect(queryPaths(JSON.parse('{"$filter": {"a": {"$eq": 1, "__proto__": {"$ne": 1}}}}'))).toEqual([
      '$filter.a',
    ]);
    expect(queryIssues(JSON.parse('{"$order_by": {"__proto__": "asc"}}'))).toEqual([
      { path: '$order_by.__proto__', message: 'reserved field name' },
    ]);
    expect(queryPaths(JSON.parse('{"$order_by": {"constructor": "asc"}}'))).toEqual([
      '$order_by.constructor',
    ]);
    expect(queryPaths(JSON.parse('{"__proto__": {"$limit": 1}}'))).toEqual(['__proto__']);
    expect(({} as Record<string, unknown>).$or).toBeUndefined();
  });

  it('reports several problems at once', () => {
    expect(queryPaths({ $filter: { $bad: 1, a: { $in: 1 } }, $limit: -1, $extra: 1 }).sort()).toEqual([
      '$extra',
      '$filter.$bad',
      '$filter.a.$in',
      '$limit',
    ]);
  });
});

describe('parseCountQuery and parseFilter', () => {
  it('parseCountQuery takes only $filter', () => {
    expect(parseCountQuery({ $filter: { a: 1 } })).toEqual({ a: 1 });
    expect(parseCountQuery({})).toEqual({});
    expect(parseCountQuery(undefined)).toEqual({});
    const err = thrown(() => parseCountQuery({ $filter: {}, $limit: 1 })) as InvalidQueryError;
    expect(err).toBeInstanceOf(InvalidQueryError);
    expect(err.errors).toEqual([{ path: '$limit', message: 'Unrecognized key: "$limit"' }]);
    expect((thrown(() => parseCountQuery({ $filter: { $x: 1 } })) as InvalidQueryError).errors[0]!.path).toBe(
      '$filter.$x',
    );
  });

  it('parseFilter parses a bare filter with paths relative to it', () => {
    expect(parseFilter({ category: { $ne: 'hidden' } })).toEqual({ category: { $ne: 'hidden' } });
    const err = thrown(() => parseFilter({ $or: [{ a: { $foo: 1 } }] })) as InvalidQueryError;
    expect(err).toBeInstanceOf(InvalidQueryError);
    expect(err.errors).toEqual([{ path: '$or[0].a', message: 'unknown operator "$foo"' }]);
    expect((thrown(() => parseFilter(null)) as InvalidQueryError).errors[0]!.path).toBe('(root)');
    expect(
      (thrown(() => parseFilter(nested(3), { ...DEFAULT_QUERY_LIMITS, maxDepth: 2 })) as InvalidQueryError)
        .code,
    ).toBe('INVALID_QUERY');
  });

  it('exposes the zod schemas', () => {
    expect(filterSchema().safeParse({ a: 1 }).success).toBe(true);
    expect(filterSchema().safeParse({ $a: 1 }).success).toBe(false);
    expect(querySchema().safeParse({ $limit: 5 }).success).toBe(true);
    expect(querySchema({ ...DEFAULT_QUERY_LIMITS, maxLimit: 4 }).safeParse({ $limit: 5 }).success).toBe(
      false,
    );
  });
});

describe('compileFilter of timestamp fields', () => {
  const rows = [
    { id: 1, ts: '2026-01-01T08:59:59+09:00' }, // 2025-12-31T23:59:59Z
    { id: 2, ts: '2026-01-01T00:00:00Z' },
    { id: 3, ts: '2025-12-31T19:00:00.000-05:00' }, // the same instant as 2
    { id: 4, ts: 'not a time' },
    { id: 5, ts: null },
    { id: 6 },
  ];
  const select = (filter: Filter) =>
    rows.filter(compileFilter(filter, { timestampFields: new Set(['ts']) })).map((r) => r.id);

  it('defect: compares instants, not their text, in every operator and nested filter', () => {
    // As text, "2026-01-01T08:59:59+09:00" >= "2026-01-01T00:00:00Z" and "2025-12-31T19…" < it.
    expect(select({ ts: { $gte: '2026-01-01T00:00:00Z' } })).toEqual([2, 3]);
    expect(select({ ts: { $lt: '2026-01-01T09:00:00+09:00' } })).toEqual([1]);
    expect(select({ ts: '2026-01-01T00:00:00.000000Z' })).toEqual([2, 3]);
    expect(select({ ts: { $in: ['2025-12-31T23:59:59Z'] } })).toEqual([1]);
    expect(select({ $or: [{ ts: { $eq: 1767225600000 } }, { ts: null }] })).toEqual([2, 3, 5, 6]);
    expect(select({ ts: { $ne: '2026-01-01T00:00:00Z' } })).toEqual([1, 4, 5, 6]);
  });

  it('without the option, values compare as they are written', () => {
    expect(rows.filter(compileFilter({ ts: { $gte: '2026-01-01T00:00:00Z' } })).map((r) => r.id)).toEqual([
      1, 2, 4,
    ]);
  });
});

describe('compileFilter semantics', () => {
  const matches = (filter: Filter, record: Record<string, unknown>) => compileFilter(filter)(record);
  const select = (filter: Filter, records: Array<Record<string, unknown>>) =>
    records.filter(compileFilter(filter)).map((r) => r.id);

  const rows = [
    { id: 1, value: 5, name: 'alpha', category: 'a', tags: ['x', 'y'], flag: true },
    { id: 2, value: 10, name: 'beta', category: 'b', tags: ['y'], flag: false },
    { id: 3, value: 15, name: 'gamma', category: 'hidden', tags: [], flag: null },
    { id: 4, value: '12', name: 'delta', tags: 'xy' },
    { id: 5, name: 'epsilon', category: null },
  ];

  it('an empty filter matches everything', () => {
    expect(select({}, rows)).toEqual([1, 2, 3, 4, 5]);
  });

  it('a bare value means $eq, strictly typed', () => {
    expect(select({ value: 10 }, rows)).toEqual([2]);
    expect(select({ value: '12' }, rows)).toEqual([4]);
    expect(select({ value: 12 }, rows)).toEqual([]);
    expect(select({ flag: true }, rows)).toEqual([1]);
    expect(select({ flag: false }, rows)).toEqual([2]);
    expect(matches({ value: 0 }, { value: -0 })).toBe(true);
  });

  it('$eq: a missing field equals null', () => {
    expect(select({ value: { $eq: 15 } }, rows)).toEqual([3]);
    expect(select({ category: { $eq: null } }, rows)).toEqual([4, 5]);
    expect(select({ category: null }, rows)).toEqual([4, 5]);
    expect(select({ flag: { $eq: null } }, rows)).toEqual([3, 4, 5]);
    expect(matches({ a: { $eq: [1] as never } }, { a: [1] })).toBe(false);
  });

  it('$ne: the complement of $eq (a missing field is null)', () => {
    expect(select({ category: { $ne: 'hidden' } }, rows)).toEqual([1, 2, 4, 5]);
    expect(select({ category: { $ne: null } }, rows)).toEqual([1, 2, 3]);
    expect(select({ value: { $ne: 10 } }, rows)).toEqual([1, 3, 4, 5]);
  });

  it('$lt, $lte, $gt, $gte compare numbers with numbers only', () => {
    expect(select({ value: { $lt: 10 } }, rows)).toEqual([1]);
    expect(select({ value: { $lte: 10 } }, rows)).toEqual([1, 2]);
    expect(select({ value: { $gt: 10 } }, rows)).toEqual([3]);
    expect(select({ value: { $gte: 10 } }, rows)).toEqual([2, 3]);
    // "12" is a string: never in a numeric range; a missing field never in any range.
    expect(select({ value: { $gte: 0 } }, rows)).toEqual([1, 2, 3]);
  });

  it('range operators compare strings with strings only, by code unit', () => {
    expect(select({ name: { $gte: 'beta', $lt: 'epsilon' } }, rows)).toEqual([2, 4]);
    expect(select({ value: { $gt: '1' } }, rows)).toEqual([4]);
    expect(matches({ s: { $lt: 'a' } }, { s: 'B' })).toBe(true);
    expect(matches({ s: { $gt: 'a' } }, { s: 'ä' })).toBe(true);
  });

  it('range operators never match null, booleans or mixed types', () => {
    for (const op of ['$lt', '$lte', '$gt', '$gte'] as const) {
      expect(matches({ a: { [op]: null } }, { a: null }), op).toBe(false);
      expect(matches({ a: { [op]: null } }, {}), op).toBe(false);
      expect(matches({ a: { [op]: true } }, { a: true }), op).toBe(false);
      expect(matches({ a: { [op]: false } }, { a: true }), op).toBe(false);
      expect(matches({ a: { [op]: 1 } }, { a: '1' }), op).toBe(false);
      expect(matches({ a: { [op]: '1' } }, { a: 1 }), op).toBe(false);
      expect(matches({ a: { [op]: 1 } }, { a: [1] }), op).toBe(false);
    }
  });

  it('range bounds are exclusive or inclusive as named', () => {
    expect(matches({ a: { $lt: 5 } }, { a: 5 })).toBe(false);
    expect(matches({ a: { $lte: 5 } }, { a: 5 })).toBe(true);
    expect(matches({ a: { $gt: 5 } }, { a: 5 })).toBe(false);
    expect(matches({ a: { $gte: 5 } }, { a: 5 })).toBe(true);
    expect(matches({ a: { $gt: 1.5 } }, { a: 1.50001 })).toBe(true);
  });

  it('several operators on one field are ANDed', () => {
    expect(select({ value: { $gte: 5, $lt: 15 } }, rows)).toEqual([1, 2]);
    expect(select({ value: { $gt: 5, $ne: 15 } }, rows)).toEqual([2]);
    expect(select({ value: { $gt: 10, $lt: 10 } }, rows)).toEqual([]);
  });

  it('several fields are ANDed', () => {
    expect(select({ category: { $ne: 'hidden' }, value: { $gte: 10 } }, rows)).toEqual([2]);
  });

  it('$in: membership with strict types; null in the list matches a missing field', () => {
    expect(select({ category: { $in: ['a', 'hidden'] } }, rows)).toEqual([1, 3]);
    expect(select({ category: { $in: ['a', null] } }, rows)).toEqual([1, 4, 5]);
    expect(select({ value: { $in: [5, '12'] } }, rows)).toEqual([1, 4]);
    expect(select({ value: { $in: [] } }, rows)).toEqual([]);
    expect(select({ flag: { $in: [false] } }, rows)).toEqual([2]);
  });

  it('$contains: substring on strings, membership on arrays, false otherwise', () => {
    expect(select({ name: { $contains: 'ta' } }, rows)).toEqual([2, 4]);
    expect(select({ tags: { $contains: 'y' } }, rows)).toEqual([1, 2, 4]);
    expect(select({ tags: { $contains: 'x' } }, rows)).toEqual([1, 4]);
    expect(select({ name: { $contains: '' } }, rows)).toEqual([1, 2, 3, 4, 5]);
    expect(matches({ n: { $contains: 1 } }, { n: 123 })).toBe(false);
    expect(matches({ n: { $contains: 1 } }, { n: '123' })).toBe(false);
    expect(matches({ n: { $contains: 1 } }, { n: [1, 2] })).toBe(true);
    expect(matches({ n: { $contains: '1' } }, { n: [1, 2] })).toBe(false);
    expect(matches({ n: { $contains: null } }, { n: [null] })).toBe(true);
    expect(matches({ n: { $contains: 'a' } }, {})).toBe(false);
    expect(matches({ n: { $contains: 'a' } }, { n: { a: 1 } })).toBe(false);
  });

  it('$and requires every branch, $or any branch', () => {
    expect(select({ $and: [{ value: { $gte: 5 } }, { value: { $lte: 10 } }] }, rows)).toEqual([1, 2]);
    expect(select({ $or: [{ category: 'a' }, { name: 'epsilon' }] }, rows)).toEqual([1, 5]);
    expect(select({ $or: [{ category: 'zzz' }] }, rows)).toEqual([]);
    expect(
      select(
        {
          $or: [{ $and: [{ category: 'a' }, { flag: true }] }, { value: { $gt: 12 } }],
          name: { $ne: 'gamma' },
        },
        rows,
      ),
    ).toEqual([1]);
  });

  it('matches a deeply nested filter the same as the flat one', () => {
    expect(
      select(nested(8), [
        { id: 1, value: 1 },
        { id: 2, value: 2 },
      ]),
    ).toEqual([1]);
  });

  it('looks only at the record’s own fields', () => {
    const inherited = Object.create({ value: 5 }) as Record<string, unknown>;
    expect(matches({ value: 5 }, inherited)).toBe(false);
    expect(matches({ value: null }, inherited)).toBe(true);
    expect(matches({ toString: null }, {})).toBe(true);
    expect(matches({ toString: { $ne: null } }, {})).toBe(false);
  });

  it('ignores operators whose operand is undefined, and never matches an unknown operator', () => {
    expect(matches({ a: { $eq: undefined } }, { a: 1 })).toBe(true);
    expect(matches({ a: undefined }, { a: 1 })).toBe(true);
    expect(matches({ a: { $regex: 'x' } as never }, { a: 'x' })).toBe(false);
  });

  it('agrees with what parseQuery produces from the wire', () => {
    const { filter } = parseQuery(
      JSON.parse('{"$filter": {"category": {"$ne": "hidden"}, "value": {"$gte": 10}}}'),
    );
    expect(select(filter, rows)).toEqual([2]);
  });
});

describe('compareScalars', () => {
  it('orders null < booleans < numbers < strings', () => {
    const values = ['b', 2, null, true, 'a', -1, false, 10, 'B', ''];
    expect([...values].sort(compareScalars)).toEqual([null, false, true, -1, 2, 10, '', 'B', 'a', 'b']);
    // undefined (a missing field) ranks with null.
    expect(compareScalars(undefined, false)).toBe(-1);
    expect(compareScalars(undefined, null)).toBe(0);
  });

  it('returns exactly -1, 0 or 1', () => {
    expect(compareScalars(1, 2)).toBe(-1);
    expect(compareScalars(2, 1)).toBe(1);
    expect(compareScalars(2, 2)).toBe(0);
    expect(compareScalars('a', 'a')).toBe(0);
    expect(compareScalars(null, undefined)).toBe(0);
    expect(compareScalars(false, true)).toBe(-1);
    expect(compareScalars(true, false)).toBe(1);
    expect(compareScalars(true, true)).toBe(0);
    expect(compareScalars(1, '1')).toBe(-1);
    expect(compareScalars('1', 1)).toBe(1);
    expect(compareScalars(null, false)).toBe(-1);
  });

  it('orders non-scalars after strings, among themselves by their JSON', () => {
    expect(compareScalars({ a: 1 }, 'zzz')).toBe(1);
    expect(compareScalars([1], [2])).toBe(-1);
    expect(compareScalars([1], [1])).toBe(0);
    expect(compareScalars({ b: 1 }, { a: 1 })).toBe(1);
  });

  it('is antisymmetric over a mixed sample', () => {
    const sample = [null, false, true, -1, 0, 1.5, '', 'a', 'b', [1], { a: 1 }];
    for (const a of sample)
      for (const b of sample) expect(compareScalars(a, b)).toBe(-compareScalars(b, a) || 0);
  });
});

describe('andFilters', () => {
  it('ANDs the non-empty filters', () => {
    expect(andFilters()).toEqual({});
    expect(andFilters(undefined, {}, undefined)).toEqual({});
    const only = { a: 1 };
    expect(andFilters(undefined, only, {})).toBe(only);
    expect(andFilters({ a: 1 }, { b: { $gt: 2 } })).toEqual({ $and: [{ a: 1 }, { b: { $gt: 2 } }] });
  });

  it('cannot be widened by the user part (a token row filter stays binding)', () => {
    const rowFilter: Filter = { tenant: 't1' };
    const user: Filter = { $or: [{ tenant: 't2' }, { tenant: 't1' }] };
    const keep = compileFilter(andFilters(rowFilter, user));
    expect(keep({ tenant: 't1' })).toBe(true);
    expect(keep({ tenant: 't2' })).toBe(false);
  });
});

describe('canonicalFilter', () => {
  const records = [
    { id: 1, category: 'a', value: 1 },
    { id: 2, category: 'b', value: null },
    { id: 3, category: 'b' },
    { id: 4, category: 'a', value: 7 },
  ];
  const matching = (filter: Filter) => records.filter(compileFilter(filter)).map((r) => r.id);

  it('spells a lone $eq as its bare value, in $and / $or too, and selects the same records', () => {
    const spelled: Filter = {
      category: { $eq: 'a' },
      value: { $eq: null },
      $or: [{ value: { $eq: 7 } }, { id: { $eq: 2 }, value: { $gt: 0, $eq: 1 } }],
    };
    const bare: Filter = {
      category: 'a',
      value: null,
      $or: [{ value: 7 }, { id: 2, value: { $gt: 0, $eq: 1 } }],
    };
    expect(canonicalFilter(spelled)).toEqual(bare);
    expect(canonicalFilter(bare)).toEqual(bare);
    expect(matching(canonicalFilter(spelled))).toEqual(matching(spelled));
    expect(matching({ value: { $eq: null } })).toEqual(matching({ value: null }));
  });

  it('folds nothing else, and leaves what is no filter as it is', () => {
    expect(canonicalFilter({ value: { $in: [1] }, category: { $ne: 'a' } })).toEqual({
      value: { $in: [1] },
      category: { $ne: 'a' },
    });
    expect(canonicalFilter({ value: { $eq: 1, $lt: undefined } })).toEqual({ value: 1 });
    const garbage = { value: { $eq: { $lt: 5 } }, tags: [1, 2], $and: 'x' } as unknown as Filter;
    expect(canonicalFilter(garbage)).toEqual(garbage);
  });
});
