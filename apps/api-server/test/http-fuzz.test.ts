/**
 * Hostile requests at every route of the query API (docs/http-api.md), through a real api-server process with JWT
 * auth on: lookups, queries, counts and change feeds with malformed keys, bodies of every wrong shape and size, bytes
 * that are not UTF-8, garbage `Last-Event-ID` / `sluice-min-position`, bodies cut short or declared over the limit,
 * malformed bearer tokens. Every answer must be a problem with a stable code (never a 5xx, never silence), the server
 * must go on answering `/healthz`, and the cache it reads must hold what it held.
 *
 * Seeded (20261207 unless `SEED=<n>` asks for another run; the seed is printed), `FUZZ_REQUESTS=<n>` sizes it
 * (default 300).
 */
import {
  answerViolations,
  describeRawRequest,
  type FuzzRoute,
  hostileRequest,
  malformedBearer,
  seededRandom,
  sendRawRequest,
  signJwt,
  tempDir,
} from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { fetchJson, spawnApiServer, writeConfig, writeGeneration } from './helpers.js';

// A fixed seed by default, as every seeded test of the house: CI runs the same requests each time. Explore with
// `SEED=<n> FUZZ_REQUESTS=<n>` (any other seed, any size); a failure prints its seed to replay.
const SEED = Number(process.env.SEED ?? 20261207);
const REQUESTS = Number(process.env.FUZZ_REQUESTS ?? 300);
const BODY_LIMIT = 16 * 1024;
const SECRET = 'fuzz-jwt-secret-0123456789abcdef';

describe('query API under hostile requests', () => {
  it(`answers every hostile request with a problem, stays up and leaves the cache as it was (seed ${SEED}, ${REQUESTS} requests)`, async () => {
    console.log(`http-fuzz (api-server): SEED=${SEED} FUZZ_REQUESTS=${REQUESTS}`);
    const rng = seededRandom(SEED);
    await using dir = await tempDir('sluice-query-fuzz-');
    await writeGeneration(dir.path, 1, 40);
    await using api = await spawnApiServer(
      await writeConfig(dir.path, {
        dataDir: dir.path,
        http: { bodyBytes: BODY_LIMIT },
        query: { maxLimit: 100, maxIn: 10 },
        api: { auth: { jwtSecret: SECRET } },
      }),
    );
    const port = Number(new URL(api.url).port);
    const claims = { sub: 'fuzz', endpoints: '*' };
    const jwt = signJwt(SECRET, claims);
    const authorization = `Bearer ${jwt}`;
    const everything = async () =>
      fetchJson(`${api.url}/v1/endpoints/items/query`, {
        method: 'POST',
        headers: { authorization, 'content-type': 'application/json' },
        body: JSON.stringify({ $limit: 100 }),
      });
    const before = await everything();
    expect(before.status).toBe(200);
    expect(before.body.records).toHaveLength(40);

    const query = () => ({
      $filter: { value: { $gte: 1, $lt: 30 }, category: { $in: ['a', 'b'] } },
      $order_by: { value: 'desc' },
      $limit: 5,
    });
    const routes: FuzzRoute[] = [
      { method: 'GET', path: '/v1/endpoints' },
      { method: 'GET', path: '/v1/endpoints/:name', params: { name: 'items' } },
      { method: 'GET', path: '/v1/endpoints/:name/records/:key', params: { name: 'items', key: '7' } },
      { method: 'GET', path: '/v1/endpoints/:name/records/:key', params: { name: 'items', key: '7' } },
      { method: 'GET', path: '/v1/endpoints/:name/records', params: { name: 'items' }, query: { key: '7' } },
      { method: 'POST', path: '/v1/endpoints/:name/query', params: { name: 'items' }, body: query },
      { method: 'POST', path: '/v1/endpoints/:name/query', params: { name: 'items' }, body: query },
      { method: 'POST', path: '/v1/endpoints/:name/query', params: { name: 'items' }, body: query },
      {
        method: 'POST',
        path: '/v1/endpoints/:name/count',
        params: { name: 'items' },
        body: () => ({ $filter: { category: 'a' } }),
      },
      {
        method: 'GET',
        path: '/v1/endpoints/:name/changes',
        params: { name: 'items' },
        query: { after: 'x', snapshot: 'true', filter: '%7B%22category%22%3A%22a%22%7D' },
        headers: { 'last-event-id': 'x' },
      },
      { method: 'GET', path: '/healthz' },
      { method: 'GET', path: '/readyz' },
      { method: 'GET', path: '/metrics' },
      { method: 'GET', path: '/docs/json' },
    ];
    const context = {
      bodyLimit: BODY_LIMIT,
      authorization,
      badBearer: (r: typeof rng) => malformedBearer(r, jwt, { secret: SECRET, claims }),
      headerGarbage: {
        'last-event-id': [
          'x',
          'eyJ9',
          '0',
          '-1',
          'items:1:1',
          '..',
          Buffer.from('%ff').toString('base64url'),
        ],
        'sluice-min-position': [
          '0/16B3748',
          'items.source="0/16B3748"',
          '0/0',
          'FFFFFFFF/FFFFFFFF',
          '1/2/3',
          'x=',
          '=1',
          'a="b',
          '?1',
          'items.source=1e309',
          '__proto__="0/1"',
          'a=1, a=2',
        ],
      },
    };
    for (const route of routes)
      if (route.path.startsWith('/v1/endpoints/:name'))
        route.headers = { ...route.headers, 'sluice-min-position': '0/1' };

    const violations: string[] = [];
    const statuses = new Map<number | null, number>();
    for (let n = 0; n < REQUESTS && violations.length < 20; n++) {
      const route = rng.pick(routes);
      const { request, mutations } = hostileRequest(rng, route, n, context);
      const label = `#${n} ${route.method} ${route.path} {${mutations.join('; ')}}\n    ${describeRawRequest(request)}`;
      let answer: Awaited<ReturnType<typeof sendRawRequest>>;
      try {
        answer = await sendRawRequest(port, request);
      } catch (err) {
        violations.push(`${label}\n    → ${(err as Error).message}`);
        continue;
      }
      statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
      for (const problem of answerViolations(request, answer)) violations.push(`${label}\n    → ${problem}`);
      if (api.child.child.exitCode !== null) {
        violations.push(`${label}\n    → the api-server exited (${api.child.child.exitCode})`);
        break;
      }
      const health = await fetch(`${api.url}/healthz`).catch((err: Error) => ({ status: err.message }));
      if (health.status !== 200)
        violations.push(`${label}\n    → /healthz answered ${health.status} after it`);
    }
    console.log(
      `http-fuzz (api-server): ${REQUESTS} requests, statuses ${JSON.stringify(Object.fromEntries(statuses))}`,
    );
    expect(violations, `SEED=${SEED}`).toEqual([]);
    // The server reads the cache only: what it serves is what it served.
    const after = await everything();
    expect(after.body, `SEED=${SEED}`).toEqual(before.body);
  }, 300_000);
});
