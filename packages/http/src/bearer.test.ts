import { expectSluiceError } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { jwtExpiry, MAX_BEARER_LENGTH, MAX_NUMERIC_DATE, parseBearer } from './bearer.js';

/** The message `parseBearer` refuses `header` with (as UNAUTHORIZED). */
function refusal(header: string | string[] | undefined): string {
  return expectSluiceError(() => parseBearer(header), 'UNAUTHORIZED', JSON.stringify(header)).message;
}

describe('parseBearer', () => {
  it('reads the token of a Bearer header, any case of the scheme, surrounding whitespace ignored', () => {
    expect(parseBearer('Bearer abc.def-ghi_jkl=')).toBe('abc.def-ghi_jkl=');
    expect(parseBearer('bearer a-long-random-token-1234')).toBe('a-long-random-token-1234');
    expect(parseBearer('  BEARER \t tok+/~!#  ')).toBe('tok+/~!#');
    expect(parseBearer(`Bearer ${'a'.repeat(MAX_BEARER_LENGTH)}`)).toHaveLength(MAX_BEARER_LENGTH);
  });

  it('refuses a missing header as "required" and every malformed one naming the expected form', () => {
    expect(refusal(undefined)).toBe('A valid bearer token is required');
    expect(refusal('')).toBe('A valid bearer token is required');
    const malformed = 'The Authorization header must be "Bearer <token>"';
    for (const header of [
      'Basic dXNlcjpwYXNz',
      'Bearer',
      'Bearer ',
      'Bearertoken',
      'Bearer two tokens',
      'Bearer tök',
    ])
      expect(refusal(header), header).toBe(malformed);
    expect(refusal(['Bearer a', 'Bearer b'])).toBe(malformed);
  });

  it('defect: a token over MAX_BEARER_LENGTH was refused as malformed ("must be "Bearer <token>"") — now said to be too long, with the limit', () => {
    const length = MAX_BEARER_LENGTH + 1;
    for (const header of [`Bearer ${'a'.repeat(length)}`, `  bearer \t${'a'.repeat(length)}  `]) {
      const err = expectSluiceError(() => parseBearer(header), 'UNAUTHORIZED', 'over-long token');
      expect(err.message).toBe(
        `The bearer token is too long: ${length} characters, at most ${MAX_BEARER_LENGTH} are accepted`,
      );
      expect(err.details).toEqual({ reason: 'too-long', maxLength: MAX_BEARER_LENGTH, length });
    }
    // Length is judged only for a header of the right form: another scheme is still "must be Bearer".
    expect(refusal(`Basic ${'a'.repeat(length)}`)).toBe('The Authorization header must be "Bearer <token>"');
    expect(refusal(`Bearer ${'ö'.repeat(length)}`)).toBe('The Authorization header must be "Bearer <token>"');
  });
});

describe('jwtExpiry', () => {
  it('reads exp (seconds, fractions allowed) as epoch milliseconds, null without one', () => {
    expect(jwtExpiry({ exp: 1_893_456_000 })).toBe(1_893_456_000_000);
    expect(jwtExpiry({ exp: 1_893_456_000.5, nbf: -1, iat: 0 })).toBe(1_893_456_000_500);
    expect(jwtExpiry({ exp: -MAX_NUMERIC_DATE })).toBe(-MAX_NUMERIC_DATE * 1000);
    expect(jwtExpiry({ sub: 'x' })).toBeNull();
    expect(jwtExpiry(null)).toBeNull();
  });

  it('refuses a time claim that is no NumericDate a date can hold, naming it — never "does not expire"', () => {
    for (const [claims, claim, got] of [
      [{ exp: Number.POSITIVE_INFINITY }, 'exp', 'got Infinity'],
      [{ exp: Number.NEGATIVE_INFINITY }, 'exp', 'got -Infinity'],
      [{ exp: Number.NaN }, 'exp', 'got NaN'],
      [{ exp: 1e300 }, 'exp', 'got 1e+300, beyond any date'],
      [{ exp: MAX_NUMERIC_DATE + 1 }, 'exp', 'beyond any date'],
      [{ exp: '1893456000' }, 'exp', 'got string'],
      [{ exp: null }, 'exp', 'got null'],
      [{ exp: [1] }, 'exp', 'got array'],
      [{ exp: 1_893_456_000, nbf: Number.POSITIVE_INFINITY }, 'nbf', 'got Infinity'],
      [{ exp: 1_893_456_000, iat: 'yesterday' }, 'iat', 'got string'],
    ] as const) {
      const err = expectSluiceError(() => jwtExpiry(claims), 'UNAUTHORIZED', JSON.stringify(claims));
      expect(err.message).toContain(`claim "${claim}" is invalid`);
      expect(err.message).toContain(got);
    }
  });
});
