import { expectSluiceError } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { DIALECTS, LEASE_MS, makeRequest, owner, storeFixture, submitInput } from '../test/helpers.js';

describe.each(DIALECTS)('fencing by epoch on %s', (dialect) => {
  it("after a takeover the old owner's transition, checkpoint, release and heartbeat are refused and change nothing", async () => {
    await using fx = await storeFixture(dialect);
    const nodeA = await fx.open();
    const nodeB = await fx.open();
    const a = owner('node-a');
    const b = owner('node-b');
    const { record } = await nodeA.submit(submitInput(makeRequest(), a));
    await nodeA.transition(record.id, 1, { to: 'IN_PROGRESS' });
    await nodeA.saveCheckpoint(record.id, 1, { offset: 10 });
    await fx.advance(LEASE_MS + 1); // node A looks dead
    const taken = await nodeB.takeOver(record.id, 1, b, LEASE_MS);
    expect(taken.epoch).toBe(2);
    expect(taken.checkpoint).toEqual({ offset: 10 }); // the new owner resumes where A stopped
    await fx.advance(1_000);
    // Read after the clock moved (on PostgreSQL, advancing shifts stored leases: test/helpers.ts).
    const takenNow = await nodeB.get(record.id);

    // Node A comes back and carries on as if it still owned the transfer.
    await expectSluiceError(nodeA.transition(record.id, 1, { to: 'COMPLETED' }), 'STALE_EPOCH');
    await expectSluiceError(
      nodeA.transition(record.id, 1, { to: 'FAILED', error: { code: 'X', message: 'y' } }),
      'STALE_EPOCH',
    );
    await expectSluiceError(nodeA.saveCheckpoint(record.id, 1, { offset: 99 }, LEASE_MS), 'STALE_EPOCH');
    await expectSluiceError(nodeA.release(record.id, 1), 'STALE_EPOCH');
    await expectSluiceError(nodeA.recordRetry(record.id, 1), 'STALE_EPOCH');
    await expectSluiceError(nodeA.takeOver(record.id, 1, a, LEASE_MS), 'STALE_EPOCH');
    expect(await nodeA.heartbeat(a, LEASE_MS)).toEqual({ extended: [], held: [] });
    expect(await nodeA.get(record.id)).toEqual(takenNow);

    // The new owner goes on normally.
    expect(await nodeB.heartbeat(b, LEASE_MS)).toEqual({ extended: [record.id], held: [] });
    await nodeB.saveCheckpoint(record.id, 2, { offset: 20 });
    const done = await nodeB.transition(record.id, 2, { to: 'COMPLETED' });
    expect(done).toMatchObject({
      state: 'COMPLETED',
      epoch: 2,
      ownerNodeId: 'node-b',
      checkpoint: { offset: 20 },
    });
  });

  it('a restarted node (new instance id) does not heartbeat the transfers of its previous life', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const firstLife = owner('node-a', 'a-life-1');
    const { record } = await store.submit(submitInput(makeRequest(), firstLife));
    await fx.advance(LEASE_MS + 1);
    expect(await store.heartbeat(owner('node-a', 'a-life-2'), LEASE_MS)).toEqual({ extended: [], held: [] });
    const recovered = await store.recoverExpired(owner('node-a', 'a-life-2'), LEASE_MS, 10);
    expect(recovered.map((r) => [r.id, r.epoch])).toEqual([[record.id, 2]]);
    expect(await store.heartbeat(firstLife, LEASE_MS)).toEqual({ extended: [], held: [] });
  });

  it('a stale epoch is reported even when the transfer has since reached a final state', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const { record } = await store.submit(submitInput(makeRequest(), owner('node-a')));
    await store.takeOver(record.id, 1, owner('node-b'), LEASE_MS);
    await store.transition(record.id, 2, { to: 'TERMINATED' });
    const err = await store.transition(record.id, 1, { to: 'IN_PROGRESS' }).catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: 'STALE_EPOCH',
      details: { id: record.id, expectedEpoch: 1, epoch: 2 },
    });
  });
});
