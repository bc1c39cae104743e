/**
 * A terminate that lands right after the owner's fenced `finishing` step (docs/fencing.md § Finishing holds the
 * record). The file sink publishes (renames its temp into place) once the store confirmed the run's epoch; a record
 * that stayed plain IN_PROGRESS after that confirmation let a peer told "nobody runs it" (the owner cut off from
 * NATS, not from the store) turn it TERMINATED at the next epoch in the moment between the confirmation and the
 * rename — the owner then published the file of a transfer the record and the terminate's caller call TERMINATED.
 *
 * Two real app-servers on a PostgreSQL store and a private nats-server, the owner's NATS connection through a TCP
 * proxy that is cut (partitioned-owner.ts). Triggers on the store's `transfers` table line the statements up
 * (store-gates.ts): the owner's finishing write waits, holding the record's row, until the peer's terminate is
 * queued behind it; then every new update waits at its start, so once the finishing write commits the terminate's
 * statement is the next to judge the record, and the owner's next store write (recording COMPLETED, after its
 * rename) waits until the test has seen the file published.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { openStore } from '@sluice/store';
import { createTestDatabase, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  FINISHING_WRITE_WAITS,
  HOLD_FINISHING,
  HOLD_UPDATES,
  partitionedAtFinishing,
  RECORDS,
} from './finishing-hold.js';
import { call, exactlyOnce } from './helpers.js';
import { startPartitionedPair } from './partitioned-owner.js';
import { openStoreGates } from './store-gates.js';

describe('a terminate that meets an owner past its fenced finishing step', () => {
  it('defect: a terminate through another node reported TERMINATED for a file the partitioned owner published', {
    timeout: 120_000,
  }, async () => {
    await using storeDb = await createTestDatabase('sluice_app_finish_terminate');
    await using dir = await tempDir('sluice-finish-terminate-');
    await using store = await openStore(storeDb.url);
    await using pair = await startPartitionedPair(dir.path, storeDb.url);
    const { other, files } = pair;
    await using gates = await openStoreGates(storeDb, {
      rowHolds: FINISHING_WRITE_WAITS,
      updateGate: HOLD_UPDATES,
    });
    await gates.hold(HOLD_FINISHING);
    const out = join(files, 'out.jsonl');
    // The partition: the owner keeps running and writing through PostgreSQL; NATS no longer reaches it.
    await partitionedAtFinishing(pair, gates, 'finish-race', out);
    const terminating = call(`${other.url}/v1/transfers/finish-race/terminate`, { method: 'POST' });
    terminating.catch(() => {}); // awaited below; a failure before that must not be an unhandled rejection
    await waitFor(gates.waitingOnRow, { timeoutMs: 20_000, intervalMs: 10, what: 'the terminate to queue' });
    // From here every new update waits at its start: once the finishing write commits, the terminate's statement
    // (already past that gate, queued on the row) is the next to judge the record.
    await gates.hold(HOLD_UPDATES);
    await gates.release(HOLD_FINISHING);
    // The owner was confirmed: it publishes the file, then goes on to record COMPLETED (held at the gate).
    await waitFor(() => existsSync(out), { timeoutMs: 20_000, intervalMs: 10, what: 'the owner to publish' });
    await waitFor(() => gates.waitingOnAdvisory(HOLD_UPDATES, "%'COMPLETED'%"), {
      timeoutMs: 20_000,
      intervalMs: 10,
      what: 'the owner to record COMPLETED',
    });
    await gates.release(HOLD_UPDATES);

    const terminated = await terminating;
    const record = await store.get('finish-race');
    // The file is published: the only true outcome is COMPLETED, and the terminate came too late for it.
    expect({
      terminate: terminated.status,
      code: terminated.body?.code ?? null,
      state: record?.state,
      published: existsSync(out),
    }).toEqual({ terminate: 409, code: 'ILLEGAL_TRANSITION', state: 'COMPLETED', published: true });
    expect(await exactlyOnce(out, RECORDS)).toBeNull();
  });

  it('an owner paused right after its finishing step publishes nothing once it wakes: its lease ran out and a terminate landed meanwhile', {
    timeout: 120_000,
  }, async () => {
    await using storeDb = await createTestDatabase('sluice_app_finish_paused');
    await using dir = await tempDir('sluice-finish-paused-');
    await using store = await openStore(storeDb.url);
    await using pair = await startPartitionedPair(dir.path, storeDb.url);
    const { owner, other, files } = pair;
    await using gates = await openStoreGates(storeDb, {
      rowHolds: FINISHING_WRITE_WAITS,
      updateGate: HOLD_UPDATES,
    });
    await gates.hold(HOLD_FINISHING);
    const out = join(files, 'out.jsonl');
    // Cut off from NATS, the owner takes no finishing shortcut: its finishing write reaches the store.
    await partitionedAtFinishing(pair, gates, 'finish-paused', out);
    // Paused with its finishing write in the store's hands: the write commits, its reply waits unread.
    owner.child.kill('SIGSTOP');
    try {
      await gates.release(HOLD_FINISHING);
      await waitFor(async () => !(await gates.waitingOnAdvisory(HOLD_FINISHING)), {
        timeoutMs: 20_000,
        intervalMs: 10,
        what: 'the finishing write to commit',
      });
      // Nobody answers for the owner: the terminate waits for its lease (by the store's clock), then lands.
      const terminated = await call(`${other.url}/v1/transfers/finish-paused/terminate`, { method: 'POST' });
      expect(terminated.status, JSON.stringify(terminated.body)).toBe(200);
      expect(terminated.body).toMatchObject({ state: 'TERMINATED', epoch: 2, owner: { nodeId: 'n2' } });
    } finally {
      owner.child.kill('SIGCONT');
    }
    // The owner wakes up with the confirmation in hand, but its lease ran out meanwhile: it must not publish.
    await owner.child.waitForLine(/no longer owns|could not record COMPLETED|already final/, 20_000);
    expect({ publishedAfterTerminate: existsSync(out) }).toEqual({ publishedAfterTerminate: false });
    expect(await store.get('finish-paused')).toMatchObject({ state: 'TERMINATED', epoch: 2 });
  });
});
