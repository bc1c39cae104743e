/**
 * Range queries answered below fastify (src/fast-query.ts): which requests the fast route takes, that it writes
 * nothing to the ones it leaves to fastify, that a taken request that is not a page is handed to fastify whole,
 * and that a query answers byte for byte the same either way.
 */
import { request as httpRequest } from 'node:http';
import { openCacheManager } from '@sluice/cache';
import { DEFAULT_QUERY_LIMITS } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { TokenAuthenticator } from '../src/auth.js';
import { checkpointStamps } from '../src/checkpoint-headers.js';
import { endpointAccess } from '../src/endpoint-access.js';
import { fastQueryRoute, type InjectedReply, QUERY_ROUTE } from '../src/fast-query.js';
import { InFlight } from '../src/in-flight.js';
import { PositionSeal } from '../src/position-seal.js';
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

/** The status of the stand-in for fastify's `inject` (a taken request handed over). */
const HANDED_OVER = 598;

/** A POST with a chunked body (no content-length): fetch cannot send one from a string. */
function postChunked(url: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      { method: 'POST', headers: { 'content-type': 'application/json' } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.write(body.slice(0, 5));
    req.end(body.slice(5));
  });
}

const PAGE = JSON.stringify({ $filter: { value: { $gte: 10 } }, $order_by: { value: 'asc' }, $limit: 5 });

