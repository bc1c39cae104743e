/**
 * Shared fixtures of the store's tests (not part of the package API): one fresh database per test on each
 * dialect (with testkit's manual clock), and request/owner builders.
 */
import {
  type OwnerIdentity,
  parseTransferRequest,
  requestHash,
  type SubmitInput,
  type TransferRequest,
} from '@sluice/core';
import { createTestDatabase, ManualClock, type TestDatabase, tempDir } from '@sluice/testkit';
import pg from 'pg';
import { afterAll, expect } from 'vitest';
import { type OpenStoreOptions, openStore } from '../src/open.js';
import type { SqlDataPlaneStore } from '../src/store.js';

export const DIALECTS = ['sqlite', 'postgres'] as const;
export type TestDialect = (typeof DIALECTS)[number];

export interface StoreFixture extends AsyncDisposable {
  readonly dialect: TestDialect;
  readonly url: string;
  /** The PostgreSQL database name (postgres only). */
  readonly databaseName: string | null;
  readonly clock: ManualClock;
  /** Opens another store instance (its own connection/pool, like another node); closed on dispose. */
  open(options?: OpenStoreOptions): Promise<SqlDataPlaneStore>;
  /**
   * Lets `ms` pass for leases. SQLite judges leases by the injected clock, so that clock moves; PostgreSQL judges
   * them by its own clock (store-clock.ts), so the leases stored move back by `ms` instead — the same thing for
   * every comparison a statement makes. The manual clock moves on both; timestamps PostgreSQL writes
   * (`createdAt`, `updatedAt`) stay on its real clock (compare them with `storeNow`).
   */
  advance(ms: number): Promise<void>;
  /** How long `record`'s lease has left by the store's clock (exact on SQLite, to the millisecond on PostgreSQL). */
  leaseLeft(record: { leaseExpiresAt: Date | null } | null | undefined): Promise<number>;
  /** Asserts the lease has `ms` left: exactly on SQLite; on PostgreSQL, up to 5 s less (time the test took). */
  expectLeaseLeft(record: { leaseExpiresAt: Date | null } | null | undefined, ms: number): Promise<void>;
  /** Now by the store's clock: the manual clock on SQLite, the database's on PostgreSQL. */
  storeNow(): Promise<Date>;
  /** Asserts a timestamp the store wrote is its now: exactly on SQLite; within 5 s on PostgreSQL. */
  expectStoreNow(at: Date | undefined): Promise<void>;
}

/**
 * One PostgreSQL database per test file, emptied before each test: creating a database costs seconds on a busy
 * host, truncating two tables milliseconds. Dropped when the file's tests are done.
 */
let shared: { db: TestDatabase; admin: pg.Client } | null = null;

async function sharedDatabase(): Promise<{ db: TestDatabase; admin: pg.Client }> {
  if (shared === null) {
    const db = await createTestDatabase('sluice_store');
    const admin = new pg.Client({ connectionString: db.url, application_name: 'sluice-store-tests' });
    await admin.connect();
    shared = { db, admin };
  }
  return shared;
}

afterAll(async () => {
  if (shared === null) return;
  const { db, admin } = shared;
  shared = null;
  await admin.end();
  await db.drop();
});

async function emptied(): Promise<{ url: string; name: string }> {
  const { db, admin } = await sharedDatabase();
  const { rows } = await admin.query<{ t: string | null }>(`select to_regclass('transfers')::text as t`);
  if (rows[0]?.t) await admin.query('truncate transfers, nodes');
  return { url: db.url, name: db.name };
}

/**
 * An empty store location: a SQLite file in a fresh temp dir, or on PostgreSQL this file's database, emptied
 * (`fresh: true` creates a brand-new, unmigrated database instead).
 *
 * @example
 * ```ts
 * await using fx = await storeFixture('postgres');
 * const store = await fx.open();
 * ```
 */
