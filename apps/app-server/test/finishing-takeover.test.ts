/**
 * A successor that takes over a FINISHING record once its owner's lease expired (docs/fencing.md § Finishing holds
 * the record). The owner's fenced finishing step commits in the store (the record marked finishing at epoch 1), and
 * the owner is paused before it reads the store's reply, i.e. before its rename: a frozen process, a long GC pause.
 * Nobody answers for it, so the record's finishing mark keeps a resubmit on another node from taking it over until
 * the lease expired by the store's clock; then that node resumes the transfer at epoch 2 from the owner's checkpoint,
 * publishes the file and records COMPLETED. When the old owner wakes up it holds a confirmation for an epoch that no
 * longer owns the transfer: it must publish nothing, so the destination holds one run's file, once, and the record's
 * outcome describes that file.
 *
 * Two real app-servers on a PostgreSQL store and a private nats-server (partitioned-owner.ts); the owner's finishing
 * write is held by a trigger (finishing-hold.ts) until the test has paused the owner with SIGSTOP.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { openStore } from '@sluice/store';
import { createTestDatabase, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  FINISHING_WRITE_WAITS,
  HOLD_FINISHING,
  HOLD_UPDATES,
  partitionedAtFinishing,
  RECORDS,
} from './finishing-hold.js';
import { call, exactlyOnce, fileTransfer, waitForState } from './helpers.js';
import { startPartitionedPair } from './partitioned-owner.js';
import { openStoreGates } from './store-gates.js';

describe('a successor that takes over a finishing record after its lease expired', () => {
  it('the paused owner publishes nothing when it wakes: the file is the successor’s, once, and COMPLETED says so', {
    timeout: 120_000,
  }, async () => {
    await using storeDb = await createTestDatabase('sluice_app_finish_takeover');
    await using dir = await tempDir('sluice-finish-takeover-');
    await using store = await openStore(storeDb.url);
    await using pair = await startPartitionedPair(dir.path, storeDb.url);
    const { owner, other, files } = pair;
    await using gates = await openStoreGates(storeDb, {
      rowHolds: FINISHING_WRITE_WAITS,
      updateGate: HOLD_UPDATES,
    });
    await gates.hold(HOLD_FINISHING);
    const out = join(files, 'out.jsonl');
    const id = 'finish-takeover';
    await partitionedAtFinishing(pair, gates, id, out);
    // Paused with its finishing write in the store's hands: the write commits, its reply waits unread.
    owner.child.kill('SIGSTOP');
    let published: { ino: number; size: number };
    try {
      await gates.release(HOLD_FINISHING);
      await waitFor(async () => !(await gates.waitingOnAdvisory(HOLD_FINISHING)), {
        timeoutMs: 20_000,
        intervalMs: 10,
        what: 'the finishing write to commit',
      });
      const [mark] = await sql<{ epoch: number; finishing_epoch: number | null }>(
        storeDb.url,
        'SELECT epoch, finishing_epoch FROM transfers WHERE id = $1',
        [id],
      );
      expect(mark).toEqual({ epoch: 1, finishing_epoch: 1 });
      // The control API shows the mark, on any node.
      expect((await call(`${other.url}/v1/transfers/${id}`)).body).toMatchObject({
        epoch: 1,
        finishing: true,
      });

      // The same request resent through the other node: nobody answers for the owner, and the finishing mark
      // keeps the record until the lease expired by the store's clock; then that node takes it over and resumes.
      const source = join(files, 'in.jsonl');
      await waitFor(
        async () => {
          const reply = await call(`${other.url}/v1/transfers`, { json: fileTransfer(id, source, out, 200) });
          expect([200, 202]).toContain(reply.status);
          return reply.body.resumed === true || reply.body.epoch === 2 ? reply.body : null;
        },
        { timeoutMs: 30_000, intervalMs: 100, what: 'the other node to take the transfer over' },
      );
      const completed = await waitForState(other.url, id, 'COMPLETED');
      expect(completed).toMatchObject({ epoch: 2, owner: { nodeId: 'n2' }, finishing: false });
      const { ino, size } = await stat(out);
      published = { ino, size };
    } finally {
      owner.child.kill('SIGCONT');
    }
    // The old owner wakes up with its epoch's confirmation in hand: it is refused before its rename.
    await owner.child.waitForLine(/no longer owns|could not record COMPLETED|already final/, 20_000);
    const { ino, size } = await stat(out);
    expect({ ino, size }).toEqual(published);
    expect(await exactlyOnce(out, RECORDS)).toBeNull();
    const record = await store.get(id);
    expect(record).toMatchObject({ state: 'COMPLETED', epoch: 2, ownerNodeId: 'n2' });
    // The outcome describes what the destination holds: every record of the source, written once.
    expect(record?.result).toMatchObject({ recordsRead: RECORDS, recordsWritten: RECORDS });
    // A resend anywhere answers that stored outcome.
    const resent = await call(`${owner.url}/v1/transfers`, {
      json: fileTransfer(id, join(files, 'in.jsonl'), out, 200),
    });
    expect(resent.status).toBe(200);
    expect(resent.body).toMatchObject({ state: 'COMPLETED', epoch: 2 });
  });
});
