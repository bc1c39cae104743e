/**
 * An owner whose outcome statement waits in the store longer than the store's `statement_timeout` (30 s): the row
 * held by another session — an operator's `SELECT … FOR UPDATE`, a long transaction, lock contention under load.
 * PostgreSQL cancels the statement (SQLSTATE 57014), nothing of it is written, and the store answers again as soon
 * as the row is free: the store did not answer in time, as when its connection drops (outcome-store-outage.test.ts)
 * or the client's own query timeout fires. The run must keep the transfer and record its outcome once the store
 * takes it — never drop it and leave the finished transfer IN_PROGRESS for the heartbeat to run again.
 *
 * One real app-server on a PostgreSQL store of the test's own. A trigger on `transfers` (store-gates.ts) parks the
 * statement that records COMPLETED on an advisory lock the test holds, with the record's row locked, until
 * PostgreSQL's statement timeout cancels it; the test then lets the row go.
 */
import { join } from 'node:path';
import { createTestDatabase, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, exactlyOnce, fileTransfer, startNodeProcess, waitForState, writeRecords } from './helpers.js';
import { openStoreGates, untilCancelled } from './store-gates.js';

const RECORDS = 500;
/** The advisory lock the COMPLETED statement waits on. */
const COMPLETED_GATE = 41;
/** A gate every update passes at its start; never held here. */
const UNUSED_GATE = 42;

describe('an outcome statement the store cancelled (statement timeout)', () => {
  it('defect: a COMPLETED the store cancelled after its statement timeout was dropped: the finished transfer ran again from scratch', {
    timeout: 180_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_app_stmt_timeout');
    await using dir = await tempDir('sluice-stmt-timeout-');
    const files = join(dir.path, 'files');
    await using node = await startNodeProcess({
      nodeId: 's1',
      dir: join(dir.path, 's1'),
      store: db.url,
      roots: [files],
    });
    await using gates = await openStoreGates(db, {
      rowHolds: `IF NEW.state = 'COMPLETED' THEN PERFORM pg_advisory_xact_lock_shared(${COMPLETED_GATE}); END IF;`,
      updateGate: UNUSED_GATE,
    });
    const source = await writeRecords(join(files, 'in.jsonl'), RECORDS);
    const out = join(files, 'out.jsonl');
    await gates.hold(COMPLETED_GATE);
    try {
      expect(
        (await call(`${node.url}/v1/transfers`, { json: fileTransfer('stmt-timeout', source, out) })).status,
      ).toBe(201);
      // The run published its file and now records COMPLETED: parked, holding the record's row.
      // Then PostgreSQL cancels it after its statement timeout (30 s); nothing of it was written.
      await untilCancelled(() => gates.waitingOnAdvisory(COMPLETED_GATE), 'the COMPLETED statement');
    } finally {
      await gates.release(COMPLETED_GATE);
    }
    const done = await waitForState(node.url, 'stmt-timeout', 'COMPLETED', 60_000);
    // Recorded by the run that finished it, at its own epoch: nothing ran it a second time.
    expect({ epoch: done.epoch, attempts: done.attempts }).toEqual({ epoch: 1, attempts: 1 });
    expect(done.result).toMatchObject({ recordsRead: RECORDS, recordsWritten: RECORDS });
    expect(await exactlyOnce(out, RECORDS)).toBeNull();
  });
});
