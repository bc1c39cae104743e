import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  canonicalJson,
  FORBIDDEN_KEYS,
  hashJson,
  JsonScalarSchema,
  refuseProtoKey,
  SafeKeySchema,
} from './json.js';

describe('canonicalJson', () => {
  it('sorts object keys at every depth', () => {
    const a = { b: 1, a: { d: [1, { z: 1, y: 2 }], c: null } };
    const b = { a: { c: null, d: [1, { y: 2, z: 1 }] }, b: 1 };
    expect(canonicalJson(a)).toBe('{"a":{"c":null,"d":[1,{"y":2,"z":1}]},"b":1}');
    expect(canonicalJson(b)).toBe(canonicalJson(a));
  });

  it('keeps array order (order in arrays is meaningful)', () => {
    expect(canonicalJson([2, 1])).not.toBe(canonicalJson([1, 2]));
  });

  it('agrees with JSON.stringify on scalars, undefined and non-finite numbers', () => {
    for (const value of ['x', 'quote"and\\slash', 0, -1.5, 1e300, true, false, null]) {
      expect(canonicalJson(value)).toBe(JSON.stringify(value));
    }
    expect(canonicalJson(undefined)).toBe('null');
    expect(canonicalJson(Number.NaN)).toBe('null');
    expect(canonicalJson(Number.POSITIVE_INFINITY)).toBe('null');
    expect(canonicalJson([undefined, () => 1])).toBe('[null,null]');
  });

  it('drops undefined members, as JSON does', () => {
    expect(canonicalJson({ a: 1, b: undefined })).toBe('{"a":1}');
  });

  it('honours toJSON, so distinct dates never collide', () => {
    const early = { at: new Date('2026-01-01T00:00:00.000Z') };
    const late = { at: new Date('2026-12-01T00:00:00.000Z') };
    expect(canonicalJson(early)).toBe('{"at":"2026-01-01T00:00:00.000Z"}');
    expect(hashJson(early)).not.toBe(hashJson(late));
  });

  it('keeps an own "__proto__" key as data', () => {
    const value = JSON.parse('{"__proto__": {"x": 1}, "a": 2}');
    expect(canonicalJson(value)).toBe('{"__proto__":{"x":1},"a":2}');
  });

  it('escapes lone surrogates, so they cannot collide after UTF-8 encoding', () => {
    expect(canonicalJson('\uD800')).not.toBe(canonicalJson('\uDBFF'));
    expect(hashJson('\uD800')).not.toBe(hashJson('\uDBFF'));
  });
});

describe('hashJson', () => {
  it('is a hex SHA-256 that ignores key order', () => {
    const h = hashJson({ a: 1, b: [1, 2] });
    expect(h).toMatch(/^[0-9a-f]{64}$/);
    expect(hashJson({ b: [1, 2], a: 1 })).toBe(h);
    expect(hashJson({ a: 1, b: [2, 1] })).not.toBe(h);
    expect(hashJson({ a: '1', b: [1, 2] })).not.toBe(h);
  });

  it('is stable across runs (pinned value)', () => {
    // sha256('{"a":1}')
    expect(hashJson({ a: 1 })).toBe('015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862');
  });
});

describe('JsonScalarSchema', () => {
  it('accepts strings, finite numbers, booleans and null', () => {
    for (const value of ['', 'x', 'x'.repeat(65_536), 0, -0, 1.5, -1e308, true, false, null]) {
      expect(JsonScalarSchema.safeParse(value).success).toBe(true);
    }
  });

  it('refuses non-scalars, non-finite numbers and huge strings', () => {
    for (const value of [
      undefined,
      Number.NaN,
      Number.POSITIVE_INFINITY,
      Number.NEGATIVE_INFINITY,
      {},
      [],
      [1],
      () => 1,
      10n,
      Symbol('x'),
      new Date(0),
      'x'.repeat(65_537),
    ]) {
      expect(JsonScalarSchema.safeParse(value).success).toBe(false);
    }
  });

  it('explains what it expects', () => {
    const result = JsonScalarSchema.safeParse({});
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.message).toBe('expected a string, number, boolean or null');
  });
});

describe('SafeKeySchema', () => {
  it('accepts ordinary keys up to 256 characters', () => {
    for (const key of ['a', 'requestedBy', 'with space', 'ünïcode', 'k'.repeat(256), '$x', 'toString']) {
      expect(SafeKeySchema.safeParse(key).success).toBe(true);
    }
  });

  it('refuses the prototype-pollution keys, empty and huge keys, and non-strings', () => {
    expect([...FORBIDDEN_KEYS].sort()).toEqual(['__proto__', 'constructor', 'prototype']);
    for (const key of ['__proto__', 'constructor', 'prototype', '', 'k'.repeat(257), 1, null]) {
      expect(SafeKeySchema.safeParse(key).success).toBe(false);
    }
    expect(SafeKeySchema.safeParse('constructor').error?.issues[0]?.message).toBe('reserved key name');
  });
});

describe('refuseProtoKey', () => {
  const Labels = refuseProtoKey(z.record(z.string(), z.string()));

  it('refuses an own "__proto__" key (from JSON.parse) with its path instead of dropping it', () => {
    const result = Labels.safeParse(JSON.parse('{"a": "1", "__proto__": "x"}'));
    expect(result.success).toBe(false);
    expect(result.error?.issues).toEqual([
      expect.objectContaining({ code: 'custom', path: ['__proto__'], message: 'reserved key name' }),
    ]);
  });

  it('uses the given message', () => {
    const Fields = refuseProtoKey(z.record(z.string(), z.number()), 'reserved field name');
    expect(Fields.safeParse(JSON.parse('{"__proto__": 1}')).error?.issues[0]?.message).toBe(
      'reserved field name',
    );
  });

  it('otherwise behaves exactly as the wrapped schema', () => {
    expect(Labels.parse({ a: '1', b: '2' })).toEqual({ a: '1', b: '2' });
    expect(Labels.safeParse({ a: 1 }).error?.issues[0]?.path).toEqual(['a']);
    expect(Labels.safeParse('x').success).toBe(false);
    expect(Labels.safeParse(null).success).toBe(false);
    // An inherited __proto__ (every object has one) is not an own key and is fine.
    expect(Labels.parse({})).toEqual({});
  });

  it('shows the wrapped record what a bare zod record would silently do', () => {
    // The reason the wrapper exists: zod drops the key, changing what the input means.
    expect(z.record(z.string(), z.string()).parse(JSON.parse('{"__proto__": "x"}'))).toEqual({});
  });
});
