import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { type CheckpointPort, type PipelineProgress, SluiceError, type TransferRequest } from '@sluice/core';
import {
  perKeyWriteMismatches,
  type SourceWriter,
  spawnTs,
  sql,
  startNatsServer,
  startSourceWriter,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { memoryCheckpointPort } from '../test/helpers.js';
import { useLogicalPostgres } from '../test/replication.js';
import { OP_HEADER } from './sources/jetstream.js';
import { compareLsn } from './sources/replication/lsn.js';
import { transferReplicationName } from './sources/replication/setup.js';
import { discardTransferLeftovers, runTransfer, type TransferContext } from './transfer.js';

const CHILD = fileURLToPath(new URL('../test/fixtures/transfer-child.ts', import.meta.url));

const server = useLogicalPostgres();

const REPLICATION = { keepaliveMs: 200, slotWaitMs: 10_000 };

/**
 * `items` (the source) and `dst` (the destination) in a fresh database. Every committed physical write into `dst`
 * (insert, update, delete) leaves a row in `dst_writes` with the writing transaction's xid and the row's `tag`
 * (which source transaction wrote it): a replayed change shows there even where `dst` itself (keyed) would not.
 * With `sourceChanges`, every change of `items` from now on leaves a row in `src_changes`.
 */
async function database(rows: number, sourceChanges = false): Promise<string> {
  const url = await server.createDatabase('transfer_cdc');
  await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, tag int NOT NULL DEFAULT 0)');
  if (rows > 0) await sql(url, `INSERT INTO items SELECT i, i % 10, 0 FROM generate_series(1, ${rows}) i`);
  await sql(url, 'CREATE TABLE dst (id int PRIMARY KEY, v int NOT NULL, tag int NOT NULL)');
  await sql(url, 'CREATE TABLE dst_writes (id int NOT NULL, op text NOT NULL, tag int, xid bigint NOT NULL)');
  await sql(
    url,
    `CREATE FUNCTION count_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
       IF TG_OP = 'DELETE' THEN INSERT INTO dst_writes VALUES (OLD.id, TG_OP, NULL, txid_current());
       ELSE INSERT INTO dst_writes VALUES (NEW.id, TG_OP, NEW.tag, txid_current()); END IF;
       RETURN NULL; END $$`,
  );
  await sql(
    url,
    'CREATE TRIGGER dst_counted AFTER INSERT OR UPDATE OR DELETE ON dst FOR EACH ROW EXECUTE FUNCTION count_write()',
  );
  if (sourceChanges) {
    await sql(url, 'CREATE TABLE src_changes (id int NOT NULL, op text NOT NULL)');
    await sql(
      url,
      `CREATE FUNCTION count_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
         INSERT INTO src_changes VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END, TG_OP);
         RETURN NULL; END $$`,
    );
    await sql(
      url,
      'CREATE TRIGGER items_counted AFTER INSERT OR UPDATE OR DELETE ON items FOR EACH ROW EXECUTE FUNCTION count_change()',
    );
  }
  return url;
}

function request(id: string, options: Record<string, unknown> = {}): TransferRequest {
  return {
    id,
    mode: 'idempotent',
    source: { type: 'postgres', connection: 'db', table: 'items', capture: 'replication' },
    destination: { type: 'postgres', connection: 'db', table: 'dst', key: 'id' },
    properties: {},
    options: { onBadRecord: 'skip', ...options },
  } as TransferRequest;
}

const rowsOf = async (url: string, table: string) =>
  (await sql<{ row: string }>(url, `SELECT row_to_json(t)::text AS row FROM ${table} t ORDER BY id`)).map(
    (r) => r.row,
  );

/** The slots of the database whose names a transfer would use, and the publications beside them. */
async function leftovers(url: string) {
  const slots = await sql<{ name: string }>(
    url,
    `SELECT slot_name AS name FROM pg_replication_slots WHERE starts_with(slot_name, 'sluice_x_') ORDER BY 1`,
  );
  const publications = await sql<{ name: string }>(
    url,
    `SELECT pubname AS name FROM pg_publication WHERE starts_with(pubname, 'sluice_x_') ORDER BY 1`,
  );
  return { slots: slots.map((s) => s.name), publications: publications.map((p) => p.name) };
}

