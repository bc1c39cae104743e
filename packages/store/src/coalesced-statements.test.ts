/**
 * Coalesced owner writes on PostgreSQL (coalesced-statements.ts): concurrent checkpoint saves and transitions share
 * statements and commits, and every call still gets exactly the outcome it would have got alone — fenced ones
 * STALE_EPOCH, illegal ones ILLEGAL_TRANSITION, the row a trigger refuses alone failing.
 */
import type { TransferRecord } from '@sluice/core';
import { expectSluiceError } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { allRecords, LEASE_MS, makeRequest, owner, storeFixture, submitInput } from '../test/helpers.js';

const AUDIT_DDL = `
CREATE TABLE IF NOT EXISTS store_writes (seq bigserial PRIMARY KEY, id text NOT NULL, state text NOT NULL,
  xid bigint NOT NULL DEFAULT txid_current());
CREATE OR REPLACE FUNCTION store_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO store_writes (id, state) VALUES (NEW.id, NEW.state);
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS store_write ON transfers;
CREATE TRIGGER store_write AFTER UPDATE ON transfers FOR EACH ROW EXECUTE FUNCTION store_write();
TRUNCATE store_writes;`;

const outcome = (p: Promise<unknown>) =>
  p.then(
    () => 'ok',
    (err: { code?: string }) => err.code ?? 'no code',
  );

