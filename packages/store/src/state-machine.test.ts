import { ALL_STATES, canTransition, isTerminal, type TransferRecord, type TransferState } from '@sluice/core';
import { expectSluiceError } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { DIALECTS, LEASE_MS, makeRequest, owner, storeFixture, submitInput } from '../test/helpers.js';
import type { SqlDataPlaneStore } from './store.js';

/** The path from RECEIVED to each state. */
const PATH: Record<TransferState, TransferState[]> = {
  RECEIVED: [],
  IN_PROGRESS: ['IN_PROGRESS'],
  COMPLETED: ['IN_PROGRESS', 'COMPLETED'],
  FAILED: ['IN_PROGRESS', 'FAILED'],
  TERMINATED: ['TERMINATED'],
};

async function recordIn(store: SqlDataPlaneStore, state: TransferState): Promise<TransferRecord> {
  let record = (await store.submit(submitInput(makeRequest(), owner('node-a')))).record;
  for (const to of PATH[state]) {
    record = await store.transition(record.id, record.epoch, {
      to,
      ...(to === 'COMPLETED' ? { result: { recordsRead: 1, recordsWritten: 1, badRecords: 0 } } : {}),
      ...(to === 'FAILED' ? { error: { code: 'SOURCE_FAILED', message: 'boom' } } : {}),
    });
  }
  expect(record.state).toBe(state);
  return record;
}

describe.each(DIALECTS)('the state machine through the store on %s', (dialect) => {
  it('allows exactly the legal transitions and refuses every other one, changing nothing', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    let legal = 0;
    let refused = 0;
    for (const from of ALL_STATES) {
      for (const to of ALL_STATES) {
        const created = await recordIn(store, from);
        await fx.advance(1_000);
        // Read after the clock moved (on PostgreSQL, advancing shifts stored leases).
        const before = (await store.get(created.id)) ?? created;
        if (canTransition(from, to)) {
          const after = await store.transition(before.id, before.epoch, { to });
          expect(after.state).toBe(to);
          expect(after.epoch).toBe(before.epoch);
          await fx.expectStoreNow(after.updatedAt);
          legal++;
        } else {
          await expectSluiceError(store.transition(before.id, before.epoch, { to }), 'ILLEGAL_TRANSITION');
          expect(await store.get(before.id)).toEqual(before);
          refused++;
        }
      }
    }
    expect(legal).toBe(5);
    expect(refused).toBe(20);
  });

  it('final states stay final: no heartbeat, takeover, recovery, checkpoint or transition moves them', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const me = owner('node-a');
    const finals: TransferRecord[] = [];
    for (const state of ALL_STATES.filter(isTerminal)) finals.push(await recordIn(store, state));
    await fx.advance(10 * LEASE_MS);
    expect(await store.heartbeat(me, LEASE_MS)).toEqual({ extended: [], held: [] });
    expect(await store.recoverExpired(owner('node-b'), LEASE_MS, 100)).toEqual([]);
    for (const record of finals) {
      await expectSluiceError(
        store.takeOver(record.id, record.epoch, owner('node-b'), LEASE_MS),
        'ILLEGAL_TRANSITION',
      );
      await expectSluiceError(
        store.saveCheckpoint(record.id, record.epoch, { late: true }),
        'ILLEGAL_TRANSITION',
      );
      for (const to of ALL_STATES) {
        await expectSluiceError(store.transition(record.id, record.epoch, { to }), 'ILLEGAL_TRANSITION');
      }
      // A late submit of the same request reports the final outcome, untouched.
      const again = await store.submit(submitInput(record.request, owner('node-c')));
      expect(again).toEqual({ record, created: false });
      expect(await store.get(record.id)).toEqual(record);
    }
  });
});
