import { expectSluiceError } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { MAX_BEARER_LENGTH, parseBearer } from './bearer.js';

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
      `Bearer ${'a'.repeat(MAX_BEARER_LENGTH + 1)}`,
    ])
      expect(refusal(header), header).toBe(malformed);
    expect(refusal(['Bearer a', 'Bearer b'])).toBe(malformed);
  });
});
