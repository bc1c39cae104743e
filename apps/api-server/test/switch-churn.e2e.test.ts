/**
 * A long-running host switches an endpoint's generation many times (an operator's rebuilds, a source that cannot
 * resume): a real app-server and api-server on one host, a light query load and one change feed kept open, 40
 * blue/green switches in a row. What each switch opened must be given back once the old generation is collected
 * (`cache.gcGraceMs`, small here): file descriptors, mappings of LMDB files (none of a deleted generation),
 * generation directories, LMDB reader slots, and the lmdb-js stores the process keeps — a leak of one per switch
 * would break every bound below. The stores did leak (lmdb-js's registry, see packages/cache/src/lmdb-registry.ts).
 */
import { readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import {
  heapObjectCounts,
  heapSnapshotNodeOptions,
  processResources,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { fetchJson, type ItemsHost, startItemsHost, startLoad } from './helpers.js';
import { SseConnection } from './sse.js';

/** lmdb-js as the cache package resolves it (this package does not depend on it): to read reader tables. */
const lmdb = createRequire(import.meta.resolve('@sluice/cache'))('lmdb') as {
  open(options: Record<string, unknown>): { readerList(): string; close(): Promise<void> };
};

/** An SSE connection closed on dispose. */
async function openKeptFeed(url: string): Promise<{ connection: SseConnection } & AsyncDisposable> {
  const connection = await SseConnection.open(url);
  return {
    connection,
    [Symbol.asyncDispose]: async () => connection.kill(),
  };
}

/** A few hundred records per generation, each generation a different count so a switch is visible. */
const countOf = (gen: number) => 300 + (gen % 7);
const COUNT_BY_GEN = Object.fromEntries(Array.from({ length: 60 }, (_, i) => [i + 1, countOf(i + 1)]));

/** Reader slots each process holds in the LMDB environment at `path`, by pid. */
async function readerSlots(path: string, pids: number[]): Promise<number[]> {
  const env = lmdb.open({ path, readOnly: true, maxDbs: 64, maxReaders: 1022 });
  try {
    const lines = env.readerList().split('\n');
    return pids.map((pid) => lines.filter((line) => new RegExp(`^\\s*${pid}\\s`).test(line)).length);
  } finally {
    await env.close();
  }
}

async function rebuildOnto(host: ItemsHost, apiUrl: string, gen: number, from: string): Promise<string> {
  await host.writeSource(gen);
  expect((await fetchJson(`${host.appUrl}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
  const green = await waitFor(
    async () => {
      const status = await host.status();
      return status.buildingCache === null && status.records === countOf(gen) && status.servingCache !== from
        ? status.servingCache
        : null;
    },
    { timeoutMs: 30_000, what: `the app-server to serve generation ${gen}` },
  );
  await waitFor(
    async () =>
      (await fetchJson(`${apiUrl}/v1/endpoints/items/records/1`)).headers.get('sluice-cache') === green,
    { timeoutMs: 20_000, what: `the api-server on generation ${gen}` },
  );
  return green;
}

describe('many blue/green switches on one host', () => {
  it('defect: every switch left the lmdb-js stores of the closed generation reachable in both processes (fds, mappings, directories, reader slots stay flat too)', async () => {
    await using snapshots = await tempDir('sluice-switch-churn-heap-');
    await using host = await startItemsHost('sluice-switch-churn-', {
      countByGen: COUNT_BY_GEN,
      extra: { cache: { gcGraceMs: 300 } },
      env: { NODE_OPTIONS: heapSnapshotNodeOptions(snapshots.path) },
    });
    let serving = await waitFor(
      async () => {
        const status = await host.status();
        return status.buildingCache === null && status.records === countOf(1) ? status.servingCache : null;
      },
      { timeoutMs: 60_000, what: 'the first generation' },
    );
    const [api] = await host.startApiServers(1);
    const pids = { app: host.app.pid, api: api!.child.pid };
    const caches = join(host.dir, 'data', 'caches');
    const load = startLoad({ urls: [api!.url], concurrency: 2, endpoint: 'items', ids: 300, countOf });
    // A change-feed subscriber that stays connected through every switch, as a downstream consumer does for months.
    await using feed = await openKeptFeed(`${api!.url}/v1/endpoints/items/changes`);
    await feed.connection.waitForEvent((e) => e.event === 'live');

    const measure = async () => {
      // Retired generations are collected after the grace: the serving one is left.
      await waitFor(() => readdirSync(caches).join() === serving, {
        timeoutMs: 20_000,
        what: 'old generations collected',
      });
      await waitFor(
        () => processResources(pids.app).mappedDeleted + processResources(pids.api).mappedDeleted === 0,
        { timeoutMs: 20_000, what: 'no mapping of a deleted generation' },
      );
      const stores = async (pid: number) =>
        (await heapObjectCounts(pid, snapshots.path, ['LMDBStore'])).LMDBStore!;
      return {
        app: { ...processResources(pids.app), stores: await stores(pids.app) },
        api: { ...processResources(pids.api), stores: await stores(pids.api) },
        aliasSlots: await readerSlots(join(host.dir, 'data', 'aliases'), [pids.app, pids.api]),
        servingSlots: await readerSlots(join(caches, serving), [pids.app, pids.api]),
      };
    };

    let gen = 1;
    for (; gen <= 10; gen += 1) serving = await rebuildOnto(host, api!.url, gen + 1, serving);
    const warm = await measure();
    for (; gen <= 40; gen += 1) serving = await rebuildOnto(host, api!.url, gen + 1, serving);
    const after = await measure();
    const stats = await load.stop();
    // The feed followed every switch to the last generation and is still open.
    expect(feed.connection.closed).toBe(false);
    expect(feed.connection.events.filter((e) => e.event === 'switch').length).toBeGreaterThanOrEqual(40);

    expect(stats.failures.slice(0, 3)).toEqual([]);
    expect(stats.requests).toBeGreaterThan(100);
    for (const side of ['app', 'api'] as const) {
      const was = (what: string, n: number) => `${side}: ${what} (after 10 switches: ${n})`;
      expect(after[side].fds, was('fds', warm[side].fds)).toBeLessThanOrEqual(warm[side].fds + 5);
      expect(after[side].mapped, was('data.mdb mappings', warm[side].mapped)).toBeLessThanOrEqual(
        warm[side].mapped + 2,
      );
      expect(after[side].mappedDeleted, `${side}: mappings of deleted files`).toBe(0);
      // 30 switches later: one store leaked per switch would add 30.
      expect(after[side].stores, was('lmdb-js stores', warm[side].stores)).toBeLessThanOrEqual(
        warm[side].stores + 10,
      );
    }
    // One reader slot per process and environment, however many switches and requests went by.
    expect(
      after.aliasSlots.every((n) => n <= 1),
      `alias env reader slots ${after.aliasSlots}`,
    ).toBe(true);
    expect(
      after.servingSlots.every((n) => n <= 1),
      `serving env reader slots ${after.servingSlots}`,
    ).toBe(true);
  }, 120_000);
});
