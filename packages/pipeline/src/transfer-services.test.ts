import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { CheckpointPort, TransferRequest } from '@sluice/core';
import { createTestDatabase, startNatsServer, tempDir } from '@sluice/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryCheckpointPort } from '../test/helpers.js';
import { runTransfer } from './transfer.js';

const base = { mode: 'idempotent', properties: {}, options: { onBadRecord: 'skip' } } as const;

describe('PostgreSQL source and sink', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let client: pg.Client;
  beforeAll(async () => {
    db = await createTestDatabase('sluice_pipeline');
    client = new pg.Client({ connectionString: db.url });
    await client.connect();
    await client.query(
      `CREATE TABLE src (id bigint PRIMARY KEY, name text NOT NULL, value double precision, updated_at timestamptz NOT NULL DEFAULT now())`,
    );
    await client.query(
      `INSERT INTO src (id, name, value) SELECT g, 'n' || g, g * 0.5 FROM generate_series(1, 3000) g`,
    );
    await client.query(
      `CREATE TABLE dst (id bigint PRIMARY KEY, name text NOT NULL, value double precision, updated_at timestamptz)`,
    );
    // Every committed physical write into dst leaves a row here: a replayed upsert would show, dst would not.
    await client.query('CREATE TABLE dst_writes (id bigint NOT NULL)');
    await client.query(`CREATE FUNCTION count_write() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN INSERT INTO dst_writes VALUES (NEW.id); RETURN NEW; END $$`);
    await client.query(
      'CREATE TRIGGER dst_counted AFTER INSERT OR UPDATE ON dst FOR EACH ROW EXECUTE FUNCTION count_write()',
    );
  });
  afterAll(async () => {
    await client?.end();
    await db?.drop();
  });

  const request = (id: string): TransferRequest => ({
    ...base,
    id,
    source: { type: 'postgres', connection: 'wh', table: 'src', key: 'id' },
    destination: { type: 'postgres', connection: 'wh', table: 'dst', key: 'id' },
  });

  it('copies a table by keyset pages, resumes after termination, and upserts each row once', async () => {
    const port = memoryCheckpointPort();
    const controller = new AbortController();
    const connections = { wh: { type: 'postgres' as const, url: db.url } };
    await expect(
      runTransfer(request('pg-copy'), {
        checkpoint: port,
        connections,
        signal: controller.signal,
        commitEveryRecords: 500,
        onProgress: (p) => {
          if (p.epoch >= 2) controller.abort();
        },
      }),
    ).rejects.toMatchObject({ code: 'TRANSFER_TERMINATED' });
    const partial = Number((await client.query('SELECT count(*) FROM dst')).rows[0].count);
    expect(partial).toBeGreaterThanOrEqual(1000);
    expect(partial).toBeLessThan(3000);

    const result = await runTransfer(request('pg-copy'), {
      checkpoint: port,
      connections,
      signal: new AbortController().signal,
      commitEveryRecords: 500,
    });
    expect(result.decision).toBe('resume');
    expect(result.recordsWritten).toBe(3000);
    const rows = await client.query(
      'SELECT count(*)::int AS n, count(DISTINCT id)::int AS d, sum(id)::bigint AS s FROM dst',
    );
    expect(rows.rows[0]).toEqual({ n: 3000, d: 3000, s: String((3000 * 3001) / 2) });
    const diff = await client.query(
      'SELECT count(*)::int AS n FROM src s FULL JOIN dst d USING (id) WHERE d.id IS NULL OR s.id IS NULL OR s.name <> d.name OR s.value <> d.value OR s.updated_at <> d.updated_at',
    );
    expect(diff.rows[0].n).toBe(0);
    // Once: the resumed run wrote only what the terminated one had not committed.
    const writes = await client.query(
      'SELECT count(*)::int AS n, count(DISTINCT id)::int AS d FROM dst_writes',
    );
    expect(writes.rows[0]).toEqual({ n: 3000, d: 3000 });
  });

  it('refuses an unknown connection with a typed error', async () => {
    await expect(
      runTransfer(request('pg-unknown'), {
        checkpoint: memoryCheckpointPort(),
        connections: {},
        signal: new AbortController().signal,
      }),
    ).rejects.toMatchObject({ code: 'UNKNOWN_CONNECTION' });
  });
});

