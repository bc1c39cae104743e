/**
 * Store statements of a running transfer that PostgreSQL cancels after the store's statement timeout (57014, a row
 * held by another session longer than that), as store-statement-timeout.test.ts does for the outcome: a trigger
 * (store-gates.ts) parks the chosen statement on an advisory lock the test holds, with the record's row locked, until
 * the timeout cancels it; nothing of it is written. The store URL lowers PostgreSQL's timeout for the test
 * (`?statement_timeout=`, a connection parameter of the pg driver that overrides the store's 30 s default) so that
 * the relation between it and the lease is the one under test, not the wall time.
 */
import { join } from 'node:path';
import { createTestDatabase, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, exactlyOnce, fileTransfer, startNodeProcess, writeRecords } from './helpers.js';
import { NOT_A_HEARTBEAT, openStoreGates, untilCancelled } from './store-gates.js';

const RECORDS = 1_000;
/** The lease of the test nodes (helpers' FAST_TRANSFERS). */
const LEASE_MS = 2_000;
/** A gate every update passes at its start; never held here. */
const UNUSED_GATE = 50;

/** Polls the transfer until it is final, whatever that state is. */
function ended(url: string, id: string) {
  return waitFor(
    async () => {
      const reply = await call(`${url}/v1/transfers/${id}`);
      return ['COMPLETED', 'FAILED', 'TERMINATED'].includes(reply.body.state) ? reply.body : null;
    },
    { timeoutMs: 60_000, intervalMs: 100, what: `${id} to end` },
  );
}

/** The checkpoint save of the first run (epoch 1) past half the records waits for this key. */
const SAVE_GATE = 51;
const SAVE_WAITS = `IF NEW.epoch = 1 AND NEW.checkpoint IS DISTINCT FROM OLD.checkpoint
    AND jsonb_path_exists(NEW.checkpoint::jsonb, '$.** ? (@.read >= ${RECORDS / 2})') THEN
  PERFORM pg_advisory_xact_lock_shared(${SAVE_GATE});
END IF;`;

describe('a checkpoint save the store cancelled (statement timeout)', () => {
  // The timeout shorter than the lease: the cancelled save itself ends the run (its watchdog has not stopped it),
  // the case of any lease longer than the store's 30 s. A timeout longer than the lease (the defaults) is the
  // watchdog's stop of a run whose lease ran out, as in every store outage (store-restart.test.ts).
  it('a run whose save was cancelled before its lease ran out stops and resumes from its checkpoint: completed once, never FAILED', {
    timeout: 120_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_app_save_stalled');
    await using dir = await tempDir('sluice-save-stalled-');
    const files = join(dir.path, 'files');
    await using node = await startNodeProcess({
      nodeId: 'k1',
      dir: join(dir.path, 'k1'),
      store: `${db.url}?statement_timeout=${LEASE_MS / 2}`,
      roots: [files],
    });
    await using gates = await openStoreGates(db, { rowHolds: SAVE_WAITS, updateGate: UNUSED_GATE });
    const source = await writeRecords(join(files, 'in.jsonl'), RECORDS);
    const out = join(files, 'out.jsonl');
    await gates.hold(SAVE_GATE);
    try {
      expect(
        (await call(`${node.url}/v1/transfers`, { json: fileTransfer('save-stalled', source, out, 400) }))
          .status,
      ).toBe(201);
      await untilCancelled(() => gates.waitingOnAdvisory(SAVE_GATE), 'the checkpoint save');
    } finally {
      await gates.release(SAVE_GATE);
    }
    const done = await ended(node.url, 'save-stalled');
    // Stopped once (the cancelled save) and resumed once, by this node, from the checkpoint before it.
    expect({ state: done.state, epoch: done.epoch, attempts: done.attempts, error: done.error }).toEqual({
      state: 'COMPLETED',
      epoch: 2,
      attempts: 2,
      error: null,
    });
    expect(done.result).toMatchObject({ recordsRead: RECORDS, recordsWritten: RECORDS });
    expect(await exactlyOnce(out, RECORDS)).toBeNull();
  });
});

/** The heartbeat of node a1 waits for this key on the row of `hb-2`, holding the rows it updated before. */
const HEARTBEAT_GATE = 53;
const HELD_ROW = 'hb-2';
const IDS = ['hb-1', HELD_ROW, 'hb-3'];
const HEARTBEAT_WAITS = `IF NEW.id = '${HELD_ROW}' AND NEW.owner_node_id = 'a1'
    AND (SELECT NOT (${NOT_A_HEARTBEAT}) FROM (SELECT current_query() AS query) AS statement) THEN
  PERFORM pg_advisory_xact_lock_shared(${HEARTBEAT_GATE});
END IF;`;

describe('a heartbeat the store cancelled (statement timeout)', () => {
  // One statement renews every lease of the node, so one held row stalls all of them. Worth its time: a store that
  // answers everything else (peers, saves of other rows) while the node's heartbeat is stuck past its lease is a
  // case no whole-store outage shows — runs are stopped by their watchdog, taken over by the peer or resumed here.
  it('one held row stalls the heartbeat past the lease: every transfer of the node completes once, taken over fenced, none FAILED', {
    timeout: 120_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_app_hb_stalled');
    await using dir = await tempDir('sluice-hb-stalled-');
    await using nats = await startNatsServer();
    const files = join(dir.path, 'files');
    const spec = (nodeId: string) => ({
      nodeId,
      dir: join(dir.path, nodeId),
      // Longer than the lease, as the store's 30 s is longer than the default 15 s lease.
      store: `${db.url}?statement_timeout=${LEASE_MS * 2}`,
      nats: nats.url,
      roots: [files],
    });
    await using a = await startNodeProcess(spec('a1'));
    await using b = await startNodeProcess(spec('b1'));
    await using gates = await openStoreGates(db, { rowHolds: HEARTBEAT_WAITS, updateGate: UNUSED_GATE });
    const outOf = (id: string) => join(files, `${id}.out.jsonl`);
    for (const id of IDS) {
      const source = await writeRecords(join(files, `${id}.in.jsonl`), RECORDS);
      expect(
        (await call(`${a.url}/v1/transfers`, { json: fileTransfer(id, source, outOf(id), 250) })).status,
      ).toBe(201);
    }
    await gates.hold(HEARTBEAT_GATE);
    try {
      await untilCancelled(() => gates.heartbeatWaitingOnAdvisory(HEARTBEAT_GATE), "a1's heartbeat");
    } finally {
      await gates.release(HEARTBEAT_GATE);
    }
    for (const id of IDS) {
      const done = await ended(b.url, id);
      expect({ id, state: done.state, error: done.error }).toEqual({ id, state: 'COMPLETED', error: null });
      // Every owner change counted once: no run was claimed without a new epoch.
      expect(done.attempts).toBe(done.epoch);
      expect(done.result).toMatchObject({ recordsRead: RECORDS, recordsWritten: RECORDS });
      expect({ id, duplicates: await exactlyOnce(outOf(id), RECORDS) }).toEqual({ id, duplicates: null });
    }
    // The held row's run could not renew its lease: it was stopped and taken over (here or by b1), at a new epoch.
    expect((await call(`${a.url}/v1/transfers/${HELD_ROW}`)).body.epoch).toBeGreaterThanOrEqual(2);
  });
});
