/**
 * An owner whose outcome (TERMINATED, COMPLETED) meets a store that stays unreachable longer than its quick retries:
 * the run keeps the transfer and records that outcome once the store answers again — it is never left IN_PROGRESS
 * for the heartbeat to resume as an orphan. The store "goes away" at exactly that statement through a trigger that
 * ends the session writing the outcome (as a PostgreSQL restart or failover at that moment would); the rest of the
 * store keeps answering, so heartbeats go on.
 */
import { access } from 'node:fs/promises';
import { join } from 'node:path';
import { createTestDatabase, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, exactlyOnce, fileTransfer, startNodeProcess, waitForState, writeRecords } from './helpers.js';

const RECORDS = 3_000;

/** Until disposed, every statement that moves a transfer to `state` loses its connection. */
async function loseConnectionsRecording(url: string, state: string): Promise<AsyncDisposable> {
  await sql(
    url,
    `CREATE FUNCTION lose_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       IF NEW.state = '${state}' THEN PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(1); END IF;
       RETURN NEW;
     END $$`,
  );
  await sql(
    url,
    'CREATE TRIGGER lose_outcome BEFORE UPDATE ON transfers FOR EACH ROW EXECUTE FUNCTION lose_outcome()',
  );
  return {
    [Symbol.asyncDispose]: async () => {
      await sql(url, 'DROP TRIGGER IF EXISTS lose_outcome ON transfers');
      await sql(url, 'DROP FUNCTION IF EXISTS lose_outcome()');
    },
  };
}

/** Waits until the transfer's lease was renewed `count` times (heartbeats went on), then returns the record. */
async function afterLeaseRenewals(url: string, id: string, count: number) {
  const read = async () => (await call(`${url}/v1/transfers/${id}`)).body;
  let last = (await read()).leaseExpiresAt;
  let renewals = 0;
  await waitFor(
    async () => {
      const lease = (await read()).leaseExpiresAt;
      if (lease !== last) renewals += 1;
      last = lease;
      return renewals >= count;
    },
    { timeoutMs: 20_000, intervalMs: 50, what: `${count} lease renewals of ${id}` },
  );
  return read();
}

describe('an outcome the store could not take at once', () => {
  it('defect: a terminate the store could not record was forgotten: the stopped transfer resumed and completed', {
    timeout: 120_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_app_term_outage');
    await using dir = await tempDir('sluice-term-outage-');
    const files = join(dir.path, 'files');
    await using node = await startNodeProcess({
      nodeId: 't1',
      dir: join(dir.path, 't1'),
      store: db.url,
      roots: [files],
    });
    const source = await writeRecords(join(files, 'in.jsonl'), RECORDS);
    const out = join(files, 'out.jsonl');
    // ~7 s: still running when the terminate comes, and done well within the test if it were resumed.
    expect(
      (await call(`${node.url}/v1/transfers`, { json: fileTransfer('term-outage', source, out, 450) }))
        .status,
    ).toBe(201);
    await waitFor(
      async () =>
        ((await call(`${node.url}/v1/transfers/term-outage`)).body.progress?.recordsRead ?? 0) > 300,
      { timeoutMs: 20_000, what: 'the transfer to be under way' },
    );
    {
      await using _outage = await loseConnectionsRecording(db.url, 'TERMINATED');
      const terminated = await call(`${node.url}/v1/transfers/term-outage/terminate`, { method: 'POST' });
      // Not recorded yet: the caller is told to retry, never that it is done.
      expect({ status: terminated.status, code: terminated.body?.code }).toEqual({
        status: 503,
        code: 'STORE_UNAVAILABLE',
      });
      // Heartbeats go on meanwhile, and none of them resumes the stopped transfer.
      const during = await afterLeaseRenewals(node.url, 'term-outage', 2);
      expect({ state: during.state, epoch: during.epoch, attempts: during.attempts }).toEqual({
        state: 'IN_PROGRESS',
        epoch: 1,
        attempts: 1,
      });
    }
    const ended = await waitFor(
      async () => {
        const reply = await call(`${node.url}/v1/transfers/term-outage`);
        return ['COMPLETED', 'FAILED', 'TERMINATED'].includes(reply.body.state) ? reply.body : null;
      },
      { timeoutMs: 60_000, intervalMs: 200, what: 'the transfer to end' },
    );
    // Recorded by the owner that stopped it, at its own epoch: nothing took it over.
    expect({ state: ended.state, epoch: ended.epoch, result: ended.result }).toEqual({
      state: 'TERMINATED',
      epoch: 1,
      result: null,
    });
    // The terminated transfer's destination was never published.
    expect(
      await access(out).then(
        () => 'published',
        () => 'absent',
      ),
    ).toBe('absent');
  });

  it('defect: a COMPLETED the store could not take at once was dropped: the finished transfer ran again from scratch, over and over', {
    timeout: 120_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_app_done_outage');
    await using dir = await tempDir('sluice-done-outage-');
    const files = join(dir.path, 'files');
    await using node = await startNodeProcess({
      nodeId: 'c1',
      dir: join(dir.path, 'c1'),
      store: db.url,
      roots: [files],
    });
    const source = await writeRecords(join(files, 'in.jsonl'), RECORDS);
    const out = join(files, 'out.jsonl');
    {
      await using _outage = await loseConnectionsRecording(db.url, 'COMPLETED');
      expect(
        (await call(`${node.url}/v1/transfers`, { json: fileTransfer('done-outage', source, out) })).status,
      ).toBe(201);
      await node.child.waitForLine(/store unreachable: COMPLETED is recorded once it answers again/, 30_000);
      const during = await afterLeaseRenewals(node.url, 'done-outage', 2);
      expect({ state: during.state, epoch: during.epoch, attempts: during.attempts }).toEqual({
        state: 'IN_PROGRESS',
        epoch: 1,
        attempts: 1,
      });
    }
    const done = await waitForState(node.url, 'done-outage', 'COMPLETED', 30_000);
    expect({ epoch: done.epoch, attempts: done.attempts }).toEqual({ epoch: 1, attempts: 1 });
    expect(done.result).toMatchObject({ recordsRead: RECORDS, recordsWritten: RECORDS });
    expect(await exactlyOnce(out, RECORDS)).toBeNull();
  });
});
