/**
 * A real `sluice-app-server` and two `sluice-api-server` processes under steady load while an operator asks for a
 * rebuild twice in a row (the second while the first green is still building), then one api-server is SIGKILLed
 * and restarted across the next switch. What the serving plane promises: every response 2xx and from one
 * generation that served at some point, both api-servers end on the same generation, a restarted api-server
 * serves the generation the alias table names, and the other one never fails a request meanwhile.
 */
import { waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  allAnswerFrom,
  answeringCache,
  fetchJson,
  spawnApiServer,
  startItemsHost,
  startLoad,
} from './helpers.js';

/** Records per version of the source file; version 2 is large enough to still be building when asked again. */
const COUNT_BY_GEN: Record<number, number> = { 1: 400, 2: 6_000, 3: 420, 4: 430 };

describe('rebuilt twice in a row, and an api-server killed across a switch', () => {
  it('every response 2xx from a generation that served; both api-servers converge; a restarted one serves the alias target', async () => {
    await using host = await startItemsHost('sluice-api-rebuild-twice-', {
      countByGen: COUNT_BY_GEN,
      extra: { cache: { gcGraceMs: 3_600_000 } },
    });
    const { appUrl, config } = host;
    const items = () => host.status();
    const settledOn = (records: number) =>
      waitFor(
        async () => {
          const status = await items();
          return status.buildingCache === null && status.records === records
            ? (status.servingCache as string)
            : null;
        },
        { timeoutMs: 90_000, what: `the app-server to serve ${records} records` },
      );
    await settledOn(COUNT_BY_GEN[1]!);
    const servers = await host.startApiServers(2);
    const urls = servers.map((s) => s.url);

    const load = startLoad({
      urls,
      concurrency: 16,
      endpoint: 'items',
      ids: 400,
      countOf: (g) => COUNT_BY_GEN[g]!,
    });
    await waitFor(() => load.stats.requests > 300, { timeoutMs: 20_000, what: 'load to warm up' });
    await host.writeSource(2);
    expect((await fetchJson(`${appUrl}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    await waitFor(async () => ((await items()).building?.records ?? 0) > 500, {
      timeoutMs: 30_000,
      intervalMs: 5,
      what: 'the first green to be part-built',
    });
    await host.writeSource(3);
    expect((await fetchJson(`${appUrl}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    const final = await settledOn(COUNT_BY_GEN[3]!);
    await waitFor(() => allAnswerFrom(urls, final), {
      timeoutMs: 20_000,
      what: 'both api-servers on the last green',
    });
    const stats = await load.stopAfter(300, { timeoutMs: 30_000, what: 'load after the switch' });

    expect(stats.failures.slice(0, 5)).toEqual([]);
    expect(stats.mixed.slice(0, 5)).toEqual([]);
    // Every answering generation is one the alias pointed at (its switch history), never a half-built green.
    const history = (await fetchJson(`${appUrl}/v1/endpoints/items/generations`)).body.history as Array<{
      to: string;
    }>;
    const served = new Set(history.map((h) => h.to));
    expect([...stats.byCache.keys()].filter((cache) => !served.has(cache))).toEqual([]);
    expect(stats.genByCache.get(final)).toBe(3);

    // api-server A is SIGKILLed under load on B; the alias moves while A is down; A comes back.
    const loadB = startLoad({
      urls: [urls[1]!],
      concurrency: 8,
      endpoint: 'items',
      ids: 400,
      countOf: (g) => COUNT_BY_GEN[g]!,
    });
    await waitFor(() => loadB.stats.requests > 200, { timeoutMs: 20_000, what: 'load on B' });
    expect(await servers[0]!.child.stop('SIGKILL', 10_000)).toEqual({ code: null, signal: 'SIGKILL' });
    await host.writeSource(4);
    expect((await fetchJson(`${appUrl}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    const fourth = await settledOn(COUNT_BY_GEN[4]!);
    await using restarted = await spawnApiServer(config);
    // Its first answer already comes from the generation the alias table names.
    expect(await answeringCache(restarted.url)).toBe(fourth);
    await waitFor(async () => (await answeringCache(urls[1]!)) === fourth, {
      timeoutMs: 20_000,
      what: 'B on it',
    });
    const statsB = await loadB.stopAfter(200, { timeoutMs: 30_000, what: 'load on B after the switch' });
    expect(statsB.failures.slice(0, 5)).toEqual([]);
    expect(statsB.mixed.slice(0, 5)).toEqual([]);
  }, 300_000);
});
