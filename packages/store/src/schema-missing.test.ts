/**
 * The store's tables disappearing under a running store (`DROP TABLE transfers`, a database replaced by an empty
 * one): the store says so as `STORE_UNAVAILABLE` (reason `schema-missing`) — in `ping`, which readiness uses, and
 * in every operation — and never recreates the schema behind the operator's back.
 */
import { expectSluiceError } from '@sluice/testkit';
import Database from 'better-sqlite3';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import {
  DIALECTS,
  makeRequest,
  owner,
  storeFixture,
  submitInput,
  type TestDialect,
} from '../test/helpers.js';

/** Runs statements on the store's database with a connection of its own (the operator's psql / sqlite3). */
async function operator(dialect: TestDialect, url: string, statements: string[]): Promise<void> {
  if (dialect === 'sqlite') {
    const db = new Database(url.slice('sqlite:'.length));
    try {
      for (const statement of statements) db.exec(statement);
    } finally {
      db.close();
    }
    return;
  }
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const statement of statements) await client.query(statement);
  } finally {
    await client.end();
  }
}

async function tableExists(dialect: TestDialect, url: string, table: string): Promise<boolean> {
  if (dialect === 'sqlite') {
    const db = new Database(url.slice('sqlite:'.length), { readonly: true });
    try {
      return (
        db.prepare('select 1 from sqlite_master where type = ? and name = ?').get('table', table) !==
        undefined
      );
    } finally {
      db.close();
    }
  }
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ t: string | null }>('select to_regclass($1)::text as t', [table]);
    return rows[0]?.t != null;
  } finally {
    await client.end();
  }
}

const DROP_TRANSFERS: Record<TestDialect, string> = {
  sqlite: 'drop table transfers',
  postgres: 'drop table transfers cascade',
};

describe.each(DIALECTS)('the store schema going missing on %s', (dialect) => {
  it('defect: with the transfers table dropped, ping answered (readiness 200) and operations failed INTERNAL; now STORE_UNAVAILABLE naming the missing schema, nothing recreated', async () => {
    await using fx = await storeFixture(dialect, { fresh: true });
    const store = await fx.open();
    const request = makeRequest();
    await store.submit(submitInput(request));
    await store.ping();
    await operator(dialect, fx.url, [DROP_TRANSFERS[dialect]]);

    const pinged = await expectSluiceError(store.ping(), 'STORE_UNAVAILABLE');
    expect(pinged.status).toBe(503);
    expect(pinged.details).toEqual({ reason: 'schema-missing' });
    expect(pinged.message).toMatch(/schema is missing/);
    expect(pinged.message).toMatch(/transfers/);
    for (const [what, operation] of [
      ['submit', () => store.submit(submitInput(makeRequest()))],
      ['get', () => store.get(request.id)],
      ['list', () => store.list({})],
      ['heartbeat', () => store.heartbeat(owner(), 30_000)],
    ] as const) {
      const err = await expectSluiceError(operation(), 'STORE_UNAVAILABLE', what);
      expect(err.details, what).toEqual({ reason: 'schema-missing' });
    }
    expect(await tableExists(dialect, fx.url, 'transfers')).toBe(false);

    // Another node starting on it refuses too: its migrations are recorded, its tables are not there.
    const reopened = await expectSluiceError(fx.open(), 'STORE_UNAVAILABLE');
    expect(reopened.details).toEqual({ reason: 'schema-missing' });
    expect(await tableExists(dialect, fx.url, 'transfers')).toBe(false);

    // The operator chose to start over empty: dropping the rest of the schema lets the next start migrate it.
    await operator(dialect, fx.url, [
      'drop table nodes',
      'drop table sluice_store_migration',
      'drop table sluice_store_migration_lock',
    ]);
    const fresh = await fx.open();
    await fresh.ping();
    expect(await fresh.get(request.id)).toBeNull();
    await store.ping(); // the first store serves again too
  });
});
