/**
 * The OpenAPI document (`/docs/json`) of a real app-server process is what a user generates a typed client from:
 * every status a route can answer must be declared there. The lists come from the routes' code paths and
 * docs/http-api.md:
 * - every control route: 400 (a query-string parameter it does not take), 401 (control auth), 500 (INTERNAL),
 *   503 (NODE_SHUTTING_DOWN while the node closes, STORE_UNAVAILABLE, BACKPLANE_UNAVAILABLE);
 * - POST routes: 413 (body over `http.bodyBytes`), 415 (a body that is not JSON);
 * - transfers: 200 / 201 / 202 on submit, 403 (PATH_NOT_ALLOWED, PATH_NOT_ACCESSIBLE), 404 (TRANSFER_NOT_FOUND,
 *   UNKNOWN_ENDPOINT), terminate 409 ILLEGAL_TRANSITION, 422 (IDEMPOTENCY_CONFLICT, UNSUPPORTED_ADDRESS_TYPE,
 *   UNKNOWN_CONNECTION), 429 (QUEUE_FULL);
 * - an endpoint's routes: 404 UNKNOWN_ENDPOINT; rebuild, promote, rollback 409 (ENDPOINT_NOT_RUNNING,
 *   NOTHING_TO_PROMOTE, NOTHING_TO_ROLL_BACK, CANNOT_RESUME); promote 504 ENDPOINT_TIMEOUT (the hand-over of the
 *   switch did not happen in time);
 * - the endpoint stream: 200 as `text/event-stream`, 429 QUEUE_FULL (stream limit);
 * - readiness: 503 when the store or the backplane is down.
 */
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { localNode, startNodeProcess, tokenAndKeptGenerationsYaml } from './helpers.js';

const TOKEN = 'openapi-statuses-token-0123456789';

const EVERY = ['400', '401', '500', '503'];
const POSTED = [...EVERY, '413', '415'];

const EXPECTED: Record<string, string[]> = {
  'post /v1/transfers': ['200', '201', '202', ...POSTED, '403', '404', '422', '429'],
  'get /v1/transfers': ['200', ...EVERY],
  'get /v1/transfers/{id}': ['200', ...EVERY, '404'],
  'post /v1/transfers/{id}/terminate': ['200', ...POSTED, '404', '409'],
  'get /v1/endpoints': ['200', ...EVERY],
  'post /v1/endpoints/{name}/rebuild': ['202', ...POSTED, '404', '409'],
  'get /v1/endpoints/{name}/generations': ['200', ...EVERY, '404'],
  'post /v1/endpoints/{name}/promote': ['200', ...POSTED, '404', '409', '504'],
  'post /v1/endpoints/{name}/rollback': ['200', ...POSTED, '404', '409'],
  'get /v1/endpoints/stream': ['200', ...EVERY, '429'],
  'get /v1/nodes': ['200', ...EVERY],
  'get /readyz': ['200', '503'],
};

interface Operation {
  responses?: Record<string, { content?: Record<string, unknown> }>;
}

describe('the app-server OpenAPI document', () => {
  it('defect: a client generated from /docs/json knows only a 200 "Default Response" for every control route (no 201/202, no problem statuses, no event stream)', async () => {
    await using dir = await tempDir('sluice-app-openapi-');
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: tokenAndKeptGenerationsYaml(TOKEN).join('\n'),
    });
    const response = await fetch(`${node.url}/docs/json`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(response.status).toBe(200);
    const doc = (await response.json()) as { paths: Record<string, Record<string, Operation>> };

    const missing: Record<string, string[]> = {};
    for (const [route, expected] of Object.entries(EXPECTED)) {
      const [method, path] = route.split(' ') as [string, string];
      const operation = doc.paths[path]?.[method];
      expect(operation, route).toBeDefined();
      const statuses = Object.keys(operation!.responses ?? {});
      const gaps = expected.filter((s) => !statuses.includes(s));
      if (gaps.length > 0) missing[route] = gaps;
    }
    expect(missing).toEqual({});
    // The stream's 200 is an event stream, not JSON; problems are problem details.
    const stream = doc.paths['/v1/endpoints/stream']!.get!;
    expect(Object.keys(stream.responses!['200']!.content ?? {})).toEqual(['text/event-stream']);
  }, 90_000);

  it('defect: every error response was declared application/json while the server sends application/problem+json', async () => {
    await using dir = await tempDir('sluice-app-openapi-');
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: tokenAndKeptGenerationsYaml(TOKEN).join('\n'),
    });
    for (const document of ['/docs/json', '/openapi.json']) {
      const response = await fetch(`${node.url}${document}`, {
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      expect(response.status).toBe(200);
      const doc = (await response.json()) as { paths: Record<string, Record<string, Operation>> };
      const declared: Record<string, string[]> = {};
      for (const [path, operations] of Object.entries(doc.paths))
        for (const [method, operation] of Object.entries(operations))
          for (const [status, answer] of Object.entries(operation.responses ?? {}))
            if (Number(status) >= 400)
              declared[`${method} ${path} ${status}`] = Object.keys(answer.content ?? {});
      expect(Object.keys(declared).length, document).toBeGreaterThan(50);
      // /readyz's 503 is also its not-ready body (JSON); every other error is a problem only.
      const expected = (route: string) =>
        route === 'get /readyz 503'
          ? 'application/json,application/problem+json'
          : 'application/problem+json';
      const wrong = Object.entries(declared).filter(([route, types]) => types.join() !== expected(route));
      expect(Object.fromEntries(wrong), document).toEqual({});
    }
    // What the document declares is what a refusal carries.
    const refused = await fetch(`${node.url}/v1/transfers/nope`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(refused.status).toBe(404);
    expect(refused.headers.get('content-type')).toBe('application/problem+json; charset=utf-8');
  }, 90_000);
});
