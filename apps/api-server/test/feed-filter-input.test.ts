/**
 * The change feed's `filter=` is a `$filter` of the query language: a JSON object. Anything else is refused with
 * a precise problem, as a query body that is not an object is — never read as "no filter".
 */
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { startQuietApiServer, writeGeneration } from './helpers.js';

describe('change feed: the filter parameter', () => {
  it('defect: filter=null opened an unfiltered feed (every record) instead of refusing a filter that is not an object', async () => {
    await using dir = await tempDir('sluice-api-feed-filter-');
    await writeGeneration(dir.path, 1, 20);
    await using server = await startQuietApiServer(dir.path);
    for (const [filter, received] of [
      ['null', 'null'],
      ['[]', 'array'],
      ['5', 'number'],
      ['"a"', 'string'],
    ] as const) {
      const controller = new AbortController();
      const response = await fetch(
        `${server.url}/v1/endpoints/items/changes?filter=${encodeURIComponent(filter)}`,
        { signal: controller.signal },
      );
      const status = response.status;
      const body = status === 200 ? null : ((await response.json()) as Record<string, unknown>);
      controller.abort();
      expect({ filter, status }).toEqual({ filter, status: 400 });
      expect(body).toMatchObject({
        code: 'INVALID_QUERY',
        errors: [{ path: 'querystring.filter', message: `expected an object, received ${received}` }],
      });
    }
    // An object is still a filter, the empty one included.
    const ok = new AbortController();
    const response = await fetch(
      `${server.url}/v1/endpoints/items/changes?filter=${encodeURIComponent('{}')}`,
      {
        signal: ok.signal,
      },
    );
    expect(response.status).toBe(200);
    ok.abort();
  }, 60_000);

  it('defect: a filter= the endpoint cannot run was refused at $filter.<field>, a body key the request has no such thing as — now at querystring.filter.<field>, where the parameter is', async () => {
    await using dir = await tempDir('sluice-api-feed-filter-');
    await writeGeneration(dir.path, 1, 20);
    await using server = await startQuietApiServer(dir.path);
    for (const [filter, path, reason] of [
      [{ nope: 1 }, 'querystring.filter.nope', 'unknown field'],
      [{ value: 'x' }, 'querystring.filter.value', 'number'],
      [{ value: { $regex: 'x' } }, 'querystring.filter.value', 'unknown operator'],
      [{ $and: [{ id: 1 }, { category: { $gt: 1 } }] }, 'querystring.filter.$and[1].category.$gt', 'string'],
    ] as const) {
      const controller = new AbortController();
      const response = await fetch(
        `${server.url}/v1/endpoints/items/changes?filter=${encodeURIComponent(JSON.stringify(filter))}`,
        { signal: controller.signal },
      );
      const status = response.status;
      const body = status === 200 ? null : ((await response.json()) as Record<string, unknown>);
      controller.abort();
      expect({ path, status }).toEqual({ path, status: 400 });
      expect(body).toMatchObject({
        code: 'INVALID_QUERY',
        detail: expect.stringContaining(path),
        errors: [{ path, message: expect.stringContaining(reason) }],
      });
    }
  }, 60_000);
});
