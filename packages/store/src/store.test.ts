import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import { IdempotencyConflictError, requestHash, type SluiceError, TransferNotFoundError } from '@sluice/core';
import { expectSluiceError } from '@sluice/testkit';
import Database from 'better-sqlite3';
import { Kysely, Migrator, PostgresDialect, SqliteDialect, sql } from 'kysely';
import pg from 'pg';
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
import { createCheckpointPort } from './checkpoint.js';
import { MIGRATION_LOCK_TABLE, MIGRATION_TABLE, storeMigrations } from './migrations.js';

describe.each(DIALECTS)('SqlDataPlaneStore on %s', (dialect) => {
  it('submit inserts a new id at epoch 1, RECEIVED, owned by the caller with a lease', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    expect(store.dialect).toBe(dialect);
    const request = makeRequest();
    const { record, created } = await store.submit(submitInput(request, owner('node-a')));
    expect(created).toBe(true);
    expect(record).toMatchObject({
      id: request.id,
      requestHash: requestHash(request),
      request,
      state: 'RECEIVED',
      ownerNodeId: 'node-a',
      ownerAddress: 'http://node-a.test:7070',
      ownerInstance: 'node-a-i1',
      epoch: 1,
      attempts: 1,
      error: null,
      result: null,
      checkpoint: null,
    });
    await fx.expectLeaseLeft(record, LEASE_MS);
    await fx.expectStoreNow(record.createdAt);
    // What submit returned is exactly what is stored.
    expect(await store.get(request.id)).toEqual(record);
  });

  it('submit can create the record IN_PROGRESS (claimed and started in the one insert); other states are refused', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const request = makeRequest();
    const { record, created } = await store.submit({
      ...submitInput(request, owner('node-a')),
      state: 'IN_PROGRESS',
    });
    expect(created).toBe(true);
    expect(record).toMatchObject({ state: 'IN_PROGRESS', epoch: 1, ownerNodeId: 'node-a' });
    expect(await store.get(request.id)).toEqual(record);
    const other = makeRequest();
    const refused = store.submit({
      ...submitInput(other, owner('node-a')),
      state: 'COMPLETED' as 'IN_PROGRESS',
    });
    await expectSluiceError(refused, 'VALIDATION_FAILED');
    expect(await store.get(other.id)).toBeNull();
  });

  it('submit of the same id and body returns the stored record, created=false, and changes nothing', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const request = makeRequest();
    const first = await store.submit(submitInput(request, owner('node-a')));
    await fx.advance(1_000);
    const stored = await store.get(request.id);
    expect(stored).toMatchObject({ ...first.record, leaseExpiresAt: expect.any(Date) });
    const again = await store.submit(submitInput(request, owner('node-b')));
    expect(again.created).toBe(false);
    expect(again.record).toEqual(stored);
    expect(await store.get(request.id)).toEqual(stored);
  });

  it('submit of the same id with another body → IDEMPOTENCY_CONFLICT, nothing changes', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const id = newId();
    const first = await store.submit(submitInput(makeRequest(id, { v: 1 })));
    const other = makeRequest(id, { v: 2 });
    const err = await store.submit(submitInput(other, owner('node-b'))).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IdempotencyConflictError);
    expect((err as SluiceError).code).toBe('IDEMPOTENCY_CONFLICT');
    expect(await store.get(id)).toEqual(first.record);
    expect(await allRecords(store)).toHaveLength(1);
  });

  it('accepts an owner without an advertised address (a single embedded node)', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const local = { nodeId: 'local', address: '', instanceId: 'local-1' };
    const { record } = await store.submit(submitInput(makeRequest(), local));
    expect(record.ownerAddress).toBe('');
    expect(await store.heartbeat(local, LEASE_MS)).toEqual({ extended: [record.id], held: [] });
    await store.registerNode(local);
    expect((await store.listNodes())[0]?.address).toBe('');
  });

  it('get returns null for an unknown id; operations on it → TRANSFER_NOT_FOUND', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    expect(await store.get('nope')).toBeNull();
    await expect(store.transition('nope', 1, { to: 'IN_PROGRESS' })).rejects.toBeInstanceOf(
      TransferNotFoundError,
    );
    await expectSluiceError(store.takeOver('nope', 1, owner(), LEASE_MS), 'TRANSFER_NOT_FOUND');
    await expectSluiceError(store.saveCheckpoint('nope', 1, { a: 1 }), 'TRANSFER_NOT_FOUND');
    await expectSluiceError(store.release('nope', 1), 'TRANSFER_NOT_FOUND');
    expect(await allRecords(store)).toHaveLength(0);
  });

  it('takeOver sets the new owner, increments epoch and attempts, renews the lease', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const { record } = await store.submit(submitInput(makeRequest(), owner('node-a')));
    await fx.advance(5_000);
    const taken = await store.takeOver(record.id, 1, owner('node-b'), 10_000);
    expect(taken).toMatchObject({
      state: 'RECEIVED',
      ownerNodeId: 'node-b',
      ownerAddress: 'http://node-b.test:7070',
      ownerInstance: 'node-b-i1',
      epoch: 2,
      attempts: 2,
    });
    await fx.expectLeaseLeft(taken, 10_000);
    await fx.expectStoreNow(taken.updatedAt);
    expect(taken.createdAt).toEqual(record.createdAt);
    expect(await store.get(record.id)).toEqual(taken);
  });

  it('transition records the result and error, and a final state drops the lease', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const a = (await store.submit(submitInput(makeRequest()))).record;
    const running = await store.transition(a.id, 1, { to: 'IN_PROGRESS' });
    expect(running.state).toBe('IN_PROGRESS');
    expect(running.leaseExpiresAt).toEqual(a.leaseExpiresAt);
    const done = await store.transition(a.id, 1, {
      to: 'COMPLETED',
      result: { recordsRead: 10, recordsWritten: 9, badRecords: 1 },
    });
    expect(done).toMatchObject({
      state: 'COMPLETED',
      leaseExpiresAt: null,
      result: { recordsRead: 10, recordsWritten: 9, badRecords: 1 },
      error: null,
    });
    const b = (await store.submit(submitInput(makeRequest()))).record;
    await store.transition(b.id, 1, { to: 'IN_PROGRESS' });
    const failed = await store.transition(b.id, 1, {
      to: 'FAILED',
      error: { code: 'SOURCE_FAILED', message: 'x'.repeat(100_000) },
    });
    expect(failed.state).toBe('FAILED');
    expect(failed.error?.code).toBe('SOURCE_FAILED');
    // Long failure messages are cut, never refused: a failing run must still be recorded.
    expect(failed.error?.message.length).toBe(16 * 1024);
    expect(await store.get(b.id)).toEqual(failed);
  });

  it('saveCheckpoint writes the checkpoint (and renews the lease when asked); the port reads it back', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const { record } = await store.submit(submitInput(makeRequest()));
    const checkpoint = { dag: 'abc', epoch: 3, positions: { 'source:file': { offset: 1234 } }, at: 'now' };
    const port = createCheckpointPort(store, record.id, record.epoch, { leaseMs: 60_000 });
    expect(await port.load()).toBeNull();
    await fx.advance(1_000);
    await port.save(checkpoint);
    expect(await port.load()).toEqual(checkpoint);
    const stored = await store.get(record.id);
    await fx.expectLeaseLeft(stored, 60_000);
    await fx.expectStoreNow(stored?.updatedAt);
    await store.saveCheckpoint(record.id, 1, { step: 2 });
    expect((await store.get(record.id))?.leaseExpiresAt).toEqual(stored?.leaseExpiresAt);
    expect((await store.get(record.id))?.checkpoint).toEqual({ step: 2 });
  });

  it('the checkpoint port carries its epoch and finishing() is fenced: STALE_EPOCH after a takeover, nothing overwritten', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const { record } = await store.submit(submitInput(makeRequest()));
    const port = createCheckpointPort(store, record.id, record.epoch, { leaseMs: 60_000 });
    expect(port.epoch).toBe(1);
    await port.save({ offset: 10 });
    await fx.advance(1_000);
    // While this epoch owns the record, finishing confirms it (and renews the lease) without changing progress.
    await port.finishing();
    const confirmed = await store.get(record.id);
    expect(confirmed).toMatchObject({ epoch: 1, checkpoint: { offset: 10 } });
    await fx.expectLeaseLeft(confirmed, 60_000);
    // A finishing owner is taken over only once its lease expired (finishing.test.ts).
    await expectSluiceError(store.takeOver(record.id, 1, owner('node-b'), LEASE_MS), 'LEASE_HELD');
    await fx.advance(60_001);
    const taken = await store.takeOver(record.id, 1, owner('node-b'), LEASE_MS);
    await store.saveCheckpoint(record.id, taken.epoch, { offset: 99 });
    await expectSluiceError(port.finishing(), 'STALE_EPOCH');
    // A port that never loaded nor saved is fenced the same way.
    await expectSluiceError(createCheckpointPort(store, record.id, 1).finishing(), 'STALE_EPOCH');
    expect(await store.get(record.id)).toMatchObject({
      epoch: 2,
      ownerNodeId: 'node-b',
      checkpoint: { offset: 99 },
    });
  });

  it('heartbeat extends the leases of every active transfer of that owner instance, and only those', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const mine = owner('node-a', 'a-1');
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push((await store.submit(submitInput(makeRequest(), mine))).record.id);
    // Another incarnation of the same node, another node, and a finished one of mine.
    const oldLife = (await store.submit(submitInput(makeRequest(), owner('node-a', 'a-0')))).record;
    const other = (await store.submit(submitInput(makeRequest(), owner('node-b')))).record;
    const finished = (await store.submit(submitInput(makeRequest(), mine))).record;
    await store.transition(finished.id, 1, { to: 'TERMINATED' });
    await fx.advance(20_000);
    const [oldLifeNow, otherNow] = [await store.get(oldLife.id), await store.get(other.id)];
    expect(await store.heartbeat(mine, 45_000)).toEqual({ extended: [...ids].sort(), held: [] });
    for (const id of ids) {
      await fx.expectLeaseLeft(await store.get(id), 45_000);
    }
    expect((await store.get(oldLife.id))?.leaseExpiresAt).toEqual(oldLifeNow?.leaseExpiresAt);
    expect((await store.get(other.id))?.leaseExpiresAt).toEqual(otherNow?.leaseExpiresAt);
    expect((await store.get(finished.id))?.leaseExpiresAt).toBeNull();
    expect(await store.heartbeat(owner('node-c'), 45_000)).toEqual({ extended: [], held: [] });
  });

  it('release expires the lease at once so a sweeper can recover it; releasing a final record is a no-op', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const { record } = await store.submit(submitInput(makeRequest(), owner('node-a')));
    expect(await store.recoverExpired(owner('node-b'), LEASE_MS, 10)).toEqual([]);
    await store.release(record.id, 1);
    const recovered = await store.recoverExpired(owner('node-b'), LEASE_MS, 10);
    expect(recovered.map((r) => [r.id, r.epoch, r.ownerNodeId])).toEqual([[record.id, 2, 'node-b']]);
    await store.transition(record.id, 2, { to: 'TERMINATED' });
    await store.release(record.id, 2);
    expect((await store.get(record.id))?.state).toBe('TERMINATED');
  });

  it('recoverExpired takes over expired active transfers, oldest lease first, up to the limit', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const dead = owner('node-dead');
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      ids.push((await store.submit(submitInput(makeRequest(), dead))).record.id);
      await fx.advance(1_000); // each one's lease expires 1 s after the previous one's
    }
    const live = (await store.submit({ ...submitInput(makeRequest(), dead), leaseMs: 10 * 60_000 })).record;
    expect(await store.recoverExpired(owner('node-b'), LEASE_MS, 10)).toEqual([]);
    await fx.advance(LEASE_MS - 2_000); // the first three leases have expired
    const first = await store.recoverExpired(owner('node-b'), LEASE_MS, 2);
    expect(first.map((r) => r.id)).toEqual(ids.slice(0, 2));
    await fx.advance(10_000);
    const rest = await store.recoverExpired(owner('node-c'), LEASE_MS, 100);
    expect(rest.map((r) => r.id)).toEqual(ids.slice(2));
    for (const r of [...first, ...rest]) {
      expect(r.epoch).toBe(2);
      expect(r.attempts).toBe(2);
      await fx.expectLeaseLeft(await store.get(r.id), LEASE_MS - (first.includes(r) ? 10_000 : 0));
    }
    expect(rest.every((r) => r.ownerNodeId === 'node-c' && r.ownerInstance === 'node-c-i1')).toBe(true);
    expect((await store.get(live.id))?.epoch).toBe(1);
  });

  it('list filters by state and owner and pages with an opaque cursor', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const ids: string[] = [];
    for (let i = 0; i < 25; i++) {
      const id = `list-${String(i).padStart(2, '0')}`;
      ids.push(id);
      await store.submit(submitInput(makeRequest(id), owner(i % 2 === 0 ? 'node-a' : 'node-b')));
      if (i % 5 === 0) await store.transition(id, 1, { to: 'TERMINATED' });
    }
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await store.list({ limit: 10, cursor });
      seen.push(...page.records.map((r) => r.id));
      cursor = page.next ?? undefined;
      pages++;
    } while (cursor);
    expect(pages).toBe(3);
    expect(seen).toEqual(ids);
    const terminated = await store.list({ state: 'TERMINATED' });
    expect(terminated.records.map((r) => r.id)).toEqual([
      'list-00',
      'list-05',
      'list-10',
      'list-15',
      'list-20',
    ]);
    expect(terminated.next).toBeNull();
    const ofB = await store.list({ ownerNodeId: 'node-b', state: 'RECEIVED', limit: 5 });
    expect(ofB.records.map((r) => r.id)).toEqual(['list-01', 'list-03', 'list-07', 'list-09', 'list-11']);
    const ofB2 = await store.list({ ownerNodeId: 'node-b', state: 'RECEIVED', limit: 5, cursor: ofB.next! });
    expect(ofB2.records.map((r) => r.id)).toEqual(['list-13', 'list-17', 'list-19', 'list-21', 'list-23']);
    expect(ofB2.next).toBeNull();
  });

  it('purge deletes only final records last updated longer ago than the age given', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const old = (await store.submit(submitInput(makeRequest()))).record;
    await store.transition(old.id, 1, { to: 'TERMINATED' });
    const oldActive = (await store.submit(submitInput(makeRequest()))).record;
    // A minute passes by the store's clock: SQLite's is the injected one; PostgreSQL's cannot be moved, so the
    // records written so far are made a minute older instead.
    await fx.advance(60_000);
    if (dialect === 'postgres') {
      const client = new pg.Client({ connectionString: fx.url });
      await client.connect();
      await client.query(
        'UPDATE transfers SET updated_at = updated_at - 60000, created_at = created_at - 60000',
      );
      await client.end();
    }
    const recent = (await store.submit(submitInput(makeRequest()))).record;
    await store.transition(recent.id, 1, { to: 'TERMINATED' });
    expect(await store.purge(30_000)).toBe(1);
    expect(await store.get(old.id)).toBeNull();
    expect(await store.get(oldActive.id)).not.toBeNull();
    expect(await store.get(recent.id)).not.toBeNull();
    expect(await store.purge(30_000)).toBe(0);
    // A purged id can be submitted afresh.
    expect((await store.submit(submitInput(old.request))).created).toBe(true);
  });

  it('registers, touches and lists nodes', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const startedAt = new Date(fx.clock.now().getTime() - 5_000);
    await store.registerNode({ nodeId: 'node-b', address: 'http://b:7070', instanceId: 'b-1', startedAt });
    await store.registerNode({ nodeId: 'node-a', address: 'http://a:7070', instanceId: 'a-1' });
    await fx.advance(3_000);
    await store.touchNode('node-b');
    // Re-registering after a restart replaces address and instance.
    await store.registerNode({ nodeId: 'node-a', address: 'http://a2:7070', instanceId: 'a-2' });
    const nodes = await store.listNodes();
    expect(nodes).toEqual([
      {
        nodeId: 'node-a',
        address: 'http://a2:7070',
        instanceId: 'a-2',
        startedAt: expect.any(Date),
        lastSeenAt: expect.any(Date),
        silentMs: expect.any(Number),
      },
      {
        nodeId: 'node-b',
        address: 'http://b:7070',
        instanceId: 'b-1',
        startedAt,
        lastSeenAt: expect.any(Date),
        silentMs: expect.any(Number),
      },
    ]);
    // Both were seen just now (touched / re-registered after the last clock move).
    for (const node of nodes) expect(node.silentMs).toBeLessThan(dialect === 'sqlite' ? 1 : 5_000);
    // Times the store took itself are on its clock (the database's on PostgreSQL); a given start time is kept.
    for (const at of [nodes[0]?.startedAt, nodes[0]?.lastSeenAt, nodes[1]?.lastSeenAt])
      await fx.expectStoreNow(at);
    await expectSluiceError(store.touchNode('node-z'), 'NOT_FOUND');
  });

  it('recordRetry counts retryable failures apart from owner changes; a checkpoint that moved starts the count again, one that did not keeps it', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const { record } = await store.submit(submitInput(makeRequest(), owner('node-a')));
    expect(record.retries).toBe(0);
    await store.transition(record.id, 1, { to: 'IN_PROGRESS' });
    expect((await store.recordRetry(record.id, 1)).retries).toBe(1);
    const counted = await store.recordRetry(record.id, 1);
    expect(counted).toMatchObject({ retries: 2, attempts: 1, epoch: 1, state: 'IN_PROGRESS' });
    expect(await store.get(record.id)).toEqual(counted);
    // An owner change is a new run, not a failure: the count carries over untouched.
    await fx.advance(LEASE_MS + 1);
    const taken = await store.takeOver(record.id, 1, owner('node-b'), LEASE_MS);
    expect(taken).toMatchObject({ epoch: 2, attempts: 2, retries: 2 });
    expect((await store.recordRetry(record.id, 2)).retries).toBe(3);
    // The first checkpoint is progress; saving the same one again (a sink's fenced `finishing`) is not.
    await store.saveCheckpoint(record.id, 2, { line: 10 }, LEASE_MS);
    expect((await store.get(record.id))?.retries).toBe(0);
    await store.recordRetry(record.id, 2);
    await store.saveCheckpoint(record.id, 2, { line: 10 });
    await store.saveCheckpoint(record.id, 2, { line: 10 }, LEASE_MS);
    expect((await store.get(record.id))?.retries).toBe(1);
    await store.saveCheckpoint(record.id, 2, { line: 20 });
    expect((await store.get(record.id))?.retries).toBe(0);
    // Fenced like every owner write, and refused once final; nothing changes.
    await expectSluiceError(store.recordRetry(record.id, 1), 'STALE_EPOCH');
    await expectSluiceError(store.recordRetry('absent-id', 1), 'TRANSFER_NOT_FOUND');
    const done = await store.transition(record.id, 2, { to: 'COMPLETED' });
    await expectSluiceError(store.recordRetry(record.id, 2), 'ILLEGAL_TRANSITION');
    expect(await store.get(record.id)).toEqual(done);
  });

  it('a store written by the first schema (0001) is migrated in place: its records keep their fields and count no retries', async () => {
    await using fx = await storeFixture(dialect, { fresh: true });
    const firstOnly = { '0001_transfers_and_nodes': storeMigrations(dialect)['0001_transfers_and_nodes']! };
    const db = await rawKysely(dialect, fx.url);
    try {
      const { error } = await new Migrator({
        db,
        provider: { getMigrations: async () => firstOnly },
        migrationTableName: MIGRATION_TABLE,
        migrationLockTableName: MIGRATION_LOCK_TABLE,
      }).migrateToLatest();
      expect(error).toBeUndefined();
      await sql`insert into transfers (id, request_hash, request, state, epoch, attempts, created_at, updated_at)
        values ('old-one', 'h', ${JSON.stringify(makeRequest('old-one'))}, 'IN_PROGRESS', 3, 3, 1000, 2000)`.execute(
        db,
      );
    } finally {
      await db.destroy();
    }
    const store = await fx.open();
    expect(await store.get('old-one')).toMatchObject({
      state: 'IN_PROGRESS',
      epoch: 3,
      attempts: 3,
      retries: 0,
    });
    expect((await store.recordRetry('old-one', 3)).retries).toBe(1);
  });

  it('keeps its data across a reopen and migrates idempotently; several nodes may migrate at once', async () => {
    await using fx = await storeFixture(dialect, { fresh: true });
    // Five nodes start together on an empty database.
    const stores = await Promise.all([1, 2, 3, 4, 5].map(() => fx.open()));
    const { record } = await stores[0]!.submit(submitInput(makeRequest()));
    for (const s of stores) expect(await s.get(record.id)).toEqual(record);
    await Promise.all(stores.map((s) => s.close()));
    const reopened = await fx.open();
    expect(await reopened.get(record.id)).toEqual(record);
    await reopened.ping();
  });

  it('after close every operation → STORE_UNAVAILABLE; close is idempotent', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    await store.close();
    await store.close();
    expect(store.closed).toBe(true);
    await expectSluiceError(store.ping(), 'STORE_UNAVAILABLE');
    await expectSluiceError(store.get('a'), 'STORE_UNAVAILABLE');
    await expectSluiceError(store.submit(submitInput(makeRequest())), 'STORE_UNAVAILABLE');
  });
});

/** A kysely handle on the store's database without the store (to write an older schema). */
async function rawKysely(dialect: 'sqlite' | 'postgres', url: string): Promise<Kysely<unknown>> {
  if (dialect === 'postgres')
    return new Kysely({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1 }) }),
    });
  const file = url.slice('sqlite:'.length);
  await mkdir(dirname(file), { recursive: true });
  return new Kysely({ dialect: new SqliteDialect({ database: new Database(file) }) });
}
