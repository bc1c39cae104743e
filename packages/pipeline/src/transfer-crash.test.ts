import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { DestinationAddress, TransferRequest } from '@sluice/core';
import { createTestDatabase, spawnTs, startNatsServer, tempDir } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';

const CHILD = fileURLToPath(new URL('../test/fixtures/transfer-child.ts', import.meta.url));
const RECORDS = 10_000;
const COMMIT_EVERY = 500;
const KILLS = 2;

/** Writes the source file (`in.jsonl` in `dir`, RECORDS records); returns its path. */
async function writeSource(dir: string): Promise<string> {
  const path = join(dir, 'in.jsonl');
  const lines: string[] = [];
  for (let i = 0; i < RECORDS; i++) lines.push(JSON.stringify({ id: i, name: `n${i}`, value: i % 97 }));
  await writeFile(path, `${lines.join('\n')}\n`);
  return path;
}

/**
 * Runs the transfer in a child process, SIGKILLed at a random commit (plus a random few ms, or right before that
 * commit's checkpoint is saved) `kills` times — the child kills itself (fixture's `killAt`), so the kill lands
 * mid-transfer however late this process reads its output — each
 * run at the next fencing epoch (as a takeover would), then lets a last run finish; returns its DONE line. Every
 * kill must land mid-transfer: the child neither finished nor failed before it, and `physicalWrites` (what reached
 * the destination so far, counted below any idempotent layer) is still short of the whole source. The last run
 * must resume.
 */
async function killAndResume(
  input: Record<string, unknown>,
  kills: number,
  physicalWrites: () => Promise<number>,
): Promise<Record<string, unknown>> {
  const perCommit = input.commitEveryRecords as number;
  const writesBoundedByCommits = (input.request as TransferRequest).destination.type !== 'jetstream';
  // Records written by the last commit seen (the sink's cumulative count): each kill is aimed at the first commit
  // past a record count that leaves at least four commits' worth of records — a commit closes the batch that
  // reached `commitEveryRecords`, so it may hold up to twice that — for the runs after it: it lands mid-transfer
  // by construction. (Aimed by a commit's number before, it could name a run's last commit: a run makes fewer
  // commits than RECORDS ÷ commitEveryRecords, and the kill then came after the file was published.)
  let committedWritten = 0;
  for (let k = 0; k < kills; k++) {
    const room = Math.max(1, Math.floor((RECORDS - committedWritten - 4 * perCommit) / (kills - k + 1)));
    const killAt = {
      written: committedWritten + 1 + Math.floor(Math.random() * room),
      delayMs: Math.floor(Math.random() * 15),
    };
    await using child = spawnTs(CHILD, [JSON.stringify({ ...input, epoch: k + 1, killAt })]);
    const exit = await child.exited;
    for (const line of child.lines.filter((l) => l.startsWith('COMMIT ')))
      committedWritten = Math.max(committedWritten, Number(line.split(' ')[2]));
    // The kill landed mid-transfer: the run neither finished nor failed on its own (an intermediate FAILED run
    // would hide a defect behind the next run's success).
    expect(child.lines.filter((l) => /^(DONE|FAILED) /.test(l))).toEqual([]);
    expect(exit.signal).toBe('SIGKILL');
    // Killed before the run's last commit; and for a sink whose writes land only with a commit (PostgreSQL),
    // short of the whole source. JetStream publishes run ahead of commits, so its count may already be complete.
    expect(committedWritten).toBeLessThan(RECORDS);
    if (writesBoundedByCommits) expect(await physicalWrites()).toBeLessThan(RECORDS);
  }
  await using last = spawnTs(CHILD, [JSON.stringify({ ...input, epoch: kills + 1 })]);
  const done = await last.waitForLine(/^(DONE|FAILED) /, 90_000);
  expect(done).toMatch(/^DONE /);
  // The decision line names the reason when it is not a resume.
  expect(last.lines.filter((l) => l.startsWith('DECISION '))).toEqual([
    expect.stringMatching(/^DECISION resume /),
  ]);
  return JSON.parse(done.slice(5)) as Record<string, unknown>;
}

