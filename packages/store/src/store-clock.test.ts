import type { Clock, TransferRecord } from '@sluice/core';
import { expectSluiceError } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { DIALECTS, LEASE_MS, makeRequest, owner, storeFixture, submitInput } from '../test/helpers.js';

/** A node whose wall clock is off by `skewMs`. */
function skewedClock(skewMs: number): Clock {
  return { now: () => new Date(Date.now() + skewMs) };
}

describe('leases on the store clock (PostgreSQL)', () => {
  it('defect 6: a node whose clock is 12 s ahead steals no healthy lease (sweeper, conditional takeover, terminate)', async () => {
    await using fx = await storeFixture('postgres');
    const healthy = await fx.open({ clock: skewedClock(0) });
    const ahead = await fx.open({ clock: skewedClock(12_000) });
    const a = owner('node-a');
    // A healthy owner with a lease of 5 s, renewed on time: never expired by the database's clock.
    const { record } = await healthy.submit({ ...submitInput(makeRequest(), a), leaseMs: 5_000 });
    expect(await ahead.recoverExpired(owner('node-b'), LEASE_MS, 10)).toEqual([]);
    await expectSluiceError(
      ahead.takeOver(record.id, 1, owner('node-b'), LEASE_MS, { requireExpiredLease: true }),
      'LEASE_HELD',
    );
    await expectSluiceError(
      ahead.terminateAbandoned(record.id, 1, owner('node-b'), { requireExpiredLease: true }),
      'LEASE_HELD',
    );
    expect((await ahead.list({ leaseExpired: true })).records).toEqual([]);
    expect(await healthy.get(record.id)).toMatchObject({
      epoch: 1,
      ownerNodeId: 'node-a',
      state: 'RECEIVED',
    });
  });

  it('defect 6: a node whose clock is 12 s behind writes leases that a correct node does not see as expired', async () => {
    await using fx = await storeFixture('postgres');
    const behind = await fx.open({ clock: skewedClock(-12_000) });
    const correct = await fx.open({ clock: skewedClock(0) });
    const me = owner('node-late');
    const { record } = await behind.submit({ ...submitInput(makeRequest(), me), leaseMs: 5_000 });
    await behind.heartbeat(me, 5_000);
    await behind.saveCheckpoint(record.id, 1, { offset: 1 }, 5_000);
    expect(await correct.recoverExpired(owner('node-b'), LEASE_MS, 10)).toEqual([]);
    expect((await correct.list({ leaseExpired: true })).records).toEqual([]);
    const left = await fx.leaseLeft(await correct.get(record.id));
    expect(left).toBeGreaterThan(3_000);
    expect(left).toBeLessThanOrEqual(5_000);
  });
});

describe('timestamps on the store clock (PostgreSQL)', () => {
  it('a node whose clock is an hour behind writes created/updated times a purge on a correct clock keeps', async () => {
    await using fx = await storeFixture('postgres');
    const behind = await fx.open({ clock: skewedClock(-3_600_000) });
    const correct = await fx.open({ clock: skewedClock(0) });
    const me = owner('node-late');
    const { record } = await behind.submit(submitInput(makeRequest(), me));
    await behind.transition(record.id, 1, { to: 'IN_PROGRESS' });
    const done = await behind.transition(record.id, 1, {
      to: 'COMPLETED',
      result: { recordsRead: 1, recordsWritten: 1, badRecords: 0 },
    });
    for (const at of [record.createdAt, done.updatedAt])
      expect(Math.abs(at.getTime() - Date.now())).toBeLessThan(5_000);
    // Retention of 30 minutes, on a correct clock: the record finished just now must stay.
    expect(await correct.purge(1_800_000)).toBe(0);
    expect(await correct.get(record.id)).toMatchObject({ state: 'COMPLETED' });
    await behind.registerNode(me);
    const [node] = await correct.listNodes();
    expect(Math.abs(node!.lastSeenAt.getTime() - Date.now())).toBeLessThan(5_000);
    expect(Math.abs(node!.startedAt.getTime() - Date.now())).toBeLessThan(5_000);
    // "Alive" is judged on the store's clock: just seen, whoever asks (a node-clock comparison said an hour).
    expect(node!.silentMs).toBeLessThan(5_000);
    expect((await behind.listNodes())[0]!.silentMs).toBeLessThan(5_000);
  });
});

