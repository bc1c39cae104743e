import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type CacheManager, openCacheManager } from '@sluice/cache';
import type { EndpointConfig } from '@sluice/core';
import { type ChildHandle, spawnTs, sql, tempDir, waitFor } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { allRecords } from '../../test/helpers.js';
import {
  cacheRows,
  committedLsn,
  confirmedFlush,
  tableRows,
  useLogicalPostgres,
} from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';
import { compareLsn } from './replication/lsn.js';

const CHILD = fileURLToPath(new URL('../../test/fixtures/replication-child.ts', import.meta.url));
const SLOT = 'sluice_r1_items_source';

const server = useLogicalPostgres();

const endpoint = (fields = true): EndpointConfig =>
  ({
    name: 'items',
    source: { type: 'postgres', connection: 'db', table: 'items' },
    primaryKey: ['id'],
    ...(fields ? { fields: { id: 'integer', v: 'integer', name: 'string' } } : {}),
    indexes: [['v']],
  }) as EndpointConfig;

async function itemsTable(url: string, rows: number) {
  await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, name text)');
  if (rows > 0)
    await sql(url, `INSERT INTO items SELECT i, i % 10, 'n' || i FROM generate_series(1, ${rows}) i`);
}

/** Random small transactions (upserts, updates, deletes, some several at once) until stopped. */
function startWriter(url: string, ids = 2_000) {
  let running = true;
  let transactions = 0;
  let failures = 0;
  let lastError = '';
  const done = (async () => {
    let client = new pg.Client({ connectionString: url });
    client.on('error', () => {});
    let connected = false;
    while (running) {
      try {
        if (!connected) {
          await client.connect();
          connected = true;
        }
        const id = 1 + Math.floor(Math.random() * ids);
        const kind = Math.random();
        if (kind < 0.5)
          await client.query(
            `INSERT INTO items VALUES ($1::int, $2::int, 'w' || $2::text) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, name = EXCLUDED.name`,
            [id, transactions],
          );
        else if (kind < 0.8) await client.query('DELETE FROM items WHERE id = $1', [id]);
        else
          await client.query(
            `BEGIN; UPDATE items SET v = v + 1 WHERE id BETWEEN ${id} AND ${id + 20}; DELETE FROM items WHERE id = ${id + 21}; COMMIT`,
          );
        transactions++;
      } catch (err) {
        // PostgreSQL restarting: the loop reconnects (a new client; a pg client connects once).
        failures++;
        lastError = (err as Error).message;
        connected = false;
        await client.end().catch(() => {});
        client = new pg.Client({ connectionString: url });
        client.on('error', () => {});
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    await client.end();
  })();
  return {
    get transactions() {
      return transactions;
    },
    get failures() {
      return failures;
    },
    get lastError() {
      return lastError;
    },
    async stop() {
      running = false;
      await done;
    },
  };
}

async function servedRows(root: string) {
  const caches = await openCacheManager(root, { readOnly: true });
  try {
    const cache = await caches.openRo('items');
    try {
      return { name: cache.name, rows: cacheRows(allRecords(cache)), state: cache.commitState() };
    } finally {
      await cache.close();
    }
  } finally {
    await caches.close();
  }
}

/** Waits until the endpoint serves exactly the table's rows, compared row by row. */
async function waitMirrored(root: string, url: string, what: string) {
  let last = '';
  await waitFor(
    async () => {
      const [table, served] = await Promise.all([tableRows(url, 'items'), servedRows(root)]);
      last = `table ${table.size} rows, cache ${served.rows.size}`;
      if (table.size !== served.rows.size) return false;
      for (const [id, row] of table) if (served.rows.get(id) !== row) return false;
      return served;
    },
    { timeoutMs: 30_000, what: `${what} (${last})` },
  );
  return servedRows(root);
}

function child(root: string, url: string) {
  return spawnTs(CHILD, [JSON.stringify({ root, url, endpoint: endpoint(), nodeId: 'r1' })]);
}

/** The generation the child reports once it serves (its `SERVING <cache>` line). */
async function servedGeneration(proc: ChildHandle): Promise<string> {
  return (await proc.waitForLine(/^SERVING /, 60_000)).split(' ')[1]!;
}

/** One test's world: database `name` with `rows` items and a data root in a fresh directory, removed on dispose. */
async function scenario(name: string, rows: number) {
  const dir = await tempDir();
  try {
    const url = await server.createDatabase(name);
    await itemsTable(url, rows);
    return { root: join(dir.path, 'data'), url, [Symbol.asyncDispose]: () => dir.remove() };
  } catch (err) {
    await dir.remove();
    throw err;
  }
}

/** The endpoint in this process, with short commit, retry and keepalive periods so a restart is seen quickly. */
function startInProcess(url: string, caches: CacheManager, config: EndpointConfig) {
  return startEndpointPipeline(config, {
    caches,
    events: { publish: async () => {} },
    connections: { db: { type: 'postgres', url } },
    nodeId: 'r1',
    commitEveryMs: 20,
    retryMs: 100,
    replication: { keepaliveMs: 200 },
  });
}

describe('replication source restarts (issue 16)', () => {
  it('SIGKILL mid-stream: the restart resumes in place (same cache) and ends equal to the table, row by row', {
    timeout: 120_000,
  }, async () => {
    await using world = await scenario('kill_stream', 1_000);
    const { root, url } = world;
    let firstCache = '';
    {
      await using first = child(root, url);
      firstCache = await servedGeneration(first);
      const writer = startWriter(url);
      // Killed while changes stream in: some epochs after the snapshot.
      const epochs = () => first.lines.filter((l) => l.startsWith('EPOCH ')).length;
      const at = epochs();
      await waitFor(() => epochs() >= at + 10 && writer.transactions > 200, {
        timeoutMs: 30_000,
        what: `epochs and writes (${writer.lastError})`,
      });
      first.kill('SIGKILL');
      await first.exited;
      // More changes while it is down.
      await new Promise((resolve) => setTimeout(resolve, 300));
      await writer.stop();
      expect(writer.lastError).toBe('');
    }
    const down = await servedRows(root);
    const table = await tableRows(url, 'items');
    expect(down.rows).not.toEqual(table); // the kill did leave changes to catch up

    await using second = child(root, url);
    const decision = await second.waitForLine(/^DECISION /, 60_000);
    expect(decision).toMatch(/^DECISION resume continuing in place/);
    const after = await waitMirrored(root, url, 'the resumed endpoint');
    expect(after.name).toBe(firstCache);
    const lsn = committedLsn(after.state.checkpoint, 'items.source')!;
    expect(compareLsn((await confirmedFlush(url, SLOT))!, lsn)).toBeLessThanOrEqual(0);
  });

  it('SIGKILL mid-snapshot: the restart continues the same green generation and is served only once consistent', {
    timeout: 120_000,
  }, async () => {
    await using world = await scenario('kill_snapshot', 60_000);
    const { root, url } = world;
    let green = '';
    {
      await using first = child(root, url);
      await first.waitForLine(/^EPOCH 5$/, 60_000);
      first.kill('SIGKILL');
      await first.exited;
      expect(first.lines.some((l) => l.startsWith('SERVING'))).toBe(false);
      const caches = await openCacheManager(root, { readOnly: true });
      try {
        const generations = (await caches.list()).filter((c) => c.endpoint === 'items');
        expect(generations).toHaveLength(1);
        green = generations[0]!.name;
        expect(caches.resolveAlias('items')).toBeNull();
      } finally {
        await caches.close();
      }
    }
    // Changes while it is down, to rows already read and not yet read by the snapshot.
    await sql(url, 'UPDATE items SET v = v + 1000 WHERE id % 7 = 0');
    await sql(url, 'DELETE FROM items WHERE id % 11 = 0');
    await sql(url, "INSERT INTO items SELECT i, 1, 'late' FROM generate_series(60001, 60500) i");

    await using second = child(root, url);
    expect(await second.waitForLine(/^DECISION /, 60_000)).toMatch(/^DECISION resume continuing the rebuild/);
    expect(await servedGeneration(second)).toBe(green);
    // Served = complete: equal to the table as soon as the alias points at it.
    const served = await servedRows(root);
    const table = await tableRows(url, 'items');
    expect(served.rows.size).toBe(table.size);
    for (const [id, row] of table) expect(served.rows.get(id), `row ${id}`).toBe(row);
  });

  it('slot dropped while down: a new generation from a fresh snapshot while the old one serves, then the switch', {
    timeout: 120_000,
  }, async () => {
    await using world = await scenario('slot_dropped', 2_000);
    const { root, url } = world;
    let blue = '';
    {
      await using first = child(root, url);
      blue = await servedGeneration(first);
      await waitMirrored(root, url, 'the first generation');
    }
    await waitFor(
      async () => (await sql(url, 'SELECT 1 FROM pg_replication_slots WHERE active_pid IS NULL')).length > 0,
    );
    await sql(url, 'SELECT pg_drop_replication_slot($1)', [SLOT]);
    await sql(url, 'DELETE FROM items WHERE id > 1500');
    await sql(url, 'UPDATE items SET v = 99 WHERE id <= 10');

    // Readers keep reading the alias the whole time: every read answers, from a complete generation.
    await using reader = await openCacheManager(root, { readOnly: true });
    let reading = true;
    const counts = new Set<number>();
    let failures = 0;
    const readLoop = (async () => {
      while (reading) {
        try {
          const cache = await reader.openRo('items');
          counts.add(cache.count({}));
          await cache.close();
        } catch {
          failures++;
        }
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();

    await using second = child(root, url);
    expect(await second.waitForLine(/^DECISION /, 60_000)).toMatch(
      /^DECISION from-scratch .*replication slot sluice_r1_items_source no longer exists/,
    );
    const green = await servedGeneration(second);
    expect(green).not.toBe(blue);
    const after = await waitMirrored(root, url, 'the new generation');
    // The loop reads every 5 ms, but under load its next read can come after this line: the reads go on until one
    // of them has seen the new generation (or the wait fails the test).
    await waitFor(() => counts.has(1_500), { timeoutMs: 30_000, what: 'a read of the new generation' });
    reading = false;
    await readLoop;
    expect(after.name).toBe(green);
    expect(failures).toBe(0);
    expect([...counts].sort((a, b) => a - b)).toEqual([1_500, 2_000]); // the old generation, then the new one
  });

  it('PostgreSQL restarted mid-stream: the endpoint reconnects, resumes in place and catches up', {
    timeout: 120_000,
  }, async () => {
    await using world = await scenario('pg_restart', 500);
    const { root, url } = world;
    const caches = await openCacheManager(root);
    const pipeline = await startInProcess(url, caches, endpoint());
    try {
      const served = await pipeline.whenServing({ timeoutMs: 30_000 });
      let writer = startWriter(url, 500);
      await waitFor(() => writer.transactions > 100, { timeoutMs: 30_000 });
      await server.restart('fast');
      await writer.stop();
      writer = startWriter(url, 500);
      await waitFor(() => writer.transactions > 100, { timeoutMs: 30_000 });
      await writer.stop();
      const after = await waitMirrored(root, url, 'catching up after the restart');
      expect(after.name).toBe(served);
      expect(pipeline.decision.decision).toBe('resume');
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });

  it('table schema changes in the stream: an added column continues; a retyped one builds a new generation', {
    timeout: 120_000,
  }, async () => {
    await using world = await scenario('schema_change', 100);
    const { root, url } = world;
    const caches = await openCacheManager(root);
    const pipeline = await startInProcess(url, caches, endpoint(false));
    try {
      const first = await pipeline.whenServing({ timeoutMs: 30_000 });
      await sql(url, 'ALTER TABLE items ADD COLUMN extra text');
      await sql(url, "UPDATE items SET extra = 'e' || id WHERE id <= 5");
      const added = await waitMirrored(root, url, 'the added column');
      expect(added.name).toBe(first);

      await sql(url, "ALTER TABLE items ALTER COLUMN v TYPE text USING 'v' || v");
      await sql(url, "UPDATE items SET v = 'changed' WHERE id = 1");
      const retyped = await waitMirrored(root, url, 'the retyped column');
      expect(retyped.name).not.toBe(first);
      expect((await caches.info(retyped.name))?.schema.fields.v).toBe('string');
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });

  it('defect: a column added with a default left the rows already there without it (no change of theirs streams)', {
    timeout: 120_000,
  }, async () => {
    await using world = await scenario('added_default', 100);
    const { root, url } = world;
    {
      const caches = await openCacheManager(root);
      const pipeline = await startInProcess(url, caches, endpoint(false));
      try {
        const first = await pipeline.whenServing({ timeoutMs: 30_000 });
        // PostgreSQL answers 7 for every existing row (a "missing" value in the catalog), and nothing streams.
        await sql(url, 'ALTER TABLE items ADD COLUMN flag int NOT NULL DEFAULT 7');
        // Before: timed out — the cache's 100 rows never had `flag`.
        const filled = await waitMirrored(root, url, 'the rows already there to hold the default');
        expect(filled.name).not.toBe(first);
        expect((await caches.info(filled.name))?.schema.fields.flag).toBe('integer');
        // A column added without one reads null in the rows already there: the generation goes on.
        await sql(url, 'ALTER TABLE items ADD COLUMN note text');
        await sql(url, "UPDATE items SET note = 'n' WHERE id = 3");
        const noted = await waitMirrored(root, url, 'the column added without a default');
        expect(noted.name).toBe(filled.name);
      } finally {
        await pipeline.stop();
        await caches.close();
      }
    }
    // Stopped, then a column with a volatile default (PostgreSQL rewrites the table): the restart rebuilds.
    await sql(url, 'ALTER TABLE items ADD COLUMN stamp text DEFAULT md5(random()::text)');
    const caches = await openCacheManager(root);
    const pipeline = await startInProcess(url, caches, endpoint(false));
    try {
      expect(pipeline.decision).toMatchObject({
        decision: 'from-scratch',
        reason: expect.stringMatching(/^the source changed \(.*"stamp"/),
      });
      await pipeline.whenServing({ timeoutMs: 30_000 });
      await waitMirrored(root, url, 'the restarted endpoint with the rewritten column');
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});
