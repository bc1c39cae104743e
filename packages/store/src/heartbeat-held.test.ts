/**
 * A heartbeat waits for no row (PostgreSQL): a row another session holds is skipped and named `held`, the others
 * are extended at once; once the holder commits, the next heartbeat extends the row again — or, when the holder
 * moved it to another owner, names it in neither list (fenced).
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { makeRequest, owner, storeFixture, submitInput } from '../test/helpers.js';

const LEASE = 45_000;

describe('heartbeat on PostgreSQL with a transfer row held by another session', () => {
  it('extends the other rows without waiting and names the held one; after the holder commits it is judged again', async () => {
    await using fx = await storeFixture('postgres');
    const store = await fx.open();
    const mine = owner('node-a', 'a-1');
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await store.submit(submitInput(makeRequest(), mine))).record.id);
    ids.sort();
    const [heldId, ...others] = ids as [string, ...string[]];
    await fx.advance(20_000);
    const heldBefore = (await store.get(heldId))?.leaseExpiresAt;

    const holder = new pg.Client({ connectionString: fx.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT id FROM transfers WHERE id = $1 FOR UPDATE', [heldId]);
      expect(await store.heartbeat(mine, LEASE)).toEqual({ extended: others, held: [heldId] });
      for (const id of others) await fx.expectLeaseLeft(await store.get(id), LEASE);
      expect((await store.get(heldId))?.leaseExpiresAt).toEqual(heldBefore);
      await holder.query('COMMIT');
      expect(await store.heartbeat(mine, LEASE)).toEqual({ extended: ids, held: [] });

      // The holder changes the owner while the heartbeat runs: not extended, and not held once it committed.
      await holder.query('BEGIN');
      await holder.query("UPDATE transfers SET owner_node_id = 'node-b', epoch = epoch + 1 WHERE id = $1", [
        heldId,
      ]);
      expect(await store.heartbeat(mine, LEASE)).toEqual({ extended: others, held: [heldId] });
      await holder.query('COMMIT');
      expect(await store.heartbeat(mine, LEASE)).toEqual({ extended: others, held: [] });
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      await holder.end();
    }
  });
});
