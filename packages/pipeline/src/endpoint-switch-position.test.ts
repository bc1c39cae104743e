/**
 * The position readers see never goes back across a blue/green switch of a logical-replication endpoint
 * (docs/generations.md § The switch hands over at a position): while a green builds, the serving generation (blue)
 * follows its source through its own slot, so when the green's snapshot is done blue has usually committed past
 * the green's consistent point. The alias may move only once the green has committed at least what blue last
 * committed, and blue commits nothing past that in between.
 *
 * Read here as the api-server reads it: the commit checkpoint of the generation the alias points at, sampled as fast
 * as the event loop allows while a writer commits continuously to the source table.
 */
import { join } from 'node:path';
import { openCacheManager, type RoCache } from '@sluice/cache';
import type { EndpointConfig } from '@sluice/core';
import { sql, startItemsWriter, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { replicationContext, useLogicalPostgres } from '../test/replication.js';
import { startEndpointPipeline } from './endpoint.js';
import { compareLsn } from './sources/replication/lsn.js';

const server = useLogicalPostgres();

const endpoint = (mode: 'auto' | 'manual') =>
  ({
    name: 'items',
    source: { type: 'postgres', connection: 'db', table: 'items' },
    primaryKey: ['id'],
    fields: { id: 'integer', v: 'integer', name: 'string' },
    indexes: [],
    switch: { mode },
  }) as EndpointConfig;

type Caches = Awaited<ReturnType<typeof openCacheManager>>;

/** One reading of what the alias serves: the generation and the LSN its commit checkpoint names. */
interface Served {
  cache: string;
  lsn: string;
}

/**
 * Samples the generation the alias `items` points at and its committed LSN until stopped, keeping every change —
 * what an api-server stamps as `sluice-position` on each response. Also notes the LSN at which the generation being
 * built (`building()`) finished its snapshot: where it stood when its switch became possible.
 */
function watchServedPosition(caches: Caches, building: () => string | null) {
  const samples: Served[] = [];
  const snapshotDone = new Map<string, string>();
  // One reader per generation, kept as the promise of its opening: the loop and `committed` may ask at once.
  const readers = new Map<string, Promise<RoCache>>();
  const reader = (cache: string) => {
    let open = readers.get(cache);
    if (open === undefined) {
      open = caches.openRo(cache);
      readers.set(cache, open);
    }
    return open;
  };
  const lsnOf = (state: ReturnType<RoCache['commitState']>) =>
    (state.checkpoint?.positions['items.source'] as { lsn?: string } | undefined)?.lsn;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const cache = caches.resolveAlias('items')?.cache;
      if (cache !== undefined) {
        const lsn = lsnOf((await reader(cache)).commitState());
        const last = samples.at(-1);
        if (lsn !== undefined && (last?.cache !== cache || last.lsn !== lsn)) samples.push({ cache, lsn });
      }
      const green = building();
      if (green !== null && green !== cache && !snapshotDone.has(green)) {
        const state = (await reader(green)).commitState();
        const lsn = lsnOf(state);
        if (state.snapshottingDone.length > 0 && lsn !== undefined) snapshotDone.set(green, lsn);
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
  })();
  const stop = async (): Promise<Served[]> => {
    if (!stopped) {
      stopped = true;
      await loop;
      for (const open of readers.values()) await (await open).close();
    }
    return samples;
  };
  return {
    samples,
    snapshotDone,
    /** The LSN generation `cache` has committed (its commit checkpoint), or undefined before its first commit. */
    committed: async (cache: string) => lsnOf((await reader(cache)).commitState()),
    stop,
    // Stopped before the caches close even when the test fails: a loop left running reads closed caches.
    [Symbol.asyncDispose]: async () => {
      await stop();
    },
  };
}

/** Every step where the served position went back: the reading before and the one after. */
function stepsBack(samples: readonly Served[]): Array<{ before: Served; after: Served }> {
  const out: Array<{ before: Served; after: Served }> = [];
  for (let i = 1; i < samples.length; i++)
    if (compareLsn(samples[i]!.lsn, samples[i - 1]!.lsn) < 0)
      out.push({ before: samples[i - 1]!, after: samples[i]! });
  return out;
}

/**
 * How long the test waits for its own writer to commit a number of transactions. The writer is this test's load, not
 * the product: each transaction opens a fresh connection, in the process that also runs the pipeline and samples the
 * alias as fast as its event loop allows. It commits about 10 a second on an idle 2-core machine and 5 a second with
 * two busy loops beside it (50 took 9.9 s), so the 10 s of a default wait was a speed this machine does not promise.
 */
const WRITER_MS = 60_000;

/** Rows of the source table: enough that a green's snapshot takes a few seconds. */
const ROWS = 60_000;

/** A table of {@link ROWS} rows, which {@link startItemsWriter} then changes while a green builds. */
async function busyItemsTable(prefix: string) {
  const url = await server.createDatabase(prefix);
  await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, name text)');
  await sql(url, `INSERT INTO items SELECT i, i % 10, repeat('x', 300) FROM generate_series(1, ${ROWS}) i`);
  return url;
}

