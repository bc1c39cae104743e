/**
 * Terminate of a transfer into PostgreSQL whose owner is frozen (SIGSTOP) in the middle of a sink commit: once the
 * terminate has answered TERMINATED, the woken owner must not land a single row in the destination. Two real
 * app-servers on a PostgreSQL store and a private nats-server; physical writes are counted by a trigger.
 */
import { join } from 'node:path';
import { openStore } from '@sluice/store';
import { createTestDatabase, sql, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { call, createCountedDestination, startNodeProcess, writeRecords } from './helpers.js';

const ROWS = 4_000;

describe('terminate while the owner is frozen inside a PostgreSQL sink commit', () => {
  it('defect: the woken owner committed a batch into the PostgreSQL destination after the transfer was TERMINATED', {
    timeout: 120_000,
  }, async () => {
    await using storeDb = await createTestDatabase('sluice_app_termfence');
    await using dst = await createTestDatabase('sluice_app_termfence_dst');
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-app-termfence-');
    await using store = await openStore(storeDb.url);
    // Every committed physical write into dst is counted: a replayed or duplicated write would show.
    const writes = await createCountedDestination(dst.url);
    // No sweeper within the test: the frozen owner's transfer is ended by the terminate alone.
    const transfers = { leaseMs: 2_000, heartbeatMs: 400, ownerWaitMs: 500, sweepIntervalMs: 600_000 };
    const spec = (nodeId: string) => ({
      nodeId,
      dir: join(dir.path, nodeId),
      store: storeDb.url,
      nats: nats.url,
      roots: [dir.path],
      transfers,
      pipeline: { commitEveryRecords: 100, commitEveryMs: 5_000 },
      extraYaml: `connections: { wh: { type: postgres, url: "${dst.url}" } }`,
    });
    const t1 = await startNodeProcess(spec('t1'));
    const t2 = await startNodeProcess(spec('t2'));
    const locker = new pg.Client({ connectionString: dst.url });
    await locker.connect();
    try {
      const input = await writeRecords(join(dir.path, 'in.jsonl'), ROWS);
      const body = {
        id: 'term-pg',
        mode: 'idempotent',
        source: { type: 'file', path: input, format: 'jsonl' },
        destination: { type: 'postgres', connection: 'wh', table: 'dst', key: 'id' },
        properties: {},
        options: { maxRecordsPerSecond: 400 },
      };
      expect((await call(`${t1.url}/v1/transfers`, { json: body })).status).toBe(201);
      const written = async () => (await writes.counts()).n;
      await waitFor(async () => (await written()) >= 200, { timeoutMs: 30_000, what: 'a few commits' });

      // Hold the sink's checkpoint row: the owner's next commit writes its batch, then waits on this lock.
      await locker.query('BEGIN');
      await locker.query('SELECT * FROM sluice_sink_checkpoints FOR UPDATE');
      await waitFor(
        async () =>
          (
            await sql<{ n: number }>(
              dst.url,
              `SELECT count(*)::int AS n FROM pg_stat_activity
                WHERE datname = $1 AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO sluice_sink_checkpoints%'`,
              [dst.name],
            )
          )[0]!.n === 1,
        { timeoutMs: 20_000, intervalMs: 20, what: 'the owner to wait inside its commit' },
      );
      // Frozen inside the commit; the lock goes, its statement completes, its COMMIT is not sent yet.
      t1.child.kill('SIGSTOP');
      try {
        await locker.query('COMMIT');
        const terminating = call(`${t2.url}/v1/transfers/term-pg/terminate`, { method: 'POST' });
        await waitFor(async () => (await store.get('term-pg'))?.state === 'TERMINATED', {
          timeoutMs: 20_000,
          intervalMs: 50,
          what: 'the record to turn TERMINATED',
        });
        const atTerminated = await written();
        // Woken well within the sink session's idle timeout (10 s), so its session is still open.
        t1.child.kill('SIGCONT');
        const terminated = await terminating;
        expect(terminated.status).toBe(200);
        expect(terminated.body).toMatchObject({ state: 'TERMINATED', epoch: 2, owner: { nodeId: 't2' } });
        await t1.child.waitForLine(/no longer owns|fenced|stale/i, 20_000);
        // The woken owner had time to do whatever it still does.
        await waitFor(
          async () =>
            (
              await sql(
                dst.url,
                "SELECT 1 FROM pg_stat_activity WHERE datname = $1 AND state = 'idle in transaction'",
                [dst.name],
              )
            ).length === 0,
          { timeoutMs: 20_000, what: 'no open sink transaction' },
        );
        expect({ writesAfterTerminated: (await written()) - atTerminated }).toEqual({
          writesAfterTerminated: 0,
        });
        expect(await store.get('term-pg')).toMatchObject({ state: 'TERMINATED', epoch: 2 });
      } finally {
        t1.child.kill('SIGCONT');
      }
    } finally {
      await locker.end().catch(() => {});
      await Promise.allSettled([t1.child.stop('SIGKILL'), t2.child.stop('SIGKILL')]);
    }
  });
});
