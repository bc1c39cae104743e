/**
 * A real app-server and two real api-servers on one host while their nats-server is killed and started again (same
 * port, same JetStream directory), with blue/green rebuilds during and right after the outage: every api-server
 * converges on the alias with no failed request, a change feed resumed by `Last-Event-ID` loses nothing, and
 * readiness says what is down and recovers.
 */
import { waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { fetchJson, ITEMS_COUNT_BY_GEN, startItemsHost, startLoad } from './helpers.js';
import { applyFeed, queryAll, SseConnection } from './sse.js';

async function genOf(url: string): Promise<number | null> {
  const reply = await fetchJson(`${url}/v1/endpoints/items/records/1`);
  return reply.status === 200 ? (reply.body.gen as number) : null;
}

describe('NATS restarted under a host', () => {
  it('nats-server killed and restarted across two rebuilds: api-servers converge with no failed request, a resumed feed loses nothing', async () => {
    await using host = await startItemsHost('sluice-api-nats-restart-');
    const { nats, appUrl } = host;
    const servers = await host.startApiServers(2);
    const urls = servers.map((s) => s.url);
    await waitFor(async () => (await Promise.all(urls.map(genOf))).every((g) => g === 1), {
      timeoutMs: 30_000,
      what: 'both api-servers to serve generation 1',
    });
    const feedUrl = `${urls[0]}/v1/endpoints/items/changes`;
    const feed = await SseConnection.open(feedUrl);
    await feed.waitForEvent((e) => e.event === 'live');
    const load = startLoad({
      urls,
      concurrency: 8,
      endpoint: 'items',
      ids: 400,
      countOf: (g) => ITEMS_COUNT_BY_GEN[g]!,
    });
    await waitFor(() => load.stats.requests > 100, { timeoutMs: 20_000, what: 'load to warm up' });

    await nats.kill();
    await waitFor(
      async () => {
        for (const url of [...urls, appUrl])
          if ((await fetchJson(`${url}/readyz`)).body.backplane === 'connected') return false;
        return true;
      },
      { timeoutMs: 15_000, what: 'every process to notice NATS is gone' },
    );
    const appReady = await fetchJson(`${appUrl}/readyz`);
    expect(appReady.status).toBe(503);
    // The subscriber drops off during the outage and comes back later with its last id.
    const lastId = feed.lastId!;
    feed.kill();
    await host.writeSource(2);
    expect((await fetchJson(`${appUrl}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    await waitFor(
      async () => {
        const items = await host.status();
        return items.buildingCache === null && items.records === 450;
      },
      { timeoutMs: 60_000, what: 'the app-server to switch to generation 2' },
    );
    await nats.start();
    // At once, while the processes may still be reconnecting.
    await host.writeSource(3);
    const second = await fetchJson(`${appUrl}/v1/endpoints/items/rebuild`, { method: 'POST' });
    expect(second.status, JSON.stringify(second.body)).toBe(202);
    await waitFor(async () => (await Promise.all(urls.map(genOf))).every((g) => g === 3), {
      timeoutMs: 30_000,
      what: 'both api-servers to serve generation 3',
    });
    const stats = await load.stopAfter(200, { timeoutMs: 30_000, what: 'load after the switches' });
    expect(stats.failures.slice(0, 5)).toEqual([]);
    expect(stats.mixed.slice(0, 5)).toEqual([]);

    const resumed = await SseConnection.open(feedUrl, { 'last-event-id': lastId });
    await waitFor(
      async () => {
        const local = applyFeed(resumed.events, applyFeed(feed.events));
        return (
          JSON.stringify([...local.entries()].sort()) ===
          JSON.stringify([...(await queryAll(urls[0]!, 'items')).records.entries()].sort())
        );
      },
      { timeoutMs: 20_000, what: 'the resumed feed to hold what the endpoint serves' },
    );
    expect(resumed.events.some((e) => e.event === 'reset')).toBe(false);
    resumed.kill();
    await waitFor(async () => (await fetchJson(`${appUrl}/readyz`)).status === 200, {
      timeoutMs: 20_000,
      what: 'the app-server ready again',
    });
    for (const url of urls)
      await waitFor(async () => (await fetchJson(`${url}/readyz`)).body.backplane === 'connected', {
        timeoutMs: 20_000,
        what: 'the api-servers to reconnect',
      });
  }, 240_000);
});
