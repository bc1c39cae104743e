import { request as httpRequest } from 'node:http';
import { resolveConfig, type SluiceConfigInput } from '@sluice/core';
import { signJwt, spawnTs, type TempDir, tempDir, waitFor } from '@sluice/testkit';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiServer, startApiServer } from '../src/index.js';
import { CATEGORIES, item } from './fixtures/data.js';
import { answeringCache, WRITER } from './helpers.js';

const COUNT = 300;
const SECRET = 'a-test-secret-of-32-characters!!';

async function runWriter(root: string, args: string[]): Promise<string[]> {
  const child = spawnTs(WRITER, ['--root', root, ...args]);
  await child.waitForLine(/^DONE$/, 60_000);
  const info = await child.exited;
  expect(info.code).toBe(0);
  return child.lines;
}

function startServer(root: string, extra: SluiceConfigInput = {}): Promise<ApiServer> {
  const config = resolveConfig({
    dataDir: root,
    logLevel: 'silent',
    ...extra,
    http: { bodyBytes: 4096, ...extra.http },
    query: { maxLimit: 100, maxIn: 10, maxDepth: 3, ...extra.query },
  });
  return startApiServer({
    config,
    dataDir: root,
    port: 0,
    host: '127.0.0.1',
    logger: pino({ level: 'silent' }),
    watchMs: 50,
  });
}

async function call(
  base: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; json: Record<string, unknown> }> {
  const init: RequestInit =
    body === undefined
      ? { headers }
      : {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...headers },
          body: typeof body === 'string' ? body : JSON.stringify(body),
        };
  const response = await fetch(`${base}${path}`, init);
  const text = await response.text();
  return { status: response.status, headers: response.headers, json: text ? JSON.parse(text) : {} };
}

let dir: TempDir;
let server: ApiServer;
let itemsCache: string;

beforeAll(async () => {
  dir = await tempDir('sluice-api-');
  const lines = await runWriter(dir.path, ['--count', String(COUNT), '--orders']);
  itemsCache = lines.find((l) => l.startsWith('GEN 1 '))!.split(' ')[2]!;
  server = await startServer(dir.path);
}, 90_000);

afterAll(async () => {
  await server?.close();
  await dir?.remove();
});

