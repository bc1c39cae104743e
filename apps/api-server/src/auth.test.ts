import { DEFAULT_QUERY_LIMITS } from '@sluice/core';
import { expectSluiceError } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { TokenAuthenticator } from './auth.js';

/** An authenticator whose "verification" hands back the claims named by the token text (signatures are fastify-jwt's). */
function authenticatorOf(claims: Record<string, unknown>): TokenAuthenticator {
  return new TokenAuthenticator(() => claims, DEFAULT_QUERY_LIMITS);
}

const refusal = (claims: Record<string, unknown>) => {
  const err = expectSluiceError(
    () => authenticatorOf(claims).authenticate('Bearer a.b.c'),
    'UNAUTHORIZED',
    JSON.stringify(claims),
  );
  expect(err.status).toBe(401);
  return err.message;
};

describe('token claims', () => {
  it('defect: a token whose filters.items is not an object was refused naming "endpoints" — now the claim that is wrong', () => {
    // Before: 'The bearer token does not carry Sluice claims ("endpoints")' for all of these.
    expect(refusal({ endpoints: ['items'], filters: { items: 5 } })).toBe(
      'The bearer token\'s claim "filters.items" is invalid: it must be a filter object (e.g. {"region": "eu"}), got number',
    );
    expect(refusal({ endpoints: '*', filters: [] })).toContain('claim "filters" is invalid');
    expect(refusal({ endpoints: '*', filter: 'category = a' })).toContain('claim "filter" is invalid');
    expect(refusal({ endpoints: '*', filters: { items: null } })).toContain(
      'claim "filters.items" is invalid: it must be a filter object',
    );
    // An absent or wrong "endpoints" is still named as such.
    expect(refusal({ filters: { items: {} } })).toContain('claim "endpoints"');
    expect(refusal({ endpoints: 'items' })).toContain('claim "endpoints"');
  });

  it('accepts well-formed claims', () => {
    const scope = authenticatorOf({
      endpoints: ['items'],
      filters: { items: { category: 'a' } },
    }).authenticate('Bearer a.b.c');
    expect(scope.allows('items')).toBe(true);
    expect(scope.rowFilter('items')).toEqual({ category: 'a' });
  });
});