describe('JetStream source and sink', () => {
  let nats: Awaited<ReturnType<typeof startNatsServer>>;
  beforeAll(async () => {
    nats = await startNatsServer();
  });
  afterAll(async () => {
    await nats?.[Symbol.asyncDispose]();
  });

  /** Runs `request` against this file's NATS server with `checkpoint` (the transfer reads no connections). */
  const runOnNats = (
    request: TransferRequest,
    checkpoint: CheckpointPort,
    options: Omit<Parameters<typeof runTransfer>[1], 'checkpoint' | 'connections' | 'nats'>,
  ) => runTransfer(request, { checkpoint, connections: {}, nats: nats.url, ...options });

  async function withStreams<T>(fn: (jsm: Awaited<ReturnType<typeof jetstreamManager>>) => Promise<T>) {
    const nc = await connect({ servers: nats.url });
    try {
      return await fn(await jetstreamManager(nc));
    } finally {
      await nc.close();
    }
  }

  it('copies a stream with dedupe ids: a resumed transfer duplicates nothing', async () => {
    await withStreams(async (jsm) => {
      await jsm.streams.add({ name: 'SRC1', subjects: ['src1.>'] });
      await jsm.streams.add({ name: 'DST1', subjects: ['dst1.>'], duplicate_window: 120_000_000_000 });
      const js = jsm.jetstream();
      for (let i = 0; i < 2000; i++) await js.publish('src1.items', JSON.stringify({ id: i, v: i * 2 }));
    });
    const request: TransferRequest = {
      ...base,
      id: 'js-copy',
      source: { type: 'jetstream', stream: 'SRC1', subject: 'src1.>', key: 'id' },
      destination: { type: 'jetstream', stream: 'DST1', subject: 'dst1.items', key: 'id' },
    };
    const port = memoryCheckpointPort();
    const controller = new AbortController();
    await expect(
      runOnNats(request, port, {
        signal: controller.signal,
        commitEveryRecords: 300,
        onProgress: (p) => {
          if (p.epoch >= 2) controller.abort();
        },
      }),
    ).rejects.toMatchObject({ code: 'TRANSFER_TERMINATED' });
    // Replay part of what was already published: roll the checkpoint back one epoch's worth by starting over.
    // No checkpoint: from scratch, every record published again.
    const result = await runOnNats(request, memoryCheckpointPort(), {
      signal: new AbortController().signal,
      commitEveryRecords: 300,
    });
    expect(result.decision).toBe('from-scratch');
    expect(result.recordsWritten).toBe(2000);
    const resumed = await runOnNats(request, port, {
      signal: new AbortController().signal,
      commitEveryRecords: 300,
    });
    expect(resumed.decision).toBe('resume');
    await withStreams(async (jsm) => {
      const info = await jsm.streams.info('DST1');
      expect(info.state.messages).toBe(2000);
      const ids = new Set<number>();
      const consumer = await jsm.jetstream().consumers.get('DST1');
      const messages = await consumer.fetch({ max_messages: 2000, expires: 2000 });
      for await (const m of messages) {
        ids.add((m.json() as { id: number }).id);
        if (ids.size === 2000) break;
      }
      expect(ids.size).toBe(2000);
    });
  });

  it('cannot resume once the stream discarded the next sequence, and starts from scratch', async () => {
    await withStreams(async (jsm) => {
      await jsm.streams.add({ name: 'SRC2', subjects: ['src2.>'] });
      const js = jsm.jetstream();
      for (let i = 0; i < 1000; i++) await js.publish('src2.items', JSON.stringify({ id: i }));
    });
    await using dir = await tempDir();
    const out = join(dir.path, 'out.jsonl');
    const request: TransferRequest = {
      ...base,
      id: 'js-purged',
      source: { type: 'jetstream', stream: 'SRC2', subject: 'src2.>' },
      destination: { type: 'file', path: out, format: 'jsonl' },
    };
    const port = memoryCheckpointPort();
    const controller = new AbortController();
    await expect(
      runOnNats(request, port, {
        signal: controller.signal,
        commitEveryRecords: 200,
        onProgress: (p) => {
          if (p.epoch >= 1) controller.abort();
        },
      }),
    ).rejects.toMatchObject({ code: 'TRANSFER_TERMINATED' });
    await withStreams(async (jsm) => {
      await jsm.streams.purge('SRC2', { keep: 100 });
    });
    const result = await runOnNats(request, port, {
      signal: new AbortController().signal,
    });
    expect(result.decision).toBe('from-scratch');
    expect(result.reason).toMatch(/no longer retains sequence/);
    expect(result.recordsWritten).toBe(100);
    await writeFile(join(dir.path, 'marker'), '');
  });
});