describe('query API', () => {
  it('lists endpoints with their cache, checkpoint, record count and schema', async () => {
    const { status, json } = await call(server.url, '/v1/endpoints');
    expect(status).toBe(200);
    const endpoints = json.endpoints as Array<Record<string, unknown>>;
    expect(endpoints.map((e) => e.name)).toEqual(['items', 'orders']);
    const items = endpoints[0]!;
    expect(items.cache).toBe(itemsCache);
    expect(items.recordCount).toBe(COUNT);
    expect((items.checkpoint as { epoch: number }).epoch).toBe(1);
    expect((items.schema as { primaryKey: string[] }).primaryKey).toEqual(['id']);
  });

  it('gets a record by key converted to the key type, with cache and checkpoint headers', async () => {
    const found = await call(server.url, '/v1/endpoints/items/records/42');
    expect(found.status).toBe(200);
    expect(found.json).toEqual(item(42, 1));
    expect(found.headers.get('sluice-cache')).toBe(itemsCache);
    expect(found.headers.get('sluice-checkpoint')).toMatch(/^epoch=1, at="[^"]+"/);

    const missing = await call(server.url, '/v1/endpoints/items/records/9999');
    expect(missing.status).toBe(404);
    expect(missing.json.code).toBe('RECORD_NOT_FOUND');
    expect(missing.headers.get('sluice-cache')).toBe(itemsCache);

    const bad = await call(server.url, '/v1/endpoints/items/records/forty-two');
    expect(bad.status).toBe(400);
    expect(bad.headers.get('content-type')).toContain('application/problem+json');
    expect(bad.json.code).toBe('VALIDATION_FAILED');
    expect(bad.json.errors).toEqual([{ path: 'key', message: '"forty-two" is not an integer' }]);
  });

  it('gets records by composite key (comma-separated, percent-encoded components)', async () => {
    const eu = await call(server.url, '/v1/endpoints/orders/records/eu,3');
    expect(eu.status).toBe(200);
    expect(eu.json).toEqual({ region: 'eu', id: 3, amount: 30 });
    const west = await call(server.url, `/v1/endpoints/orders/records/${encodeURIComponent('eu, west')},5`);
    expect(west.json).toEqual({ region: 'eu, west', id: 5, amount: 50 });
    const arity = await call(server.url, '/v1/endpoints/orders/records/eu');
    expect(arity.status).toBe(400);
    expect(arity.json.code).toBe('VALIDATION_FAILED');
  });

  it('sends records as their stored JSON text: a lookup and a page are those bytes, in canonical field order', async () => {
    const lookup = await fetch(`${server.url}/v1/endpoints/items/records/42`);
    expect(lookup.headers.get('content-type')).toBe('application/json; charset=utf-8');
    // item() lists the fields in the schema's declaration order, which is the stored order.
    expect(await lookup.text()).toBe(JSON.stringify(item(42, 1)));
    const page = await fetch(`${server.url}/v1/endpoints/items/query`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ $filter: { value: { $gte: 10, $lt: 13 } }, $order_by: { value: 'asc' } }),
    });
    expect(page.status).toBe(200);
    expect(await page.text()).toBe(
      JSON.stringify({ records: [10, 11, 12].map((id) => item(id, 1)), next: null }),
    );
    const empty = await fetch(`${server.url}/v1/endpoints/items/query`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ $filter: { value: { $lt: -1 } } }),
    });
    expect(await empty.text()).toBe('{"records":[],"next":null}');
  });

  it('answers queries exactly as a brute-force reference, and walks pages with $after', async () => {
    const all = Array.from({ length: COUNT }, (_, i) => item(i + 1, 1));
    const expected = all
      .filter((r) => r.category === 'b' && (r.value as number) >= 100 && (r.value as number) < 250)
      .sort((a, b) => (b.value as number) - (a.value as number));
    const { status, json, headers } = await call(server.url, '/v1/endpoints/items/query', {
      $filter: { category: 'b', value: { $gte: 100, $lt: 250 } },
      $order_by: { value: 'desc' },
      $limit: 100,
    });
    expect(status).toBe(200);
    expect(headers.get('sluice-cache')).toBe(itemsCache);
    expect(json.records).toEqual(expected);
    expect(json.next).toBeNull();

    const seen: number[] = [];
    let after: string | null = null;
    let pages = 0;
    do {
      const page = await call(server.url, '/v1/endpoints/items/query', {
        $filter: { category: { $in: ['a', 'c'] } },
        $order_by: { value: 'asc' },
        $limit: 17,
        ...(after ? { $after: after } : {}),
      });
      expect(page.status).toBe(200);
      seen.push(...(page.json.records as Array<{ id: number }>).map((r) => r.id));
      after = page.json.next as string | null;
      pages += 1;
    } while (after !== null && pages < 100);
    const reference = all.filter((r) => r.category !== 'b').map((r) => r.id as number);
    expect(seen).toEqual(reference);
  });

  it('counts with a filter', async () => {
    const { status, json, headers } = await call(server.url, '/v1/endpoints/items/count', {
      $filter: { $or: [{ category: 'a' }, { value: { $lt: 10 } }] },
    });
    expect(status).toBe(200);
    const reference = Array.from({ length: COUNT }, (_, i) => item(i + 1, 1)).filter(
      (r) => r.category === 'a' || (r.value as number) < 10,
    ).length;
    expect(json).toEqual({ count: reference });
    expect(headers.get('sluice-checkpoint')).toMatch(/^epoch=1/);
    expect((await call(server.url, '/v1/endpoints/items/count', {})).json).toEqual({ count: COUNT });
  });

  it('answers unknown endpoints with 404 UNKNOWN_ENDPOINT problem details', async () => {
    for (const path of ['/v1/endpoints/nope/records/1', '/v1/endpoints/nope']) {
      const { status, json, headers } = await call(server.url, path);
      expect(status).toBe(404);
      expect(headers.get('content-type')).toContain('application/problem+json');
      expect(json).toMatchObject({ status: 404, code: 'UNKNOWN_ENDPOINT', title: 'Not Found' });
      expect(typeof json.type).toBe('string');
    }
    expect((await call(server.url, '/v1/endpoints/nope/query', {})).json.code).toBe('UNKNOWN_ENDPOINT');
  });
});

