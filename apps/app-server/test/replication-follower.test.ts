/**
 * The serving generation of a logical-replication endpoint follows its source while a green is held
 * (docs/generations.md), through real app-server and api-server processes sharing one configuration, a private
 * PostgreSQL with `wal_level=logical` and `switch: { mode: manual }`:
 * - across a SIGKILL of the app-server: rows written while it is dead reach the serving generation (through its own
 *   slot, from its own checkpoint) and the held green (through the other slot) once it is back, exactly once, and
 *   read-your-writes (`sluice-min-position`) is answered by the serving generation;
 * - `GET /v1/endpoints` → `follower` tells an operator whether the serving generation follows, and why it stands.
 */
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { dropSlotFromUnderIt, startHeldItems } from './held-replication.js';
import { call, startHostApiServer, startNodeProcess } from './helpers.js';
import { currentLsn, servedRows, tableRows } from './items-rows.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { generationStates, itemsOf, lsnReached } from './replication-node.js';

const postgres = logicalPostgresPerFile();

describe('the serving generation follows its source across an app-server restart while a green is held', () => {
  it('SIGKILLed while held: after the restart both generations follow on from their own slots, nothing lost or doubled', {
    timeout: 240_000,
  }, async () => {
    await using dir = await tempDir('sluice-follow-restart-');
    await using started = await startHeldItems(postgres(), 'followrestart', 'h1', dir.path);
    const { url, spec, api, blue, green } = started;
    const primarySlot = 'sluice_h1_items_source';
    const alternateSlot = 'sluice_h1_items_source_b';

    // The node is replaced after its SIGKILL: the one running at the end is stopped here (the first one by `started`).
    let node = started.node;
    try {
      await using apiServer = await startHostApiServer(node);

      // While held, the serving generation follows: read-your-writes is answered by it.
      await sql(url, "INSERT INTO items SELECT g, g, 'held ' || g FROM generate_series(101, 120) g");
      await sql(url, "UPDATE items SET v = -v, s = 'updated while held' WHERE id BETWEEN 1 AND 10");
      await sql(url, 'DELETE FROM items WHERE id BETWEEN 40 AND 44');
      expect(await servedRows(api, await currentLsn(url))).toEqual(await tableRows(url));
      const before = await waitFor(
        async () => {
          const items = await itemsOf(node);
          return items.replication?.following?.cache === green ? items : null;
        },
        { what: 'the status to tell the serving and the held generation apart' },
      );
      expect(before).toMatchObject({
        replication: { slot: primarySlot, following: { cache: green } },
        follower: { cache: blue, phase: 'following', reason: null, error: null },
      });

      // Killed, not stopped: no run closes, no checkpoint is written on the way out.
      node.child.kill('SIGKILL');
      await node.child.exited;
      await sql(url, "INSERT INTO items SELECT g, g, 'while dead ' || g FROM generate_series(121, 160) g");
      await sql(url, "UPDATE items SET v = v + 1000, s = 'updated while dead' WHERE id BETWEEN 50 AND 70");
      await sql(url, 'DELETE FROM items WHERE id BETWEEN 80 AND 89 OR id = 1');
      await sql(url, "INSERT INTO items VALUES (1, 1, 're-inserted while dead')");
      node = await startNodeProcess(spec);
      await sql(url, "INSERT INTO items VALUES (500, 500, 'after the restart')");
      const position = await currentLsn(url);
      const expected = await tableRows(url);
      expect(expected.length).toBe(146);

      // Readers get the serving generation, caught up with every change, each once.
      expect(await servedRows(api, position)).toEqual(expected);
      const after = await waitFor(
        async () => {
          const items = await itemsOf(node);
          const r = items.replication;
          return r?.lagBytes === 0 && r.following?.lagBytes === 0 && items.records === expected.length
            ? items
            : null;
        },
        {
          timeoutMs: 60_000,
          what: `both generations to catch up after the restart (${JSON.stringify(await itemsOf(node).catch(() => null))})`,
        },
      );
      // The status says so truthfully: blue serves and follows through its own slot, green stays held on the other.
      expect(after).toMatchObject({
        servingCache: blue,
        held: { cache: green },
        replication: { slot: primarySlot, following: { cache: green } },
        follower: {
          cache: blue,
          phase: 'following',
          reason: null,
          error: null,
          lastCommit: { lsn: expect.any(String), at: expect.any(String) },
        },
      });
      expect(await generationStates(node)).toEqual(
        [
          [blue, 'serving'],
          [green, 'held'],
        ].sort(),
      );
      const slots = await sql<{ slot_name: string }>(
        url,
        "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'sluice_h1_items%' ORDER BY slot_name",
      );
      expect(slots.map((s) => s.slot_name)).toEqual([primarySlot, alternateSlot]);

      // The held green followed too: promoted, it serves the same rows.
      const promoted = await call(`${node.url}/v1/endpoints/items/promote`, { method: 'POST' });
      expect(promoted.body).toMatchObject({ from: blue, to: green, changed: true });
      expect(await servedRows(api, position)).toEqual(expected);
      expect((await itemsOf(node)).records).toBe(expected.length);
      void apiServer;
    } finally {
      await node[Symbol.asyncDispose]();
    }
  });

  it('defect: a serving generation that can no longer follow (its slot dropped from under it) showed nothing in GET /v1/endpoints', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-follower-status-');
    await using started = await startHeldItems(postgres(), 'followerstatus', 'h2', dir.path);
    const { url, node, blue, green } = started;
    const primarySlot = 'sluice_h2_items_source';

    // Following: its phase, and its progress as it commits what is written while the green is held.
    await sql(url, "INSERT INTO items VALUES (101, 101, 'while held')");
    const position = await currentLsn(url);
    const following = await waitFor(
      async () => {
        const items = await itemsOf(node);
        const commit = items.follower?.lastCommit;
        return commit && (await lsnReached(url, commit.lsn, position)) ? items : null;
      },
      {
        timeoutMs: 30_000,
        what: `the follower to commit ${position} (${JSON.stringify((await itemsOf(node)).follower)})`,
      },
    );
    expect(following.follower).toMatchObject({
      cache: blue,
      phase: 'following',
      reason: null,
      error: null,
      recordsWritten: expect.any(Number),
    });
    expect(following.follower!.recordsWritten).toBeGreaterThan(0);

    // Its slot dropped from under it (its walsender ended first): it cannot continue, and says why.
    await dropSlotFromUnderIt(url, primarySlot);
    await sql(url, "INSERT INTO items VALUES (102, 102, 'after the slot is gone')");
    const standing = await waitFor(
      async () => {
        const items = await itemsOf(node);
        return items.follower?.phase === 'standing' ? items : null;
      },
      {
        timeoutMs: 60_000,
        what: `the follower to stand (${JSON.stringify((await itemsOf(node)).follower)})`,
      },
    );
    expect(standing).toMatchObject({
      servingCache: blue,
      held: { cache: green },
      error: null,
      follower: {
        cache: blue,
        phase: 'standing',
        reason: expect.stringContaining(primarySlot),
        error: null,
        lastCommit: { lsn: expect.any(String), at: expect.any(String) },
      },
      // The held green goes on following.
      replication: { following: { cache: green } },
    });
    // What readers get stands at the follower's last commit, at or past what it had when it still followed.
    const stoodAt = standing.follower!.lastCommit!.lsn;
    expect(standing.replication!.committedLsn).toBe(stoodAt);
    expect(await lsnReached(url, stoodAt, following.follower!.lastCommit!.lsn)).toBe(true);
    // It stays so: nothing recreated the slot behind the operator's back.
    expect(await sql(url, 'SELECT 1 FROM pg_replication_slots WHERE slot_name = $1', [primarySlot])).toEqual(
      [],
    );

    // Promoted, the green serves and follows: nothing is followed for it any more.
    expect((await call(`${node.url}/v1/endpoints/items/promote`, { method: 'POST' })).status).toBe(200);
    await waitFor(async () => ((await itemsOf(node)).follower === null ? true : null), {
      what: 'the follower to report nothing once the green serves',
    });
  });
});
