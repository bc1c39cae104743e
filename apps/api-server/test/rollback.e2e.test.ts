/**
 * An operator's rollback under query load: one `sluice-app-server` process rebuilds an endpoint blue → green, then
 * `POST /v1/endpoints/items/rollback` points the alias back at blue (continued from its own checkpoint). Two
 * `sluice-api-server` processes switch on that AliasRedirected exactly as on a rebuild: zero failed requests,
 * every response from one generation.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  allAnswerFrom,
  fetchJson,
  moved,
  type SpawnedApiServer,
  spawnApiServer,
  spawnAppServer,
  startLoad,
  switchesOf,
  writeItemsConfig,
} from './helpers.js';

const COUNT = 400;

describe('rollback behind a real app-server', () => {
  it('switches both api-servers back to the previous generation under load with zero failed requests', async () => {
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-api-rollback-');
    const source = join(dir.path, 'items.jsonl');
    const lines: string[] = [];
    for (let id = 1; id <= COUNT; id += 1)
      lines.push(JSON.stringify({ id, gen: 1, value: id, category: ['a', 'b', 'c'][id % 3] }));
    await writeFile(source, `${lines.join('\n')}\n`);
    const appPort = await freePort();
    const config = await writeItemsConfig(dir.path, {
      appPort,
      natsUrl: nats.url,
      source,
      extra: { cache: { gcGraceMs: 3_600_000 } },
    });
    await using _app = await spawnAppServer(config, dir.path);
    const appUrl = `http://127.0.0.1:${appPort}`;
    const servingOf = async () =>
      (await fetchJson(`${appUrl}/v1/endpoints`)).body.endpoints.find(
        (e: { name: string }) => e.name === 'items',
      );
    const blue = (
      await waitFor(async () => ((await servingOf())?.records === COUNT ? servingOf() : null), {
        timeoutMs: 30_000,
        what: 'the first generation',
      })
    ).servingCache as string;
    expect((await fetchJson(`${appUrl}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    const green = (
      await waitFor(
        async () => {
          const items = await servingOf();
          return items.servingCache !== blue && items.buildingCache === null && items.records === COUNT
            ? items
            : null;
        },
        { timeoutMs: 30_000, what: 'the rebuild to switch' },
      )
    ).servingCache as string;

    const servers: SpawnedApiServer[] = await Promise.all([spawnApiServer(config), spawnApiServer(config)]);
    await using _a = servers[0]!;
    await using _b = servers[1]!;
    const urls = servers.map((s) => s.url);
    await waitFor(() => allAnswerFrom(urls, green), {
      timeoutMs: 30_000,
      what: 'both api-servers to serve green',
    });
    const switchesBefore = await Promise.all(
      urls.map(async (u) => switchesOf(await (await fetch(`${u}/metrics`)).text(), 'items')),
    );

    const load = startLoad({ urls, concurrency: 32, endpoint: 'items', ids: COUNT, countOf: () => COUNT });
    await waitFor(() => load.stats.requests > 300, { timeoutMs: 20_000, what: 'load to warm up' });
    const inFlightAtRollback = load.stats.inFlight;
    const rollback = await fetchJson(`${appUrl}/v1/endpoints/items/rollback`, { method: 'POST' });
    expect(rollback.status).toBe(200);
    expect(rollback.body).toEqual(moved('rollback', green, blue));
    const rolledAt = Date.now();
    await waitFor(() => allAnswerFrom(urls, blue), {
      timeoutMs: 20_000,
      what: 'both api-servers to answer from blue again',
    });
    const switchMs = Date.now() - rolledAt;
    // Repeating the rollback changes nothing (idempotent), under the same load.
    expect((await fetchJson(`${appUrl}/v1/endpoints/items/rollback`, { method: 'POST' })).body).toMatchObject(
      {
        to: blue,
        changed: false,
      },
    );
    const stats = await load.stopAfter(600, { timeoutMs: 30_000, what: 'load after the rollback' });

    expect(stats.failures.slice(0, 5)).toEqual([]);
    expect(stats.mixed.slice(0, 5)).toEqual([]);
    expect(stats.byCache.get(green)).toBeGreaterThan(100);
    expect(stats.byCache.get(blue)).toBeGreaterThan(100);
    expect(inFlightAtRollback).toBeGreaterThanOrEqual(16);
    const switchesAfter = await Promise.all(
      urls.map(async (u) => switchesOf(await (await fetch(`${u}/metrics`)).text(), 'items')),
    );
    // One switch each for the rollback (by its event, or a reconcile that ran first on a loaded machine).
    expect(switchesAfter).toEqual(switchesBefore.map((n) => n + 1));
    const listed = await fetchJson(`${appUrl}/v1/endpoints/items/generations`);
    expect(listed.body.history.map((h: { cause: string }) => h.cause)).toEqual([
      'rollback',
      'rebuild',
      'restart',
    ]);
    console.log(
      `rollback under load: ${stats.requests} requests in ${stats.durationMs} ms (${Math.round(stats.rate)}/s), 0 failed, switch seen in ${switchMs} ms`,
    );
  }, 180_000);
});