describe('hostile queries and bodies', () => {
  const query = (body: unknown, headers?: Record<string, string>) =>
    call(server.url, '/v1/endpoints/items/query', body, headers);

  it('names the failing path of malformed queries and enforces the limits', async () => {
    const cases: Array<[unknown, string]> = [
      [{ $limit: 101 }, '$limit'],
      [{ $limit: -1 }, '$limit'],
      [{ $limit: 'ten' }, '$limit'],
      [{ $filter: { id: { $in: Array.from({ length: 11 }, (_, i) => i) } } }, '$filter.id.$in'],
      [
        { $filter: { $and: [{ $or: [{ $and: [{ $or: [{ id: 1 }] }] }] }] } },
        '$filter.$and[0].$or[0].$and[0].$or',
      ],
      [{ $filter: { id: { $regex: '.*' } } }, '$filter.id'],
      [{ $filter: { $where: 'sleep(1)' } }, '$filter.$where'],
      [{ $order_by: { value: 'sideways' } }, '$order_by.value'],
      [{ $skip: 5, $after: 'x' }, '$after'],
      [{ $after: 'not-a-cursor' }, '$after'],
      [{ $unknown: 1 }, '$unknown'],
    ];
    for (const [body, path] of cases) {
      const { status, json } = await query(body);
      expect(status, JSON.stringify(body)).toBe(400);
      expect(json.code, JSON.stringify(body)).toBe('INVALID_QUERY');
      const paths = (json.errors as Array<{ path: string }>).map((e) => e.path);
      expect(paths, JSON.stringify(body)).toContain(path);
    }
    const wrongType = await query({ $filter: { value: { $gte: 'ten' } }, $order_by: { nope: 'asc' } });
    expect(wrongType.status).toBe(400);
    expect(wrongType.json.code).toBe('INVALID_QUERY');
  });

  it('rejects bad bodies with typed problems and keeps serving', async () => {
    const malformed = await query('{"$filter": ');
    expect(malformed.status).toBe(400);
    expect(malformed.json.code).toBe('MALFORMED_JSON');
    // Reserved keys are refused by the query parser, naming where they are (the JSON itself is valid).
    for (const [body, path] of [
      ['{"$filter": {"__proto__": {"polluted": true}}}', '$filter.__proto__'],
      ['{"$filter": {"constructor": {"prototype": {"polluted": true}}}}', '$filter.constructor'],
      ['{"$filter": {"$and": [{"prototype": 1}]}}', '$filter.$and[0].prototype'],
    ] as const) {
      const poisoned = await query(body);
      expect(poisoned.status).toBe(400);
      expect(poisoned.json).toMatchObject({ code: 'INVALID_QUERY' });
      expect((poisoned.json.errors as { path: string }[]).map((e) => e.path)).toContain(path);
    }
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect((Object.prototype as Record<string, unknown>).polluted).toBeUndefined();
    const huge = await query({ $filter: { category: 'x'.repeat(5000) } });
    expect(huge.status).toBe(413);
    expect(huge.json.code).toBe('PAYLOAD_TOO_LARGE');
    const form = await call(server.url, '/v1/endpoints/items/query', 'a=1', { 'content-type': 'text/plain' });
    expect(form.status).toBe(415);
    expect(form.json.code).toBe('UNSUPPORTED_MEDIA_TYPE');
    const array = await query([1, 2, 3]);
    expect(array.status).toBe(400);
    expect(array.json.code).toBe('INVALID_QUERY');
    const longKey = await call(server.url, `/v1/endpoints/items/records/${'9'.repeat(9_500)}`);
    // Past the router's parameter limit: a problem like every other refusal (fastify's own body shape before).
    expect(longKey.status).toBe(400);
    expect(longKey.json).toMatchObject({ code: 'VALIDATION_FAILED', status: 400 });
    expect(longKey.json).not.toHaveProperty('instance');
    const badEncoding = await call(server.url, '/v1/endpoints/items/records/%E0%A4%A');
    expect(badEncoding.status).toBe(400);
    expect(badEncoding.json).toMatchObject({
      code: 'VALIDATION_FAILED',
      instance: '/v1/endpoints/items/records/%E0%A4%A',
    });
    expect((await call(server.url, '/v1/endpoints/items/records/7')).status).toBe(200);
  });

  it('survives a body that never finishes and a raw garbage request line', async () => {
    const status = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(`${server.url}/v1/endpoints/items/query`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': '100000' },
      });
      req.on('response', (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.write('{"$filter":');
    });
    expect(status).toBe(413);
    expect((await call(server.url, '/healthz')).status).toBe(200);
  });

  it("defect: a header block over Node's limit was answered 431 in fastify's own JSON shape — a problem now", async () => {
    const response = await fetch(`${server.url}/v1/endpoints/items/records/7`, {
      headers: { 'x-filler': 'f'.repeat(20_000) },
    });
    expect(response.status).toBe(431);
    expect(response.headers.get('content-type')).toBe('application/problem+json; charset=utf-8');
    expect(await response.json()).toMatchObject({ status: 431, code: 'HEADERS_TOO_LARGE' });
    expect((await call(server.url, '/v1/endpoints/items/records/7')).status).toBe(200);
  });

  it('defect: a wrong method on a known path answered 404 NOT_FOUND, as if the path did not exist — now 405 METHOD_NOT_ALLOWED with Allow', async () => {
    await using cors = await startServer(dir.path, { api: { cors: { origins: ['https://app.example'] } } });
    const cases: Array<[string, string, string, string]> = [
      // The fast routes leave every other method to fastify, which must know the path.
      [server.url, 'DELETE', '/v1/endpoints/items/query', 'POST'],
      [server.url, 'GET', '/v1/endpoints/items/query', 'POST'],
      [server.url, 'POST', '/v1/endpoints/items/records/7', 'GET, HEAD'],
      [server.url, 'PUT', '/v1/endpoints/items/records/eu%2C%20west,42', 'GET, HEAD'],
      [server.url, 'PATCH', '/v1/endpoints/nothing/count', 'POST'],
      [server.url, 'DELETE', '/v1/endpoints/items', 'GET, HEAD'],
      [server.url, 'POST', '/v1/endpoints/items/changes', 'GET, HEAD'],
      [server.url, 'POST', '/healthz', 'GET, HEAD'],
      // With CORS every path answers OPTIONS (preflights): it is one of the methods the path has.
      [cors.url, 'DELETE', '/v1/endpoints/items/query', 'OPTIONS, POST'],
      [cors.url, 'POST', '/v1/endpoints/items/records/7', 'GET, HEAD, OPTIONS'],
    ];
    for (const [base, method, path, allow] of cases) {
      const response = await fetch(`${base}${path}`, { method });
      const name = `${base === cors.url ? 'cors ' : ''}${method} ${path}`;
      expect(response.status, name).toBe(405);
      expect(response.headers.get('allow'), name).toBe(allow);
      expect(response.headers.get('content-type'), name).toBe('application/problem+json; charset=utf-8');
      expect(await response.json(), name).toMatchObject({
        status: 405,
        code: 'METHOD_NOT_ALLOWED',
        instance: path,
        allow: allow.split(', '),
      });
    }
    // A path no route has stays 404, with CORS too (only its catch-all preflight route matches it).
    for (const base of [server.url, cors.url]) {
      const response = await fetch(`${base}/v1/nowhere/query`, { method: 'DELETE' });
      expect(response.status).toBe(404);
      expect(response.headers.get('allow')).toBeNull();
      expect(((await response.json()) as { code: string }).code).toBe('NOT_FOUND');
    }
    expect((await call(server.url, '/v1/endpoints/items/records/7')).status).toBe(200);
    expect((await call(server.url, '/v1/endpoints/items/query', { $limit: 1 })).status).toBe(200);
  });

  it('defect: a JSON body of null was taken as {} (a first page, a count of everything) — now 400 INVALID_QUERY, the same below fastify and through it', async () => {
    for (const route of ['query', 'count']) {
      const url = `/v1/endpoints/items/${route}`;
      const headers = { 'content-type': 'application/json' };
      // Over HTTP a query is taken by the fast route; inject() enters fastify directly.
      const overHttp = await fetch(`${server.url}${url}`, { method: 'POST', headers, body: 'null' });
      const httpBody = await overHttp.text();
      const viaFastify = await server.app.inject({ method: 'POST', url, headers, payload: 'null' });
      expect(overHttp.status, url).toBe(400);
      expect(JSON.parse(httpBody), url).toEqual({
        type: 'https://sluice.dev/problems/invalid-query',
        title: 'Bad Request',
        status: 400,
        code: 'INVALID_QUERY',
        detail: 'Invalid query: the body must be a JSON object',
        instance: url,
        errors: [{ path: '(root)', message: 'expected an object, received null' }],
      });
      expect(viaFastify.statusCode, url).toBe(400);
      expect(viaFastify.payload, url).toBe(httpBody);
    }
    // No body at all is still the empty query.
    const none = await fetch(`${server.url}/v1/endpoints/items/count`, { method: 'POST' });
    expect(none.status).toBe(200);
    expect(await none.json()).toEqual({ count: COUNT });
  });

  it('defect: unknown query-string parameters were silently accepted — now 400 VALIDATION_FAILED naming each', async () => {
    const cases: Array<[string, string, unknown?]> = [
      ['/v1/endpoints?limit=5', 'querystring.limit'],
      ['/v1/endpoints/items?x=1', 'querystring.x'],
      ['/v1/endpoints/items/records/7?fields=id', 'querystring.fields'],
      ['/v1/endpoints/items/query?limit=5', 'querystring.limit', { $limit: 1 }],
      ['/v1/endpoints/items/count?filter=x', 'querystring.filter', {}],
      ['/v1/endpoints/items/changes?snapshot=true&afterr=c1.x', 'querystring.afterr'],
    ];
    for (const [path, failing, body] of cases) {
      const { status, json } = await call(server.url, path, body);
      expect(status, path).toBe(400);
      expect(json, path).toMatchObject({
        code: 'VALIDATION_FAILED',
        instance: path.split('?')[0],
        errors: [{ path: failing, message: `Unrecognized key: "${failing.split('.')[1]}"` }],
      });
      expect(json.detail, path).toBe(
        `Invalid querystring: ${failing}: Unrecognized key: "${failing.split('.')[1]}"`,
      );
    }
    // Probes and metrics stay lenient (a probe with a stray parameter must not restart a healthy server).
    expect((await call(server.url, '/healthz?probe=1')).status).toBe(200);
    expect((await fetch(`${server.url}/metrics?x=1`)).status).toBe(200);
  });
});