function request(id: string, source: string, destination: DestinationAddress): TransferRequest {
  return {
    id,
    mode: 'idempotent',
    source: { type: 'file', path: source, format: 'jsonl' },
    destination,
    properties: {},
    // Paced (10 000 records in ≥ 0.5 s) so that a kill a few ms after a commit lands mid-run, even when this
    // process is slow to notice the commit.
    options: { onBadRecord: 'skip', maxRecordsPerSecond: 20_000 },
  };
}

/**
 * Creates the destination table `dst` and `dst_writes`: every committed physical write (insert or update of a
 * row) leaves a row there, so an upsert replayed by a resumed run doubles it, while `dst` itself (keyed) would not
 * show it.
 */
async function createCountedDestination(client: pg.Client): Promise<void> {
  await client.query('CREATE TABLE dst (id integer PRIMARY KEY, name text, value integer)');
  await client.query('CREATE TABLE dst_writes (id integer NOT NULL)');
  await client.query(`CREATE FUNCTION count_write() RETURNS trigger LANGUAGE plpgsql AS
    $$ BEGIN INSERT INTO dst_writes VALUES (NEW.id); RETURN NEW; END $$`);
  await client.query(
    'CREATE TRIGGER dst_counted AFTER INSERT OR UPDATE ON dst FOR EACH ROW EXECUTE FUNCTION count_write()',
  );
}

/**
 * A test database holding the counted destination ({@link createCountedDestination}) and a client connected to
 * it; dispose ends the client, then drops the database.
 */
async function countedDestination(
  prefix: string,
): Promise<AsyncDisposable & { url: string; client: pg.Client }> {
  const db = await createTestDatabase(prefix);
  const client = new pg.Client({ connectionString: db.url });
  try {
    await client.connect();
    await createCountedDestination(client);
  } catch (err) {
    await client.end().catch(() => {});
    await db[Symbol.asyncDispose]();
    throw err;
  }
  return {
    url: db.url,
    client,
    async [Symbol.asyncDispose]() {
      try {
        await client.end();
      } finally {
        await db[Symbol.asyncDispose]();
      }
    },
  };
}

