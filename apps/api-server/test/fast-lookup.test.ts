/**
 * Lookups answered below fastify (src/fast-lookup.ts): which requests the fast route takes, that it writes
 * nothing to the ones it leaves to fastify, and that a lookup answers byte for byte the same either way.
 */
import { createHmac } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { openCacheManager } from '@sluice/cache';
import { DEFAULT_QUERY_LIMITS, resolveConfig } from '@sluice/core';
import { spawnTs, tempDir } from '@sluice/testkit';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { TokenAuthenticator } from '../src/auth.js';
import { checkpointStamps } from '../src/checkpoint-headers.js';
import { endpointAccess } from '../src/endpoint-access.js';
import { fastLookupRoute, LOOKUP_ROUTE } from '../src/fast-lookup.js';
import { startApiServer } from '../src/index.js';
import { recordReader } from '../src/record-read.js';
import { EndpointRegistry } from '../src/registry.js';
import { item } from './fixtures/data.js';
import { WRITER } from './helpers.js';

const SECRET = 'a-test-secret-of-32-characters!!';
/** The status the test server answers with when the fast route left a request alone. */
const LEFT_TO_FASTIFY = 599;

async function writeItemsAndOrders(root: string): Promise<void> {
  const child = spawnTs(WRITER, ['--root', root, '--count', '300', '--orders']);
  await child.waitForLine(/^DONE$/, 60_000);
  expect((await child.exited).code).toBe(0);
}

function sign(claims: Record<string, unknown>, secret = SECRET): string {
  const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const head = `${encode({ alg: 'HS256', typ: 'JWT' })}.${encode({ iat: Math.floor(Date.now() / 1000), ...claims })}`;
  return `${head}.${createHmac('sha256', secret).update(head).digest('base64url')}`;
}