describe('coalesced owner writes on postgres', () => {
  it('40 concurrent checkpoints and completions: few commits, and each call gets its own fenced outcome', async () => {
    await using fx = await storeFixture('postgres');
    const store = await fx.open();
    const other = await fx.open();
    const a = owner('node-a');
    const records: TransferRecord[] = [];
    for (let i = 0; i < 40; i++) {
      const { record } = await store.submit({
        ...submitInput(makeRequest(`c-${i}`), a),
        state: 'IN_PROGRESS',
      });
      records.push(record);
    }
    // 0–24 stay node A's; 25–34 are taken over (A's epoch 1 is stale); 35–39 are already COMPLETED.
    await fx.advance(LEASE_MS + 1);
    for (const r of records.slice(25, 35)) await other.takeOver(r.id, 1, owner('node-b'), LEASE_MS);
    for (const r of records.slice(35)) await store.transition(r.id, 1, { to: 'COMPLETED' });
    const admin = new pg.Client({ connectionString: fx.url });
    await admin.connect();
    await using _admin = { [Symbol.asyncDispose]: () => admin.end() };
    await admin.query(AUDIT_DDL);
    const commitsOf = async (state: string) =>
      Number(
        (
          await admin.query<{ n: string }>(
            'SELECT count(DISTINCT xid) AS n FROM store_writes WHERE state = $1',
            [state],
          )
        ).rows[0]!.n,
      );

    // Owned → written; taken over → STALE_EPOCH; already final → ILLEGAL_TRANSITION (as one call alone would get).
    const EXPECTED = [
      ...Array(25).fill('ok'),
      ...Array(10).fill('STALE_EPOCH'),
      ...Array(5).fill('ILLEGAL_TRANSITION'),
    ];
    const expectFewCommits = (commits: number) => {
      expect(commits).toBeGreaterThanOrEqual(2);
      expect(commits).toBeLessThanOrEqual(4);
    };
    const saves = await Promise.all(
      records.map((r, i) => outcome(store.saveCheckpoint(r.id, 1, { line: i }, LEASE_MS))),
    );
    expect(saves).toEqual(EXPECTED);
    // 25 rows written, in a handful of statements (one goes alone, the rest wait for it and go together).
    expectFewCommits(await commitsOf('IN_PROGRESS'));

    const completions = await Promise.all(
      records.map((r, i) =>
        outcome(
          store.transition(r.id, 1, {
            to: 'COMPLETED',
            result: { recordsRead: i, recordsWritten: i, badRecords: 0 },
          }),
        ),
      ),
    );
    expect(completions).toEqual(EXPECTED);
    expectFewCommits(await commitsOf('COMPLETED'));

    // What each row holds is what its own calls said, and nothing of the refused ones.
    for (const [i, r] of records.entries()) {
      const now = (await store.get(r.id))!;
      if (i < 25)
        expect(now).toMatchObject({
          state: 'COMPLETED',
          epoch: 1,
          checkpoint: { line: i },
          result: { recordsRead: i, recordsWritten: i, badRecords: 0 },
          leaseExpiresAt: null,
        });
      else if (i < 35)
        expect(now).toMatchObject({
          state: 'IN_PROGRESS',
          epoch: 2,
          ownerNodeId: 'node-b',
          checkpoint: null,
        });
      else expect(now).toMatchObject({ state: 'COMPLETED', epoch: 1, checkpoint: null, result: null });
    }
  });

  it('50 concurrent submits (40 new, 9 resent, 1 with another body) share statements; each gets its own outcome', async () => {
    await using fx = await storeFixture('postgres');
    const store = await fx.open();
    const a = owner('node-a');
    const old = Array.from({ length: 10 }, (_, i) => makeRequest(`old-${i}`));
    for (const request of old) await store.submit(submitInput(request, a));
    const admin = new pg.Client({ connectionString: fx.url });
    await admin.connect();
    await using _admin = { [Symbol.asyncDispose]: () => admin.end() };
    await admin.query(AUDIT_DDL.replace('AFTER UPDATE', 'AFTER INSERT OR UPDATE'));
    const fresh = Array.from({ length: 40 }, (_, i) => makeRequest(`new-${i}`));
    const changed = makeRequest('old-9', { other: 'body' });
    const outcomes = await Promise.all(
      [...fresh, ...old.slice(0, 9), changed].map((request) =>
        store.submit(submitInput(request, a)).then(
          ({ created, record }) => `${created ? 'created' : 'found'} ${record.id}`,
          (err: { code?: string }) => err.code ?? 'no code',
        ),
      ),
    );
    expect(outcomes).toEqual([
      ...fresh.map((r) => `created ${r.id}`),
      ...old.slice(0, 9).map((r) => `found ${r.id}`),
      'IDEMPOTENCY_CONFLICT',
    ]);
    const inserts = await admin.query<{ n: string; rows: string }>(
      'SELECT count(DISTINCT xid) AS n, count(*) AS rows FROM store_writes',
    );
    expect(Number(inserts.rows[0]!.rows)).toBe(40);
    expect(Number(inserts.rows[0]!.n)).toBeLessThanOrEqual(4);
    expect(await allRecords(store)).toHaveLength(50);
  });

  it('a row the database refuses fails only its own call; its batch-mates are written', async () => {
    await using fx = await storeFixture('postgres');
    const store = await fx.open();
    const a = owner('node-a');
    const ids = Array.from({ length: 12 }, (_, i) => `r-${i}`);
    for (const id of ids) await store.submit({ ...submitInput(makeRequest(id), a), state: 'IN_PROGRESS' });
    const admin = new pg.Client({ connectionString: fx.url });
    await admin.connect();
    await using _admin = { [Symbol.asyncDispose]: () => admin.end() };
    await admin.query(`
      CREATE OR REPLACE FUNCTION refuse_r7() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.id = 'r-7' THEN RAISE EXCEPTION 'refused by a trigger'; END IF;
        RETURN NEW;
      END $$;
      DROP TRIGGER IF EXISTS refuse_r7 ON transfers;
      CREATE TRIGGER refuse_r7 BEFORE UPDATE ON transfers FOR EACH ROW EXECUTE FUNCTION refuse_r7();`);
    try {
      const results = await Promise.all(ids.map((id) => outcome(store.saveCheckpoint(id, 1, { at: id }))));
      expect(results).toEqual(ids.map((id) => (id === 'r-7' ? 'INTERNAL' : 'ok')));
      for (const id of ids)
        expect((await store.get(id))!.checkpoint).toEqual(id === 'r-7' ? null : { at: id });
    } finally {
      await admin.query('DROP TRIGGER IF EXISTS refuse_r7 ON transfers');
    }
    await store.saveCheckpoint('r-7', 1, { at: 'r-7' });
    expect((await store.get('r-7'))!.checkpoint).toEqual({ at: 'r-7' });
  });

  it('a store closed under coalesced writes: the accepted ones land whole, later ones fail typed', async () => {
    await using fx = await storeFixture('postgres');
    const store = await fx.open();
    const a = owner('node-a');
    const ids = Array.from({ length: 20 }, (_, i) => `z-${i}`);
    for (const id of ids) await store.submit({ ...submitInput(makeRequest(id), a), state: 'IN_PROGRESS' });
    const accepted = ids.map((id) => outcome(store.transition(id, 1, { to: 'COMPLETED' })));
    const closing = store.close();
    await expectSluiceError(
      store.transition(ids[0]!, 1, { to: 'FAILED', error: { code: 'X', message: 'y' } }),
      'STORE_UNAVAILABLE',
    );
    expect(await Promise.all(accepted)).toEqual(Array(20).fill('ok'));
    await closing;
    const reader = await fx.open();
    for (const id of ids) expect((await reader.get(id))!.state).toBe('COMPLETED');
  });
});
