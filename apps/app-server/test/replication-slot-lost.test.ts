/**
 * A replication slot past `max_slot_wal_keep_size` (docs/operations.md § PostgreSQL replication slots), on real
 * app-server and api-server processes and a private PostgreSQL that keeps at most 32 MB of WAL for a slot: the WAL
 * the slot needs is removed while the app-server is stopped, or frozen (SIGSTOP), and the slot becomes
 * `wal_status = lost`. The endpoint cannot resume: it builds a new generation from a fresh snapshot and switches to
 * it, while the old one keeps answering every read; it ends equal to the table, says why it rebuilt, and leaves no
 * slot behind that nothing reads.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { freePort, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { localNode, startHostApiServer, startNodeProcess } from './helpers.js';
import { currentLsn, servedRows, tableRows } from './items-rows.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { itemsOf, itemsStreaming, itemsTable, replicatedEndpointYaml } from './replication-node.js';
import { readContinuously } from './served-positions.js';

const postgres = logicalPostgresPerFile({ settings: { max_slot_wal_keep_size: '32MB' } });

/** The slots of the database at `url`, with their WAL status, by name. */
const slotsOf = async (url: string) =>
  sql<{ slot_name: string; wal_status: string | null; active: boolean }>(
    url,
    'SELECT slot_name, wal_status, active FROM pg_replication_slots WHERE database = current_database() ORDER BY slot_name',
  );

/**
 * Changes `items` (an insert, an update, a delete) and then writes WAL and switches segments until PostgreSQL has
 * removed what `slot` needs: a checkpoint invalidates it (`wal_status = lost`, terminating a walsender that still
 * holds it).
 */
async function walPastTheSlot(url: string, slot: string): Promise<void> {
  await sql(url, "INSERT INTO items VALUES (1001, 1001, 'while the slot was lost')");
  await sql(url, "UPDATE items SET v = -v, s = 'updated while the slot was lost' WHERE id <= 10");
  await sql(url, 'DELETE FROM items WHERE id BETWEEN 20 AND 24');
  await sql(url, 'CREATE TABLE IF NOT EXISTS filler (id serial PRIMARY KEY, pad text)');
  await waitFor(
    async () => {
      // ~16 MB a round: a segment's worth of rows, then the switch to the next one.
      await sql(url, "INSERT INTO filler (pad) SELECT repeat('w', 1000) FROM generate_series(1, 12000)");
      await sql(url, 'SELECT pg_switch_wal()');
      await sql(url, 'CHECKPOINT');
      const state = (await slotsOf(url)).find((s) => s.slot_name === slot);
      return state?.wal_status === 'lost' ? true : null;
    },
    { timeoutMs: 60_000, intervalMs: 10, what: `slot ${slot} to be lost` },
  );
  await sql(url, 'TRUNCATE filler');
}

/**
 * True once the new generation's slot streams and the lost one is the only other: it holds no WAL (PostgreSQL
 * released it) and goes with the old generation's garbage collection (`cache.gcGraceMs`, then the slot sweeper).
 */
const slotsLeft = (url: string, fresh: string, lost: string) =>
  waitFor(
    async () => {
      const slots = await slotsOf(url);
      const ok =
        slots.some((s) => s.slot_name === fresh && s.active && s.wal_status === 'reserved') &&
        slots.every(
          (s) => s.slot_name === fresh || (s.slot_name === lost && s.wal_status === 'lost' && !s.active),
        );
      return ok ? true : null;
    },
    { timeoutMs: 30_000, what: `${fresh} to stream beside nothing but the lost ${lost}` },
  );

/** Waits until `items` serves a generation other than `blue`, streaming, with nothing building. */
const rebuiltFrom = (node: { url: string }, blue: string) =>
  waitFor(
    async () => {
      const items = await itemsOf(node);
      return items.servingCache !== blue &&
        items.servingCache !== null &&
        items.buildingCache === null &&
        items.phase === 'streaming'
        ? items
        : null;
    },
    { timeoutMs: 90_000, what: 'items to serve a rebuilt generation' },
  );

