/**
 * What a token's row filter hides must not show through the endpoint descriptions either: `GET /v1/endpoints` and
 * `GET /v1/endpoints/:name` report a `recordCount`, which for a row-filtered token is the count it may see (the
 * same as its `POST …/count`), never the generation's total.
 */
import { resolveConfig } from '@sluice/core';
import { signJwt, tempDir } from '@sluice/testkit';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { startApiServer } from '../src/index.js';
import { writeGeneration } from './helpers.js';

const SECRET = 'a-test-secret-of-32-characters!!';
const COUNT = 300;

async function get(url: string, token: string): Promise<{ status: number; json: Record<string, unknown> }> {
  const response = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

describe('row filters and endpoint descriptions', () => {
  it('defect: GET /v1/endpoints and /v1/endpoints/:name told a row-filtered token the recordCount of every record, hidden ones included', async () => {
    await using dir = await tempDir('sluice-api-rowcount-');
    await writeGeneration(dir.path, 1, COUNT);
    await using server = await startApiServer({
      config: resolveConfig({ dataDir: dir.path, logLevel: 'silent', api: { auth: { jwtSecret: SECRET } } }),
      dataDir: dir.path,
      port: 0,
      host: '127.0.0.1',
      logger: pino({ level: 'silent' }),
      watchMs: 50,
    });
    // Categories cycle a, b, c by id % 3 (fixtures/data.ts): a third of the records are category "a".
    const scoped = signJwt(SECRET, { endpoints: ['items'], filters: { items: { category: 'a' } } });
    const visible = await fetch(`${server.url}/v1/endpoints/items/count`, {
      method: 'POST',
      headers: { authorization: `Bearer ${scoped}`, 'content-type': 'application/json' },
      body: '{}',
    }).then((r) => r.json() as Promise<{ count: number }>);
    expect(visible.count).toBe(COUNT / 3);

    const one = await get(`${server.url}/v1/endpoints/items`, scoped);
    expect(one.status).toBe(200);
    expect(one.json.recordCount).toBe(visible.count);
    const list = await get(`${server.url}/v1/endpoints`, scoped);
    expect(
      (list.json.endpoints as Array<{ name: string; recordCount: number }>).map((e) => [
        e.name,
        e.recordCount,
      ]),
    ).toEqual([['items', visible.count]]);

    // Without a row filter the description still reports every record.
    const all = signJwt(SECRET, { endpoints: '*' });
    expect((await get(`${server.url}/v1/endpoints/items`, all)).json.recordCount).toBe(COUNT);

    // A row filter that does not fit the endpoint is 403 on its own route and leaves it out of the list.
    const unfit = signJwt(SECRET, { endpoints: '*', filters: { items: { nofield: 1 } } });
    expect((await get(`${server.url}/v1/endpoints/items`, unfit)).status).toBe(403);
    const unfitList = await get(`${server.url}/v1/endpoints`, unfit);
    expect(unfitList.status).toBe(200);
    expect(unfitList.json.endpoints).toEqual([]);
  }, 90_000);

  it("defect: the description of an endpoint counted a row-filtered token's records one by one however many there were (past cache.scanCap) — now recordCount null there, and its count refused", async () => {
    await using dir = await tempDir('sluice-api-rowcount-');
    await writeGeneration(dir.path, 1, COUNT);
    await using server = await startApiServer({
      config: resolveConfig({
        dataDir: dir.path,
        logLevel: 'silent',
        api: { auth: { jwtSecret: SECRET } },
        cache: { scanCap: 50 },
      }),
      dataDir: dir.path,
      port: 0,
      host: '127.0.0.1',
      logger: pino({ level: 'silent' }),
      watchMs: 50,
    });
    // `tags` has no index: the row filter leaves all 300 records to check, past the cap of 50.
    const unindexed = signJwt(SECRET, {
      endpoints: ['items'],
      filters: { items: { tags: { $contains: 't1' } } },
    });
    const one = await get(`${server.url}/v1/endpoints/items`, unindexed);
    expect({ status: one.status, recordCount: one.json.recordCount }).toEqual({
      status: 200,
      recordCount: null,
    });
    const list = await get(`${server.url}/v1/endpoints`, unindexed);
    expect((list.json.endpoints as Array<{ recordCount: unknown }>).map((e) => e.recordCount)).toEqual([
      null,
    ]);
    const count = await fetch(`${server.url}/v1/endpoints/items/count`, {
      method: 'POST',
      headers: { authorization: `Bearer ${unindexed}`, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(count.status).toBe(400);
    // A row filter an index answers whole ([value]) is counted by LMDB, past the cap.
    const narrow = signJwt(SECRET, { endpoints: ['items'], filters: { items: { value: { $lte: 40 } } } });
    expect((await get(`${server.url}/v1/endpoints/items`, narrow)).json.recordCount).toBe(40);
  }, 90_000);
});
