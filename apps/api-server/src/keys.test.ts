import { type CacheSchema, type FieldType, SluiceError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { formatKeySegment, parseKeySegment, rawKeySegment } from './keys.js';

const single = (type: FieldType): CacheSchema => ({ fields: { id: type }, primaryKey: ['id'], indexes: [] });
const composite: CacheSchema = {
  fields: { region: 'string', id: 'integer', active: 'boolean' },
  primaryKey: ['region', 'id', 'active'],
  indexes: [],
};

function failure(fn: () => unknown): { code: string; errors: unknown } {
  try {
    fn();
  } catch (err) {
    if (!SluiceError.isInstance(err)) throw err;
    return { code: err.code, errors: (err as unknown as { errors: unknown }).errors };
  }
  throw new Error('expected a failure');
}

describe('key segments', () => {
  it('converts a single key to the primary key field type', () => {
    expect(parseKeySegment('42', single('integer'))).toEqual([42]);
    expect(parseKeySegment('-7', single('integer'))).toEqual([-7]);
    expect(parseKeySegment('2.5', single('number'))).toEqual([2.5]);
    expect(parseKeySegment('true', single('boolean'))).toEqual([true]);
    expect(parseKeySegment('a%2Fb%2Cc', single('string'))).toEqual(['a/b,c']);
    expect(parseKeySegment('42', single('string'))).toEqual(['42']);
    expect(parseKeySegment('%7B%22a%22%3A1%7D', single('json'))).toEqual([{ a: 1 }]);
    // Every spelling of an instant is its canonical UTC text, as the cache keys it.
    expect(parseKeySegment('2026-12-02T10%3A00%3A00Z', single('timestamp'))).toEqual([
      '2026-12-02T10:00:00.000000Z',
    ]);
    expect(parseKeySegment('2026-12-02T19%3A00%3A00%2B09%3A00', single('timestamp'))).toEqual([
      '2026-12-02T10:00:00.000000Z',
    ]);
    expect(parseKeySegment('1764669600000', single('timestamp'))).toEqual(['2025-12-02T10:00:00.000000Z']);
    expect(failure(() => parseKeySegment('Dec%202%202026', single('timestamp'))).code).toBe(
      'VALIDATION_FAILED',
    );
  });

  it('takes a numeric key in its canonical spelling only (String(value), what the client sends), naming it', () => {
    for (const [text, type, canonical] of [
      ['01', 'integer', '1'],
      ['-0', 'integer', '0'],
      ['+5', 'integer', '5'],
      ['-007', 'integer', '-7'],
      ['2.50', 'number', '2.5'],
      ['2.5e0', 'number', '2.5'],
      ['%202.5', 'number', '2.5'],
      ['0x10', 'number', '16'],
      ['-0', 'number', '0'],
      ['1e21', 'number', '1e+21'],
      ['.5', 'number', '0.5'],
    ] as const)
      expect(
        failure(() => parseKeySegment(text, single(type))),
        `${type} ${text}`,
      ).toEqual({
        code: 'VALIDATION_FAILED',
        errors: [
          {
            path: 'key',
            message: `"${decodeURIComponent(text)}" is not the canonical spelling of the key: write it as "${canonical}"`,
          },
        ],
      });
    expect(parseKeySegment('0', single('integer'))).toEqual([0]);
    expect(parseKeySegment('-0.5', single('number'))).toEqual([-0.5]);
    expect(parseKeySegment('1e%2B21', single('number'))).toEqual([1e21]);
    expect(failure(() => parseKeySegment('eu,01,true', composite)).errors).toEqual([
      { path: 'key.id', message: '"01" is not the canonical spelling of the key: write it as "1"' },
    ]);
  });

  it('rejects values that cannot have the key type with a typed error naming the path', () => {
    expect(failure(() => parseKeySegment('abc', single('integer')))).toEqual({
      code: 'VALIDATION_FAILED',
      errors: [{ path: 'key', message: '"abc" is not an integer' }],
    });
    expect(failure(() => parseKeySegment('1.5', single('integer'))).code).toBe('VALIDATION_FAILED');
    expect(failure(() => parseKeySegment('99999999999999999', single('integer'))).code).toBe(
      'VALIDATION_FAILED',
    );
    expect(failure(() => parseKeySegment('NaN', single('number'))).code).toBe('VALIDATION_FAILED');
    expect(failure(() => parseKeySegment('yes', single('boolean'))).code).toBe('VALIDATION_FAILED');
    expect(failure(() => parseKeySegment('soon', single('timestamp'))).code).toBe('VALIDATION_FAILED');
    expect(failure(() => parseKeySegment('%E0%A4%A', single('string'))).code).toBe('VALIDATION_FAILED');
    expect(failure(() => parseKeySegment('x'.repeat(9000), single('string'))).code).toBe('VALIDATION_FAILED');
  });

  it('splits composite keys on literal commas only and converts each component', () => {
    expect(parseKeySegment('eu,42,false', composite)).toEqual(['eu', 42, false]);
    expect(parseKeySegment('eu%2C%20west,7,true', composite)).toEqual(['eu, west', 7, true]);
    expect(failure(() => parseKeySegment('eu,42', composite)).errors).toEqual([
      { path: 'key', message: 'expected 3 comma-separated components (region, id, active), got 2' },
    ]);
    expect(failure(() => parseKeySegment('eu,x,true', composite)).errors).toEqual([
      { path: 'key.id', message: '"x" is not an integer' },
    ]);
  });

  it('formats keys so that parsing gives them back', () => {
    const values = ['a,b/c %', 12, true];
    expect(parseKeySegment(formatKeySegment(values), composite)).toEqual(values);
  });

  it('reads the raw segment from a URL before any decoding', () => {
    expect(rawKeySegment('/v1/endpoints/items/records/eu%2Cx,1?pretty=1')).toBe('eu%2Cx,1');
    expect(rawKeySegment('/v1/endpoints/records/records/a%2Fb')).toBe('a%2Fb');
  });
});
