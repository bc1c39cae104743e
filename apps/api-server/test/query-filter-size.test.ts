/**
 * The size of a `$filter`, against a real api-server process reading a cache a real writer process wrote. A filter is
 * checked against every record a query or count examines, so its size multiplies the work of a request: within the
 * body limit, `$and` / `$or` lists nested a few levels deep hold tens of thousands of conditions. Such a filter is
 * refused (400 INVALID_QUERY at `$filter`) before any record is read, on every route that takes one; a filter of up to
 * the documented number of conditions is answered exactly.
 */
import { join } from 'node:path';
import { type TempDir, tempDir } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FeedWriter, startFeedWriter } from './feed-harness.js';
import { type SpawnedApiServer, spawnApiServer, writeConfig } from './helpers.js';

/** The most conditions one filter may hold (docs/http-api.md). */
const MAX_CONDITIONS = 1024;
const RECORDS = 2_000;

let dir: TempDir;
let writer: FeedWriter;
let api: SpawnedApiServer;

beforeAll(async () => {
  dir = await tempDir('sluice-api-filter-size-');
  writer = await startFeedWriter(dir, {
    initial: Array.from({ length: RECORDS }, (_, i) => ({
      id: i + 1,
      gen: 1,
      value: i + 1,
      category: 'abc'[i % 3],
      tags: [],
    })),
  });
  const config = await writeConfig(dir.path, { dataDir: join(dir.path, 'data'), logLevel: 'info' });
  api = await spawnApiServer(config);
}, 120_000);

afterAll(async () => {
  await api?.[Symbol.asyncDispose]();
  await writer?.[Symbol.asyncDispose]();
  await dir?.remove();
});

async function post(route: 'query' | 'count', body: unknown) {
  const response = await fetch(`${api.url}/v1/endpoints/items/${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

/**
 * A filter of exactly {@link MAX_CONDITIONS} conditions — 256 `$or` items, each holding three — plus `extra` more
 * (on the first item); it matches ids 1..256.
 */
function atTheBound(extra = 0) {
  return {
    $or: Array.from({ length: 256 }, (_, i) => ({
      id: i + 1,
      gen: 1,
      value: { $gte: 0, ...(i === 0 && extra > 0 ? { $lt: 1e9 } : {}) },
    })),
  };
}

/** `outer` lists of `inner` items each (`leaf()`), under `$or` or `$and` at both levels. */
function nested(op: '$or' | '$and', outer: number, inner: number, leaf: () => unknown) {
  return { [op]: Array.from({ length: outer }, () => ({ [op]: Array.from({ length: inner }, leaf) })) };
}

describe('filter size', () => {
  it('defect: a filter of tens of thousands of conditions (nested $or / $and lists within the body limit) was run against every record, holding the api-server for seconds to minutes — now 400 INVALID_QUERY at $filter before any record is read', async () => {
    const hostile = [
      // 64 000 conditions that never match: every one is checked on every record.
      nested('$or', 250, 256, () => ({ gen: -1 })),
      // 64 000 empty filters ANDed: no condition at all, but each is still a check per record.
      nested('$and', 250, 256, () => ({})),
      // One more than the bound (see below).
      atTheBound(1),
    ];
    for (const filter of hostile) {
      for (const route of ['query', 'count'] as const) {
        const answer = await post(route, { $filter: filter });
        expect(answer.status, route).toBe(400);
        expect(answer.json.code).toBe('INVALID_QUERY');
        expect(answer.json.errors).toEqual([
          {
            path: '$filter',
            message: `more than ${MAX_CONDITIONS} conditions (each operator or bare value of a field, each $and / $or item): use $in for a list of values`,
          },
        ]);
      }
    }
    // The change feed's filter= is held to the same bound.
    const feed = await fetch(
      `${api.url}/v1/endpoints/items/changes?filter=${encodeURIComponent(JSON.stringify(nested('$or', 5, 250, () => ({}))))}`,
    );
    expect(feed.status).toBe(400);
    expect(await feed.json()).toMatchObject({
      code: 'INVALID_QUERY',
      errors: [{ path: 'querystring.filter' }],
    });
    // The server kept serving throughout.
    expect((await fetch(`${api.url}/v1/endpoints/items/records/7`)).status).toBe(200);
  });

  it('answers a filter of exactly the bound, and $in lists of the largest size within it, exactly', async () => {
    const count = await post('count', { $filter: atTheBound() });
    expect(count).toEqual({ status: 200, json: { count: 256 } });
    const page = await post('query', { $filter: atTheBound(), $order_by: { id: 'desc' }, $limit: 1000 });
    expect(page.status).toBe(200);
    expect((page.json.records as Array<{ id: number }>).map((r) => r.id)).toEqual(
      Array.from({ length: 256 }, (_, i) => 256 - i),
    );
    // Each $in is one condition however long it is (the list is looked up, not searched).
    const lists = Array.from({ length: 40 }, (_, l) => ({
      value: { $in: Array.from({ length: 1000 }, (_, i) => (i === l ? l * 50 + 1 : -i - 1)) },
    }));
    const inCount = await post('count', { $filter: { $or: lists } });
    expect(inCount).toEqual({ status: 200, json: { count: 40 } });
  });
});
