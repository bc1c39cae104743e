/**
 * Queries that cannot mean what they say are refused with 400 INVALID_QUERY at the failing path, never answered as
 * an empty page (read as "no such records") or as an expired walk (read as "restart it").
 */
import { type TempDir, tempDir } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiServer } from '../src/index.js';
import { startQuietApiServer, writeGeneration } from './helpers.js';

let dir: TempDir;
let server: ApiServer;

beforeAll(async () => {
  dir = await tempDir('sluice-api-refusals-');
  await writeGeneration(dir.path, 1, 50);
  server = await startQuietApiServer(dir.path);
}, 90_000);

afterAll(async () => {
  await server?.close();
  await dir?.remove();
});

/** POSTs a raw JSON text (so numbers reach the server as written) and parses the answer. */
async function post(route: 'query' | 'count', text: string) {
  const response = await fetch(`${server.url}/v1/endpoints/items/${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: text,
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

const pathsOf = (json: Record<string, unknown>) =>
  (json.errors as Array<{ path: string }>).map((e) => e.path);

describe('query refusals', () => {
  it('defect: a non-integer operand on an integer field answered 200 with no records — now 400 INVALID_QUERY at its path', async () => {
    for (const [filter, path] of [
      ['{"id":1.5}', '$filter.id'],
      ['{"id":12345678901234567890}', '$filter.id'],
      ['{"id":{"$in":[1,2.5]}}', '$filter.id.$in[1]'],
      ['{"id":{"$lt":12345678901234567890}}', '$filter.id.$lt'],
    ] as const) {
      for (const route of ['query', 'count'] as const) {
        const answer = await post(route, `{"$filter":${filter}}`);
        expect(answer.status, `${route} ${filter}`).toBe(400);
        expect(answer.json.code).toBe('INVALID_QUERY');
        expect(pathsOf(answer.json)).toEqual([path]);
      }
    }
    // The same value in a lookup URL has always been a 400.
    expect((await fetch(`${server.url}/v1/endpoints/items/records/1.5`)).status).toBe(400);
    // A fractional range bound is a valid comparison: id < 2.5 is ids 1 and 2.
    const range = await post('query', '{"$filter":{"id":{"$lt":2.5}},"$order_by":{"id":"asc"}}');
    expect(range.status).toBe(200);
    expect((range.json.records as Array<{ id: number }>).map((r) => r.id)).toEqual([1, 2]);
  });

  it('defect: a garbage $after naming no generation of this endpoint answered 410 CURSOR_EXPIRED — now 400 INVALID_QUERY', async () => {
    // "aXRlbXM" is base64url of "items": the alias, not one of its generations.
    const garbage = await post('query', '{"$after":"aXRlbXM.zzz"}');
    expect(garbage.status).toBe(400);
    expect(garbage.json.code).toBe('INVALID_QUERY');
    expect(pathsOf(garbage.json)).toEqual(['$after']);
    // A cursor of a generation of this endpoint that no longer serves is still 410: the walk must restart.
    const first = await post('query', '{"$limit":2,"$order_by":{"id":"asc"}}');
    const next = first.json.next as string;
    const dot = next.indexOf('.');
    const serving = Buffer.from(next.slice(0, dot), 'base64url').toString('utf8');
    const other = `${serving.slice(0, -26)}${'0'.repeat(26)}`;
    const innerFor = (generation: string) => {
      const inner = JSON.parse(Buffer.from(next.slice(dot + 1), 'base64url').toString('utf8'));
      return Buffer.from(JSON.stringify({ ...inner, c: generation }), 'utf8').toString('base64url');
    };
    const stale = `${Buffer.from(other, 'utf8').toString('base64url')}.${innerFor(other)}`;
    const expired = await post(
      'query',
      JSON.stringify({ $limit: 2, $order_by: { id: 'asc' }, $after: stale }),
    );
    expect(expired.status).toBe(410);
    expect(expired.json.code).toBe('CURSOR_EXPIRED');
  });

  it('defect: "$limit": 0 answered {"records":[],"next":null} although records match — now 400 INVALID_QUERY at $limit', async () => {
    // An empty page with no cursor reads as "no such records"; a cursor after no records would page forever.
    for (const text of [
      '{"$limit":0}',
      '{"$limit":0,"$filter":{"id":{"$gte":1}}}',
      '{"$limit":0,"$order_by":{"value":"asc"}}',
    ]) {
      const answer = await post('query', text);
      expect(answer.status, text).toBe(400);
      expect(answer.json.code).toBe('INVALID_QUERY');
      expect(pathsOf(answer.json)).toEqual(['$limit']);
      expect(answer.json.detail).toContain('at least 1');
    }
    // The records are there: one per page is the smallest page.
    const one = await post('query', '{"$limit":1,"$order_by":{"id":"asc"}}');
    expect(one.status).toBe(200);
    expect((one.json.records as Array<{ id: number }>).map((r) => r.id)).toEqual([1]);
    expect(typeof one.json.next).toBe('string');
    // The OpenAPI document says so too, so a generated client knows the bound.
    const doc = (await (await fetch(`${server.url}/docs/json`)).json()) as {
      paths: Record<string, { post: { requestBody: { content: Record<string, { schema: unknown }> } } }>;
    };
    const body = doc.paths['/v1/endpoints/{name}/query']!.post.requestBody.content['application/json']!
      .schema as { properties: Record<string, { minimum?: number; maximum?: number }> };
    expect(body.properties.$limit).toMatchObject({ minimum: 1, maximum: 1000 });
  });
});