/** HS256 check of the test's own tokens (the full server below verifies with @fastify/jwt). */
function verifyTestToken(token: string): unknown {
  const [head, payload, signature] = token.split('.');
  const expected = createHmac('sha256', SECRET).update(`${head}.${payload}`).digest('base64url');
  if (signature !== expected)
    throw Object.assign(new Error('bad signature'), { code: 'FAST_JWT_INVALID_SIGNATURE' });
  return JSON.parse(Buffer.from(payload!, 'base64url').toString('utf8'));
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('fast lookups', () => {
  it('answers plain lookups itself and writes nothing to the requests it leaves to fastify', async () => {
    await using dir = await tempDir('sluice-fast-');
    await writeItemsAndOrders(dir.path);
    await using manager = await openCacheManager(dir.path, { readOnly: true });
    await using registry = await EndpointRegistry.start({
      caches: manager,
      host: 'local',
      reconcileMs: 600_000,
    });
    const recorded: Array<[string, string | undefined, number]> = [];
    let stopping = false;
    const build = (auth: boolean) => {
      const authenticator = auth ? new TokenAuthenticator(verifyTestToken, DEFAULT_QUERY_LIMITS) : null;
      return fastLookupRoute({
        registry,
        access: endpointAccess({ registry, authenticator, freshnessWaitMs: 100 }),
        readRecord: recordReader(),
        headersOf: checkpointStamps().headersOf,
        record: (route, name, status) => recorded.push([route, name, status]),
        cors: true,
        isStopping: () => stopping,
      });
    };
    const serve = (auth: boolean) => {
      const fast = build(auth);
      return createServer((request, response) => {
        if (fast(request, response)) return;
        // Had the fast route written anything, this would throw (headers already sent) or mix into its answer.
        response.writeHead(LEFT_TO_FASTIFY, { 'content-type': 'text/plain' });
        response.end('left');
      });
    };
    const open = serve(false);
    const secured = serve(true);
    try {
      const base = await listen(open);
      const securedBase = await listen(secured);
      const status = async (url: string, init?: RequestInit) => {
        const response = await fetch(url, init);
        return { status: response.status, text: await response.text(), headers: response.headers };
      };

      const found = await status(`${base}/v1/endpoints/items/records/42`);
      expect(found.status).toBe(200);
      expect(JSON.parse(found.text)).toEqual(item(42, 1));
      expect(found.headers.get('sluice-cache')).toMatch(/^items-/);
      expect(found.headers.get('sluice-checkpoint')).toMatch(/^epoch=1, at="/);
      expect(found.headers.get('content-type')).toBe('application/json; charset=utf-8');
      expect(found.headers.get('content-length')).toBe(String(Buffer.byteLength(found.text)));
      const composite = await status(`${base}/v1/endpoints/orders/records/eu,3`);
      expect(composite.status).toBe(200);
      expect(JSON.parse(composite.text)).toEqual({ region: 'eu', id: 3, amount: 30 });
      expect(recorded).toEqual([
        [LOOKUP_ROUTE, 'items', 200],
        [LOOKUP_ROUTE, 'orders', 200],
      ]);

      const left: Array<[string, RequestInit | undefined]> = [
        [`${base}/v1/endpoints/items/records/9999`, undefined], // no such record: 404 is fastify's
        [`${base}/v1/endpoints/items/records/forty-two`, undefined], // malformed key: 400
        [`${base}/v1/endpoints/nothing/records/1`, undefined], // unknown endpoint
        [`${base}/v1/endpoints/items/records/42?fields=id`, undefined], // a query string
        [`${base}/v1/endpoints/items/records/42/`, undefined],
        [`${base}/v1/endpoints/it%65ms/records/42`, undefined], // an encoded name (fastify decodes params)
        [`${base}/v1/endpoints/items/records/42`, { headers: { 'sluice-min-position': '0/0' } }], // may wait
        [`${base}/v1/endpoints/items/records/42`, { headers: { origin: 'http://example.test' } }], // CORS
        [`${base}/v1/endpoints/items/records/42`, { method: 'HEAD' }],
        [`${base}/v1/endpoints/items/records/42`, { method: 'POST', body: '{}' }],
        [`${securedBase}/v1/endpoints/items/records/42`, undefined], // no token: 401
        [`${securedBase}/v1/endpoints/items/records/42`, { headers: { authorization: 'Bearer x.y.z' } }],
        [
          `${securedBase}/v1/endpoints/items/records/42`,
          { headers: { authorization: `Bearer ${sign({ endpoints: ['orders'] })}` } }, // out of scope: 403
        ],
        [
          // id 4 is category 'b': outside the token's row filter it does not exist (404).
          `${securedBase}/v1/endpoints/items/records/4`,
          {
            headers: {
              authorization: `Bearer ${sign({ endpoints: ['items'], filters: { items: { category: 'a' } } })}`,
            },
          },
        ],
      ];
      for (const [url, init] of left) {
        const answer = await status(url, init);
        expect({ url, init, status: answer.status }).toEqual({ url, init, status: LEFT_TO_FASTIFY });
      }
      expect(recorded).toHaveLength(2);

      const inScope = `Bearer ${sign({ endpoints: ['items'], filters: { items: { category: 'a' } } })}`;
      const visible = await status(`${securedBase}/v1/endpoints/items/records/3`, {
        headers: { authorization: inScope },
      });
      expect(visible.status).toBe(200);
      expect(JSON.parse(visible.text)).toEqual(item(3, 1));

      stopping = true;
      expect((await status(`${base}/v1/endpoints/items/records/42`)).status).toBe(LEFT_TO_FASTIFY);
    } finally {
      open.close();
      secured.close();
    }
  }, 90_000);

  it('answers a lookup with the same status, headers and bytes as the fastify route', async () => {
    await using dir = await tempDir('sluice-fast-');
    await writeItemsAndOrders(dir.path);
    const config = resolveConfig({
      dataDir: dir.path,
      logLevel: 'silent',
      api: { auth: { jwtSecret: SECRET, issuer: 'sluice-tests' } },
    });
    await using server = await startApiServer({
      config,
      dataDir: dir.path,
      port: 0,
      host: '127.0.0.1',
      logger: pino({ level: 'silent' }),
      watchMs: 50,
    });
    const all = `Bearer ${sign({ iss: 'sluice-tests', endpoints: '*' })}`;
    const filtered = `Bearer ${sign({ iss: 'sluice-tests', endpoints: ['items'], filters: { items: { category: 'a' } } })}`;
    const cases: Array<[string, string | undefined]> = [
      ['/v1/endpoints/items/records/42', all],
      ['/v1/endpoints/items/records/1', all],
      ['/v1/endpoints/orders/records/eu,3', all],
      [`/v1/endpoints/orders/records/${encodeURIComponent('eu, west')},5`, all],
      ['/v1/endpoints/items/records/3', filtered],
      ['/v1/endpoints/items/records/4', filtered],
      ['/v1/endpoints/items/records/9999', all],
      ['/v1/endpoints/items/records/42', undefined],
      ['/v1/endpoints/orders/records/eu,1', filtered],
    ];
    // Headers of the connection, not of the answer.
    const comparable = (headers: Record<string, unknown>) => {
      const { date: _d, connection: _c, 'keep-alive': _k, ...rest } = headers;
      return rest;
    };
    for (const [path, authorization] of cases) {
      const headers: Record<string, string> = authorization ? { authorization } : {};
      const overHttp = await fetch(`${server.url}${path}`, { headers });
      const httpBody = Buffer.from(await overHttp.arrayBuffer());
      // inject() enters fastify directly: the route as fastify answers it, never the fast lookup.
      const viaFastify = await server.app.inject({ method: 'GET', url: path, headers });
      expect({ path, status: overHttp.status }).toEqual({ path, status: viaFastify.statusCode });
      expect(httpBody.equals(viaFastify.rawPayload)).toBe(true);
      expect(comparable(Object.fromEntries(overHttp.headers))).toEqual(
        comparable(viaFastify.headers as Record<string, unknown>),
      );
    }
    // Both answers of each case were counted under the route's label.
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const ok = metrics.match(
      /sluice_api_requests_total\{route="\/v1\/endpoints\/:name\/records\/:key",endpoint="items",status="200"\} (\d+)/,
    );
    expect(Number(ok?.[1])).toBe(6);
  }, 90_000);
});
