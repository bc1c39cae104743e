import { SluiceError, type TransferRecord } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import {
  allRecords,
  DIALECTS,
  LEASE_MS,
  makeRequest,
  newId,
  owner,
  storeFixture,
  submitInput,
} from '../test/helpers.js';
import type { SqlDataPlaneStore } from './store.js';

/** Several store instances on one database: separate connections / pools, like separate nodes. */
const NODES = 5;

describe.each(DIALECTS)('contention across store instances on %s', (dialect) => {
  it('50 concurrent submits of one id → exactly one created, all see the same record', async () => {
    await using fx = await storeFixture(dialect);
    const stores = await Promise.all(Array.from({ length: NODES }, () => fx.open()));
    const request = makeRequest();
    const outcomes = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        stores[i % NODES]!.submit(submitInput(request, owner(`node-${i % NODES}`, `inst-${i}`))),
      ),
    );
    const created = outcomes.filter((o) => o.created);
    expect(created).toHaveLength(1);
    const winner = created[0]!.record;
    expect(winner.epoch).toBe(1);
    for (const o of outcomes) expect(o.record).toEqual(winner);
    expect(await allRecords(stores[0]!)).toEqual([winner]);
  });

  it('50 concurrent submits of one id with different bodies → one created, the rest IDEMPOTENCY_CONFLICT', async () => {
    await using fx = await storeFixture(dialect);
    const stores = await Promise.all(Array.from({ length: NODES }, () => fx.open()));
    const id = newId();
    const settled = await Promise.allSettled(
      Array.from({ length: 50 }, (_, i) =>
        stores[i % NODES]!.submit(submitInput(makeRequest(id, { variant: i }))),
      ),
    );
    const fulfilled = settled.filter((s) => s.status === 'fulfilled');
    expect(fulfilled).toHaveLength(1);
    const rejected = settled.filter((s): s is PromiseRejectedResult => s.status === 'rejected');
    expect(rejected.every((r) => SluiceError.hasCode(r.reason, 'IDEMPOTENCY_CONFLICT'))).toBe(true);
    expect(await allRecords(stores[1]!)).toHaveLength(1);
  });

  it('20 concurrent takeovers of one epoch → exactly one winner, the others STALE_EPOCH', async () => {
    await using fx = await storeFixture(dialect);
    const stores = await Promise.all(Array.from({ length: NODES }, () => fx.open()));
    const { record } = await stores[0]!.submit(submitInput(makeRequest(), owner('node-dead')));
    await fx.advance(LEASE_MS + 1);
    const settled = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) =>
        stores[i % NODES]!.takeOver(record.id, 1, owner(`node-${i}`), LEASE_MS),
      ),
    );
    const winners = settled.filter(
      (s): s is PromiseFulfilledResult<TransferRecord> => s.status === 'fulfilled',
    );
    expect(winners).toHaveLength(1);
    const losers = settled.filter((s): s is PromiseRejectedResult => s.status === 'rejected');
    expect(losers.map((l) => (l.reason as SluiceError).code)).toEqual(Array(19).fill('STALE_EPOCH'));
    const stored = await stores[0]!.get(record.id);
    expect(stored).toEqual(winners[0]!.value);
    expect(stored).toMatchObject({ epoch: 2, attempts: 2 });
  });

  it('concurrent sweepers never receive the same row, and together recover every expired one once', async () => {
    await using fx = await storeFixture(dialect);
    const stores = await Promise.all(Array.from({ length: 4 }, () => fx.open()));
    const total = 120;
    const expired: string[] = [];
    for (let i = 0; i < total; i++) {
      const request = makeRequest();
      expired.push(request.id);
      await stores[i % 4]!.submit(submitInput(request, owner('node-dead')));
    }
    const live = (
      await stores[0]!.submit({ ...submitInput(makeRequest(), owner('node-live')), leaseMs: 3_600_000 })
    ).record;
    await fx.advance(LEASE_MS + 1);
    const sweep = async (store: SqlDataPlaneStore, index: number) => {
      const got: TransferRecord[] = [];
      for (;;) {
        const batch = await store.recoverExpired(owner(`sweeper-${index}`), LEASE_MS, 7);
        if (batch.length === 0) return got;
        got.push(...batch);
      }
    };
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => sweep(stores[i % 4]!, i)));
    const handedOut = results.flat();
    const ids = handedOut.map((r) => r.id);
    expect(new Set(ids).size).toBe(ids.length); // nobody got a row twice
    expect([...ids].sort()).toEqual([...expired].sort()); // every expired row went to someone
    // Each row was taken over exactly once, and is owned by the sweeper that received it.
    for (const [index, got] of results.entries()) {
      for (const r of got) {
        expect(r).toMatchObject({ epoch: 2, attempts: 2, ownerNodeId: `sweeper-${index}` });
        expect(await stores[0]!.get(r.id)).toEqual(r);
      }
    }
    expect((await stores[0]!.get(live.id))?.epoch).toBe(1);
    if (dialect === 'postgres') {
      // With several sweepers in flight at once, more than one must actually have worked.
      expect(results.filter((got) => got.length > 0).length).toBeGreaterThan(1);
    }
  });

  it('a sweeper and a takeover racing for one expired transfer: exactly one wins', async () => {
    await using fx = await storeFixture(dialect);
    const stores = await Promise.all(Array.from({ length: 4 }, () => fx.open()));
    const records: TransferRecord[] = [];
    for (let i = 0; i < 20; i++) records.push((await stores[0]!.submit(submitInput(makeRequest()))).record);
    await fx.advance(LEASE_MS + 1);
    const [swept, ...takeovers] = await Promise.all([
      stores[1]!.recoverExpired(owner('sweeper'), LEASE_MS, 100),
      ...records.map((r, i) =>
        stores[2 + (i % 2)]!.takeOver(r.id, 1, owner('taker'), LEASE_MS).then(
          (rec) => rec,
          (err: unknown) => (err as SluiceError).code,
        ),
      ),
    ]);
    const sweptIds = new Set((swept as TransferRecord[]).map((r) => r.id));
    for (const [i, outcome] of takeovers.entries()) {
      const id = records[i]!.id;
      if (typeof outcome === 'string') {
        expect(outcome).toBe('STALE_EPOCH');
        expect(sweptIds.has(id)).toBe(true);
      } else {
        expect(sweptIds.has(id)).toBe(false);
      }
      expect((await stores[0]!.get(id))?.epoch).toBe(2);
    }
  });
});
