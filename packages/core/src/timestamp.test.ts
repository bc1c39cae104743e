import { describe, expect, it } from 'vitest';
import { canonicalTimestamp, isTimestamp } from './timestamp.js';

describe('canonicalTimestamp', () => {
  it('writes every spelling of an instant as one UTC text with microseconds', () => {
    const same = [
      '2026-12-05T23:33:49.737383Z',
      '2026-12-05T23:33:49.737383+00:00',
      '2026-12-06T08:33:49.737383+09:00', // PostgreSQL with TimeZone Asia/Tokyo
      '2026-12-05T18:33:49.737383-05:00',
      '2026-12-06 05:03:49.737383+0530',
      '2026-12-06T08:33:49.737383+09',
      '2026-12-05t23:33:49,737383z',
      '2026-12-05T23:33:49.737383', // no zone: UTC (PostgreSQL's timestamp without time zone)
      '2026-12-05T23:33:49.7373839Z', // past microseconds: cut
    ];
    for (const text of same) expect(canonicalTimestamp(text), text).toBe('2026-12-05T23:33:49.737383Z');
    expect(canonicalTimestamp('2026-12-05T23:33:49.737Z')).toBe('2026-12-05T23:33:49.737000Z');
    expect(canonicalTimestamp('2026-12-05T23:33:49Z')).toBe('2026-12-05T23:33:49.000000Z');
    expect(canonicalTimestamp('2026-12-05T23:33')).toBe('2026-12-05T23:33:00.000000Z');
    expect(canonicalTimestamp('2026-12-05')).toBe('2026-12-05T00:00:00.000000Z');
    // A historic local-mean-time offset, as PostgreSQL prints it (seconds included).
    expect(canonicalTimestamp('1880-01-01T00:00:00+09:18:59')).toBe('1879-12-31T14:41:01.000000Z');
  });

  it('reads numbers as epoch milliseconds, a fraction to the microsecond', () => {
    expect(canonicalTimestamp(0)).toBe('1970-01-01T00:00:00.000000Z');
    expect(canonicalTimestamp(Date.UTC(2026, 11, 5, 23, 33, 49, 737) + 0.383)).toBe(
      '2026-12-05T23:33:49.737383Z',
    );
    expect(canonicalTimestamp(-1)).toBe('1969-12-31T23:59:59.999000Z');
    expect(canonicalTimestamp(Number.NaN)).toBeNull();
    expect(canonicalTimestamp(Number.POSITIVE_INFINITY)).toBeNull();
  });

  it('keeps years 0001–9999 (UTC), where the text order is the time order', () => {
    expect(canonicalTimestamp('0001-01-01T00:00:00Z')).toBe('0001-01-01T00:00:00.000000Z');
    expect(canonicalTimestamp('0099-03-01T00:00:00Z')).toBe('0099-03-01T00:00:00.000000Z');
    expect(canonicalTimestamp('9999-12-31T23:59:59.999999Z')).toBe('9999-12-31T23:59:59.999999Z');
    expect(canonicalTimestamp('0001-01-01T00:00:00+01:00')).toBeNull(); // year 0 in UTC
    expect(canonicalTimestamp('9999-12-31T23:00:00-02:00')).toBeNull(); // year 10000 in UTC
    const texts = [
      '0001-01-01',
      '0999-12-31T23:59:59.999999Z',
      '1969-12-31T23:59:59Z',
      '1970-01-01',
      '2026-12-05',
    ];
    const canonical = texts.map((t) => canonicalTimestamp(t)!);
    expect([...canonical].sort()).toEqual(canonical);
  });

  it('refuses what is not an ISO 8601 instant', () => {
    for (const value of [
      'yesterday',
      'Dec 5 2026',
      '2026/12/05',
      '2026-13-01',
      '2026-02-29',
      '2026-12-05T24:00:00Z',
      '2026-12-05T23:60:00Z',
      '2026-12-05T23:59:60Z',
      '2026-12-05T23:00:00+24:00',
      '2026-12-05Z',
      'infinity',
      '0044-03-15T10:00:00+00 BC',
      '12026-12-05T00:00:00Z',
      '',
      true,
      null,
      {},
    ])
      expect(isTimestamp(value), JSON.stringify(value)).toBe(false);
    expect(isTimestamp('2024-02-29')).toBe(true);
  });
});