describe('transfers killed with SIGKILL and resumed write each record exactly once', () => {
  it('file sink', { timeout: 120_000 }, async () => {
    await using dir = await tempDir();
    const src = await writeSource(dir.path);
    const out = join(dir.path, 'out.jsonl');
    const result = await killAndResume(
      {
        request: request('crash-file', src, { type: 'file', path: out, format: 'jsonl' }),
        checkpointFile: join(dir.path, 'checkpoint.json'),
        commitEveryRecords: 500,
        fileChunkBytes: 16_384,
      },
      2,
      // Not published before the end: what reached the destination is nothing.
      async () => ((await readFile(out, 'utf8').catch(() => '')).match(/\n/g) ?? []).length,
    );
    expect(result.recordsWritten).toBe(RECORDS);
    const ids = (await readFile(out, 'utf8'))
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { id: number }).id);
    expect(ids).toEqual(Array.from({ length: RECORDS }, (_, i) => i));
  });

  it('postgres sink', { timeout: 120_000 }, async () => {
    await using dir = await tempDir();
    await using dst = await countedDestination('sluice_pipeline_crash');
    const { client } = dst;
    const src = await writeSource(dir.path);
    const result = await killAndResume(
      {
        request: request('crash-pg', src, { type: 'postgres', connection: 'wh', table: 'dst', key: 'id' }),
        checkpointFile: join(dir.path, 'checkpoint.json'),
        connections: { wh: { type: 'postgres', url: dst.url } },
        commitEveryRecords: 500,
        fileChunkBytes: 16_384,
      },
      2,
      async () => (await client.query('SELECT count(*)::int AS n FROM dst_writes')).rows[0].n as number,
    );
    expect(result.recordsWritten).toBe(RECORDS);
    // The sink commits its checkpoint with its data and a resume starts from it: no write happens twice.
    const writes = await client.query(
      'SELECT count(*)::int AS n, count(DISTINCT id)::int AS d FROM dst_writes',
    );
    expect(writes.rows[0]).toEqual({ n: RECORDS, d: RECORDS });
    const stats = await client.query(
      'SELECT count(*)::int AS n, count(DISTINCT id)::int AS d, min(id) AS lo, max(id) AS hi FROM dst',
    );
    expect(stats.rows[0]).toEqual({ n: RECORDS, d: RECORDS, lo: 0, hi: RECORDS - 1 });
  });

  it('defect: an owner that finished the PostgreSQL sink but died before recording COMPLETED made the next owner rewrite every record', {
    timeout: 120_000,
  }, async () => {
    // The chaos run's duplicate: the sink's finish deleted its committed checkpoint, the owner lost the transfer
    // before the store recorded COMPLETED, and the next owner found "the sink has no committed checkpoint" and
    // started from scratch — every row written a second time. The next owner must resume at the end instead.
    await using dir = await tempDir();
    await using dst = await countedDestination('sluice_pipeline_finished');
    const { client } = dst;
    const src = await writeSource(dir.path);
    const input = {
      request: request('finished-pg', src, { type: 'postgres', connection: 'wh', table: 'dst', key: 'id' }),
      checkpointFile: join(dir.path, 'checkpoint.json'),
      connections: { wh: { type: 'postgres', url: dst.url } },
      commitEveryRecords: 2_000,
      fileChunkBytes: 16_384,
    };
    // The first owner runs the transfer to its end; it exits before anything records COMPLETED.
    await using first = spawnTs(CHILD, [JSON.stringify({ ...input, epoch: 1 })]);
    expect(await first.waitForLine(/^(DONE|FAILED) /, 90_000)).toMatch(/^DONE /);
    // The next owner (a takeover: the next epoch, the same checkpoint) resumes where the sink ended.
    await using next = spawnTs(CHILD, [JSON.stringify({ ...input, epoch: 2 })]);
    const done = await next.waitForLine(/^(DONE|FAILED) /, 90_000);
    expect(done).toMatch(/^DONE /);
    expect(next.lines.filter((l) => l.startsWith('DECISION '))).toEqual([
      expect.stringMatching(/^DECISION resume /),
    ]);
    // Its result still counts the whole transfer (the counts travel in the checkpoint).
    expect(JSON.parse(done.slice(5))).toMatchObject({ recordsRead: RECORDS, recordsWritten: RECORDS });
    const writes = await client.query(
      'SELECT count(*)::int AS n, count(DISTINCT id)::int AS d FROM dst_writes',
    );
    expect(writes.rows[0]).toEqual({ n: RECORDS, d: RECORDS });
    expect((await client.query('SELECT count(*)::int AS n FROM dst')).rows[0].n).toBe(RECORDS);
  });

  it('jetstream sink', { timeout: 120_000 }, async () => {
    await using dir = await tempDir();
    await using nats = await startNatsServer();
    const nc = await connect({ servers: nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'OUT', subjects: ['out.>'], duplicate_window: 120_000_000_000 });
      // A raw core-NATS subscriber counts every physical publish, duplicates the stream drops included.
      let published = 0;
      nc.subscribe('out.items', {
        callback: () => {
          published++;
        },
      });
      await nc.flush();
      const src = await writeSource(dir.path);
      const result = await killAndResume(
        {
          request: request('crash-js', src, {
            type: 'jetstream',
            stream: 'OUT',
            subject: 'out.items',
            key: 'id',
          }),
          checkpointFile: join(dir.path, 'checkpoint.json'),
          nats: nats.url,
          commitEveryRecords: COMMIT_EVERY,
          fileChunkBytes: 16_384,
        },
        KILLS,
        async () => {
          await nc.flush();
          return published;
        },
      );
      expect(result.recordsWritten).toBe(RECORDS);
      await nc.flush();
      // The JetStream sink keeps no checkpoint: a kill replays what was published since the last saved one,
      // which is less than one commit interval plus one batch (batches are min(commitEvery, 1000) records).
      expect(published).toBeGreaterThanOrEqual(RECORDS);
      expect(published).toBeLessThan(RECORDS + KILLS * (COMMIT_EVERY + Math.min(COMMIT_EVERY, 1000)));
      // The replays were dropped as duplicates by source position: each record is stored once.
      const info = await jsm.streams.info('OUT');
      expect(info.state.messages).toBe(RECORDS);
      const ids = new Set<number>();
      const consumer = await jsm.jetstream().consumers.get('OUT');
      for await (const m of await consumer.fetch({ max_messages: RECORDS, expires: 5_000 })) {
        ids.add((m.json() as { id: number }).id);
        if (ids.size === RECORDS) break;
      }
      expect(ids.size).toBe(RECORDS);
    } finally {
      await nc.close();
    }
  });
});
