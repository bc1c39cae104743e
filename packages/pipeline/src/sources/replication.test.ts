import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { canonicalTimestamp, type EndpointConfig, parseQuery, SluiceError } from '@sluice/core';
import { createTestDatabase, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { allRecords } from '../../test/helpers.js';
import {
  createPgValueTypes,
  ENDPOINT_CASES,
  expectedPgValues,
  insertPgValuesSql,
  PG_VALUES_TABLE_SQL,
} from '../../test/pg-values.js';
import {
  cacheRows,
  committedLsn,
  confirmedFlush,
  replicationContext,
  tableRows,
  useLogicalPostgres,
} from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';
import { compareLsn } from './replication/lsn.js';

const SLOT = 'sluice_t1_items_source';

const server = useLogicalPostgres();

const endpoint = (extra: Partial<EndpointConfig['source']> = {}): EndpointConfig =>
  ({
    name: 'items',
    source: { type: 'postgres', connection: 'db', table: 'items', ...extra },
    primaryKey: ['id'],
    fields: { id: 'integer', v: 'integer', name: 'string' },
    indexes: [['v'], ['name']],
  }) as EndpointConfig;

async function start(
  root: string,
  url: string,
  config = endpoint(),
  replication: { keepaliveMs: number } = { keepaliveMs: 200 },
) {
  const caches = await openCacheManager(root);
  const pipeline = await startEndpointPipeline(config, replicationContext(caches, url, { replication }));
  return {
    caches,
    pipeline,
    async [Symbol.asyncDispose]() {
      await pipeline.stop();
      await caches.close();
    },
  };
}

type Started = Awaited<ReturnType<typeof start>>;

async function served(started: Started) {
  const cache = await started.caches.openRo('items');
  try {
    return { records: allRecords(cache), state: cache.commitState() };
  } finally {
    await cache.close();
  }
}

/** Waits until the endpoint serves exactly the table's rows. */
async function waitMirrored(started: Started, url: string, what: string) {
  await waitFor(
    async () => {
      const [table, { records }] = await Promise.all([tableRows(url, 'items'), served(started)]);
      const cache = cacheRows(records);
      if (cache.size !== table.size) return false;
      for (const [id, row] of table) if (cache.get(id) !== row) return false;
      return true;
    },
    { timeoutMs: 20_000, what },
  );
}

async function itemsTable(url: string, rows: number) {
  await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, name text)');
  if (rows > 0)
    await sql(url, `INSERT INTO items SELECT i, i % 10, 'n' || i FROM generate_series(1, ${rows}) i`);
}

