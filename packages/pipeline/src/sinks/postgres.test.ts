import { setTimeout as delay } from 'node:timers/promises';
import type { PipelineCheckpoint } from '@sluice/core';
import { createTestDatabase, type TestDatabase } from '@sluice/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RecordOp } from '../ops.js';
import { createPostgresSink, type PostgresSinkOptions } from './postgres.js';

const checkpoint = (epoch: number): PipelineCheckpoint => ({
  dag: 'd',
  epoch,
  positions: {},
  at: new Date().toISOString(),
});
const upserts = (ids: number[], name: string): RecordOp[] =>
  ids.map((id) => ({ op: 'upsert', record: { id, name }, at: { source: 's', offset: id } }));

describe('PostgreSQL sink effects are fenced in the destination database', () => {
  let db: TestDatabase;
  let client: pg.Client;
  beforeAll(async () => {
    db = await createTestDatabase('sluice_pipeline_pgfence');
    client = new pg.Client({ connectionString: db.url });
    await client.connect();
  });
  afterAll(async () => {
    await client?.end();
    await db?.drop();
  });
  const sinkAt = (table: string, epoch: number, extra: Partial<PostgresSinkOptions> = {}) =>
    createPostgresSink({
      handle: `${table}.sink`,
      url: db.url,
      table,
      writerId: `t-${table}`,
      fence: { epoch, finishing: async () => {} },
      ...extra,
    });

  it("a stale epoch's transaction is refused with STALE_EPOCH once a newer epoch wrote", async () => {
    await client.query('CREATE TABLE stale_dst (id int PRIMARY KEY, name text)');
    const stale = sinkAt('stale_dst', 1);
    const owner = sinkAt('stale_dst', 2);
    try {
      await stale.prepare({ decision: 'from-scratch', checkpoint: null });
      await stale.write(upserts([1, 2], 'e1'));
      await stale.commit(checkpoint(1));
      await owner.prepare({ decision: 'resume', checkpoint: null });
      await owner.write(upserts([3], 'e2'));
      await owner.commit(checkpoint(2));
      // The stale owner wakes up and writes again: its transaction fails at its first statement.
      const late = (async () => {
        await stale.write(upserts([1, 4], 'late'));
        await stale.commit(checkpoint(2));
      })();
      await expect(late).rejects.toMatchObject({ code: 'STALE_EPOCH' });
      const rows = await client.query('SELECT id, name FROM stale_dst ORDER BY id');
      expect(rows.rows).toEqual([
        { id: 1, name: 'e1' },
        { id: 2, name: 'e1' },
        { id: 3, name: 'e2' },
      ]);
      const fence = await client.query(
        'SELECT epoch::int AS epoch FROM sluice_sink_fences WHERE writer = $1',
        ['t-stale_dst:stale_dst.sink'],
      );
      expect(fence.rows).toEqual([{ epoch: 2 }]);
    } finally {
      await stale.close();
      await owner.close();
    }
  });

  it('defect: the restart read the committed checkpoint before the fence, so a stale owner committed behind it', async () => {
    await client.query('CREATE TABLE behind_dst (id int PRIMARY KEY, name text)');
    const stale = sinkAt('behind_dst', 1);
    const owner = sinkAt('behind_dst', 2);
    try {
      await stale.prepare({ decision: 'from-scratch', checkpoint: null });
      await stale.write(upserts([1], 'e1'));
      await stale.commit(checkpoint(1));
      // The stale owner is mid-transaction (it wrote epoch 2's batch, its COMMIT is still to come) when the
      // new owner takes over and asks the sink where to resume from.
      await stale.write(upserts([2], 'e1'));
      const decided = owner.committed();
      const early = await Promise.race([decided.then(() => 'answered'), delay(300).then(() => 'waiting')]);
      await stale.commit(checkpoint(2));
      // The answer must include everything the stale owner could still commit: its epoch-2 batch.
      expect((await decided)?.epoch).toBe(2);
      expect(early).toBe('waiting');
      // And after that answer, nothing of the stale owner lands any more.
      await expect(
        (async () => {
          await stale.write(upserts([3], 'late'));
          await stale.commit(checkpoint(3));
        })(),
      ).rejects.toMatchObject({ code: 'STALE_EPOCH' });
      const rows = await client.query('SELECT id FROM behind_dst ORDER BY id');
      expect(rows.rows).toEqual([{ id: 1 }, { id: 2 }]);
    } finally {
      await stale.close();
      await owner.close();
    }
  });

  it("a frozen stale owner's open transaction blocks the new owner only until its idle timeout, and its late COMMIT fails", {
    timeout: 30_000,
  }, async () => {
    await client.query('CREATE TABLE held_dst (id int PRIMARY KEY, name text)');
    const stale = sinkAt('held_dst', 1, { idleInTransactionTimeoutMs: 1_000 });
    const owner = sinkAt('held_dst', 2);
    try {
      await stale.prepare({ decision: 'from-scratch', checkpoint: null });
      // Open transaction holding row locks on ids 1..3, then the owner goes silent (frozen).
      await stale.write(upserts([1, 2, 3], 'e1'));
      const started = Date.now();
      await owner.prepare({ decision: 'from-scratch', checkpoint: null });
      await owner.write(upserts([2, 3, 4], 'e2'));
      await owner.commit(checkpoint(1));
      const waited = Date.now() - started;
      expect(waited).toBeLessThan(8_000);
      await expect(stale.commit(checkpoint(1))).rejects.toMatchObject({
        code: expect.stringMatching(/SINK|STALE_EPOCH/),
      });
      const rows = await client.query('SELECT id, name FROM held_dst ORDER BY id');
      expect(rows.rows).toEqual([
        { id: 2, name: 'e2' },
        { id: 3, name: 'e2' },
        { id: 4, name: 'e2' },
      ]);
    } finally {
      await stale.close();
      await owner.close();
    }
  });
});

describe('sinks opening one fresh destination database at once', () => {
  it('defect: two PostgreSQL sinks opening a fresh database at the same moment: one failed creating the checkpoint table (duplicate pg_type key)', async () => {
    // Each round a new database: the race is between two `CREATE TABLE IF NOT EXISTS` of a table that is not there.
    const outcomes: string[] = [];
    for (let round = 0; round < 5; round++) {
      const db = await createTestDatabase('sluice_pipeline_pgrace');
      try {
        const setup = new pg.Client({ connectionString: db.url });
        await setup.connect();
        await setup.query('CREATE TABLE dst (id int PRIMARY KEY, name text)');
        await setup.end();
        const sinks = ['a', 'b', 'c'].map((writer) =>
          createPostgresSink({
            handle: `dst.${writer}`,
            url: db.url,
            table: 'dst',
            writerId: `race-${writer}`,
            fence: { epoch: 1, finishing: async () => {} },
          }),
        );
        try {
          const settled = await Promise.allSettled(
            sinks.map((sink) => sink.prepare({ decision: 'from-scratch', checkpoint: null })),
          );
          for (const s of settled) outcomes.push(s.status === 'fulfilled' ? 'opened' : String(s.reason));
          // Every sink that opened writes and commits: the tables it needs are there.
          await Promise.all(
            sinks.map(async (sink, i) => {
              await sink.write(upserts([round * 10 + i], 'x'));
              await sink.commit(checkpoint(1));
            }),
          );
        } finally {
          await Promise.all(sinks.map((sink) => sink.close()));
        }
      } finally {
        await db.drop();
      }
    }
    expect(outcomes.filter((o) => o !== 'opened')).toEqual([]);
  });
});
