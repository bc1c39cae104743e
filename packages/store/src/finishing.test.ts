import { expectSluiceError } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { DIALECTS, LEASE_MS, makeRequest, owner, storeFixture, submitInput } from '../test/helpers.js';
import { createCheckpointPort } from './checkpoint.js';

describe.each(DIALECTS)('the fenced finishing step on %s', (dialect) => {
  it('keeps a takeover or terminate on a "nobody" off the record until it is final: LEASE_HELD, nothing changes', async () => {
    await using fx = await storeFixture(dialect);
    const nodeA = await fx.open();
    const nodeB = await fx.open();
    const a = owner('node-a');
    const b = owner('node-b');
    const { record } = await nodeA.submit({ ...submitInput(makeRequest(), a), state: 'IN_PROGRESS' });
    await nodeA.saveCheckpoint(record.id, 1, { offset: 10 }, LEASE_MS);
    await nodeA.finishing(record.id, 1, LEASE_MS);
    const finishing = await nodeA.get(record.id);
    // The mark is part of the record (the control API shows it as `finishing`).
    expect(finishing).toMatchObject({ epoch: 1, finishingEpoch: 1 });

    // Node B heard "nobody" (node A cut off from the backplane, publishing right now).
    const takeover = await nodeB.takeOver(record.id, 1, b, LEASE_MS).catch((e: unknown) => e);
    expect(takeover).toMatchObject({ code: 'LEASE_HELD', details: { id: record.id, finishing: true } });
    await expectSluiceError(nodeB.terminateAbandoned(record.id, 1, b), 'LEASE_HELD');
    await expectSluiceError(
      nodeB.terminateAbandoned(record.id, 1, b, { requireExpiredLease: true }),
      'LEASE_HELD',
    );
    expect(await nodeB.get(record.id)).toEqual(finishing);

    // The owner records its outcome; the terminate that came too late is told it is final.
    await nodeA.transition(record.id, 1, { to: 'COMPLETED' });
    await expectSluiceError(nodeB.terminateAbandoned(record.id, 1, b), 'ILLEGAL_TRANSITION');
    await expectSluiceError(nodeB.takeOver(record.id, 1, b, LEASE_MS), 'ILLEGAL_TRANSITION');
  });

  it('once the finishing owner’s lease expired a successor takes over on a "nobody": the old owner is fenced, the successor finishes', async () => {
    await using fx = await storeFixture(dialect);
    const nodeA = await fx.open();
    const nodeB = await fx.open();
    const a = owner('node-a');
    const b = owner('node-b');
    const { record } = await nodeA.submit({ ...submitInput(makeRequest(), a), state: 'IN_PROGRESS' });
    await nodeA.saveCheckpoint(record.id, 1, { offset: 10 }, LEASE_MS);
    await nodeA.finishing(record.id, 1, LEASE_MS);
    await fx.advance(LEASE_MS + 1); // node A stopped before its publish (its watchdog) or died

    const taken = await nodeB.takeOver(record.id, 1, b, LEASE_MS);
    expect(taken).toMatchObject({ epoch: 2, ownerNodeId: 'node-b', checkpoint: { offset: 10 } });
    // The mark names epoch 1 still: it no longer holds the record.
    expect(taken.finishingEpoch).toBe(1);
    await expectSluiceError(nodeA.finishing(record.id, 1, LEASE_MS), 'STALE_EPOCH');
    await expectSluiceError(nodeA.transition(record.id, 1, { to: 'COMPLETED' }), 'STALE_EPOCH');
    // The marker was epoch 1's: the successor is not held by it (a "nobody" about node B takes over at once)…
    const c = owner('node-c');
    const retaken = await nodeB.takeOver(record.id, 2, c, LEASE_MS);
    expect(retaken.epoch).toBe(3);
    // …and its own finishing step holds the record again.
    await nodeB.finishing(record.id, 3, LEASE_MS);
    await expectSluiceError(nodeA.terminateAbandoned(record.id, 3, a), 'LEASE_HELD');
    expect(await nodeB.transition(record.id, 3, { to: 'COMPLETED' })).toMatchObject({
      state: 'COMPLETED',
      epoch: 3,
    });
  });

  it('a terminate of a finishing record whose lease expired lands in one statement', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const { record } = await store.submit({
      ...submitInput(makeRequest(), owner('node-a')),
      state: 'IN_PROGRESS',
    });
    await store.finishing(record.id, 1, LEASE_MS);
    await fx.advance(LEASE_MS + 1);
    expect(await store.terminateAbandoned(record.id, 1, owner('node-b'))).toMatchObject({
      state: 'TERMINATED',
      epoch: 2,
      ownerNodeId: 'node-b',
      leaseExpiresAt: null,
    });
    await expectSluiceError(store.finishing(record.id, 1, LEASE_MS), 'STALE_EPOCH');
  });

  it('the finishing owner’s own instance takes its orphan over at once (it knows nothing of it runs)', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const a = owner('node-a');
    const { record } = await store.submit({ ...submitInput(makeRequest(), a), state: 'IN_PROGRESS' });
    await store.finishing(record.id, 1, LEASE_MS);
    expect((await store.takeOver(record.id, 1, a, LEASE_MS)).epoch).toBe(2);
    // Another incarnation of the same node id (a restart while the old process may live on) is held.
    await store.finishing(record.id, 2, LEASE_MS);
    await expectSluiceError(
      store.takeOver(record.id, 2, owner('node-a', 'node-a-i2'), LEASE_MS),
      'LEASE_HELD',
    );
  });

  it('renews the lease it is given (or keeps it) and is fenced like every owner write', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const { record } = await store.submit({ ...submitInput(makeRequest(), owner()), state: 'IN_PROGRESS' });
    await fx.advance(10_000);
    await store.finishing(record.id, 1);
    await fx.expectLeaseLeft(await store.get(record.id), LEASE_MS - 10_000);
    await store.finishing(record.id, 1, LEASE_MS * 2);
    await fx.expectLeaseLeft(await store.get(record.id), LEASE_MS * 2);
    await expectSluiceError(store.finishing(record.id, 2, LEASE_MS), 'STALE_EPOCH');
    await expectSluiceError(store.finishing('absent-id', 1, LEASE_MS), 'TRANSFER_NOT_FOUND');
    await expectSluiceError(store.finishing(record.id, 1, -1), 'VALIDATION_FAILED');
    const done = await store.transition(record.id, 1, { to: 'COMPLETED' });
    await expectSluiceError(store.finishing(record.id, 1, LEASE_MS), 'ILLEGAL_TRANSITION');
    expect(await store.get(record.id)).toEqual(done);
  });

  it('the checkpoint port’s finishing step is the store’s: it holds the record against a "nobody"', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const { record } = await store.submit({ ...submitInput(makeRequest(), owner()), state: 'IN_PROGRESS' });
    const port = createCheckpointPort(store, record.id, 1, { leaseMs: LEASE_MS, initial: null });
    await port.save({ offset: 5 });
    await port.finishing(); // no shortcut without `recentlyConfirmed`
    await expectSluiceError(store.terminateAbandoned(record.id, 1, owner('node-b')), 'LEASE_HELD');
    expect(await store.get(record.id)).toMatchObject({
      state: 'IN_PROGRESS',
      epoch: 1,
      checkpoint: { offset: 5 },
    });
  });
});