describe('purging on the store clock (PostgreSQL)', () => {
  it('defect: a node whose clock was ahead by more than the retention purged a record finished just now', async () => {
    await using fx = await storeFixture('postgres');
    const DAY = 86_400_000;
    const correct = await fx.open({ clock: skewedClock(0) });
    const ahead = await fx.open({ clock: skewedClock(31 * DAY) });
    const me = owner('node-on-time');
    const { record } = await correct.submit(submitInput(makeRequest(), me));
    await correct.transition(record.id, 1, { to: 'IN_PROGRESS' });
    await correct.transition(record.id, 1, {
      to: 'COMPLETED',
      result: { recordsRead: 1, recordsWritten: 1, badRecords: 0 },
    });
    // The app-server's hourly purge with the default retention (30 days), on the node whose clock is 31 days ahead:
    // the record finished a moment ago on the store's clock, so a resend must still find its outcome.
    expect(await ahead.purge(30 * DAY)).toBe(0);
    expect(await correct.get(record.id)).toMatchObject({ state: 'COMPLETED' });
  });
});

describe.each(DIALECTS)('conditional owner changes on %s', (dialect) => {
  it('takeOver({ requireExpiredLease }) waits for the lease; terminateAbandoned is one statement', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const { record } = await store.submit(submitInput(makeRequest(), owner('node-a')));
    await expectSluiceError(
      store.takeOver(record.id, 1, owner('node-b'), LEASE_MS, { requireExpiredLease: true }),
      'LEASE_HELD',
    );
    await expectSluiceError(
      store.terminateAbandoned(record.id, 1, owner('node-b'), { requireExpiredLease: true }),
      'LEASE_HELD',
    );
    expect(await store.get(record.id)).toMatchObject({ epoch: 1, ownerNodeId: 'node-a', state: 'RECEIVED' });
    await fx.advance(LEASE_MS + 1);
    expect((await store.list({ leaseExpired: true })).records.map((r) => r.id)).toEqual([record.id]);
    const terminated = await store.terminateAbandoned(record.id, 1, owner('node-b'), {
      requireExpiredLease: true,
    });
    expect(terminated).toMatchObject({
      state: 'TERMINATED',
      epoch: 2,
      ownerNodeId: 'node-b',
      leaseExpiresAt: null,
    });
    expect(await store.get(record.id)).toEqual(terminated);
    await expectSluiceError(store.terminateAbandoned(record.id, 2, owner('node-c')), 'ILLEGAL_TRANSITION');
    await expectSluiceError(store.terminateAbandoned(record.id, 1, owner('node-c')), 'STALE_EPOCH');
    await expectSluiceError(store.takeOver(record.id, 2, owner('node-c'), LEASE_MS), 'ILLEGAL_TRANSITION');
  });

  it('of 8 concurrent terminateAbandoned / takeOver calls on one epoch exactly one wins', async () => {
    await using fx = await storeFixture(dialect);
    const nodes = await Promise.all(Array.from({ length: 4 }, () => fx.open()));
    const { record } = await nodes[0]!.submit(submitInput(makeRequest(), owner('node-a')));
    const calls = nodes.flatMap((store, i) => [
      store.terminateAbandoned(record.id, 1, owner(`t-${i}`)),
      store.takeOver(record.id, 1, owner(`o-${i}`), LEASE_MS),
    ]);
    const settled = await Promise.allSettled(calls);
    const won = settled.filter((s) => s.status === 'fulfilled');
    expect(won).toHaveLength(1);
    const final = await nodes[0]!.get(record.id);
    expect(final?.epoch).toBe(2);
    for (const lost of settled.filter((s) => s.status === 'rejected'))
      expect(['STALE_EPOCH', 'ILLEGAL_TRANSITION']).toContain((lost.reason as { code: string }).code);
  });
  it('of 8 concurrent conditional terminateAbandoned / takeOver calls on an expired lease exactly one wins', async () => {
    await using fx = await storeFixture(dialect);
    const nodes = await Promise.all(Array.from({ length: 4 }, () => fx.open()));
    const { record } = await nodes[0]!.submit(submitInput(makeRequest(), owner('node-a')));
    await fx.advance(LEASE_MS + 1);
    const conditional = { requireExpiredLease: true };
    // Takeovers first (the other test starts with a termination), so each kind is the likely first arrival once.
    const calls = nodes.flatMap((store, i) => [
      store.takeOver(record.id, 1, owner(`o-${i}`), LEASE_MS, conditional),
      store.terminateAbandoned(record.id, 1, owner(`t-${i}`), conditional),
    ]);
    const settled = await Promise.allSettled(calls);
    const won = settled.filter((s): s is PromiseFulfilledResult<TransferRecord> => s.status === 'fulfilled');
    expect(won).toHaveLength(1);
    expect(await nodes[0]!.get(record.id)).toEqual(won[0]!.value);
    expect(won[0]!.value.epoch).toBe(2);
    // Losers saw the winner's epoch (or its final state), never a lease the winner just renewed as "held".
    for (const lost of settled.filter((s) => s.status === 'rejected'))
      expect(['STALE_EPOCH', 'ILLEGAL_TRANSITION']).toContain((lost.reason as { code: string }).code);
  });
});
