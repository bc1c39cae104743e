import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { requestHash, SluiceError, type SubmitOutcome } from '@sluice/core';
import { createTestDatabase, expectSluiceError, freePort, spawnTs, tempDir, waitFor } from '@sluice/testkit';
import Database from 'better-sqlite3';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import {
  allRecords,
  DIALECTS,
  LEASE_MS,
  makeRequest,
  owner,
  type StoreFixture,
  storeFixture,
  submitInput,
} from '../test/helpers.js';
import { openStore } from './open.js';

const crashWriter = fileURLToPath(new URL('../test/fixtures/crash-writer.ts', import.meta.url));

async function adminClient(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  return client;
}

/** Waits for a store backend of this database blocked on a lock and terminates it (the database "goes away"). */
async function terminateBlockedBackend(fx: StoreFixture, admin: pg.Client): Promise<void> {
  const pid = await waitFor(
    async () => {
      const { rows } = await admin.query<{ pid: number }>(
        `select pid from pg_stat_activity
          where datname = $1 and application_name = 'sluice-store' and wait_event_type = 'Lock'`,
        [fx.databaseName],
      );
      return rows[0]?.pid;
    },
    { what: 'a store backend waiting on a lock', timeoutMs: 10_000 },
  );
  await admin.query('select pg_terminate_backend($1)', [pid]);
}

/**
 * Holds the database's write lock from another connection (on PostgreSQL: a lock on `lockId`'s row — or, for a
 * statement that skips locked rows, an advisory lock a trigger takes when the statement updates that row, so it
 * stops midway with the rows before it written; on SQLite: an immediate transaction), runs `op` into it, and makes
 * the database go away under it: the PostgreSQL backend is terminated mid-statement, the SQLite write waits out
 * its busy timeout.
 */
async function interruptMidOperation<T>(
  fx: StoreFixture,
  lockId: string,
  op: () => Promise<T>,
  hold: 'row' | 'mid-update' = 'row',
): Promise<unknown> {
  if (fx.dialect === 'postgres') {
    const locker = await adminClient(fx.url);
    const killer = await adminClient(fx.url);
    try {
      if (hold === 'mid-update') {
        await locker.query(
          `create or replace function hold_mid_update() returns trigger language plpgsql as
            $$ begin if new.id = '${lockId}' then perform pg_advisory_xact_lock(7707); end if; return new; end $$`,
        );
        await locker.query(
          'create trigger hold_mid_update before update on transfers for each row execute function hold_mid_update()',
        );
      }
      await locker.query('begin');
      if (hold === 'mid-update') await locker.query('select pg_advisory_xact_lock(7707)');
      else await locker.query('select id from transfers where id = $1 for update', [lockId]);
      const pending = op().then(
        () => null,
        (err: unknown) => err,
      );
      await terminateBlockedBackend(fx, killer);
      const err = await pending;
      await locker.query('rollback');
      return err;
    } finally {
      // The fixture's database is reused by the next test.
      if (hold === 'mid-update') await killer.query('drop trigger if exists hold_mid_update on transfers');
      await locker.end();
      await killer.end();
    }
  }
  const path = fx.url.slice('sqlite:'.length);
  const locker = new Database(path);
  try {
    locker.exec('begin immediate');
    const err = await op().then(
      () => null,
      (e: unknown) => e,
    );
    locker.exec('rollback');
    return err;
  } finally {
    locker.close();
  }
}

