import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { openCacheManager } from '@sluice/cache';
import type { SluiceEvent } from '@sluice/core';
import { createTestDatabase, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { startEndpointPipeline } from './endpoint.js';

function collector() {
  const events: SluiceEvent[] = [];
  return { events, publish: async (event: SluiceEvent) => void events.push(event) };
}

type Caches = Awaited<ReturnType<typeof openCacheManager>>;
type Served = Awaited<ReturnType<Caches['openRo']>>;

/** Runs `read` on the generation `items` serves now, and closes it. */
async function readItems<T>(caches: Caches, read: (cache: Served) => T): Promise<T> {
  const cache = await caches.openRo('items');
  try {
    return read(cache);
  } finally {
    await cache.close();
  }
}

/** An `items` endpoint (`id`, `v`) over the PostgreSQL table `items` at `url`, incremental by `cursor`. */
function startPostgresItems(caches: Caches, url: string, cursor: string, indexes: string[][]) {
  return startEndpointPipeline(
    {
      name: 'items',
      source: { type: 'postgres', connection: 'db', table: 'items', key: 'id', cursor },
      primaryKey: ['id'],
      indexes,
      select: ['id', 'v'],
    },
    { caches, events: collector(), connections: { db: { type: 'postgres', url } }, commitEveryMs: 50 },
  );
}

describe('endpoints over JetStream and PostgreSQL', () => {
  it('JetStream: resumes while the stream retains the next sequence, rebuilds once it was purged', async () => {
    await using nats = await startNatsServer();
    await using dir = await tempDir();
    const nc = await connect({ servers: nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'ITEMS', subjects: ['items.>'] });
      const js = jsm.jetstream();
      const publish = async (from: number, n: number) => {
        await Promise.all(
          Array.from({ length: n }, (_, i) =>
            js.publish('items.upsert', JSON.stringify({ id: from + i, v: from + i })),
          ),
        );
      };
      await publish(0, 300);
      const events = collector();
      const config = {
        name: 'items',
        source: { type: 'jetstream' as const, stream: 'ITEMS', subject: 'items.>', key: 'id' },
        primaryKey: ['id'],
        fields: { id: 'integer' as const, v: 'integer' as const },
        indexes: [['v']],
      };
      await using caches = await openCacheManager(join(dir.path, 'data'));
      const ctx = { caches, events, connections: {}, nats: nats.url, commitEveryMs: 50 };
      const first = await startEndpointPipeline(config, ctx);
      const blue = await first.whenServing();
      await publish(300, 50); // streamed after the snapshot
      await waitFor(() => readItems(caches, (cache) => cache.count({}) === 350));
      await first.stop();
      // A stopped pipeline leaves no consumer behind on the stream (not even until its inactivity timeout).
      const consumers = [];
      for await (const c of jsm.consumers.list('ITEMS')) consumers.push(c.name);
      expect(consumers).toEqual([]);

      await publish(350, 10);
      const second = await startEndpointPipeline(config, ctx);
      expect(second.decision.decision).toBe('resume');
      // Resumed at sequence 351: a replay from sequence 1 would only reach the 360th record after 350 more writes.
      await waitFor(() => readItems(caches, (cache) => cache.count({}) === 360), {
        what: 'resumed stream read',
      });
      expect(second.status().progress.recordsWritten).toBe(360);
      expect(caches.resolveAlias('items')?.cache).toBe(blue);
      await second.stop();

      await publish(360, 40);
      await jsm.streams.purge('ITEMS', { keep: 20 }); // discards sequences the checkpoint still needs
      const third = await startEndpointPipeline(config, ctx);
      expect(third.decision.decision).toBe('from-scratch');
      expect(third.decision.reason).toMatch(/no longer retains sequence/);
      const green = await third.whenServing();
      expect(green).not.toBe(blue);
      await readItems(caches, (cache) => {
        expect(cache.count({})).toBe(20);
        expect(cache.get([399])).toEqual({ id: 399, v: 399 });
      });
      expect(events.events.filter((e) => e.type === 'AliasRedirected')).toHaveLength(2);
      await third.stop();
    } finally {
      await nc.close();
    }
  });

  it('PostgreSQL: a change committed late, with a cursor value older than rows already read, is still seen', async () => {
    await using db = await createTestDatabase('sluice_pipeline_late');
    await using dir = await tempDir();
    const client = new pg.Client({ connectionString: db.url });
    const slow = new pg.Client({ connectionString: db.url });
    await client.connect();
    await slow.connect();
    try {
      await client.query(
        'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())',
      );
      await client.query('INSERT INTO items (id, v) SELECT g, g FROM generate_series(1, 100) g');
      await using caches = await openCacheManager(join(dir.path, 'data'));
      const pipeline = await startPostgresItems(caches, db.url, 'updated_at', []);
      await pipeline.whenServing();
      const cachedValue = (id: number) => readItems(caches, (cache) => cache.get([id])?.v);
      // A long transaction takes its updated_at (now() = its start) first…
      await slow.query('BEGIN');
      await slow.query('UPDATE items SET v = -20, updated_at = now() WHERE id = 20');
      await new Promise((r) => setTimeout(r, 200));
      // …a quick one with a later updated_at commits and is read: the cursor moves past the slow one's value…
      await client.query('UPDATE items SET v = -30, updated_at = now() WHERE id = 30');
      await waitFor(async () => (await cachedValue(30)) === -30, {
        timeoutMs: 15_000,
        what: 'the quick update',
      });
      await new Promise((r) => setTimeout(r, 1_500)); // a poll or two later
      // …and only then the slow one commits.
      await slow.query('COMMIT');
      await waitFor(async () => (await cachedValue(20)) === -20, {
        timeoutMs: 8_000,
        what: 'the late-committed update',
      });
      expect(await cachedValue(30)).toBe(-30);
      await pipeline.stop();
    } finally {
      await slow.end();
      await client.end();
    }
  });

  it('PostgreSQL: snapshot by keyset, then changed rows by the cursor column', async () => {
    await using db = await createTestDatabase('sluice_pipeline_ep');
    await using dir = await tempDir();
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      await client.query('CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, rev bigserial)');
      await client.query('INSERT INTO items (id, v) SELECT g, g FROM generate_series(1, 500) g');
      await using caches = await openCacheManager(join(dir.path, 'data'));
      const pipeline = await startPostgresItems(caches, db.url, 'rev', [['v']]);
      await pipeline.whenServing();
      await client.query(`UPDATE items SET v = -v, rev = nextval('items_rev_seq') WHERE id <= 10`);
      await client.query('INSERT INTO items (id, v) VALUES (501, 501)');
      await waitFor(
        () =>
          readItems(
            caches,
            (cache) => cache.count({}) === 501 && cache.get([5])?.v === -5 && cache.get([501])?.v === 501,
          ),
        { timeoutMs: 15_000, what: 'incremental changes' },
      );
      expect(pipeline.status().progress.phase).toBe('streaming');
      await pipeline.stop();
    } finally {
      await client.end();
    }
  });
});
