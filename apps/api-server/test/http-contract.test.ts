/**
 * The corners of the query API's HTTP contract (docs/http-api.md): how every key reaches its record by URL, and that
 * each refusal names its place the way the rest of the API does (`params.<name>`, `querystring.<name>`, `headers.<name>`)
 * as an `application/problem+json` with a stable code.
 */
import { openCacheManager } from '@sluice/cache';
import { rawHttpExchange, signJwt, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { checkpointFor } from './fixtures/data.js';
import { fetchJson, startQuietApiServer, writeGeneration } from './helpers.js';

/** Writes `items` (integer key, ids 1..20) and `codes` (one string key field, one record keyed by "") under `root`. */
async function writeItemsAndCodes(root: string): Promise<void> {
  await writeGeneration(root, 1, 20);
  await using manager = await openCacheManager(root);
  const codes = await manager.create({
    endpoint: 'codes',
    schema: { fields: { code: 'string', n: 'integer' }, primaryKey: ['code'], indexes: [] },
  });
  codes.apply([
    { op: 'upsert', record: { code: '', n: 0 } },
    { op: 'upsert', record: { code: 'a,b', n: 1 } },
    { op: 'upsert', record: { code: 'x', n: 2 } },
  ]);
  await codes.commit(checkpointFor(1));
  const name = codes.name;
  await codes.close();
  await manager.redirect('codes', name);
}

/** Sends `request` as raw bytes and returns the whole answer as text (the server closes after it). */

describe('query API contract corners', () => {
  it('defect: a single-field key that is the empty string could not be read by URL (/records/ has no key segment) — now GET …/records?key=', async () => {
    await using dir = await tempDir('sluice-api-contract-');
    await writeItemsAndCodes(dir.path);
    await using server = await startQuietApiServer(dir.path);
    const base = `${server.url}/v1/endpoints`;

    const empty = await fetchJson(`${base}/codes/records?key=`);
    expect(empty.status).toBe(200);
    expect(empty.body).toEqual({ code: '', n: 0 });
    expect(empty.headers.get('sluice-cache')).toMatch(/^codes-/);
    // The same encoding as the path segment: any key may be sent so, a comma inside a value as %2C.
    expect((await fetchJson(`${base}/codes/records?key=a%2Cb`)).body).toEqual({ code: 'a,b', n: 1 });
    expect((await fetchJson(`${base}/codes/records?key=x`)).body).toEqual(
      (await fetchJson(`${base}/codes/records/x`)).body,
    );
    expect((await fetchJson(`${base}/items/records?key=7`)).body).toMatchObject({ id: 7 });
    const missing = await fetchJson(`${base}/codes/records?key=nope`);
    expect(missing.status).toBe(404);
    expect(missing.body).toMatchObject({ code: 'RECORD_NOT_FOUND', key: 'nope' });
    // The key is converted to the field's type as in the path: "" is no integer.
    const notInteger = await fetchJson(`${base}/items/records?key=`);
    expect(notInteger.status).toBe(400);
    expect(notInteger.body).toMatchObject({
      code: 'VALIDATION_FAILED',
      errors: [{ path: 'key', message: '"" is not an integer' }],
    });
    // The key is the one parameter of that form, and it is required.
    for (const [query, path] of [
      ['', 'querystring.key'],
      ['?key=x&key=y', 'querystring.key'],
      ['?key=x&fields=id', 'querystring.fields'],
    ] as const) {
      const refused = await fetchJson(`${base}/codes/records${query}`);
      expect(refused.status, query).toBe(400);
      expect(refused.headers.get('content-type'), query).toBe('application/problem+json; charset=utf-8');
      expect(refused.body, query).toMatchObject({ code: 'VALIDATION_FAILED' });
      expect(
        refused.body.errors.map((e: { path: string }) => e.path),
        query,
      ).toEqual([path]);
    }
  }, 60_000);

  it('defect: a change-feed filter that is not JSON was refused MALFORMED_JSON without naming querystring.filter', async () => {
    await using dir = await tempDir('sluice-api-contract-');
    await writeGeneration(dir.path, 1, 5);
    await using server = await startQuietApiServer(dir.path);
    for (const filter of ['nope', '', '{"value": {"$gt": ']) {
      const refused = await fetchJson(
        `${server.url}/v1/endpoints/items/changes?filter=${encodeURIComponent(filter)}`,
      );
      expect(refused.status, filter).toBe(400);
      expect(refused.headers.get('content-type'), filter).toBe('application/problem+json; charset=utf-8');
      expect(refused.body, filter).toMatchObject({
        code: 'MALFORMED_JSON',
        instance: '/v1/endpoints/items/changes',
        errors: [{ path: 'querystring.filter', message: expect.stringContaining('not valid JSON') }],
      });
    }
  }, 60_000);

  it('defect: a malformed change-feed token was refused at path "after" / "last-event-id", every other parameter and header at querystring.<name> / headers.<name>', async () => {
    await using dir = await tempDir('sluice-api-contract-');
    await writeGeneration(dir.path, 1, 5);
    await using server = await startQuietApiServer(dir.path);
    const feed = `${server.url}/v1/endpoints/items/changes`;
    const byParameter = await fetchJson(`${feed}?after=nope`);
    const byHeader = await fetchJson(feed, { headers: { 'last-event-id': 'nope' } });
    const paths = (answer: { body: unknown }) =>
      ((answer.body as { errors?: Array<{ path: string }> }).errors ?? []).map((e) => e.path);
    expect({ status: byParameter.status, paths: paths(byParameter) }).toEqual({
      status: 400,
      paths: ['querystring.after'],
    });
    expect({ status: byHeader.status, paths: paths(byHeader) }).toEqual({
      status: 400,
      paths: ['headers.last-event-id'],
    });
  }, 60_000);

  it('defect: an expired JWT was refused with the reason in the detail text only — the control API says reason: "expired" in the problem', async () => {
    await using dir = await tempDir('sluice-api-contract-');
    await writeGeneration(dir.path, 1, 5);
    const secret = 'a-test-secret-of-32-characters!!';
    await using server = await startQuietApiServer(dir.path, { api: { auth: { jwtSecret: secret } } });
    const now = Math.floor(Date.now() / 1000);
    const expired = signJwt(secret, { endpoints: '*', exp: now - 60 });
    const forged = signJwt('another-secret-of-32-characters!', { endpoints: '*', exp: now + 600 });
    for (const path of ['/v1/endpoints/items/records/1', '/v1/endpoints/items']) {
      const old = await fetchJson(`${server.url}${path}`, {
        headers: { authorization: `Bearer ${expired}` },
      });
      expect({ status: old.status, body: old.body }, path).toMatchObject({
        status: 401,
        body: { code: 'UNAUTHORIZED', reason: 'expired' },
      });
      // Any other refusal names no reason a caller could act on.
      const bad = await fetchJson(`${server.url}${path}`, { headers: { authorization: `Bearer ${forged}` } });
      expect(bad.status, path).toBe(401);
      expect((bad.body as Record<string, unknown>).reason, path).toBeUndefined();
    }
  }, 60_000);

  it('defect: an empty endpoint name (GET /v1/endpoints/) answered 404 UNKNOWN_ENDPOINT naming the endpoint "" — now 400 at params.name, as the control API answers', async () => {
    await using dir = await tempDir('sluice-api-contract-');
    await writeGeneration(dir.path, 1, 5);
    await using server = await startQuietApiServer(dir.path);
    const json = { 'content-type': 'application/json' };
    for (const [method, path] of [
      ['GET', '/v1/endpoints/'],
      ['GET', '/v1/endpoints//records/1'],
      ['GET', '/v1/endpoints//records?key=1'],
      ['POST', '/v1/endpoints//query'],
      ['POST', '/v1/endpoints//count'],
      ['GET', '/v1/endpoints//changes'],
    ] as const) {
      const name = `${method} ${path}`;
      const answer = await fetchJson(
        `${server.url}${path}`,
        method === 'POST' ? { method, headers: json, body: '{}' } : { method },
      );
      expect(answer.status, name).toBe(400);
      expect(answer.headers.get('content-type'), name).toBe('application/problem+json; charset=utf-8');
      expect(answer.body, name).toMatchObject({ code: 'VALIDATION_FAILED', instance: path.split('?')[0] });
      expect(
        answer.body.errors.map((e: { path: string }) => e.path),
        name,
      ).toEqual(['params.name']);
    }
    // An empty key segment is no key either: the empty key is read with ?key= (above).
    const noKey = await fetchJson(`${server.url}/v1/endpoints/items/records/`);
    expect(noKey.status).toBe(400);
    expect(noKey.body.errors.map((e: { path: string }) => e.path)).toEqual(['params.key']);
    expect((await fetchJson(`${server.url}/v1/endpoints/items`)).status).toBe(200);
  }, 60_000);

  it('defect: an HTTP/1.1 request without Host was answered 400 with an empty body by Node, not a problem — and a lookup below fastify answered it 200', async () => {
    await using dir = await tempDir('sluice-api-contract-');
    await writeGeneration(dir.path, 1, 5);
    await using server = await startQuietApiServer(dir.path);
    for (const path of ['/v1/endpoints/items/records/1', '/v1/endpoints', '/nowhere']) {
      const answer = await rawHttpExchange(
        Number(new URL(server.url).port),
        `GET ${path} HTTP/1.1\r\nconnection: close\r\n\r\n`,
      );
      const [head, body] = answer.split('\r\n\r\n') as [string, string];
      expect(head.split('\r\n')[0], path).toBe('HTTP/1.1 400 Bad Request');
      expect(head.toLowerCase(), path).toContain('content-type: application/problem+json; charset=utf-8');
      expect(JSON.parse(body), path).toMatchObject({
        status: 400,
        code: 'VALIDATION_FAILED',
        errors: [{ path: 'headers.host', message: 'required in HTTP/1.1' }],
      });
    }
    // HTTP/1.0 has no Host requirement.
    const old = await rawHttpExchange(
      Number(new URL(server.url).port),
      'GET /v1/endpoints/items/records/1 HTTP/1.0\r\n\r\n',
    );
    expect(old.split('\r\n')[0]).toBe('HTTP/1.1 200 OK');
  }, 60_000);

  it('defect: the lookups and queries answered below fastify took a request with two Authorization (or Host, Content-Type) lines by its first, and answered an unmet Expect 200', async () => {
    await using dir = await tempDir('sluice-api-contract-');
    await writeGeneration(dir.path, 1, 5);
    const secret = 'a-test-secret-of-32-characters!!';
    await using server = await startQuietApiServer(dir.path, { api: { auth: { jwtSecret: secret } } });
    const port = Number(new URL(server.url).port);
    const token = signJwt(secret, { endpoints: '*' });
    const query = '{"$limit":2}';
    const cases = [
      // The second token is not even a token: which line decides who asks depends on which hop reads which line.
      [
        'GET /v1/endpoints/items/records/1',
        `authorization: Bearer ${token}\r\nauthorization: Bearer nope\r\n`,
        'headers.authorization',
      ],
      ['GET /v1/endpoints/items/records/1', 'host: a\r\n', 'headers.host'],
      ['GET /v1/endpoints/items/records/1', 'expect: 200-ok\r\n', 'headers.expect'],
      [
        'POST /v1/endpoints/items/query',
        `content-type: text/plain\r\ncontent-length: ${query.length}\r\n`,
        'headers.content-type',
      ],
      [
        'POST /v1/endpoints/items/query',
        `content-length: ${query.length}\r\nexpect: 200-ok\r\n`,
        'headers.expect',
      ],
    ] as const;
    for (const [line, extra, path] of cases) {
      const post = line.startsWith('POST');
      const answer = await rawHttpExchange(
        port,
        `${line} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\n` +
          `${post ? 'content-type: application/json\r\n' : ''}${extra.replace(`authorization: Bearer ${token}\r\n`, '')}` +
          `connection: close\r\n\r\n${post ? query : ''}`,
      );
      const [head, body] = answer.split('\r\n\r\n') as [string, string];
      expect(head.split('\r\n')[0], `${line} ${path}`).toBe('HTTP/1.1 400 Bad Request');
      expect(JSON.parse(body), `${line} ${path}`).toMatchObject({
        status: 400,
        code: 'VALIDATION_FAILED',
        errors: [{ path }],
      });
    }
    // One line of each is answered as before, below fastify or not.
    const one = await rawHttpExchange(
      port,
      `GET /v1/endpoints/items/records/1 HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\nconnection: close\r\n\r\n`,
    );
    expect(one.split('\r\n')[0]).toBe('HTTP/1.1 200 OK');
  }, 60_000);
});