describe('PostgreSQL logical replication source (issue 16)', () => {
  it('mirrors a table: snapshot, then inserts, updates, deletes and truncate; confirms only committed LSNs', async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('mirror');
    await itemsTable(url, 250);
    await using started = await start(join(dir.path, 'data'), url);
    expect(started.pipeline.decision.decision).toBe('from-scratch');
    await started.pipeline.whenServing({ timeoutMs: 30_000 });
    await waitMirrored(started, url, 'the snapshot');
    expect((await served(started)).records).toHaveLength(250);

    await sql(url, 'INSERT INTO items SELECT i, 7, NULL FROM generate_series(251, 300) i');
    await sql(url, "UPDATE items SET v = v + 100, name = 'changed' WHERE id <= 20");
    await sql(url, 'DELETE FROM items WHERE id BETWEEN 100 AND 149');
    await sql(url, 'UPDATE items SET id = 1000 WHERE id = 1'); // a key change: delete + insert
    await waitMirrored(started, url, 'inserts, updates, deletes');
    const after = await served(started);
    expect(after.records).toHaveLength(250);
    expect(after.records.find((r) => r.id === 1)).toBeUndefined();
    expect(after.records.find((r) => r.id === 1000)).toMatchObject({ v: 101, name: 'changed' });
    // Deleted rows left their index entries too: a query by the indexed field finds none of them.
    const byName = await started.caches.openRo('items');
    try {
      expect(byName.query(parseQuery({ $filter: { name: 'n120' } })).records).toEqual([]);
      expect(byName.query(parseQuery({ $filter: { name: 'n150' } })).records).toEqual([
        { id: 150, v: 0, name: 'n150' },
      ]);
      const n = (await sql<{ n: number }>(url, 'SELECT count(*)::int AS n FROM items WHERE v = 7'))[0]!.n;
      expect(n).toBe(68); // 25 of the first 250, less 2 updated and 5 deleted, plus the 50 new ones
      expect(byName.count({ v: 7 })).toBe(68);
    } finally {
      await byName.close();
    }

    // The slot is confirmed at most up to what the cache committed, and reaches it.
    await waitFor(
      async () => {
        const lsn = committedLsn((await served(started)).state.checkpoint, 'items.source');
        const confirmed = await confirmedFlush(url, SLOT);
        if (lsn === null || confirmed === null) return false;
        expect(compareLsn(confirmed, lsn)).toBeLessThanOrEqual(0);
        return compareLsn(confirmed, lsn) === 0;
      },
      { what: 'the slot confirmed at the cache LSN' },
    );

    await sql(
      url,
      'BEGIN; INSERT INTO items VALUES (5000, 1, $$x$$); TRUNCATE items; INSERT INTO items VALUES (5001, 2, $$y$$); COMMIT',
    );
    await waitMirrored(started, url, 'the truncate');
    expect((await served(started)).records.map((r) => r.id)).toEqual([5001]);
  });

  it('a 10 000-row transaction appears all at once: a sampling reader never sees a count in between', async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('atomic');
    await itemsTable(url, 100);
    const root = join(dir.path, 'data');
    await using started = await start(root, url);
    await started.pipeline.whenServing({ timeoutMs: 30_000 });
    await waitMirrored(started, url, 'the snapshot');

    // A reader as an api-server has one: a read-only manager on the same files.
    await using reader = await openCacheManager(root, { readOnly: true });
    const seen = new Set<number>();
    let sampling = true;
    const sampler = (async () => {
      const cache = await reader.openRo('items');
      try {
        while (sampling) {
          seen.add(cache.count({}));
          await new Promise((resolve) => setImmediate(resolve));
        }
      } finally {
        await cache.close();
      }
    })();
    await sql(url, 'INSERT INTO items SELECT i, i % 10, NULL FROM generate_series(1001, 11000) i');
    await waitFor(() => seen.has(10_100), { timeoutMs: 30_000, what: 'the transaction to appear' });
    sampling = false;
    await sampler;
    expect([...seen].sort((a, b) => a - b)).toEqual([100, 10_100]);
    await waitMirrored(started, url, 'the big transaction');
  });

  it('an idle slot advances: keepalives move the committed LSN past other tables’ WAL', async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('idle');
    await itemsTable(url, 10);
    await sql(url, 'CREATE TABLE other (id serial PRIMARY KEY, x int)');
    await using started = await start(join(dir.path, 'data'), url);
    await started.pipeline.whenServing({ timeoutMs: 30_000 });
    const before = committedLsn((await served(started)).state.checkpoint, 'items.source')!;
    await sql(url, 'INSERT INTO other (x) SELECT i FROM generate_series(1, 1000) i');
    const written = (await sql<{ lsn: string }>(url, 'SELECT pg_current_wal_lsn()::text AS lsn'))[0]!.lsn;
    await waitFor(
      async () => {
        const confirmed = await confirmedFlush(url, SLOT);
        return confirmed !== null && compareLsn(confirmed, written) >= 0;
      },
      { timeoutMs: 15_000, what: 'the slot to pass WAL of a table the endpoint does not read' },
    );
    const after = committedLsn((await served(started)).state.checkpoint, 'items.source')!;
    expect(compareLsn(after, before)).toBe(1);
    expect(compareLsn((await confirmedFlush(url, SLOT))!, after)).toBeLessThanOrEqual(0);
  });

  it('heartbeat: its row is written every interval through the publication; the idle slot passes other tables’ WAL with keepalive requests off', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('heartbeat');
    await itemsTable(url, 10);
    await sql(url, 'CREATE TABLE other (id serial PRIMARY KEY, x int)');
    // Keepalive requests every 10 minutes: only the heartbeat can move the slot within the test.
    const config = endpoint({ heartbeat: { intervalMs: 200 } } as Partial<EndpointConfig['source']>);
    await using started = await start(join(dir.path, 'data'), url, config, { keepaliveMs: 600_000 });
    await started.pipeline.whenServing({ timeoutMs: 30_000 });
    const before = (await confirmedFlush(url, SLOT))!;
    for (let i = 0; i < 5; i++) {
      await sql(url, 'INSERT INTO other (x) SELECT i FROM generate_series(1, 1000) i');
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const written = (await sql<{ lsn: string }>(url, 'SELECT pg_current_wal_lsn()::text AS lsn'))[0]!.lsn;
    await waitFor(
      async () => {
        const confirmed = await confirmedFlush(url, SLOT);
        return confirmed !== null && compareLsn(confirmed, written) >= 0;
      },
      { timeoutMs: 15_000, what: 'the slot to pass the other table’s WAL' },
    );
    expect(compareLsn((await confirmedFlush(url, SLOT))!, before)).toBe(1);
    const beat = async () =>
      (await sql<{ slot: string; at: Date }>(url, 'SELECT slot, at FROM sluice_heartbeat'))[0]!;
    const first = await beat();
    expect(first.slot).toBe(SLOT);
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect((await beat()).at.getTime()).toBeGreaterThan(first.at.getTime());
    expect(await sql(url, 'SELECT * FROM sluice_heartbeat')).toHaveLength(1);
    const published = await sql<{ tablename: string }>(
      url,
      'SELECT tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY tablename',
      [SLOT],
    );
    expect(published.map((p) => p.tablename)).toEqual(['items', 'sluice_heartbeat']);
    // The heartbeat rows are not the endpoint's records.
    expect((await served(started)).records).toHaveLength(10);
  });

  it('defect: streamed rows read a domain over int4 as text (every one refused as a bad record), a date as a Date, timestamp and date arrays as Dates, bytea as a Buffer; they read as JSON values, exactly like snapshot rows', async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('pgvalues');
    await createPgValueTypes((statement) => sql(url, statement));
    await sql(url, PG_VALUES_TABLE_SQL);
    await sql(url, insertPgValuesSql(1)); // read by the snapshot
    const config = {
      name: 'pgvalues',
      source: { type: 'postgres', connection: 'db', table: 'pgvalues' },
      primaryKey: ['id'],
      indexes: [],
    } as EndpointConfig;
    await using started = await start(join(dir.path, 'data'), url, config);
    await started.pipeline.whenServing({ timeoutMs: 30_000 });
    await sql(url, insertPgValuesSql(2)); // streamed: pgoutput's text through textParser
    const records = await waitFor(
      async () => {
        const cache = await started.caches.openRo('pgvalues');
        try {
          const all = allRecords(cache);
          // A streamed row the schema refused never arrives: fail with its reason rather than time out.
          expect(started.pipeline.status().badRecords.last?.reason ?? null).toBeNull();
          return all.length === 2 ? all : null;
        } finally {
          await cache.close();
        }
      },
      { timeoutMs: 20_000, what: 'the streamed row' },
    );
    // The cache keeps `timestamp` fields as the instant's canonical UTC text (core's `canonicalTimestamp`).
    const expected = expectedPgValues(ENDPOINT_CASES);
    const served = {
      ...expected,
      ts: canonicalTimestamp(expected.ts),
      tstz: canonicalTimestamp(expected.tstz),
    };
    expect(records).toEqual([
      { id: 1, ...served },
      { id: 2, ...served },
    ]);
    expect(started.pipeline.status().badRecords.count).toBe(0);
  });

  it('misconfigurations stop start-up with their code: wal_level, REPLICATION privilege, no primary key', async () => {
    await using dir = await tempDir();
    const codeOf = async (url: string, config = endpoint()) => {
      const caches = await openCacheManager(join(dir.path, `data-${Math.random()}`));
      try {
        const pipeline = await startEndpointPipeline(config, {
          caches,
          events: { publish: async () => {} },
          connections: { db: { type: 'postgres', url } },
          nodeId: 't1',
        });
        await pipeline.stop();
        return 'started';
      } catch (err) {
        expect(SluiceError.isInstance(err)).toBe(true);
        return `${(err as SluiceError).code}: ${(err as Error).message}`;
      } finally {
        await caches.close();
      }
    };

    // The machine's shared server runs wal_level=replica.
    await using replica = await createTestDatabase('sluice_i16_replica');
    await sql(replica.url, 'CREATE TABLE items (id int PRIMARY KEY, v int, name text)');
    expect(await codeOf(replica.url)).toMatch(/^REPLICATION_NOT_ENABLED: .*wal_level=logical/);

    const url = await server.createDatabase('misconfig');
    await itemsTable(url, 3);
    await sql(url, 'CREATE ROLE plain LOGIN');
    await sql(url, 'GRANT SELECT ON items TO plain');
    const plainUrl = url.replace('postgres@', 'plain@');
    expect(await codeOf(plainUrl)).toMatch(/^REPLICATION_NOT_PERMITTED: .*WITH REPLICATION/);

    await sql(url, 'CREATE TABLE nokey (id int, v int, name text)');
    expect(
      await codeOf(url, { ...endpoint(), source: { type: 'postgres', connection: 'db', table: 'nokey' } }),
    ).toMatch(/^REPLICA_IDENTITY_MISSING: .*primary key/);
    // Nothing was created on the way: no slot for any of them.
    expect(
      await sql(url, 'SELECT slot_name FROM pg_replication_slots WHERE database = current_database()'),
    ).toEqual([]);
  });
});
