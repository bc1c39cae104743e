/**
 * The OpenAPI document (`/docs/json`) of a real api-server process is what a user generates a typed client from:
 * every status a route can answer must be declared there, and every request header it reads. The lists below
 * come from the routes' code paths and docs/http-api.md:
 * - every route: 400 (a query-string parameter it does not take), 401 (auth), 500 (INTERNAL), 503
 *   (NODE_SHUTTING_DOWN while the server closes);
 * - an endpoint's routes: 403 (token without access, or a row filter that does not fit), 404 (UNKNOWN_ENDPOINT,
 *   RECORD_NOT_FOUND), 503 ENDPOINT_NOT_READY; those that take `sluice-min-position` also 503
 *   POSITION_NOT_REACHED;
 * - POST routes: 413 (body over `http.bodyBytes`), 415 (a body that is not JSON); `query` 410 CURSOR_EXPIRED;
 * - the change feed: 200 as `text/event-stream`, 429 QUEUE_FULL (subscriber limit), `Last-Event-ID`.
 */
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { spawnApiServer, writeConfig } from './helpers.js';

const EVERY = ['400', '401', '500', '503'];
const ENDPOINT = [...EVERY, '403', '404'];
const POSTED = [...ENDPOINT, '413', '415'];

const EXPECTED: Record<string, { statuses: string[]; headers: string[] }> = {
  // Declared to say it is refused (a position names one endpoint's sources).
  'get /v1/endpoints': { statuses: ['200', ...EVERY], headers: ['sluice-min-position'] },
  'get /v1/endpoints/{name}': { statuses: ['200', ...ENDPOINT], headers: ['sluice-min-position'] },
  'get /v1/endpoints/{name}/records/{key}': {
    statuses: ['200', ...ENDPOINT],
    headers: ['sluice-min-position'],
  },
  'get /v1/endpoints/{name}/records': {
    statuses: ['200', ...ENDPOINT],
    headers: ['sluice-min-position'],
  },
  'post /v1/endpoints/{name}/query': {
    statuses: ['200', ...POSTED, '410'],
    headers: ['sluice-min-position'],
  },
  'post /v1/endpoints/{name}/count': { statuses: ['200', ...POSTED], headers: ['sluice-min-position'] },
  'get /v1/endpoints/{name}/changes': {
    statuses: ['200', ...ENDPOINT, '429'],
    headers: ['last-event-id', 'sluice-min-position'],
  },
};

interface Operation {
  parameters?: Array<{ in: string; name: string }>;
  responses?: Record<string, { content?: Record<string, unknown> }>;
}

describe('the api-server OpenAPI document', () => {
  it('defect: a client generated from /docs/json knows no 503, 415, event-stream 200 or 429, nor the sluice-min-position and Last-Event-ID headers', async () => {
    await using dir = await tempDir('sluice-api-openapi-');
    const config = await writeConfig(dir.path, {
      dataDir: dir.path,
      logLevel: 'info',
      api: { auth: { jwtSecret: 'openapi-statuses-secret-0123456789' } },
    });
    await using server = await spawnApiServer(config);
    const response = await fetch(`${server.url}/docs/json`);
    expect(response.status).toBe(200);
    const doc = (await response.json()) as { paths: Record<string, Record<string, Operation>> };

    const missing: Record<string, string[]> = {};
    for (const [route, expected] of Object.entries(EXPECTED)) {
      const [method, path] = route.split(' ') as [string, string];
      const operation = doc.paths[path]?.[method];
      expect(operation, route).toBeDefined();
      const statuses = Object.keys(operation!.responses ?? {});
      const headers = (operation!.parameters ?? []).filter((p) => p.in === 'header').map((p) => p.name);
      const gaps = [
        ...expected.statuses.filter((s) => !statuses.includes(s)),
        ...expected.headers.filter((h) => !headers.includes(h)).map((h) => `header ${h}`),
      ];
      if (gaps.length > 0) missing[route] = gaps;
    }
    expect(missing).toEqual({});
    // The feed's 200 is an event stream, not JSON.
    const feed = doc.paths['/v1/endpoints/{name}/changes']!.get!;
    expect(Object.keys(feed.responses!['200']!.content ?? {})).toEqual(['text/event-stream']);
  }, 90_000);

  it('defect: every error response was declared application/json while the server sends application/problem+json', async () => {
    await using dir = await tempDir('sluice-api-openapi-');
    await using server = await spawnApiServer(await writeConfig(dir.path, { dataDir: dir.path }));
    const doc = (await (await fetch(`${server.url}/docs/json`)).json()) as {
      paths: Record<string, Record<string, Operation>>;
    };
    const declared: Record<string, string[]> = {};
    for (const [path, operations] of Object.entries(doc.paths))
      for (const [method, operation] of Object.entries(operations))
        for (const [status, answer] of Object.entries(operation.responses ?? {}))
          if (Number(status) >= 400)
            declared[`${method} ${path} ${status}`] = Object.keys(answer.content ?? {});
    expect(Object.keys(declared).length).toBeGreaterThan(30);
    const wrong = Object.entries(declared).filter(([, types]) => types.join() !== 'application/problem+json');
    expect(Object.fromEntries(wrong)).toEqual({});
    // What the document declares is what a refusal carries.
    const refused = await fetch(`${server.url}/v1/endpoints/nope`);
    expect(refused.status).toBe(404);
    expect(refused.headers.get('content-type')).toBe('application/problem+json; charset=utf-8');
  }, 90_000);
});
