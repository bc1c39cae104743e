/**
 * A token's row filter is ANDed into every query and count of its endpoint, but it is the issuer's, not the caller's:
 * a caller's query means the same with or without one. Its `$filter` is held to the query limits (`query.maxDepth`
 * …) and its mistakes are named at the paths the caller wrote; the row filter is not counted against those limits
 * (each of its claims was checked against them when the token was read), and a row filter within them never turns
 * a caller's query into an error.
 */
import { signJwt, type TempDir, tempDir } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiServer } from '../src/index.js';
import { startQuietApiServer, writeGeneration } from './helpers.js';

const SECRET = 'a-test-secret-of-32-characters!!';
/** Records 1..60: `category` is a, b, c by id % 3 (fixtures/data.ts), `value` is the id. */
const COUNT = 60;
/** The default `query.maxDepth`. */
const MAX_DEPTH = 8;

/** A token for `items` with `claims`. */
const sign = (claims: Record<string, unknown>): string =>
  signJwt(SECRET, { endpoints: ['items'], ...claims });

/** `inner` wrapped in `levels` levels of one-element `op` lists: a filter nested exactly `levels` deep. */
function nested(inner: Record<string, unknown>, levels: number, op: '$and' | '$or'): Record<string, unknown> {
  let filter = inner;
  for (let level = 0; level < levels; level += 1) filter = { [op]: [filter] };
  return filter;
}

let dir: TempDir;
let server: ApiServer;

beforeAll(async () => {
  dir = await tempDir('sluice-api-rowfilter-shape-');
  await writeGeneration(dir.path, 1, COUNT);
  server = await startQuietApiServer(dir.path, { api: { auth: { jwtSecret: SECRET } } });
}, 90_000);

afterAll(async () => {
  await server?.close();
  await dir?.remove();
});

async function post(route: 'query' | 'count', token: string, body: unknown) {
  const response = await fetch(`${server.url}/v1/endpoints/items/${route}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

const idsOf = (json: Record<string, unknown>) => (json.records as Array<{ id: number }>).map((r) => r.id);
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe('a row filter and the caller’s query', () => {
  it('defect: a row filter made a query at query.maxDepth INVALID_QUERY and moved its errors to paths the caller never wrote', async () => {
    const scoped = sign({ filters: { items: { category: 'a' } } });
    const atMaxDepth = { $filter: nested({ value: { $lte: 30 } }, MAX_DEPTH, '$and'), $limit: 100 };
    // Accepted without a row filter…
    expect((await post('query', sign({}), atMaxDepth)).status).toBe(200);
    // …and with one, answering the records of category "a" among them.
    const query = await post('query', scoped, atMaxDepth);
    expect({ status: query.status, code: query.json.code }).toEqual({ status: 200, code: undefined });
    expect(idsOf(query.json)).toEqual(range(1, 30).filter((id) => id % 3 === 0));
    const count = await post('count', scoped, { $filter: atMaxDepth.$filter });
    expect({ status: count.status, json: count.json }).toEqual({ status: 200, json: { count: 10 } });

    // A mistake in the caller's filter is named where the caller wrote it, as it is without a row filter.
    for (const route of ['query', 'count'] as const) {
      const wrong = await post(route, scoped, { $filter: { nope: 1, value: { $gte: 'x' } } });
      expect(wrong.status).toBe(400);
      expect(wrong.json.code).toBe('INVALID_QUERY');
      expect((wrong.json.errors as Array<{ path: string }>).map((e) => e.path)).toEqual([
        '$filter.nope',
        '$filter.value.$gte',
      ]);
    }
  });

  it('defect: a row filter at query.maxDepth made every query of its token INVALID_QUERY about the row filter', async () => {
    // The authenticator accepts each claim up to the limit: it is the issuer's filter, and a valid one.
    const deepRows = sign({ filters: { items: nested({ category: 'a' }, MAX_DEPTH, '$or') } });
    const plain = await post('query', deepRows, { $filter: { value: { $lte: 12 } } });
    expect({ status: plain.status, code: plain.json.code }).toEqual({ status: 200, code: undefined });
    expect(idsOf(plain.json)).toEqual([3, 6, 9, 12]);
    expect((await post('count', deepRows, {})).json).toEqual({ count: COUNT / 3 });

    // A global `filter` and a per-endpoint one, each at the limit, are ANDed: still the issuer's valid filter.
    const both = sign({
      filter: nested({ value: { $gte: 1 } }, MAX_DEPTH, '$and'),
      filters: { items: nested({ category: 'b' }, MAX_DEPTH, '$or') },
    });
    const counted = await post('count', both, {});
    expect({ status: counted.status, json: counted.json }).toEqual({
      status: 200,
      json: { count: COUNT / 3 },
    });
    const page = await post('query', both, { $filter: { value: { $lte: 10 } } });
    expect({ status: page.status, ids: page.status === 200 ? idsOf(page.json) : page.json }).toEqual({
      status: 200,
      ids: [1, 4, 7, 10],
    });
  });
});
