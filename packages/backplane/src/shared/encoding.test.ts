import { describe, expect, it } from 'vitest';
import { Subjects } from '../nats/subjects.js';
import { bucketSafe, kvKey, subjectToken } from './encoding.js';

describe('subject and key encoding', () => {
  const tricky = [
    'a.b',
    'a~2Eb',
    'a*',
    'a>',
    'a b',
    'é',
    '~',
    '=',
    '_',
    'orders.2026:12-01',
    'x'.repeat(200),
  ];

  it('produces valid, injective subject tokens', () => {
    const tokens = tricky.map(subjectToken);
    for (const token of tokens) expect(token).toMatch(/^[A-Za-z0-9_~-]+$/);
    expect(new Set(tokens).size).toBe(tricky.length);
    expect(subjectToken('orders.2026:12')).toBe('orders~2E2026~3A12');
    expect(() => subjectToken('')).toThrow(RangeError);
  });

  it('produces valid, injective KV keys and bucket names', () => {
    const keys = tricky.map(kvKey);
    for (const key of keys) expect(key).toMatch(/^[A-Za-z0-9_=-]+$/);
    expect(new Set(keys).size).toBe(tricky.length);
    const buckets = tricky.map(bucketSafe);
    for (const bucket of buckets) expect(bucket).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(new Set(buckets).size).toBe(tricky.length);
  });

  it('puts the cluster name first and the transfer id in its own token', () => {
    const subjects = new Subjects('prod.eu');
    expect(subjects.owner('a.b')).toBe('prod~2Eeu.xfer.a~2Eb.owner');
    expect(subjects.transferWildcard('a.b')).toBe('prod~2Eeu.xfer.a~2Eb.*');
    expect(subjects.event('AliasRedirected')).toBe('prod~2Eeu.ev.AliasRedirected');
  });
});
