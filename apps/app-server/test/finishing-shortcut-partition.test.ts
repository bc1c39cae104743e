/**
 * The finishing shortcut of a file transfer (docs/fencing.md § The finishing shortcut; execution.ts `recentlyConfirmed`) under a
 * partition between the owner and NATS: the owner still reaches the store, a peer asking "who runs it?" hears a
 * definite "nobody" and terminates the transfer at once. The owner's final save lands right before that, so the
 * owner reaches the file sink's publish within half a lease of it — where it skipped the store's fenced
 * `finishing` step, arguing that its responder contradicted any "nobody". It could not: its connection was down.
 *
 * Two real app-servers on a PostgreSQL store and a private nats-server, the owner's NATS connection through a TCP
 * proxy that is cut. Triggers on the store's `transfers` table line the statements up (advisory locks the test
 * holds): the owner's final checkpoint save waits until the peer's terminate is queued behind its row lock; once the
 * save commits the terminate takes the row before any other statement (every other update waits at its start), and
 * holds it until the owner has done whatever it does after the save, up to its next store statement.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { openStore } from '@sluice/store';
import { createTestDatabase, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, fileTransfer, writeRecords } from './helpers.js';
import { startPartitionedPair } from './partitioned-owner.js';
import { openStoreGates } from './store-gates.js';

/** Not a multiple of the commit interval (50): the final save is the run's last step before the sink publishes. */
const RECORDS = 525;
/** Advisory lock keys the test holds: the owner's final save waits on the first, the terminate on the second. */
const HOLD_FINAL_SAVE = 1;
const HOLD_TERMINATE = 3;
/** Every update statement of the store waits on this one at its start, before it locks any row. */
const HOLD_UPDATES = 5;

describe('the finishing shortcut of an owner partitioned from NATS', () => {
  it('defect: a file transfer TERMINATED through another node was published anyway by its partitioned owner', {
    timeout: 120_000,
  }, async () => {
    await using storeDb = await createTestDatabase('sluice_app_finish_partition');
    await using dir = await tempDir('sluice-finish-partition-');
    await using store = await openStore(storeDb.url);
    await using pair = await startPartitionedPair(dir.path, storeDb.url);
    const { owner, other, proxy, files } = pair;

    // The final save (its checkpoint has read every record) waits for HOLD_FINAL_SAVE holding the record's row;
    // the terminate waits for HOLD_TERMINATE, holding it too.
    await using gates = await openStoreGates(storeDb, {
      rowHolds: `IF NEW.checkpoint IS DISTINCT FROM OLD.checkpoint
            AND jsonb_path_exists(NEW.checkpoint::jsonb, '$.** ? (@.read == ${RECORDS})') THEN
           PERFORM pg_advisory_xact_lock_shared(${HOLD_FINAL_SAVE});
         END IF;
         IF NEW.state = 'TERMINATED' AND OLD.state <> 'TERMINATED' THEN
           PERFORM pg_advisory_xact_lock_shared(${HOLD_TERMINATE});
         END IF;`,
      updateGate: HOLD_UPDATES,
    });
    await gates.hold(HOLD_FINAL_SAVE, HOLD_TERMINATE);
    const source = await writeRecords(join(files, 'in.jsonl'), RECORDS);
    const out = join(files, 'out.jsonl');
    const body = fileTransfer('finish-cut', source, out, 200);
    expect((await call(`${owner.url}/v1/transfers`, { json: body })).status).toBe(201);
    await waitFor(
      async () =>
        ((await call(`${owner.url}/v1/transfers/finish-cut`)).body.progress?.recordsRead ?? 0) > 100,
      { timeoutMs: 30_000, what: 'the transfer to be under way' },
    );

    // The partition: the owner keeps running and saving through PostgreSQL; NATS no longer reaches it.
    await proxy.cut();
    await waitFor(async () => (await call(`${owner.url}/readyz`)).status === 503, {
      timeoutMs: 20_000,
      what: 'the owner to see its backplane down',
    });
    await waitFor(() => gates.waitingOnAdvisory(HOLD_FINAL_SAVE), {
      timeoutMs: 30_000,
      intervalMs: 10,
      what: "the owner's final save to wait",
    });
    // The other node hears a definite "nobody" and terminates at once (no lease wait); its statement queues
    // behind the final save.
    const terminating = call(`${other.url}/v1/transfers/finish-cut/terminate`, { method: 'POST' });
    terminating.catch(() => {}); // awaited below; a failure before that must not be an unhandled rejection
    await waitFor(gates.waitingOnRow, { timeoutMs: 20_000, intervalMs: 10, what: 'the terminate to queue' });
    // From here every new update waits at its start: once the save commits, the terminate takes the row first.
    await gates.hold(HOLD_UPDATES);
    await gates.release(HOLD_FINAL_SAVE);
    await waitFor(() => gates.waitingOnAdvisory(HOLD_TERMINATE), {
      timeoutMs: 20_000,
      intervalMs: 10,
      what: 'the terminate to hold the record',
    });
    // The save is committed; the owner runs on until its next store statement (a fenced finishing step, or
    // recording COMPLETED), which finds the record held by the terminate.
    await waitFor(() => gates.waitingOnAdvisory(HOLD_UPDATES), {
      timeoutMs: 20_000,
      intervalMs: 10,
      what: "the owner's next store write",
    });
    await gates.release(HOLD_UPDATES, HOLD_TERMINATE);

    const terminated = await terminating;
    expect(terminated.status, JSON.stringify(terminated.body)).toBe(200);
    expect(terminated.body).toMatchObject({ state: 'TERMINATED', epoch: 2, owner: { nodeId: 'n2' } });
    // The owner's run ended: refused at its finishing step, or when it went on to record COMPLETED.
    await owner.child.waitForLine(/no longer owns|could not record COMPLETED|already final/, 20_000);
    expect({ publishedAfterTerminate: existsSync(out) }).toEqual({ publishedAfterTerminate: false });
    expect(await store.get('finish-cut')).toMatchObject({ state: 'TERMINATED', epoch: 2 });
  });
});
