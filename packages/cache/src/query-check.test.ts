import type { CacheSchema } from '@sluice/core';
import { expectSluiceError } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { checkFilter, checkQuery } from './query-check.js';

const schema: CacheSchema = {
  fields: { id: 'integer', value: 'number', tags: 'json', at: 'timestamp' },
  primaryKey: ['id'],
  indexes: [['value']],
};

/** The paths `checkFilter` refuses `filter` at (INVALID_QUERY), or [] when it accepts it. */
function refusedPaths(filter: unknown): string[] {
  try {
    checkFilter(filter, schema);
    return [];
  } catch {
    const err = expectSluiceError(() => checkFilter(filter, schema), 'INVALID_QUERY');
    expect(err.status).toBe(400);
    return (err as unknown as { errors: Array<{ path: string }> }).errors.map((e) => e.path);
  }
}

/** What a JSON body's `12345678901234567890` becomes: JSON.parse rounds it to another number. */
const HUGE = JSON.parse('12345678901234567890') as number;

describe('integer operands', () => {
  it('defect: a non-integer or unsafe operand on an integer field was accepted (a query of nothing) — now INVALID_QUERY at its path', () => {
    // Before: every one of these was accepted, and the query answered no records.
    expect(refusedPaths({ id: 1.5 })).toEqual(['$filter.id']);
    expect(refusedPaths({ id: HUGE })).toEqual(['$filter.id']);
    expect(refusedPaths({ id: { $eq: 1.5 } })).toEqual(['$filter.id.$eq']);
    expect(refusedPaths({ id: { $ne: 2 ** 53 } })).toEqual(['$filter.id.$ne']);
    expect(refusedPaths({ id: { $in: [1, 2.5, 3, -(2 ** 60)] } })).toEqual([
      '$filter.id.$in[1]',
      '$filter.id.$in[3]',
    ]);
    expect(refusedPaths({ $or: [{ id: 7 }, { id: 7.25 }] })).toEqual(['$filter.$or[1].id']);
    // A range bound past ±(2^53 − 1) is refused: JSON.parse may already have changed it to another number.
    expect(refusedPaths({ id: { $lt: HUGE } })).toEqual(['$filter.id.$lt']);
    expect(refusedPaths({ id: { $gte: -1e300 } })).toEqual(['$filter.id.$gte']);
    expect(() => checkQuery({ filter: { id: 0.5 } }, schema, { defaultLimit: 10, maxLimit: 10 })).toThrow(
      /\$filter\.id: expected an integer/,
    );
  });

  it('accepts safe integers, null, and fractional range bounds (a valid comparison: id < 1.5 is id ≤ 1)', () => {
    for (const filter of [
      { id: 1 },
      { id: null },
      { id: -(2 ** 53 - 1) },
      { id: { $in: [1, 2, 2 ** 53 - 1, null] } },
      { id: { $ne: 0 } },
      { id: { $lt: 1.5, $gte: -0.5 } },
      { id: { $gt: 2 ** 53 - 1 } },
      // Other types are untouched: a number field takes fractions, a json field any scalar.
      { value: 1.5 },
      { tags: 1.5 },
      { at: 1_767_225_600_000 },
    ])
      expect(refusedPaths(filter), JSON.stringify(filter)).toEqual([]);
  });
});
