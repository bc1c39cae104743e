/**
 * Starting in unfriendly conditions: no endpoint at all yet, a configured one not built yet, and NATS configured but
 * down.
 */
import { join } from 'node:path';
import { createNatsBackplane } from '@sluice/backplane';
import { aliasRedirected, resolveConfig } from '@sluice/core';
import { startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { startApiServer } from '../src/index.js';
import { answeringCache, writeGeneration } from './helpers.js';

async function readiness(url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`${url}/readyz`);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

describe('startup', () => {
  it('starts with NATS down and no endpoint, serves endpoints as they appear, follows events once NATS is up', async () => {
    await using nats = await startNatsServer();
    await nats.stop();
    await using dir = await tempDir('sluice-startup-');
    const config = resolveConfig({
      dataDir: dir.path,
      nats: nats.url,
      logLevel: 'silent',
      api: { reconcileMs: 600_000 },
    });
    await using server = await startApiServer({
      config,
      dataDir: dir.path,
      port: 0,
      logger: pino({ level: 'silent' }),
      watchMs: 50,
    });
    const ready = await readiness(server.url);
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({ status: 'ready', endpoints: 0, backplane: null });
    expect((await fetch(`${server.url}/v1/endpoints`).then((r) => r.json())) as unknown).toEqual({
      endpoints: [],
    });

    // No NATS: the alias table is watched, so a new endpoint is served without any event.
    const blue = await writeGeneration(dir.path, 1, 20);
    await waitFor(async () => (await answeringCache(server.url)) === blue, {
      timeoutMs: 20_000,
      what: 'items to appear',
    });

    // NATS comes up: the server connects in the background and from then on switches by event.
    await nats.start();
    await waitFor(async () => (await readiness(server.url)).body.backplane === 'connected', {
      timeoutMs: 30_000,
      what: 'the background NATS connection',
    });
    const green = await writeGeneration(dir.path, 2, 20);
    // Connected, the table watch is idle and the periodic reconcile is far away: only the event can switch it.
    expect(server.registry.current('items')?.name).toBe(blue);
    await using publisher = await createNatsBackplane({
      nats: nats.url,
      clusterName: 'sluice',
      nodeId: 'writer',
    });
    await publisher.publish(
      aliasRedirected({ host: 'local', alias: 'items', from: blue, to: green, checkpoint: null }),
    );
    await waitFor(async () => (await answeringCache(server.url)) === green, {
      timeoutMs: 20_000,
      what: 'the event switch',
    });
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toContain('sluice_api_backplane_connected 1');
    expect(metrics).toMatch(/sluice_api_switches_total\{endpoint="items",reason="event"\} 1/);
  }, 120_000);

  it('defect: a configured endpoint whose first generation is still being built answered 404 UNKNOWN_ENDPOINT ("No endpoint named"); it is 503 ENDPOINT_NOT_READY with retry-after until it serves', async () => {
    await using dir = await tempDir('sluice-startup-first-');
    // The host's sluice.yaml lists `items`; its app-server has not committed a first generation yet.
    const config = resolveConfig({
      dataDir: dir.path,
      logLevel: 'silent',
      api: { reconcileMs: 600_000 },
      endpoints: [
        {
          name: 'items',
          source: { type: 'file', path: join(dir.path, 'items.jsonl'), format: 'jsonl' },
          primaryKey: ['id'],
        },
      ],
    });
    await using server = await startApiServer({
      config,
      dataDir: dir.path,
      port: 0,
      logger: pino({ level: 'silent' }),
      watchMs: 50,
    });
    const json = { 'content-type': 'application/json' };
    const routes: Array<[string, RequestInit]> = [
      ['/v1/endpoints/items', {}],
      ['/v1/endpoints/items/records/1', {}],
      ['/v1/endpoints/items/records?key=1', {}],
      ['/v1/endpoints/items/query', { method: 'POST', headers: json, body: '{"$limit":1}' }],
      ['/v1/endpoints/items/count', { method: 'POST', headers: json, body: '{}' }],
      ['/v1/endpoints/items/changes', {}],
    ];
    for (const [path, init] of routes) {
      const response = await fetch(`${server.url}${path}`, init);
      const body = (await response.json()) as Record<string, unknown>;
      expect({ path, status: response.status, code: body.code, endpoint: body.endpoint }).toEqual({
        path,
        status: 503,
        code: 'ENDPOINT_NOT_READY',
        endpoint: 'items',
      });
      expect(response.headers.get('retry-after'), path).toBe('1');
      expect(body.detail, path).toMatch(/first generation/);
    }
    // A name the configuration does not have is still unknown.
    const unknown = await fetch(`${server.url}/v1/endpoints/nope/records/1`);
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as Record<string, unknown>).code).toBe('UNKNOWN_ENDPOINT');

    // The first generation is committed: it serves.
    const first = await writeGeneration(dir.path, 1, 20);
    await waitFor(async () => (await answeringCache(server.url)) === first, {
      timeoutMs: 20_000,
      what: 'items to be served',
    });
    const counted = await fetch(`${server.url}/v1/endpoints/items/count`, {
      method: 'POST',
      headers: json,
      body: '{}',
    });
    expect(await counted.json()).toEqual({ count: 20 });
  }, 120_000);
});
