import { DEFAULT_QUERY_LIMITS, parseCountQuery, parseQuery, SluiceError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { createQueryParsers } from './query-parser.js';

const limits = { ...DEFAULT_QUERY_LIMITS, maxLimit: 100, maxIn: 5, maxDepth: 2 };
const parsers = createQueryParsers(limits);

function outcome(fn: () => unknown): unknown {
  try {
    return { ok: fn() };
  } catch (err) {
    if (!SluiceError.isInstance(err)) throw err;
    return { code: err.code, message: err.message, errors: (err as unknown as { errors: unknown }).errors };
  }
}

describe('prebuilt query parsers', () => {
  it('give exactly what core parseQuery / parseCountQuery give, results and errors', () => {
    const inputs: unknown[] = [
      undefined,
      {},
      {
        $filter: { value: { $gte: 10, $lt: 20 }, category: 'a' },
        $order_by: { value: 'desc', id: 'asc' },
        $limit: 7,
      },
      { $filter: { $or: [{ a: 1 }, { b: { $in: [1, 2] } }] }, $skip: 3 },
      { $after: 'abc' },
      { $limit: 101 },
      { $filter: { id: { $in: [1, 2, 3, 4, 5, 6] } } },
      { $filter: { $and: [{ $or: [{ $and: [{ a: 1 }] }] }] } },
      { $filter: { a: { $regex: 'x' } } },
      { $skip: 1, $after: 'x' },
      { $nope: 1 },
      [1, 2],
      'text',
    ];
    for (const input of inputs) {
      expect(
        outcome(() => parsers.query(input)),
        JSON.stringify(input),
      ).toEqual(outcome(() => parseQuery(input, limits)));
      expect(
        outcome(() => parsers.count(input)),
        JSON.stringify(input),
      ).toEqual(outcome(() => parseCountQuery(input, limits)));
    }
  });
});