describe('operations', () => {
  it('serves health, readiness, metrics and the OpenAPI document', async () => {
    expect((await call(server.url, '/healthz')).json).toEqual({ status: 'ok' });
    const ready = await call(server.url, '/readyz');
    expect(ready.status).toBe(200);
    expect(ready.json).toEqual({ status: 'ready', endpoints: 2, backplane: null });
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(
      /sluice_api_requests_total\{route="\/v1\/endpoints\/:name\/records\/:key",endpoint="items",status="200"\} \d+/,
    );
    expect(metrics).toMatch(
      /sluice_api_request_duration_seconds_bucket\{le="0.001",route="\/v1\/endpoints\/:name\/query",endpoint="items"\}/,
    );
    expect(metrics).toContain('sluice_api_endpoints 2');
    // An unknown endpoint name never becomes a label (no cardinality blow-up from hostile paths).
    expect(metrics).not.toContain('endpoint="nope"');
    const docs = await call(server.url, '/docs/json');
    expect(docs.status).toBe(200);
    const paths = Object.keys(docs.json.paths as object);
    expect(paths).toEqual(
      expect.arrayContaining([
        '/v1/endpoints',
        '/v1/endpoints/{name}/records/{key}',
        '/v1/endpoints/{name}/query',
        '/v1/endpoints/{name}/count',
      ]),
    );
    const queryDoc = (docs.json.paths as Record<string, Record<string, { requestBody?: unknown }>>)[
      '/v1/endpoints/{name}/query'
    ]!.post!;
    expect(JSON.stringify(queryDoc.requestBody)).toContain('$order_by');
  });

  it('picks up an endpoint created after start and switches on a redirect (no NATS: watches the table)', async () => {
    await runWriter(dir.path, ['--alias', 'late', '--count', '10']);
    await waitFor(async () => (await answeringCache(server.url, 'late', 3)) !== null, {
      timeoutMs: 20_000,
      what: 'the late endpoint to be served',
    });
    const first = await call(server.url, '/v1/endpoints/items/query', {
      $limit: 5,
      $order_by: { id: 'asc' },
    });
    const cursor = first.json.next as string;
    expect(cursor).toEqual(expect.any(String));

    const lines = await runWriter(dir.path, ['--alias', 'items', '--count', String(COUNT), '--start', '2']);
    const gen2 = lines.find((l) => l.startsWith('GEN 2 '))!.split(' ')[2]!;
    await waitFor(async () => (await answeringCache(server.url)) === gen2, {
      timeoutMs: 20_000,
      what: 'switch',
    });
    const record = await call(server.url, '/v1/endpoints/items/records/10');
    expect(record.json).toEqual(item(10, 2));
    // The cursor was cut from generation 1: continuing it on generation 2 could skip or repeat records.
    const expired = await call(server.url, '/v1/endpoints/items/query', {
      $limit: 5,
      $order_by: { id: 'asc' },
      $after: cursor,
    });
    expect(expired.status).toBe(410);
    expect(expired.json.code).toBe('CURSOR_EXPIRED');
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/sluice_api_switches_total\{endpoint="items",reason="(watch|reconcile)"\} 1/);
    await waitFor(() => server.registry.openGenerations() === 3, { what: 'the old generation to close' });
  }, 120_000);
});