describe('fast queries', () => {
  it('answers plain queries itself, leaves the rest to fastify untouched, and hands over a taken request that is not a page', async () => {
    await using dir = await tempDir('sluice-fastq-');
    await writeItemsAndOrders(dir.path);
    await using manager = await openCacheManager(dir.path, { readOnly: true });
    await using registry = await EndpointRegistry.start({
      caches: manager,
      host: 'local',
      reconcileMs: 600_000,
    });
    const recorded: Array<[string, string | undefined, number]> = [];
    const handedOver: Array<{ url: string; body: string }> = [];
    let stopping = false;
    const build = (auth: boolean) =>
      fastQueryRoute({
        registry,
        access: endpointAccess({
          registry,
          authenticator: auth ? new TokenAuthenticator(verifyTestToken, DEFAULT_QUERY_LIMITS) : null,
          freshnessWaitMs: 100,
          limits: DEFAULT_QUERY_LIMITS,
        }),
        limits: DEFAULT_QUERY_LIMITS,
        seal: auth ? new PositionSeal('fast-query-test-secret') : null,
        headersOf: checkpointStamps().headersOf,
        record: (route, name, status) => recorded.push([route, name, status]),
        bodyLimit: 1024,
        inFlight: new InFlight(),
        cors: true,
        isStopping: () => stopping,
        inject: async (request): Promise<InjectedReply> => {
          handedOver.push({ url: request.url, body: request.payload.toString() });
          return {
            statusCode: HANDED_OVER,
            headers: { 'content-type': 'text/plain', connection: 'close', 'x-from': 'fastify' },
            rawPayload: Buffer.from('handed over'),
          };
        },
      });
    const serve = (auth: boolean) => standInServer(build(auth));
    const open = serve(false);
    const secured = serve(true);
    try {
      const base = await listen(open);
      const securedBase = await listen(secured);
      const post = async (url: string, body: string, headers: Record<string, string> = {}) => {
        const response = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...headers },
          body,
        });
        return { status: response.status, text: await response.text(), headers: response.headers };
      };

      const page = await post(`${base}/v1/endpoints/items/query`, PAGE);
      expect(page.status).toBe(200);
      const body = JSON.parse(page.text) as { records: Array<Record<string, unknown>>; next: string | null };
      expect(body.records).toEqual([10, 11, 12, 13, 14].map((id) => item(id, 1)));
      expect(body.next).toEqual(expect.any(String));
      expect(page.headers.get('sluice-cache')).toMatch(/^items-/);
      expect(page.headers.get('sluice-checkpoint')).toMatch(/^epoch=1, at="/);
      expect(page.headers.get('content-type')).toBe('application/json; charset=utf-8');
      expect(page.headers.get('content-length')).toBe(String(Buffer.byteLength(page.text)));
      // The next page from its cursor, with a charset parameter on the content type.
      const second = await post(
        `${base}/v1/endpoints/items/query`,
        JSON.stringify({
          $order_by: { value: 'asc' },
          $limit: 5,
          $after: body.next,
          $filter: { value: { $gte: 10 } },
        }),
        { 'content-type': 'application/json; charset=utf-8' },
      );
      expect(second.status).toBe(200);
      expect((JSON.parse(second.text) as { records: unknown[] }).records).toEqual(
        [15, 16, 17, 18, 19].map((id) => item(id, 1)),
      );
      // A token's row filter applies.
      const filtered = await post(`${securedBase}/v1/endpoints/items/query`, PAGE, {
        authorization: `Bearer ${sign({ endpoints: ['items'], filters: { items: { category: 'a' } } })}`,
      });
      expect(filtered.status).toBe(200);
      expect((JSON.parse(filtered.text) as { records: unknown[] }).records).toEqual(
        [12, 15, 18, 21, 24].map((id) => item(id, 1)),
      );
      expect(recorded).toEqual([
        [QUERY_ROUTE, 'items', 200],
        [QUERY_ROUTE, 'items', 200],
        [QUERY_ROUTE, 'items', 200],
      ]);

      const left: Array<[string, RequestInit]> = [
        [`${base}/v1/endpoints/items/query?x=1`, { method: 'POST', body: PAGE }], // a query string
        [`${base}/v1/endpoints/it%65ms/query`, { method: 'POST', body: PAGE }], // an encoded name
        [`${base}/v1/endpoints/items/count`, { method: 'POST', body: '{}' }],
        [`${base}/v1/endpoints/items/query`, { method: 'GET' }],
        [
          `${base}/v1/endpoints/items/query`,
          { method: 'POST', body: PAGE, headers: { 'content-type': 'text/plain' } },
        ],
        [
          `${base}/v1/endpoints/items/query`,
          { method: 'POST', body: PAGE, headers: { 'content-type': 'application/jsonx' } },
        ],
        [`${base}/v1/endpoints/items/query`, { method: 'POST', body: 'x'.repeat(1025) }], // over the body limit: 413
        [`${base}/v1/endpoints/items/query`, { method: 'POST', body: '' }], // empty body
        [
          `${base}/v1/endpoints/items/query`,
          { method: 'POST', body: PAGE, headers: { 'sluice-min-position': '0/0' } },
        ],
        [
          `${base}/v1/endpoints/items/query`,
          { method: 'POST', body: PAGE, headers: { origin: 'http://x.test' } },
        ],
        [`${securedBase}/v1/endpoints/items/query`, { method: 'POST', body: PAGE }], // no token: 401
        [
          `${securedBase}/v1/endpoints/items/query`,
          {
            method: 'POST',
            body: PAGE,
            headers: { authorization: `Bearer ${sign({ endpoints: ['orders'] })}` },
          },
        ], // out of scope: 403
      ];
      for (const [url, init] of left) {
        const headers = { 'content-type': 'application/json', ...(init.headers as Record<string, string>) };
        const answer = await fetch(url, { ...init, headers });
        expect({ url, init, status: answer.status }).toEqual({ url, init, status: LEFT_TO_FASTIFY });
      }
      expect(await postChunked(`${base}/v1/endpoints/items/query`, PAGE)).toBe(LEFT_TO_FASTIFY);
      stopping = true;
      expect((await post(`${base}/v1/endpoints/items/query`, PAGE)).status).toBe(LEFT_TO_FASTIFY);
      stopping = false;
      expect(handedOver).toEqual([]);
      expect(recorded).toHaveLength(3);

      // Taken (a JSON body for a known path), then not a page: handed to fastify whole, its answer sent as is.
      const notPages = [
        '{"$filter": ', // malformed JSON
        JSON.stringify({ $filter: { value: { $near: 1 } } }), // an unknown operator
        JSON.stringify({ $limit: 100_000 }), // over the page limit
        JSON.stringify({ $after: 'not-a-cursor', $order_by: { value: 'asc' } }),
      ];
      for (const text of notPages) {
        const answer = await post(`${base}/v1/endpoints/items/query`, text);
        expect(answer.status).toBe(HANDED_OVER);
        expect(answer.text).toBe('handed over');
        expect(answer.headers.get('x-from')).toBe('fastify');
      }
      const unknown = await post(`${base}/v1/endpoints/nothing/query`, PAGE);
      expect(unknown.status).toBe(HANDED_OVER);
      expect(handedOver).toEqual([
        ...notPages.map((text) => ({ url: '/v1/endpoints/items/query', body: text })),
        { url: '/v1/endpoints/nothing/query', body: PAGE },
      ]);
      expect(recorded).toHaveLength(3);
    } finally {
      open.close();
      secured.close();
    }
  }, 90_000);

  it('answers a query with the same status, headers and bytes as the fastify route, errors included', async () => {
    await using dir = await tempDir('sluice-fastq-');
    await writeItemsAndOrders(dir.path);
    await using server = await startSecuredApiServer(dir.path);
    const all = `Bearer ${sign({ iss: 'sluice-tests', endpoints: '*' })}`;
    const filtered = `Bearer ${sign({ iss: 'sluice-tests', endpoints: ['items'], filters: { items: { category: 'a' } } })}`;
    const first = await server.app.inject({
      method: 'POST',
      url: '/v1/endpoints/items/query',
      headers: { authorization: all, 'content-type': 'application/json' },
      payload: PAGE,
    });
    const cursor = (JSON.parse(first.payload) as { next: string }).next;
    const cases: Array<[string, string, string]> = [
      ['/v1/endpoints/items/query', PAGE, all],
      [
        '/v1/endpoints/items/query',
        JSON.stringify({
          $order_by: { value: 'asc' },
          $limit: 5,
          $after: cursor,
          $filter: { value: { $gte: 10 } },
        }),
        all,
      ],
      ['/v1/endpoints/items/query', PAGE, filtered],
      ['/v1/endpoints/orders/query', JSON.stringify({ $filter: { region: 'eu' }, $limit: 3 }), all],
      // Multi-byte UTF-8 in the records: the page's bytes must arrive exactly as stored.
      [
        '/v1/endpoints/orders/query',
        JSON.stringify({ $filter: { region: 'zürich 東京 🚀' }, $limit: 3 }),
        all,
      ],
      ['/v1/endpoints/items/query', '{"$filter": ', all],
      ['/v1/endpoints/items/query', JSON.stringify({ $filter: { value: { $near: 1 } } }), all],
      ['/v1/endpoints/items/query', JSON.stringify({ $limit: 100_000 }), all],
      [
        '/v1/endpoints/items/query',
        JSON.stringify({ $after: 'not-a-cursor', $order_by: { value: 'asc' } }),
        all,
      ],
      ['/v1/endpoints/nothing/query', PAGE, all],
    ];
    const statuses: number[] = [];
    for (const [url, payload, authorization] of cases) {
      const headers = { authorization, 'content-type': 'application/json' };
      const overHttp = await fetch(`${server.url}${url}`, { method: 'POST', headers, body: payload });
      const httpBody = Buffer.from(await overHttp.arrayBuffer());
      // inject() enters fastify directly: the route as fastify answers it, never the fast query.
      const viaFastify = await server.app.inject({ method: 'POST', url, headers, payload });
      expect({ url, payload, status: overHttp.status }).toEqual({
        url,
        payload,
        status: viaFastify.statusCode,
      });
      expect({ payload, body: httpBody.toString() }).toEqual({
        payload,
        body: viaFastify.rawPayload.toString(),
      });
      expect(httpBody.equals(viaFastify.rawPayload)).toBe(true);
      expect(answerHeaders(Object.fromEntries(overHttp.headers))).toEqual(
        answerHeaders(viaFastify.headers as Record<string, unknown>),
      );
      statuses.push(overHttp.status);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 200, 400, 400, 400, 400, 404]);
    // Pages answered below fastify and by fastify were counted under the route's label.
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const ok = metrics.match(
      /sluice_api_requests_total\{route="\/v1\/endpoints\/:name\/query",endpoint="items",status="200"\} (\d+)/,
    );
    // 1 (the cursor's page) + 3 items pages over HTTP + 3 through inject.
    expect(Number(ok?.[1])).toBe(7);
  }, 90_000);
});