export async function storeFixture(
  dialect: TestDialect,
  options: { fresh?: boolean } = {},
): Promise<StoreFixture> {
  const clock = new ManualClock();
  const opened: SqlDataPlaneStore[] = [];
  let url: string;
  let databaseName: string | null = null;
  let cleanup: () => Promise<void>;
  if (dialect === 'sqlite') {
    const dir = await tempDir('sluice-store-');
    url = `sqlite:${dir.path}/nested/store.db`;
    cleanup = dir.remove;
  } else if (options.fresh) {
    const db = await createTestDatabase('sluice_store');
    url = db.url;
    databaseName = db.name;
    cleanup = db.drop;
  } else {
    const db = await emptied();
    url = db.url;
    databaseName = db.name;
    cleanup = async () => {};
  }
  const pgNow = async (): Promise<number> => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query<{ now: string }>(
        'select floor(extract(epoch from clock_timestamp()) * 1000)::bigint as now',
      );
      return Number(rows[0]?.now);
    } finally {
      await client.end();
    }
  };
  const leaseLeft = async (record: { leaseExpiresAt: Date | null } | null | undefined) => {
    const lease = record?.leaseExpiresAt?.getTime();
    if (lease === undefined) throw new Error('the record holds no lease');
    return lease - (dialect === 'postgres' ? await pgNow() : clock.now().getTime());
  };
  return {
    dialect,
    url,
    databaseName,
    clock,
    async advance(ms) {
      clock.advance(ms);
      if (dialect !== 'postgres') return;
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        await client.query(
          'update transfers set lease_expires_at = lease_expires_at - $1 where lease_expires_at is not null',
          [ms],
        );
      } finally {
        await client.end();
      }
    },
    leaseLeft,
    async expectLeaseLeft(record, ms) {
      const left = await leaseLeft(record);
      if (dialect === 'sqlite') expect(left).toBe(ms);
      else {
        expect(left).toBeLessThanOrEqual(ms);
        expect(left).toBeGreaterThan(ms - 5_000);
      }
    },
    async storeNow() {
      return new Date(dialect === 'postgres' ? await pgNow() : clock.now().getTime());
    },
    async expectStoreNow(at) {
      expect(at).toBeInstanceOf(Date);
      if (dialect === 'sqlite') expect(at).toEqual(clock.now());
      else expect(Math.abs(at!.getTime() - (await pgNow()))).toBeLessThan(5_000);
    },
    async open(options = {}) {
      const store = await openStore(url, { clock, poolSize: 4, ...options });
      opened.push(store);
      return store;
    },
    async [Symbol.asyncDispose]() {
      await Promise.all(opened.map((store) => store.close()));
      await cleanup();
    },
  };
}

let counter = 0;

/** A unique, valid transfer id. */
export function newId(prefix = 't'): string {
  counter += 1;
  return `${prefix}-${process.pid}-${counter.toString().padStart(5, '0')}`;
}

export function makeRequest(id = newId(), properties: Record<string, string | number> = {}): TransferRequest {
  return parseTransferRequest({
    id,
    source: { type: 'file', path: '/data/in.jsonl', format: 'jsonl' },
    destination: { type: 'file', path: '/data/out.jsonl', format: 'jsonl' },
    properties,
  });
}

export function owner(nodeId = 'node-a', instanceId = `${nodeId}-i1`): OwnerIdentity {
  return { nodeId, address: `http://${nodeId}.test:7070`, instanceId };
}

export const LEASE_MS = 30_000;

export function submitInput(request: TransferRequest, who: OwnerIdentity = owner()): SubmitInput {
  return { request, requestHash: requestHash(request), owner: who, leaseMs: LEASE_MS };
}

/** Every record in the store (all pages). */
export async function allRecords(store: SqlDataPlaneStore) {
  const records = [];
  let cursor: string | undefined;
  do {
    const page = await store.list({ cursor, limit: 1000 });
    records.push(...page.records);
    cursor = page.next ?? undefined;
  } while (cursor);
  return records;
}

/** A request object that has NOT been through the schema (for hostile-input tests). */
export function rawRequest(id: string, properties: Record<string, unknown> = {}): TransferRequest {
  return {
    id,
    mode: 'idempotent',
    source: { type: 'file', path: '/data/in.jsonl', format: 'jsonl' },
    destination: { type: 'file', path: '/data/out.jsonl', format: 'jsonl' },
    properties,
    options: { onBadRecord: 'skip' },
  } as TransferRequest;
}
