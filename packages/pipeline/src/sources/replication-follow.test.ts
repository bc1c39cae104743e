/**
 * A replication endpoint's serving generation keeps following its source while a green builds or is held: each
 * generation fed has its own slot (docs/generations.md), so read-your-writes keeps working through a rebuild, and
 * the slot of a generation that is gone is dropped (WAL retention is the cost of a forgotten slot).
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig } from '@sluice/core';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { allRecords } from '../../test/helpers.js';
import {
  cacheRows,
  confirmedFlush,
  replicationContext,
  tableRows,
  useLogicalPostgres,
} from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';

const server = useLogicalPostgres();

const endpoint = {
  name: 'items',
  source: { type: 'postgres', connection: 'db', table: 'items' },
  primaryKey: ['id'],
  fields: { id: 'integer', v: 'integer', name: 'string' },
  indexes: [],
  switch: { mode: 'manual' },
} as EndpointConfig;

type Caches = Awaited<ReturnType<typeof openCacheManager>>;

/** The records of the generation the alias `items` points at now, as JSON text per id. */
async function servedRows(caches: Caches): Promise<Map<number, string>> {
  await using cache = await caches.openRo('items');
  return cacheRows(allRecords(cache));
}

/** The records of generation `name`, as JSON text per id. */
async function generationRows(caches: Caches, name: string): Promise<Map<number, string>> {
  await using cache = await caches.openRo(name);
  return cacheRows(allRecords(cache));
}

const same = (a: Map<number, string>, b: Map<number, string>) =>
  a.size === b.size && [...a].every(([id, row]) => b.get(id) === row);

describe('the serving generation while a green builds or is held', () => {
  it('defect: a held green stops the serving generation from following its source', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('follow');
    await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, name text)');
    await sql(url, "INSERT INTO items SELECT i, i % 10, 'n' || i FROM generate_series(1, 50) i");
    // No grace: a retired generation may be collected at once (its slot then goes too).
    await using caches = await openCacheManager(join(dir.path, 'data'), { gcGraceMs: 0 });
    await using pipeline = await startEndpointPipeline(
      endpoint,
      replicationContext(caches, url, { slotSweepMs: 200 }),
    );
    const blue = await pipeline.whenServing({ timeoutMs: 30_000 });
    const blueSlot = pipeline.status().replication?.slot;
    expect(blueSlot).toEqual(expect.any(String));

    await pipeline.rebuild();
    const held = await waitFor(() => pipeline.status().held, {
      timeoutMs: 30_000,
      what: 'the rebuilt generation to be held (manual switch)',
    });
    expect(caches.resolveAlias('items')?.cache).toBe(blue);

    // Written while the green is held: the generation readers get must show it.
    await sql(url, "INSERT INTO items SELECT i, i % 10, 'held ' || i FROM generate_series(51, 70) i");
    await sql(url, "UPDATE items SET name = 'updated while held', v = 99 WHERE id <= 10");
    await sql(url, 'DELETE FROM items WHERE id BETWEEN 20 AND 29');
    const expected = await tableRows(url, 'items');
    expect(expected.size).toBe(60);
    await waitFor(async () => same(await servedRows(caches), expected), {
      timeoutMs: 20_000,
      what: `the serving generation ${blue} to follow its source while ${held.cache} is held (it serves ${(await servedRows(caches)).size} records, the table holds ${expected.size})`,
    });
    expect(caches.resolveAlias('items')?.cache).toBe(blue);
    // Its status says what readers get (caught up), and how far the held one is.
    const status = await waitFor(
      () => {
        const s = pipeline.status();
        return s.replication?.lagBytes === 0 && s.replication.following?.lagBytes === 0 ? s : null;
      },
      {
        timeoutMs: 20_000,
        what: `both generations' lag to be 0 (${JSON.stringify(pipeline.status().replication)})`,
      },
    );
    expect(status.replication).toMatchObject({ slot: blueSlot, following: { cache: held.cache } });
    // And that it follows: its follower's phase and last commit (the serving generation's LSN).
    expect(status.follower).toMatchObject({
      cache: blue,
      phase: 'following',
      reason: null,
      error: null,
      lastCommit: { lsn: expect.any(String), at: expect.any(String) },
    });
    const greenSlot = await waitFor(
      async () => {
        const slots = await sql<{ slot_name: string }>(
          url,
          "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'sluice_t1_items%' ORDER BY slot_name",
        );
        return slots.length === 2 ? slots.map((s) => s.slot_name).find((s) => s !== blueSlot) : null;
      },
      { what: 'one slot per generation fed' },
    );

    // Promoted, the held generation serves everything, and follows on from its own slot.
    await pipeline.promote();
    expect(caches.resolveAlias('items')?.cache).toBe(held.cache);
    expect(same(await generationRows(caches, held.cache), expected)).toBe(true);
    await sql(url, "INSERT INTO items VALUES (100, 1, 'after the promote')");
    const after = await tableRows(url, 'items');
    await waitFor(async () => same(await servedRows(caches), after), {
      timeoutMs: 20_000,
      what: 'the promoted generation to follow',
    });
    expect(pipeline.status().replication).toMatchObject({ slot: greenSlot, following: null });
    expect(pipeline.status().follower).toBeNull();

    // The old generation, retired, goes with garbage collection, and its slot with it.
    expect((await caches.info(blue))?.state).toBe('retired');
    expect(await caches.gc()).toContain(blue);
    await waitFor(async () => (await confirmedFlush(url, blueSlot!)) === null, {
      timeoutMs: 20_000,
      what: `the slot ${blueSlot} of the collected generation to be dropped`,
    });
    expect(await confirmedFlush(url, greenSlot)).not.toBeNull();
  });
});