async function waitMirrored(url: string, what: string) {
  await waitFor(
    async () => JSON.stringify(await rowsOf(url, 'items')) === JSON.stringify(await rowsOf(url, 'dst')),
    { timeoutMs: 30_000, what },
  );
}

const connectionsOf = (url: string) => ({ db: { type: 'postgres' as const, url } });
const NO_LEFTOVERS = { slots: [], publications: [] };

/** Discards what a finished transfer of `req` left in the database; returns what is left after that. */
async function discardLeftovers(url: string, req: TransferRequest) {
  await discardTransferLeftovers(req, { connections: connectionsOf(url), replication: REPLICATION });
  return leftovers(url);
}

/** One run of `req` in this process, never aborted, with the given checkpoint port. */
function runOnce(
  url: string,
  req: TransferRequest,
  checkpoint: CheckpointPort,
  ctx: Partial<TransferContext> = {},
) {
  return runTransfer(req, {
    checkpoint,
    connections: connectionsOf(url),
    signal: new AbortController().signal,
    replication: REPLICATION,
    ...ctx,
  });
}

/**
 * A following run of `req` in this process (checkpoint in memory, commits every 50 ms) until `controller` aborts
 * it. `phases` lists the phases it went through; `ended` settles with the error it ended with (null when none).
 */
function startFollowing(url: string, req: TransferRequest, ctx: Partial<TransferContext> = {}) {
  const controller = new AbortController();
  const phases: PipelineProgress['phase'][] = [];
  const ended = runTransfer(req, {
    checkpoint: memoryCheckpointPort(),
    connections: connectionsOf(url),
    signal: controller.signal,
    replication: REPLICATION,
    commitEveryMs: 50,
    onProgress: (p) => {
      if (phases.at(-1) !== p.phase) phases.push(p.phase);
    },
    ...ctx,
  }).then(
    () => null,
    (err: unknown) => err,
  );
  const streaming = () =>
    waitFor(() => phases.includes('streaming'), { timeoutMs: 30_000, what: 'streaming' });
  return { controller, phases, ended, streaming };
}

/** What the transfer child (an owner in its own process) is started with, but the epoch. */
interface OwnerInput {
  request: TransferRequest;
  checkpointFile: string;
  connections: ReturnType<typeof connectionsOf>;
  commitEveryRecords: number;
  replication: typeof REPLICATION;
}

/** The transfer child as the owner at `epoch` (its checkpoint in `input.checkpointFile`). */
const startOwner = (input: OwnerInput, epoch: number) =>
  spawnTs(CHILD, [JSON.stringify({ ...input, epoch })]);

