/**
 * Starting in unfriendly conditions: no endpoint at all yet, and NATS configured but down.
 */
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
});
