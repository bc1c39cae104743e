/**
 * `api.cors` lets a page on a configured origin use the query API as @sluice/client does from a browser: every
 * request header the API reads passes the preflight, and every response header the client reads is exposed.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { spawnTs, type TempDir, tempDir } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiServer } from '../src/index.js';
import { API_BIN, startQuietApiServer, writeGeneration } from './helpers.js';

const ORIGIN = 'https://app.example';

let dir: TempDir;
let server: ApiServer;

beforeAll(async () => {
  dir = await tempDir('sluice-api-cors-');
  await writeGeneration(dir.path, 1, 20);
  server = await startQuietApiServer(dir.path, { api: { cors: { origins: [ORIGIN] } } });
}, 90_000);

afterAll(async () => {
  await server?.close();
  await dir?.remove();
});

/** The headers a browser's preflight for `method` on `path` with `headers` is answered with. */
async function preflight(path: string, method: string, headers: string[]) {
  const response = await fetch(`${server.url}${path}`, {
    method: 'OPTIONS',
    headers: {
      origin: ORIGIN,
      'access-control-request-method': method,
      'access-control-request-headers': headers.join(','),
    },
  });
  const allowed = (response.headers.get('access-control-allow-headers') ?? '')
    .split(',')
    .map((name) => name.trim().toLowerCase())
    .filter((name) => name !== '');
  return { status: response.status, origin: response.headers.get('access-control-allow-origin'), allowed };
}

describe('CORS for the request headers the query API reads', () => {
  it('defect: api.cors refused the preflight of a read-your-writes read (sluice-min-position), so a browser could not send it', async () => {
    const reads: Array<[string, string, string[]]> = [
      ['/v1/endpoints/items/records/1', 'GET', ['authorization', 'sluice-min-position']],
      ['/v1/endpoints/items/query', 'POST', ['authorization', 'content-type', 'sluice-min-position']],
      ['/v1/endpoints/items/count', 'POST', ['content-type', 'sluice-min-position']],
      ['/v1/endpoints/items', 'GET', ['sluice-min-position']],
      // A change feed resumed by its last event id, as EventSource and SSE clients send it.
      ['/v1/endpoints/items/changes', 'GET', ['authorization', 'last-event-id']],
    ];
    for (const [path, method, headers] of reads) {
      const answer = await preflight(path, method, headers);
      expect({ path, ...answer }).toEqual({
        path,
        status: 204,
        origin: ORIGIN,
        allowed: expect.arrayContaining(headers),
      });
    }
  });

  it('defect: api.cors hid retry-after, so a browser client could not wait as a 503 POSITION_NOT_REACHED asks', async () => {
    const response = await fetch(`${server.url}/v1/endpoints/items/records/1`, {
      headers: { origin: ORIGIN },
    });
    expect(response.status).toBe(200);
    const exposed = (response.headers.get('access-control-expose-headers') ?? '')
      .split(',')
      .map((name) => name.trim().toLowerCase());
    expect(exposed).toEqual(
      expect.arrayContaining(['sluice-cache', 'sluice-checkpoint', 'sluice-position', 'retry-after']),
    );
  });
});

/** `sluice-api-server --check` of a sluice.yaml holding `yaml`: its exit code and output. */
async function check(yaml: string) {
  await using checkDir = await tempDir('sluice-api-cors-check-');
  await writeFile(join(checkDir.path, 'sluice.yaml'), yaml);
  await using child = spawnTs(API_BIN, ['--check'], { cwd: checkDir.path });
  const exit = await child.exited;
  return { code: exit.code, output: child.output() };
}

describe('api.cors.origins', () => {
  it('defect: an origin no browser ever sends (a path, a default port, upper case, no scheme) was accepted, and CORS silently never applied', {
    timeout: 90_000,
  }, async () => {
    for (const [origin, reason] of [
      ['https://app.example/', 'a browser sends "https://app.example"'],
      ['https://app.example:443', 'a browser sends "https://app.example"'],
      ['https://App.Example', 'a browser sends "https://app.example"'],
      ['app.example', 'must be an origin: scheme://host[:port]'],
    ]) {
      const { code, output } = await check(`api: { cors: { origins: ["${origin}"] } }\n`);
      expect({ origin, code }).toEqual({ origin, code: 1 });
      expect(output).toContain('CONFIG_INVALID');
      expect(output).toContain(`api.cors.origins[0]: ${reason}`);
    }
    for (const origins of ['["https://app.example", "http://localhost:3000"]', '["*"]', 'true'])
      expect((await check(`api: { cors: { origins: ${origins} } }\n`)).code, origins).toBe(0);
  });
});