describe('PostgreSQL replication as a transfer source (issue 16)', () => {
  it('without follow: copies the snapshot and completes; a successor resumes at the end writing nothing; discard drops the slot and publication', {
    timeout: 60_000,
  }, async () => {
    const url = await database(3_000);
    const shared = { value: null, epoch: 0 };
    const slot = transferReplicationName('snap-1.source');
    const result = await runOnce(
      url,
      request('snap-1', { batchSize: 500 }),
      memoryCheckpointPort({ shared, epoch: 1 }),
    );
    expect(result).toMatchObject({ recordsRead: 3_000, recordsWritten: 3_000, decision: 'from-scratch' });
    expect(await rowsOf(url, 'dst')).toEqual(await rowsOf(url, 'items'));
    // Until the terminal state is recorded the slot is the resume point of a successor (an owner that died
    // before COMPLETED was recorded): it resumes at the end of the snapshot and writes nothing again.
    expect(await leftovers(url)).toEqual({ slots: [slot], publications: [slot] });
    const again = await runOnce(
      url,
      request('snap-1', { batchSize: 500 }),
      memoryCheckpointPort({ shared, epoch: 2 }),
    );
    expect(again).toMatchObject({ decision: 'resume', recordsWritten: 3_000 });
    expect(await sql(url, 'SELECT count(*)::int AS n, count(DISTINCT id)::int AS d FROM dst_writes')).toEqual(
      [{ n: 3_000, d: 3_000 }],
    );
    // COMPLETED recorded: the slot (which would hold WAL until the disk fills) and its publication go.
    expect(await discardLeftovers(url, request('snap-1'))).toEqual(NO_LEFTOVERS);
  });

  it('with follow: streams inserts, updates and deletes after the snapshot, each source transaction in one sink transaction; confirms only committed LSNs; terminate stops it and discard drops the slot', {
    timeout: 90_000,
  }, async () => {
    const url = await database(500);
    const slot = transferReplicationName('follow-1.source');
    // batchSize 10: a 60-row source transaction arrives in several open batches, none of which may be committed alone.
    const run = startFollowing(url, request('follow-1', { batchSize: 10, follow: true }));
    const { controller, phases } = run;
    await run.streaming();
    expect(await rowsOf(url, 'dst')).toEqual(await rowsOf(url, 'items'));

    // Each destination write now takes 100 ms: a slot confirmed before the sink commit would show in the samples.
    await sql(
      url,
      `CREATE FUNCTION slow_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.1); RETURN NULL; END $$`,
    );
    await sql(
      url,
      'CREATE TRIGGER dst_slow AFTER INSERT OR UPDATE OR DELETE ON dst FOR EACH STATEMENT EXECUTE FUNCTION slow_write()',
    );
    // The slot is confirmed only up to what the sink committed (its checkpoint row holds the LSN).
    let samples = 0;
    const sampling = (async () => {
      while (!controller.signal.aborted && samples < 1_000) {
        const confirmed = (
          await sql<{ lsn: string | null }>(
            url,
            'SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots WHERE slot_name = $1',
            [slot],
          )
        )[0]?.lsn;
        const committed = (
          await sql<{ lsn: string | null }>(
            url,
            `SELECT checkpoint->'positions'->'follow-1.source'->>'lsn' AS lsn FROM sluice_sink_checkpoints`,
          )
        )[0]?.lsn;
        if (confirmed && committed) {
          expect(compareLsn(confirmed, committed)).toBeLessThanOrEqual(0);
          samples++;
        }
        await new Promise((r) => setTimeout(r, 5));
      }
    })();

    const txn = async (statements: string[]) => {
      await sql(url, `DO $$ BEGIN ${statements.join('; ')}; END $$`);
    };
    await txn(['INSERT INTO items SELECT i, 7, 1 FROM generate_series(1001, 1060) i']);
    await txn(['UPDATE items SET v = v + 100, tag = 2 WHERE id <= 45']);
    await txn([
      'DELETE FROM items WHERE id BETWEEN 46 AND 60',
      'UPDATE items SET tag = 3 WHERE id BETWEEN 61 AND 72',
    ]);
    for (let t = 4; t < 14; t++)
      await txn([`UPDATE items SET v = v + 1, tag = ${t} WHERE id % 13 = ${t - 4}`]);
    await waitMirrored(url, 'the changes mirrored');
    controller.abort();
    await sampling;
    expect(samples).toBeGreaterThan(0);

    // Each source transaction's rows were written by exactly one destination transaction.
    const byTag = await sql<{ tag: number; writes: number; xids: number }>(
      url,
      `SELECT tag, count(*)::int AS writes, count(DISTINCT xid)::int AS xids FROM dst_writes
        WHERE tag > 0 AND op <> 'DELETE' GROUP BY tag ORDER BY tag`,
    );
    const expected = [
      { tag: 1, writes: 60, xids: 1 },
      { tag: 2, writes: 45, xids: 1 },
      { tag: 3, writes: 12, xids: 1 },
    ];
    for (let t = 4; t < 14; t++) {
      const [row] = await sql<{ n: number }>(url, `SELECT count(*)::int AS n FROM items WHERE tag = ${t}`);
      expected.push({ tag: t, writes: row!.n, xids: 1 });
    }
    expect(byTag).toEqual(expected);
    // The deletes deleted (once each), in the same destination transaction as the updates of their source one.
    const deletes = await sql<{ n: number; d: number; xids: number }>(
      url,
      `SELECT count(*)::int AS n, count(DISTINCT id)::int AS d, count(DISTINCT xid)::int AS xids FROM dst_writes WHERE op = 'DELETE'`,
    );
    expect(deletes).toEqual([{ n: 15, d: 15, xids: 1 }]);
    const [sameXid] = await sql<{ same: boolean }>(
      url,
      `SELECT (SELECT xid FROM dst_writes WHERE op = 'DELETE' LIMIT 1) = (SELECT xid FROM dst_writes WHERE tag = 3 LIMIT 1) AS same`,
    );
    expect(sameXid?.same).toBe(true);

    // Terminate: the run ends as terminated, in phase stopped after streaming; discard drops the slot.
    expect(SluiceError.hasCode(await run.ended, 'TRANSFER_TERMINATED')).toBe(true);
    expect(phases).toEqual(['snapshotting', 'streaming', 'stopped']);
    expect(await leftovers(url)).toEqual({ slots: [slot], publications: [slot] });
    expect(await discardLeftovers(url, request('follow-1', { follow: true }))).toEqual(NO_LEFTOVERS);
  });

  it('with follow into JetStream: the snapshot, then each insert, update and delete as a message (deletes with the op header and the key); terminate stops it', {
    timeout: 90_000,
  }, async () => {
    const url = await database(20);
    await using nats = await startNatsServer();
    const nc = await connect({ servers: nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'MIRROR', subjects: ['mirror.>'] });
      const run = startFollowing(
        url,
        {
          ...request('follow-js', { follow: true }),
          destination: { type: 'jetstream', stream: 'MIRROR', subject: 'mirror.items', key: 'id' },
        } as TransferRequest,
        { nats: nats.url },
      );
      await run.streaming();
      await sql(url, 'INSERT INTO items VALUES (21, 1, 1)');
      await sql(url, 'UPDATE items SET v = 42, tag = 2 WHERE id = 5');
      await sql(url, 'DELETE FROM items WHERE id = 7');
      const messages = async () => (await jsm.streams.info('MIRROR')).state.messages;
      await waitFor(async () => (await messages()) >= 23, { timeoutMs: 30_000, what: '20 + 3 messages' });
      run.controller.abort();
      expect(SluiceError.hasCode(await run.ended, 'TRANSFER_TERMINATED')).toBe(true);

      const seen: string[] = [];
      const consumer = await jsm.jetstream().consumers.get('MIRROR');
      for await (const m of await consumer.fetch({ max_messages: 23, expires: 2_000 })) {
        const row = m.json<{ id: number; v?: number; tag?: number }>();
        seen.push(
          m.headers?.get(OP_HEADER) === 'delete' ? `delete ${row.id}` : `${row.id}:${row.v}:${row.tag}`,
        );
        if (seen.length === 23) break;
      }
      // The snapshot's 20 rows, then the three changes in commit order.
      expect(seen.slice(0, 20).sort()).toEqual(
        Array.from({ length: 20 }, (_, i) => `${i + 1}:${(i + 1) % 10}:0`).sort(),
      );
      expect(seen.slice(20)).toEqual(['21:1:1', '5:42:2', 'delete 7']);
      expect(await messages()).toBe(23);
      expect(await discardLeftovers(url, request('follow-js', { follow: true }))).toEqual(NO_LEFTOVERS);
    } finally {
      await nc.close();
    }
  });

  it('defect: PostgreSQL restarted mid-snapshot failed the transfer for good (the lost connection was not retryable)', {
    timeout: 90_000,
  }, async () => {
    const url = await database(200_000);
    await using dir = await tempDir();
    let read = 0;
    const out = join(dir.path, 'out.jsonl');
    const snapshotRequest = {
      ...request('snap-restart', { batchSize: 100 }),
      destination: { type: 'file', path: out, format: 'jsonl' },
    } as TransferRequest;
    const shared = { value: null, epoch: 0 };
    const run = runOnce(url, snapshotRequest, memoryCheckpointPort({ shared, epoch: 1 }), {
      onProgress: (p) => {
        read = p.recordsRead;
      },
    });
    const ended = run.then(
      () => null,
      (err: unknown) => err,
    );
    await waitFor(() => read >= 2_000, { timeoutMs: 30_000, what: 'snapshot pages read' });
    await server.restart('fast');
    const err = await ended;
    expect(read).toBeLessThan(200_000);
    expect(SluiceError.hasCode(err, 'SOURCE_FAILED')).toBe(true);
    // Retryable: the transfer resumes from its checkpoint once PostgreSQL is back, instead of ending FAILED.
    expect((err as SluiceError).details).toMatchObject({ retryable: true });

    // The retry (the app-server's next attempt) resumes from the checkpoint and publishes every row once.
    const again = await runOnce(url, snapshotRequest, memoryCheckpointPort({ shared, epoch: 2 }));
    expect(again.decision).toBe('resume');
    const ids = (await readFile(out, 'utf8'))
      .trim()
      .split('\n')
      .map((line) => (JSON.parse(line) as { id: number }).id);
    expect(ids.length).toBe(200_000);
    expect(new Set(ids).size).toBe(200_000);
    expect(await discardLeftovers(url, snapshotRequest)).toEqual(NO_LEFTOVERS);
  });

  it('without follow: an owner SIGKILLed mid-snapshot is resumed; the new snapshot catches up through the slot, so changes to rows already copied are not lost', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await database(20_000);
    const input = {
      // Paced (20 000 rows in ≥ 2 s) so that the kill lands mid-snapshot.
      request: request('crash-snapshot', { batchSize: 500, maxRecordsPerSecond: 10_000 }),
      checkpointFile: join(dir.path, 'checkpoint.json'),
      connections: connectionsOf(url),
      commitEveryRecords: 500,
      replication: REPLICATION,
    };
    {
      await using first = startOwner(input, 1);
      await waitFor(() => first.lines.filter((l) => l.startsWith('COMMIT ')).length >= 4, {
        timeoutMs: 30_000,
        what: 'snapshot commits',
      });
      first.kill('SIGKILL');
      await first.exited;
      expect(first.lines.filter((l) => /^(DONE|FAILED) /.test(l))).toEqual([]);
    }
    const copied = (await sql<{ n: number }>(url, 'SELECT count(*)::int AS n FROM dst'))[0]!.n;
    expect(copied).toBeGreaterThanOrEqual(2_000);
    expect(copied).toBeLessThan(20_000);
    // While nobody owns it, rows the first snapshot already copied change: a fresh snapshot of the remaining keys
    // alone would never see these.
    await sql(url, 'UPDATE items SET v = v + 1000, tag = 1 WHERE id <= 300');
    await sql(url, 'DELETE FROM items WHERE id BETWEEN 301 AND 350');
    await sql(url, 'INSERT INTO items SELECT i, 5, 2 FROM generate_series(30001, 30050) i');
    await using second = startOwner(input, 2);
    const done = await second.waitForLine(/^(DONE|FAILED) /, 60_000);
    expect(done).toMatch(/^DONE /);
    expect(second.lines.filter((l) => l.startsWith('DECISION '))).toEqual([
      expect.stringMatching(/^DECISION resume /),
    ]);
    expect(await rowsOf(url, 'dst')).toEqual(await rowsOf(url, 'items'));
    expect(await discardLeftovers(url, input.request)).toEqual(NO_LEFTOVERS);
  });

  it('with follow: a source truncate empties the destination in the sink transaction of its source transaction', {
    timeout: 60_000,
  }, async () => {
    const url = await database(200);
    const run = startFollowing(url, request('truncate-1', { follow: true }));
    try {
      await run.streaming();
      await sql(url, 'TRUNCATE dst_writes');
      await sql(
        url,
        `DO $$ BEGIN TRUNCATE items; INSERT INTO items SELECT i, 1, 9 FROM generate_series(500, 509) i; END $$`,
      );
      await waitMirrored(url, 'the truncate and the new rows mirrored');
      // The 200 deletes and the 10 inserts: one destination transaction.
      expect(
        await sql(
          url,
          'SELECT op, count(*)::int AS n, count(DISTINCT xid)::int AS xids FROM dst_writes GROUP BY op ORDER BY op',
        ),
      ).toEqual([
        { op: 'DELETE', n: 200, xids: 1 },
        { op: 'INSERT', n: 10, xids: 1 },
      ]);
      const [{ same }] = (await sql(url, 'SELECT count(DISTINCT xid)::int = 1 AS same FROM dst_writes')) as [
        { same: boolean },
      ];
      expect(same).toBe(true);
    } finally {
      run.controller.abort();
      expect(SluiceError.hasCode(await run.ended, 'TRANSFER_TERMINATED')).toBe(true);
      await discardLeftovers(url, request('truncate-1', { follow: true }));
    }
  });

  it('defect: with follow, an update leaving a TOASTed column unchanged was a bad record (skipped), so the destination kept the row as it was before', {
    timeout: 60_000,
  }, async () => {
    const url = await database(20);
    // A 100 KB text of hex digits: stored out of line, so an update that leaves it alone streams without it.
    await sql(url, 'ALTER TABLE items ADD COLUMN body text');
    await sql(url, 'ALTER TABLE dst ADD COLUMN body text');
    await sql(
      url,
      `UPDATE items SET body = (SELECT string_agg(md5(random()::text || g), '') FROM generate_series(1, 3200) g)
        WHERE id IN (3, 4)`,
    );
    const run = startFollowing(url, request('toast-1', { follow: true }));
    try {
      await run.streaming();
      await waitMirrored(url, 'the snapshot copied');
      await sql(url, 'UPDATE items SET v = 42, tag = 1 WHERE id = 3');
      await sql(
        url,
        'BEGIN; UPDATE items SET v = 43, tag = 2 WHERE id = 4; DELETE FROM items WHERE id = 4; COMMIT',
      );
      await waitMirrored(url, 'the updates mirrored, with their unchanged values');
      const [row] = await sql<{ v: number; same: boolean }>(
        url,
        'SELECT d.v, d.body = i.body AS same FROM dst d JOIN items i USING (id) WHERE id = 3',
      );
      expect(row).toEqual({ v: 42, same: true });
    } finally {
      run.controller.abort();
      expect(SluiceError.hasCode(await run.ended, 'TRANSFER_TERMINATED')).toBe(true);
      await discardLeftovers(url, request('toast-1', { follow: true }));
    }
  });

  it('with follow: a new owner waits a bounded time for a slot a frozen owner still streams (retryable), and resumes once it is released', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await database(100);
    const input = {
      request: request('frozen-follow', { follow: true }),
      checkpointFile: join(dir.path, 'checkpoint.json'),
      connections: connectionsOf(url),
      commitEveryRecords: 50,
      replication: { keepaliveMs: 200, slotWaitMs: 1_000 },
    };
    await using first = startOwner(input, 1);
    await first.waitForLine(/^PHASE streaming/, 30_000);
    await waitFor(
      async () =>
        (
          await sql(
            url,
            `SELECT 1 FROM pg_replication_slots WHERE starts_with(slot_name, 'sluice_x_') AND active`,
          )
        ).length === 1,
      { timeoutMs: 10_000, what: 'the first owner streaming its slot' },
    );
    // Frozen: its walsender keeps the slot active (until wal_sender_timeout, 60 s).
    first.kill('SIGSTOP');
    try {
      const started = Date.now();
      await using second = startOwner(input, 2);
      const failed = await second.waitForLine(/^(DONE|FAILED) /, 30_000);
      expect(failed).toMatch(
        /^FAILED SOURCE_FAILED: Replication slot \S+ is in use by PostgreSQL backend \d+.* \(retryable\)$/,
      );
      expect(Date.now() - started).toBeLessThan(20_000);
    } finally {
      first.kill('SIGKILL');
    }
    await first.exited;
    await sql(url, 'INSERT INTO items VALUES (500, 5, 5)');
    await using third = startOwner(input, 3);
    await third.waitForLine(/^PHASE streaming/, 30_000);
    expect(third.lines.filter((l) => l.startsWith('DECISION '))).toEqual([
      expect.stringMatching(/^DECISION resume /),
    ]);
    await waitMirrored(url, 'the third owner applying the change');
    third.kill('SIGKILL');
    await third.exited;
    expect(await discardLeftovers(url, input.request)).toEqual(NO_LEFTOVERS);
  });

  it('with follow: an owner SIGKILLed mid-stream is resumed by the next one from the committed LSN, and every change is applied exactly once', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await database(300, true);
    const input = {
      request: request('crash-follow', { batchSize: 20, follow: true }),
      checkpointFile: join(dir.path, 'checkpoint.json'),
      connections: connectionsOf(url),
      commitEveryRecords: 20,
      replication: REPLICATION,
    };
    const streamed = async () => {
      const raw = await readFile(input.checkpointFile, 'utf8').catch(() => null);
      if (raw === null) return false;
      // The file port stores `{ epoch, checkpoint }`.
      const stored = JSON.parse(raw) as {
        checkpoint: { positions: Record<string, { phase?: string }> } | null;
      };
      return stored.checkpoint?.positions['crash-follow.source']?.phase === 'stream';
    };

    // A writer of source transactions: each updates three rows, inserts one and deletes one (several rows per
    // transaction, so a replayed or split one shows in the per-key counts).
    // (asserted, not annotated: it is assigned in startWriter, so TypeScript must not narrow it to null)
    let writer = null as SourceWriter | null;
    const startWriter = () => {
      writer = startSourceWriter(url, {
        pauseMs: 3,
        transaction: ({ updates, added, removed }) => `DO $$ BEGIN
             UPDATE items SET v = v + 1, tag = ${added} WHERE id IN (${updates.join(', ')});
             INSERT INTO items VALUES (${added}, 0, ${added});
             DELETE FROM items WHERE id = ${removed};
           END $$`,
      });
      return writer;
    };
    const written = () => writer?.written ?? 0;

    try {
      {
        await using first = startOwner(input, 1);
        await waitFor(streamed, { timeoutMs: 30_000, what: 'the first owner streaming' });
        // Changes start only once the snapshot is committed: then everything after it reaches the sink by the stream.
        startWriter();
        const before = first.lines.filter((l) => l.startsWith('COMMIT ')).length;
        await waitFor(() => first.lines.filter((l) => l.startsWith('COMMIT ')).length >= before + 5, {
          timeoutMs: 30_000,
          what: 'stream commits',
        });
        await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 20)));
        first.kill('SIGKILL');
        expect((await first.exited).signal).toBe('SIGKILL');
        expect(first.lines.filter((l) => /^(DONE|FAILED) /.test(l))).toEqual([]);
      }
      const atKill = written();
      // The source keeps changing while nobody owns the transfer.
      await waitFor(() => written() >= atKill + 20, { timeoutMs: 30_000, what: 'changes while down' });
      await using second = startOwner(input, 2);
      await second.waitForLine(/^DECISION /, 30_000);
      expect(second.lines.filter((l) => l.startsWith('DECISION '))).toEqual([
        expect.stringMatching(/^DECISION resume /),
      ]);
      await waitFor(() => written() >= atKill + 60, { timeoutMs: 30_000, what: 'changes after the resume' });
      await writer!.stop();
      await waitMirrored(url, 'the resumed owner mirrored every change');
      expect(second.lines.filter((l) => /^(DONE|FAILED) /.test(l))).toEqual([]);
      // One slot, named from the transfer id: both owners streamed the same one.
      expect((await leftovers(url)).slots).toEqual([transferReplicationName('crash-follow.source')]);

      // Exactly once: per key, the destination's physical writes are the snapshot's one (initial rows) plus one per
      // source change.
      const mismatches = await perKeyWriteMismatches(url, {
        initialRows: 300,
        changes: 'src_changes',
        writes: 'dst_writes',
      });
      expect(mismatches).toEqual([]);
      const [changed] = await sql<{ changes: number }>(
        url,
        'SELECT count(*)::int AS changes FROM src_changes',
      );
      expect(changed!.changes).toBeGreaterThanOrEqual(written() * 3);
    } finally {
      await writer?.[Symbol.asyncDispose]();
    }
    expect(await discardLeftovers(url, input.request)).toEqual(NO_LEFTOVERS);
  });
});
