/**
 * One transfer's store row held by another session (an operator's open transaction, or a node frozen inside a
 * statement on it) must not cost its owner the leases of every other transfer it runs. Two real app-servers on a
 * PostgreSQL store and a private nats-server; the row is held with `SELECT … FOR UPDATE` in an open transaction.
 */
import { join } from 'node:path';
import { openStore } from '@sluice/store';
import { createTestDatabase, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import {
  call,
  exactlyOnce,
  FAST_TRANSFERS,
  fileTransfer,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

const ROWS = 3_000;
const RATE = 300;

describe('heartbeats with a held transfer row', () => {
  it('defect: one held transfer row stalled the owner’s heartbeat, so every other transfer it ran lost its lease and was taken over', {
    timeout: 120_000,
  }, async () => {
    await using storeDb = await createTestDatabase('sluice_app_heldrow');
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-app-heldrow-');
    await using store = await openStore(storeDb.url);
    const spec = (nodeId: string) => ({
      nodeId,
      dir: join(dir.path, nodeId),
      store: storeDb.url,
      nats: nats.url,
      roots: [dir.path],
      transfers: FAST_TRANSFERS,
    });
    await using n1 = await startNodeProcess(spec('n1'));
    // A peer whose sweeper takes over any lease of n1's that runs out.
    await using _peer = await startNodeProcess(spec('n2'));
    const ids = ['held', 'free-1', 'free-2'] as const;
    for (const id of ids) {
      const input = await writeRecords(join(dir.path, `${id}-in.jsonl`), ROWS);
      const reply = await call(`${n1.url}/v1/transfers`, {
        json: fileTransfer(id, input, join(dir.path, `${id}-out.jsonl`), RATE),
      });
      expect(reply.status, JSON.stringify(reply.body)).toBe(201);
    }
    await waitFor(
      async () => {
        const records = await Promise.all(ids.map((id) => store.get(id)));
        return records.every((r) => r?.state === 'IN_PROGRESS' && r.ownerNodeId === 'n1');
      },
      { timeoutMs: 20_000, what: 'all three transfers running on n1' },
    );

    // Hold one row for three leases: the owner's heartbeat statement must not wait for it.
    const locker = new pg.Client({ connectionString: storeDb.url });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query("SELECT id FROM transfers WHERE id = 'held' FOR UPDATE");
      await new Promise((resolve) => setTimeout(resolve, FAST_TRANSFERS.leaseMs * 3));
      await locker.query('COMMIT');
    } finally {
      await locker.end();
    }

    for (const id of ids) await waitForState(n1.url, id, 'COMPLETED', 60_000);
    for (const id of ['free-1', 'free-2']) {
      const record = await store.get(id);
      // Owned by a healthy node whose heartbeats kept coming: never fenced, never taken over.
      expect({ id, epoch: record?.epoch, attempts: record?.attempts, owner: record?.ownerNodeId }).toEqual({
        id,
        epoch: 1,
        attempts: 1,
        owner: 'n1',
      });
    }
    for (const id of ids) expect(await exactlyOnce(join(dir.path, `${id}-out.jsonl`), ROWS), id).toBeNull();
  });
});
