/**
 * Lookups answered below fastify (src/fast-lookup.ts): which requests the fast route takes, that it writes
 * nothing to the ones it leaves to fastify, and that a lookup answers byte for byte the same either way.
 */
import { openCacheManager } from '@sluice/cache';
import { DEFAULT_QUERY_LIMITS } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { TokenAuthenticator } from '../src/auth.js';
import { checkpointStamps } from '../src/checkpoint-headers.js';
import { endpointAccess } from '../src/endpoint-access.js';
import { fastLookupRoute, LOOKUP_ROUTE } from '../src/fast-lookup.js';
import { recordReader } from '../src/record-read.js';
import { EndpointRegistry } from '../src/registry.js';
import {
  answerHeaders,
  LEFT_TO_FASTIFY,
  listen,
  sign,
  standInServer,
  startSecuredApiServer,
  verifyTestToken,
  writeItemsAndOrders,
} from './fast-routes.js';
import { item } from './fixtures/data.js';

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
        access: endpointAccess({
          registry,
          authenticator,
          freshnessWaitMs: 100,
          limits: DEFAULT_QUERY_LIMITS,
        }),
        readRecord: recordReader(DEFAULT_QUERY_LIMITS),
        headersOf: checkpointStamps().headersOf,
        record: (route, name, status) => recorded.push([route, name, status]),
        cors: true,
        isStopping: () => stopping,
      });
    };
    const serve = (auth: boolean) => standInServer(build(auth));
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
    await using server = await startSecuredApiServer(dir.path);
    const all = `Bearer ${sign({ iss: 'sluice-tests', endpoints: '*' })}`;
    const filtered = `Bearer ${sign({ iss: 'sluice-tests', endpoints: ['items'], filters: { items: { category: 'a' } } })}`;
    const cases: Array<[string, string | undefined]> = [
      ['/v1/endpoints/items/records/42', all],
      ['/v1/endpoints/items/records/1', all],
      ['/v1/endpoints/orders/records/eu,3', all],
      [`/v1/endpoints/orders/records/${encodeURIComponent('eu, west')},5`, all],
      [`/v1/endpoints/orders/records/${encodeURIComponent('zürich 東京 🚀')},7`, all],
      ['/v1/endpoints/items/records/3', filtered],
      ['/v1/endpoints/items/records/4', filtered],
      ['/v1/endpoints/items/records/9999', all],
      ['/v1/endpoints/items/records/42', undefined],
      ['/v1/endpoints/orders/records/eu,1', filtered],
    ];
    for (const [path, authorization] of cases) {
      const headers: Record<string, string> = authorization ? { authorization } : {};
      const overHttp = await fetch(`${server.url}${path}`, { headers });
      const httpBody = Buffer.from(await overHttp.arrayBuffer());
      // inject() enters fastify directly: the route as fastify answers it, never the fast lookup.
      const viaFastify = await server.app.inject({ method: 'GET', url: path, headers });
      expect({ path, status: overHttp.status }).toEqual({ path, status: viaFastify.statusCode });
      expect(httpBody.equals(viaFastify.rawPayload)).toBe(true);
      expect(answerHeaders(Object.fromEntries(overHttp.headers))).toEqual(
        answerHeaders(viaFastify.headers as Record<string, unknown>),
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