describe('the served position across a switch', () => {
  it('defect: a rebuilt green took the alias while the serving generation had committed past it: the served position went back', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await busyItemsTable('switchpos');
    await using caches = await openCacheManager(join(dir.path, 'data'));
    await using pipeline = await startEndpointPipeline(endpoint('auto'), replicationContext(caches, url));
    const blue = await pipeline.whenServing({ timeoutMs: 60_000 });

    await using writer = startItemsWriter(url, ROWS);
    await using watch = watchServedPosition(caches, () => pipeline.status().buildingCache);
    try {
      await waitFor(() => writer.written >= 20, { timeoutMs: WRITER_MS, what: 'the writer to commit' });
      await pipeline.rebuild();
      const green = await waitFor(
        () => {
          const serving = caches.resolveAlias('items')?.cache;
          return serving !== undefined && serving !== blue ? serving : null;
        },
        { timeoutMs: 120_000, what: 'the rebuilt generation to take the alias' },
      );
      // The green serves, and goes on following while the writer writes.
      const at = writer.written;
      await waitFor(() => writer.written >= at + 20, {
        timeoutMs: WRITER_MS,
        what: 'the writer to commit after the switch',
      });
      await waitFor(() => watch.samples.filter((s) => s.cache === green).length >= 3, {
        timeoutMs: 30_000,
        what: 'the green to commit after the switch',
      });
    } finally {
      await writer.stop();
    }
    const samples = await watch.stop();
    // Both generations were read, blue before green.
    expect(samples.some((s) => s.cache === blue)).toBe(true);
    const green = samples.at(-1)!.cache;
    expect(green).not.toBe(blue);
    // The window this test is about was there: when the green finished its snapshot, the serving generation had
    // already committed past it (it went on following through its own slot). Seen while it was built, or — when it
    // took the alias at once — as the first position it served.
    const greenAtSnapshotDone = watch.snapshotDone.get(green) ?? samples.find((s) => s.cache === green)?.lsn;
    const blueLast = samples.filter((s) => s.cache === blue).at(-1)!.lsn;
    expect(greenAtSnapshotDone).toEqual(expect.any(String));
    expect(compareLsn(greenAtSnapshotDone!, blueLast)).toBeLessThan(0);
    // Yet readers never saw the position go back.
    expect(stepsBack(samples)).toEqual([]);
  });

  it('a promote of a held green under a writer hands over at a position: the served position never goes back', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await busyItemsTable('promotepos');
    await using caches = await openCacheManager(join(dir.path, 'data'));
    await using pipeline = await startEndpointPipeline(endpoint('manual'), replicationContext(caches, url));
    const blue = await pipeline.whenServing({ timeoutMs: 60_000 });
    await using writer = startItemsWriter(url, ROWS);
    await using watch = watchServedPosition(caches, () => pipeline.status().buildingCache);
    let promoted: Awaited<ReturnType<typeof pipeline.promote>>;
    try {
      await pipeline.rebuild();
      const held = await waitFor(() => pipeline.status().held, {
        timeoutMs: 120_000,
        what: 'the rebuilt generation to be held (manual switch)',
      });
      // Both generations follow the writer (each through its own slot) while the green is held: each commits what
      // was written after the hold began.
      const at = writer.written;
      await waitFor(() => writer.written >= at + 50, {
        timeoutMs: WRITER_MS,
        what: 'the writer to commit while held',
      });
      const writtenWhileHeld = (
        await sql<{ lsn: string }>(url, 'SELECT pg_current_wal_lsn()::text AS lsn')
      )[0]!.lsn;
      await waitFor(
        async () => {
          const committed = [await watch.committed(blue), await watch.committed(held.cache)];
          return committed.every((lsn) => lsn !== undefined && compareLsn(lsn, writtenWhileHeld) >= 0);
        },
        { timeoutMs: 30_000, what: `both generations to commit past ${writtenWhileHeld} while held` },
      );
      promoted = await pipeline.promote();
      expect(promoted).toMatchObject({ from: blue, to: held.cache, changed: true });
      expect(caches.resolveAlias('items')?.cache).toBe(held.cache);
      await waitFor(() => watch.samples.filter((s) => s.cache === held.cache).length >= 3, {
        timeoutMs: 30_000,
        what: 'the promoted generation to commit after the switch',
      });
    } finally {
      await writer.stop();
    }
    const samples = await watch.stop();
    expect(samples.some((s) => s.cache === blue)).toBe(true);
    expect(samples.at(-1)?.cache).toBe(promoted.to);
    expect(stepsBack(samples)).toEqual([]);
    // The old serving generation's follower stopped with the switch (it is retired), and the status says nothing
    // is paused any more.
    await waitFor(() => (pipeline.status().follower === null ? true : null), {
      what: `the follower to stop after the promote (${JSON.stringify(pipeline.status().follower)})`,
    });
  });
});