describe('CORS', () => {
  it('answers preflights for configured origins only and exposes the data headers', async () => {
    await using cors = await startServer(dir.path, { api: { cors: { origins: ['https://app.example'] } } });
    const preflight = await fetch(`${cors.url}/v1/endpoints/items/query`, {
      method: 'OPTIONS',
      headers: {
        origin: 'https://app.example',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'content-type',
      },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('https://app.example');
    const get = await fetch(`${cors.url}/v1/endpoints/items/records/1`, {
      headers: { origin: 'https://app.example' },
    });
    expect(get.headers.get('access-control-expose-headers')).toContain('sluice-cache');
    const other = await fetch(`${cors.url}/v1/endpoints/items/records/1`, {
      headers: { origin: 'https://evil.example' },
    });
    expect(other.headers.get('access-control-allow-origin')).toBeNull();
  });
});

describe('auth', () => {
  let secured: ApiServer;
  beforeAll(async () => {
    secured = await startServer(dir.path, { api: { auth: { jwtSecret: SECRET, issuer: 'sluice-tests' } } });
  });
  afterAll(async () => {
    await secured?.close();
  });
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

  it('refuses data without a valid token (401) and out of scope (403)', async () => {
    const none = await call(secured.url, '/v1/endpoints/items/records/1');
    expect(none.status).toBe(401);
    expect(none.json.code).toBe('UNAUTHORIZED');
    expect(none.headers.get('sluice-cache')).toBeNull();
    expect(none.headers.get('www-authenticate')).toBe('Bearer');
    expect((await call(secured.url, '/v1/endpoints')).status).toBe(401);
    expect((await call(secured.url, '/v1/endpoints/items/count', {})).status).toBe(401);

    const forged = signJwt('another-secret-of-32-characters!', { iss: 'sluice-tests', endpoints: '*' });
    expect((await call(secured.url, '/v1/endpoints/items/records/1', undefined, bearer(forged))).status).toBe(
      401,
    );
    const expired = signJwt(SECRET, {
      iss: 'sluice-tests',
      endpoints: '*',
      exp: Math.floor(Date.now() / 1000) - 60,
    });
    expect(
      (await call(secured.url, '/v1/endpoints/items/records/1', undefined, bearer(expired))).status,
    ).toBe(401);
    const wrongIssuer = signJwt(SECRET, { iss: 'someone-else', endpoints: '*' });
    expect(
      (await call(secured.url, '/v1/endpoints/items/records/1', undefined, bearer(wrongIssuer))).status,
    ).toBe(401);
    const noClaims = signJwt(SECRET, { iss: 'sluice-tests' });
    expect(
      (await call(secured.url, '/v1/endpoints/items/records/1', undefined, bearer(noClaims))).status,
    ).toBe(401);
    const none256 = `${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from('{"endpoints":"*"}').toString('base64url')}.`;
    expect(
      (await call(secured.url, '/v1/endpoints/items/records/1', undefined, bearer(none256))).status,
    ).toBe(401);

    const ordersOnly = signJwt(SECRET, { iss: 'sluice-tests', endpoints: ['orders'] });
    const denied = await call(secured.url, '/v1/endpoints/items/query', {}, bearer(ordersOnly));
    expect(denied.status).toBe(403);
    expect(denied.json.code).toBe('FORBIDDEN');
    expect(
      (await call(secured.url, '/v1/endpoints/orders/records/eu,1', undefined, bearer(ordersOnly))).status,
    ).toBe(200);
    const listed = await call(secured.url, '/v1/endpoints', undefined, bearer(ordersOnly));
    expect((listed.json.endpoints as Array<{ name: string }>).map((e) => e.name)).toEqual(['orders']);
    // Operations endpoints stay open for probes.
    expect((await call(secured.url, '/healthz')).status).toBe(200);
  });

  it('ANDs the token row filter into every query, count and lookup', async () => {
    const token = signJwt(SECRET, {
      iss: 'sluice-tests',
      endpoints: ['items'],
      filters: { items: { category: 'a' } },
    });
    const all = await call(
      secured.url,
      '/v1/endpoints/items/query',
      { $limit: 100, $order_by: { id: 'asc' } },
      bearer(token),
    );
    expect(all.status).toBe(200);
    const records = all.json.records as Array<{ category: string }>;
    expect(records.length).toBeGreaterThan(0);
    expect(records.every((r) => r.category === 'a')).toBe(true);
    // Asking for another category explicitly cannot escape the row filter.
    const widened = await call(
      secured.url,
      '/v1/endpoints/items/query',
      { $filter: { $or: [{ category: 'b' }, { category: 'a' }] }, $limit: 100 },
      bearer(token),
    );
    expect((widened.json.records as Array<{ category: string }>).every((r) => r.category === 'a')).toBe(true);
    const count = await call(secured.url, '/v1/endpoints/items/count', {}, bearer(token));
    expect(count.json).toEqual({
      count: Array.from({ length: COUNT }, (_, i) => i + 1).filter((id) => CATEGORIES[id % 3] === 'a').length,
    });
    // id 3 is category 'a', id 4 is 'b'.
    expect((await call(secured.url, '/v1/endpoints/items/records/3', undefined, bearer(token))).status).toBe(
      200,
    );
    const hidden = await call(secured.url, '/v1/endpoints/items/records/4', undefined, bearer(token));
    expect(hidden.status).toBe(404);
    expect(hidden.json.code).toBe('RECORD_NOT_FOUND');
  });

  it("defect: a token row filter that does not fit the endpoint's fields was the caller's 400 on queries (quoting the token's filter as the caller's $filter), a 404 on lookups — now 403 on every route", async () => {
    const unfit = [
      signJwt(SECRET, { iss: 'sluice-tests', endpoints: ['items'], filters: { items: { nofield: 1 } } }),
      signJwt(SECRET, {
        iss: 'sluice-tests',
        endpoints: ['items'],
        filters: { items: { value: 'not a number' } },
      }),
    ];
    for (const token of unfit) {
      for (const [path, body] of [
        ['/v1/endpoints/items/query', { $limit: 1 }],
        ['/v1/endpoints/items/query', {}],
        ['/v1/endpoints/items/count', {}],
        ['/v1/endpoints/items/records/3', undefined],
      ] as const) {
        const refused = await call(secured.url, path, body, bearer(token));
        expect(refused.status, `${path} ${JSON.stringify(body)}`).toBe(403);
        expect(refused.json.code).toBe('FORBIDDEN');
        expect(refused.json.detail).toContain('row filter does not fit endpoint "items"');
      }
    }
    // A token whose filter fits still reads.
    const fits = signJwt(SECRET, {
      iss: 'sluice-tests',
      endpoints: ['items'],
      filters: { items: { category: 'a' } },
    });
    expect((await call(secured.url, '/v1/endpoints/items/records/3', undefined, bearer(fits))).status).toBe(
      200,
    );
  });
});
