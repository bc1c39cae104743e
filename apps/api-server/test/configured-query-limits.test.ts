/**
 * `query.maxIn` and `query.maxDepth` bound the filters an api-server accepts — in queries, counts and change feeds
 * alike. Above their defaults (1 000 values, 8 levels) a query within the configured limits is answered, and one
 * past them is refused at its path naming the configured limit.
 */
import { type TempDir, tempDir } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiServer } from '../src/index.js';
import { startQuietApiServer, writeGeneration } from './helpers.js';

const COUNT = 40;
const MAX_IN = 5_000;
const MAX_DEPTH = 12;

let dir: TempDir;
let server: ApiServer;

beforeAll(async () => {
  dir = await tempDir('sluice-api-query-limits-');
  await writeGeneration(dir.path, 1, COUNT);
  server = await startQuietApiServer(dir.path, { query: { maxIn: MAX_IN, maxDepth: MAX_DEPTH } });
}, 90_000);

afterAll(async () => {
  await server?.close();
  await dir?.remove();
});

async function post(route: 'query' | 'count', body: unknown) {
  const response = await fetch(`${server.url}/v1/endpoints/items/${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

function nested(inner: Record<string, unknown>, levels: number): Record<string, unknown> {
  let filter = inner;
  for (let level = 0; level < levels; level += 1) filter = { $and: [filter] };
  return filter;
}

/** Ids 1..n: the first COUNT of them exist. */
const ids = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

describe('configured query limits', () => {
  it('defect: a query within query.maxIn / query.maxDepth above their defaults was refused with the defaults', async () => {
    const wideIn = { id: { $in: ids(MAX_IN) } };
    const deep = nested({ value: { $lte: 10 } }, MAX_DEPTH);
    for (const filter of [wideIn, deep]) {
      const page = await post('query', { $filter: filter, $limit: 100 });
      expect({ status: page.status, detail: page.json.detail }).toEqual({ status: 200, detail: undefined });
      const count = await post('count', { $filter: filter });
      expect({ status: count.status, json: count.json }).toEqual({
        status: 200,
        json: { count: filter === wideIn ? COUNT : 10 },
      });
    }
    // The change feed took them already; it still does.
    const feed = await fetch(
      `${server.url}/v1/endpoints/items/changes?filter=${encodeURIComponent(JSON.stringify(deep))}`,
      { method: 'HEAD' },
    );
    expect(feed.status).toBe(200);
  });

  it('refuses a filter past the configured limits at its path, naming them', async () => {
    const tooWide = await post('query', { $filter: { id: { $in: ids(MAX_IN + 1) } } });
    expect(tooWide.status).toBe(400);
    expect(tooWide.json.errors).toEqual([{ path: '$filter.id.$in', message: `at most ${MAX_IN} values` }]);
    const tooDeep = await post('count', { $filter: nested({ id: 1 }, MAX_DEPTH + 1) });
    expect(tooDeep.status).toBe(400);
    expect(tooDeep.json.code).toBe('INVALID_QUERY');
    expect((tooDeep.json.errors as Array<{ message: string }>)[0]!.message).toBe(
      `nesting deeper than ${MAX_DEPTH}`,
    );
  });
});
