/**
 * An operator's rollback under query load: one `sluice-app-server` process rebuilds an endpoint blue → green, then
 * `POST /v1/endpoints/items/rollback` points the alias back at blue (continued from its own checkpoint). Two
 * `sluice-api-server` processes switch on that AliasRedirected exactly as on a rebuild: zero failed requests,
 * every response from one generation.
 */
import { waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  allAnswerFrom,
  fetchJson,
  ITEMS_COUNT_BY_GEN,
  moved,
  startItemsHost,
  startLoad,
  switchesOf,
} from './helpers.js';

const COUNT = ITEMS_COUNT_BY_GEN[1]!;

describe('rollback behind a real app-server', () => {
  it('switches both api-servers back to the previous generation under load with zero failed requests', async () => {
    await using host = await startItemsHost('sluice-api-rollback-', {
      extra: { cache: { gcGraceMs: 3_600_000 } },
    });
    const { appUrl } = host;
    const servingOf = () => host.status();
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

    const urls = (await host.startApiServers(2)).map((s) => s.url);
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