describe('a replication slot lost past max_slot_wal_keep_size', () => {
  it('lost while the app-server is stopped: a fresh generation, blue answering every read meanwhile, equal to the table', {
    timeout: 240_000,
  }, async () => {
    await using dir = await tempDir('sluice-slot-lost-');
    const url = await itemsTable(postgres(), 'loststopped');
    const apiPort = await freePort();
    const slot = 'sluice_h1_items_source';
    const spec = { ...localNode('h1', dir.path), extraYaml: replicatedEndpointYaml(url, { apiPort }) };
    let node = await startNodeProcess(spec);
    try {
      const blue = (await itemsStreaming(node, { records: 100 })).servingCache!;
      await using apiServer = await startHostApiServer(node);
      void apiServer;
      const api = `http://127.0.0.1:${apiPort}`;
      expect(await servedRows(api, await currentLsn(url))).toEqual(await tableRows(url));
      await using reader = readContinuously(api);

      await node[Symbol.asyncDispose]();
      await walPastTheSlot(url, slot);
      node = await startNodeProcess(node.spec);

      const rebuilt = await rebuiltFrom(node, blue);
      expect(rebuilt.decision).toMatchObject({
        decision: 'from-scratch',
        reason: expect.stringContaining(`replication slot ${slot} lost the WAL it needs`),
      });
      expect(await servedRows(api, await currentLsn(url))).toEqual(await tableRows(url));
      await sql(url, "INSERT INTO items VALUES (2001, 2001, 'after the rebuild')");
      expect(await servedRows(api, await currentLsn(url))).toEqual(await tableRows(url));

      const answers = await reader.stop();
      expect(reader.failed).toEqual([]);
      expect(new Set(answers.map((a) => a.cache))).toEqual(new Set([blue, rebuilt.servingCache]));
      expect(await slotsLeft(url, rebuilt.replication!.slot, slot)).toBe(true);
    } finally {
      await node[Symbol.asyncDispose]();
    }
  });

  it('lost while the app-server is frozen (SIGSTOP): after SIGCONT a fresh generation, no crash loop, equal to the table', {
    timeout: 240_000,
  }, async () => {
    await using dir = await tempDir('sluice-slot-lost-');
    const url = await itemsTable(postgres(), 'lostfrozen');
    const apiPort = await freePort();
    const slot = 'sluice_h2_items_source';
    await using node = await startNodeProcess({
      ...localNode('h2', dir.path),
      extraYaml: replicatedEndpointYaml(url, { apiPort }),
    });
    const blue = (await itemsStreaming(node, { records: 100 })).servingCache!;
    await using apiServer = await startHostApiServer(node);
    void apiServer;
    const api = `http://127.0.0.1:${apiPort}`;
    expect(await servedRows(api, await currentLsn(url))).toEqual(await tableRows(url));
    await using reader = readContinuously(api);

    node.child.kill('SIGSTOP');
    try {
      await walPastTheSlot(url, slot);
    } finally {
      node.child.kill('SIGCONT');
    }

    const rebuilt = await rebuiltFrom(node, blue);
    expect(rebuilt.decision).toMatchObject({
      decision: 'from-scratch',
      reason: expect.stringContaining('lost the WAL it needs'),
    });
    expect(await servedRows(api, await currentLsn(url))).toEqual(await tableRows(url));
    await sql(url, "INSERT INTO items VALUES (2001, 2001, 'after the rebuild')");
    expect(await servedRows(api, await currentLsn(url))).toEqual(await tableRows(url));
    // One rebuild, not one after another: it stays on the generation it switched to.
    await delay(3_000);
    const settled = await itemsOf(node);
    expect(settled).toMatchObject({
      servingCache: rebuilt.servingCache,
      phase: 'streaming',
      error: null,
      buildingCache: null,
    });

    const answers = await reader.stop();
    expect(reader.failed).toEqual([]);
    expect(new Set(answers.map((a) => a.cache))).toEqual(new Set([blue, rebuilt.servingCache]));
    expect(await slotsLeft(url, rebuilt.replication!.slot, slot)).toBe(true);
  });
});