describe.each(DIALECTS)('the database going away on %s', (dialect) => {
  it('mid-heartbeat: a typed error and no lease changed (the statement is all or nothing)', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open({ busyTimeoutMs: 200 });
    const me = owner('node-a');
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) ids.push((await store.submit(submitInput(makeRequest(), me))).record.id);
    await fx.advance(5_000);
    const before = await allRecords(store);
    const err = await interruptMidOperation(fx, ids[6]!, () => store.heartbeat(me, LEASE_MS), 'mid-update');
    expect(SluiceError.hasCode(err, 'STORE_UNAVAILABLE')).toBe(true);
    expect(await allRecords(store)).toEqual(before);
    // The store recovers by itself once the database is back.
    expect(await store.heartbeat(me, LEASE_MS)).toEqual({ extended: [...ids].sort(), held: [] });
  });

  it('mid-takeover and mid-transition: a typed error, the record unchanged, then the retry works', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open({ busyTimeoutMs: 200 });
    const { record } = await store.submit(submitInput(makeRequest()));
    const takeoverErr = await interruptMidOperation(fx, record.id, () =>
      store.takeOver(record.id, 1, owner('node-b'), LEASE_MS),
    );
    expect(SluiceError.hasCode(takeoverErr, 'STORE_UNAVAILABLE')).toBe(true);
    expect(await store.get(record.id)).toEqual(record);
    const transitionErr = await interruptMidOperation(fx, record.id, () =>
      store.transition(record.id, 1, { to: 'IN_PROGRESS' }),
    );
    expect(SluiceError.hasCode(transitionErr, 'STORE_UNAVAILABLE')).toBe(true);
    expect(await store.get(record.id)).toEqual(record);
    expect((await store.takeOver(record.id, 1, owner('node-b'), LEASE_MS)).epoch).toBe(2);
  });

  it('mid-submit: a typed error, the id absent, and a resend creates it', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open({ busyTimeoutMs: 200 });
    const request = makeRequest();
    let err: unknown;
    if (dialect === 'postgres') {
      // Another transaction holds the same key uncommitted, so the insert waits on it; then the backend dies.
      const locker = await adminClient(fx.url);
      const killer = await adminClient(fx.url);
      try {
        await locker.query('begin');
        await locker.query(
          `insert into transfers (id, request_hash, request, state, epoch, attempts, created_at, updated_at)
           values ($1, 'other', '{}', 'RECEIVED', 1, 0, 0, 0)`,
          [request.id],
        );
        const pending = store.submit(submitInput(request)).then(
          () => null,
          (e: unknown) => e,
        );
        await terminateBlockedBackend(fx, killer);
        err = await pending;
        await locker.query('rollback');
      } finally {
        await locker.end();
        await killer.end();
      }
    } else {
      err = await interruptMidOperation(fx, request.id, () => store.submit(submitInput(request)));
    }
    expect(SluiceError.hasCode(err, 'STORE_UNAVAILABLE')).toBe(true);
    expect(await store.get(request.id)).toBeNull();
    expect((await store.submit(submitInput(request))).created).toBe(true);
  });

  it('closing the store under 60 submits in flight: accepted ones finish, later ones fail typed, nothing half-written', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const requests = Array.from({ length: 60 }, () => makeRequest());
    const settling = Promise.allSettled(requests.map((r) => store.submit(submitInput(r))));
    await new Promise((resolve) => setImmediate(resolve));
    const closing = store.close();
    await expectSluiceError(store.submit(submitInput(makeRequest())), 'STORE_UNAVAILABLE');
    await closing;
    const settled = await settling;
    // All 60 were accepted before close() (each entered the store synchronously), so the drain lets every one
    // finish: none may fail, and each stored record is exactly what its submit returned.
    expect(settled.filter((s) => s.status === 'rejected')).toEqual([]);
    const reopened = await fx.open();
    const stored = new Map((await allRecords(reopened)).map((r) => [r.id, r]));
    for (const [i, s] of settled.entries()) {
      const record = stored.get(requests[i]!.id);
      expect(record).toEqual((s as PromiseFulfilledResult<SubmitOutcome>).value.record);
    }
    // Resending everything converges on exactly one record per id.
    for (const request of requests) await reopened.submit(submitInput(request));
    expect((await allRecords(reopened)).length).toBe(60);
  });

  it('a node killed (SIGKILL) mid-write leaves only whole records behind', async () => {
    await using fx = await storeFixture(dialect);
    await (await fx.open()).close(); // migrate first, so the child starts writing at once
    await using child = spawnTs(crashWriter, [fx.url, 'crash']);
    await child.waitForLine(/^done 15$/, 60_000);
    child.kill('SIGKILL');
    const { signal } = await child.exited;
    expect(signal).toBe('SIGKILL');
    if (dialect === 'sqlite') {
      const db = new Database(fx.url.slice('sqlite:'.length));
      try {
        expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      } finally {
        db.close();
      }
    }
    const store = await fx.open();
    const records = await allRecords(store);
    expect(records.length).toBeGreaterThanOrEqual(16);
    for (const record of records) {
      expect(record.requestHash).toBe(requestHash(record.request));
      expect(record.request.properties.pad).toBe('p'.repeat(2_000));
      expect(['RECEIVED', 'IN_PROGRESS']).toContain(record.state);
      if (record.checkpoint !== null) {
        expect(record.state).toBe('IN_PROGRESS');
        expect((record.checkpoint as { blob: string }).blob).toBe('c'.repeat(20_000));
      }
    }
  });

  if (dialect === 'postgres') {
    it('every connection terminated under 100 submits in flight: typed errors, then the pool recovers', async () => {
      await using fx = await storeFixture(dialect);
      const store = await fx.open({ poolSize: 4 });
      const admin = await adminClient(fx.url);
      const locker = await adminClient(fx.url);
      try {
        await store.ping();
        const requests = Array.from({ length: 100 }, () => makeRequest());
        // The first four submits take the pool's four connections; an uncommitted insert of their ids holds
        // them inside their statements, so the termination below surely lands mid-statement (without it, a
        // run where every connection happened to be between statements would assert nothing).
        const held = requests.slice(0, 4);
        await locker.query('begin');
        for (const request of held) {
          await locker.query(
            `insert into transfers (id, request_hash, request, state, epoch, attempts, created_at, updated_at)
             values ($1, 'other', '{}', 'RECEIVED', 1, 0, 0, 0)`,
            [request.id],
          );
        }
        const settling = Promise.allSettled(requests.map((r) => store.submit(submitInput(r))));
        // The statements in flight block on the held ids: one per submit without coalescing, and with it
        // (coalesced-statements.ts) the first submits, sent alone while the rest queue behind them.
        const blocked = async () =>
          (
            await admin.query<{ n: number }>(
              `select count(*)::int as n from pg_stat_activity
                where datname = $1 and application_name = 'sluice-store' and wait_event_type = 'Lock'`,
              [fx.databaseName],
            )
          ).rows[0]!.n;
        await waitFor(async () => ((await blocked()) >= 1 ? true : undefined), {
          what: 'store backends waiting on the held ids',
          timeoutMs: 10_000,
        });
        await new Promise((r) => setTimeout(r, 300));
        const cut = await blocked();
        expect(cut).toBeGreaterThanOrEqual(1);
        expect(cut).toBeLessThanOrEqual(held.length);
        await admin.query(
          `select pg_terminate_backend(pid) from pg_stat_activity
            where datname = $1 and application_name = 'sluice-store'`,
          [fx.databaseName],
        );
        await locker.query('rollback');
        const settled = await settling;
        const rejected = settled.flatMap((s, i) =>
          s.status === 'rejected' ? [{ i, reason: s.reason }] : [],
        );
        // The submits cut mid-statement (the first `cut`, each blocked on a held id) fail, typed; any other
        // failure is typed too.
        expect(rejected.map((r) => r.i).slice(0, cut)).toEqual(Array.from({ length: cut }, (_, i) => i));
        for (const { reason } of rejected)
          expect(SluiceError.hasCode(reason, 'STORE_UNAVAILABLE')).toBe(true);
        // Resending every request converges: exactly one whole record per id.
        for (const request of requests) {
          const { record } = await store.submit(submitInput(request));
          expect(record).toMatchObject({ request, epoch: 1, state: 'RECEIVED' });
        }
        expect(await allRecords(store)).toHaveLength(100);
      } finally {
        await locker.end();
        await admin.end();
      }
    });

    it('a database dropped under the store → STORE_UNAVAILABLE', async () => {
      await using db = await createTestDatabase('sluice_store_drop');
      await using store = await openStore(db.url, { poolSize: 2 });
      await store.submit(submitInput(makeRequest()));
      await db.drop(); // WITH (FORCE): terminates the store's connections
      expect(await codeOrNull(store.get('x'))).toBe('STORE_UNAVAILABLE');
      expect(await codeOrNull(store.submit(submitInput(makeRequest())))).toBe('STORE_UNAVAILABLE');
    });

    it('an unreachable server → STORE_UNAVAILABLE at open, quickly', async () => {
      const port = await freePort();
      const started = Date.now();
      const err = await openStore(`postgres://postgres@127.0.0.1:${port}/nothing`, {
        connectTimeoutMs: 2_000,
      }).catch((e: unknown) => e);
      expect(SluiceError.hasCode(err, 'STORE_UNAVAILABLE')).toBe(true);
      expect(Date.now() - started).toBeLessThan(5_000);
    });
  } else {
    it('an unopenable SQLite path → STORE_UNAVAILABLE at open; a file in the way of its directory → CONFIG_INVALID naming it', async () => {
      await using dir = await tempDir('sluice-store-bad-');
      const file = join(dir.path, 'a-file');
      await writeFile(file, 'not a directory');
      for (const url of [`sqlite:${dir.path}`, `sqlite:${file}`]) {
        const err = await openStore(url).catch((e: unknown) => e);
        expect(SluiceError.hasCode(err, 'STORE_UNAVAILABLE'), `${url}: ${String(err)}`).toBe(true);
      }
      // Not an outage to wait out but a mistake in `store` (sqlite-directory.ts).
      const below = await openStore(`sqlite:${file}/store.db`).catch((e: unknown) => e);
      expect(SluiceError.hasCode(below, 'CONFIG_INVALID'), String(below)).toBe(true);
      expect(String((below as Error).message)).toContain(
        `${file} is a file, in the way of the store's directory`,
      );
    });
  }
});

async function codeOrNull(promise: Promise<unknown>): Promise<string | null> {
  try {
    await promise;
    return null;
  } catch (err) {
    return (err as SluiceError).code;
  }
}
