/**
 * A real `sluice-app-server` and two `sluice-api-server` processes under steady load while an operator asks for a
 * rebuild twice in a row (the second while the first green is still building), then one api-server is SIGKILLed
 * and restarted across the next switch. What the serving plane promises: every response 2xx and from one
 * generation that served at some point, both api-servers end on the same generation, a restarted api-server
 * serves the generation the alias table names, and the other one never fails a request meanwhile.
 */
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  allAnswerFrom,
  answeringCache,
  fetchJson,
  type SpawnedApiServer,
  spawnApiServer,
  spawnAppServer,
  startLoad,
  writeItemsConfig,
} from './helpers.js';

/** Records per version of the source file; version 2 is large enough to still be building when asked again. */
const COUNT_BY_GEN: Record<number, number> = { 1: 400, 2: 6_000, 3: 420, 4: 430 };

/** Writes version `gen` of the source file atomically (write + rename), as an upstream export would. */
async function writeSource(path: string, gen: number): Promise<void> {
  const lines: string[] = [];
  for (let id = 1; id <= COUNT_BY_GEN[gen]!; id += 1)
    lines.push(JSON.stringify({ id, gen, value: id * gen, category: ['a', 'b', 'c'][id % 3] }));
  await writeFile(`${path}.tmp`, `${lines.join('\n')}\n`);
  await rename(`${path}.tmp`, path);
}

describe('rebuilt twice in a row, and an api-server killed across a switch', () => {
  it('every response 2xx from a generation that served; both api-servers converge; a restarted one serves the alias target', async () => {
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-api-rebuild-twice-');
    const source = join(dir.path, 'items.jsonl');
    await writeSource(source, 1);
    const appPort = await freePort();
    const config = await writeItemsConfig(dir.path, {
      appPort,
      natsUrl: nats.url,
      source,
      extra: { cache: { gcGraceMs: 3_600_000 } },
    });
    await using _app = await spawnAppServer(config, dir.path);
    const appUrl = `http://127.0.0.1:${appPort}`;
    const items = async () =>
      (await fetchJson(`${appUrl}/v1/endpoints`)).body.endpoints.find(
        (e: { name: string }) => e.name === 'items',
      );
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
    const servers: SpawnedApiServer[] = await Promise.all([spawnApiServer(config), spawnApiServer(config)]);
    await using _a = servers[0]!;
    await using _b = servers[1]!;
    const urls = servers.map((s) => s.url);

    const load = startLoad({
      urls,
      concurrency: 16,
      endpoint: 'items',
      ids: 400,
      countOf: (g) => COUNT_BY_GEN[g]!,
    });
    await waitFor(() => load.stats.requests > 300, { timeoutMs: 20_000, what: 'load to warm up' });
    await writeSource(source, 2);
    expect((await fetchJson(`${appUrl}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    await waitFor(async () => ((await items()).building?.records ?? 0) > 500, {
      timeoutMs: 30_000,
      intervalMs: 5,
      what: 'the first green to be part-built',
    });
    await writeSource(source, 3);
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
    await writeSource(source, 4);
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
