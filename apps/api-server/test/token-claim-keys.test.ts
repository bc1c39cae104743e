/**
 * A token's row filter is read exactly as its issuer wrote it, or refused: never read as a filter that lets more
 * through. JSON lets a claim hold an own `__proto__` key, which zod's records skip (to keep it from reaching a
 * prototype); skipped silently, `{"items": {"__proto__": …}}` was the empty filter — every record.
 */
import { signJwt, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { startQuietApiServer, writeGeneration } from './helpers.js';

const SECRET = 'token-claim-keys-secret-0123456789';
/** Records 1..30: `category` is a, b, c by id % 3 (fixtures/data.ts). */
const COUNT = 30;

describe('row filter claims', () => {
  it('defect: a row filter claim holding a "__proto__" key was read as no filter at all and showed every record', async () => {
    await using dir = await tempDir('rowauth-claims-');
    await writeGeneration(dir.path, 1, COUNT);
    await using server = await startQuietApiServer(dir.path, { api: { auth: { jwtSecret: SECRET } } });
    const answer = async (claims: string) => {
      // Parsed from text: an object literal's `__proto__` would set the prototype, not a key the JWT carries.
      const token = signJwt(SECRET, JSON.parse(claims) as Record<string, unknown>);
      const response = await fetch(`${server.url}/v1/endpoints/items/count`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: '{}',
      });
      const body = (await response.json()) as { code?: string; detail?: string; count?: number };
      return { status: response.status, code: body.code, detail: body.detail, count: body.count };
    };
    const cases: Array<[string, string]> = [
      ['{"endpoints": "*", "filters": {"items": {"__proto__": {"category": "b"}}}}', 'filters.items'],
      ['{"endpoints": "*", "filter": {"__proto__": {"category": "b"}}}', 'filter'],
      ['{"endpoints": "*", "filters": {"__proto__": {"category": "b"}}}', 'filters'],
      [
        '{"endpoints": "*", "filters": {"items": {"category": "a", "__proto__": {"category": "b"}}}}',
        'filters.items',
      ],
    ];
    for (const [claims, claim] of cases) {
      const refused = await answer(claims);
      expect({ claims, status: refused.status, code: refused.code, count: refused.count }).toEqual({
        claims,
        status: 401,
        code: 'UNAUTHORIZED',
        count: undefined,
      });
      expect(refused.detail).toBe(
        `The bearer token's claim "${claim}" is invalid: it holds a "__proto__" key, which names no field or endpoint`,
      );
    }
    // Nested deeper, core's filter parser refuses the key itself (as in a query's $filter).
    const nested = await answer('{"endpoints": "*", "filter": {"$and": [{"__proto__": {"category": "b"}}]}}');
    expect({ status: nested.status, code: nested.code }).toEqual({ status: 401, code: 'UNAUTHORIZED' });
    // The same filter without the key still applies.
    expect((await answer('{"endpoints": "*", "filters": {"items": {"category": "b"}}}')).count).toBe(
      COUNT / 3,
    );
  }, 60_000);
});
