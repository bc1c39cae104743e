import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig, SluiceEvent } from '@sluice/core';
import { createTestDatabase, tempDir, waitFor } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { startEndpointPipeline } from './endpoint.js';
import { fieldTypeOfPg, textParser } from './pg.js';

type Caches = Awaited<ReturnType<typeof openCacheManager>>;

const events = { publish: async (_event: SluiceEvent) => {} };

/** The record `key` of the generation `alias` serves now (undefined when absent). */
async function served(caches: Caches, alias: string, key: unknown[]) {
  const cache = await caches.openRo(alias);
  try {
    return cache.get(key);
  } finally {
    await cache.close();
  }
}

/** The field types of the generation `alias` serves now. */
async function servedFields(caches: Caches, alias: string) {
  const target = caches.resolveAlias(alias);
  return target ? (await caches.info(target.cache))?.schema.fields : undefined;
}

/** `products(id int, name text, price numeric, cat text, updated_at timestamptz)`, 100 rows, every price whole. */
async function productsTable(client: pg.Client) {
  await client.query(
    'CREATE TABLE products (id int PRIMARY KEY, name text, price numeric, cat text, updated_at timestamptz)',
  );
  await client.query(
    `INSERT INTO products SELECT g, 'p' || g, g * 10, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END,
            now() - interval '1 hour' FROM generate_series(1, 100) g`,
  );
}

/** A test database (with `products` unless `withProducts` is false), a client on it, and a cache manager. */
async function pgFixture(name: string, withProducts = true) {
  const db = await createTestDatabase(name);
  const dir = await tempDir();
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  if (withProducts) await productsTable(client);
  const caches = await openCacheManager(join(dir.path, 'data'));
  return {
    url: db.url,
    client,
    caches,
    /** An endpoint's context on this database (connection `db`) and cache manager. */
    ctx: {
      caches,
      events,
      connections: { db: { type: 'postgres' as const, url: db.url } },
      commitEveryMs: 50,
    },
    async [Symbol.asyncDispose]() {
      await caches[Symbol.asyncDispose]();
      await client.end();
      await dir[Symbol.asyncDispose]();
      await db[Symbol.asyncDispose]();
    },
  };
}

function products(extra: Partial<EndpointConfig> = {}): EndpointConfig {
  return {
    name: 'products',
    source: { type: 'postgres', connection: 'db', table: 'products', cursor: 'updated_at' },
    primaryKey: ['id'],
    indexes: [],
    ...extra,
  } as EndpointConfig;
}

const FRACTIONAL_UPDATE = [
  `UPDATE products SET price = 10.5, name = 'frac', updated_at = now() WHERE id = 42`,
  `INSERT INTO products VALUES (999999, 'fracnew', 2.25, 'a', now())`,
];

describe('endpoint schemas of PostgreSQL sources come from the declared column types', () => {
  it('defect: a polled PostgreSQL numeric column inferred as integer from whole values dropped every later fractional update as a bad record, silently', async () => {
    await using fx = await pgFixture('sluice_pipeline_numeric');
    const { client, caches } = fx;
    const pipeline = await startEndpointPipeline(products(), fx.ctx);
    await pipeline.whenServing();
    // Typed by the columns, not by the whole values they hold today.
    expect(await servedFields(caches, 'products')).toEqual({
      id: 'integer',
      name: 'string',
      price: 'number',
      cat: 'string',
      updated_at: 'timestamp',
    });
    for (const sql of FRACTIONAL_UPDATE) await client.query(sql);
    await waitFor(async () => (await served(caches, 'products', [999999]))?.price === 2.25, {
      timeoutMs: 15_000,
      what: 'the inserted row with a fractional price',
    });
    expect(await served(caches, 'products', [42])).toMatchObject({ id: 42, name: 'frac', price: 10.5 });
    expect(await served(caches, 'products', [999999])).toMatchObject({ name: 'fracnew', cat: 'a' });
    const status = pipeline.status();
    expect(status.progress.phase).toBe('streaming');
    expect(status.badRecords).toEqual({ count: 0, last: null });
    await pipeline.stop();
  });

  it('defect: an endpoint filter naming a field its source does not have served an empty endpoint, with no error', async () => {
    await using fx = await pgFixture('sluice_pipeline_filterfields');
    const { caches } = fx;
    const { ctx } = fx;
    // The filter applies to the source's columns, before `select` renames them: `cost` is only the cache's name.
    const renamed = products({ select: { id: 'id', cost: 'price' }, filter: { cost: { $gte: 100 } } });
    await expect(startEndpointPipeline(renamed, ctx)).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      errors: [{ path: 'filter.cost', message: expect.stringMatching(/unknown field "cost"/) }],
    });
    // An operand of another type than its column's.
    await expect(
      startEndpointPipeline(products({ filter: { price: { $gte: 'cheap' } } }), ctx),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID', errors: [{ path: 'filter.price.$gte' }] });
    expect(caches.resolveAlias('products')).toBeNull();
    // Named by its source column, the same filter serves what it keeps.
    const pipeline = await startEndpointPipeline(
      products({ select: { id: 'id', cost: 'price' }, filter: { price: { $gte: 100 } } }),
      ctx,
    );
    await pipeline.whenServing();
    await waitFor(async () => (await served(caches, 'products', [10])) !== undefined, {
      timeoutMs: 15_000,
      what: 'record 10 served',
    });
    expect(await served(caches, 'products', [10])).toEqual({ id: 10, cost: 100 });
    expect(await served(caches, 'products', [9])).toBeUndefined();
    await pipeline.stop();
  });

  it('defect: an index or a primary key on a field the PostgreSQL source does not have was accepted, and indexed nothing', async () => {
    await using fx = await pgFixture('sluice_pipeline_keyfields');
    const { caches } = fx;
    const { ctx } = fx;
    // A typo'd index field, with the fields left to the source's columns.
    await expect(
      startEndpointPipeline(products({ indexes: [['cat'], ['cat', 'prcie']] }), ctx),
    ).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      errors: [{ path: 'indexes[1][1]', message: expect.stringMatching(/unknown field "prcie".*price/) }],
    });
    // Names are the cache's, after `select`: the source column's name is not one of them.
    await expect(
      startEndpointPipeline(products({ select: { id: 'id', cost: 'price' }, indexes: [['price']] }), ctx),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID', errors: [{ path: 'indexes[0][0]' }] });
    await expect(startEndpointPipeline(products({ primaryKey: ['ident'] }), ctx)).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      errors: [{ path: 'primaryKey[0]' }],
    });
    expect(caches.resolveAlias('products')).toBeNull();
    // Spelled right, it serves, indexed.
    const pipeline = await startEndpointPipeline(
      products({ select: { id: 'id', cost: 'price' }, indexes: [['cost']] }),
      ctx,
    );
    await pipeline.whenServing();
    await expect(caches.info(caches.resolveAlias('products')!.cache)).resolves.toMatchObject({
      schema: { indexes: [['cost']], fields: { id: 'integer', cost: 'number' } },
    });
    await pipeline.stop();
  });

  it('a record the schema refuses while streaming shows in the status: its count and the last reason', async () => {
    await using fx = await pgFixture('sluice_pipeline_badstatus');
    const { client, caches } = fx;
    // Configured fields are the operator's word: a fractional price is refused.
    const pipeline = await startEndpointPipeline(
      products({
        fields: { id: 'integer', name: 'string', price: 'integer', cat: 'string', updated_at: 'timestamp' },
      }),
      fx.ctx,
    );
    await pipeline.whenServing();
    expect(pipeline.status().badRecords).toEqual({ count: 0, last: null });
    for (const sql of FRACTIONAL_UPDATE) await client.query(sql);
    const bad = await waitFor(
      () => {
        const { badRecords } = pipeline.status();
        return badRecords.count >= 2 ? badRecords : null;
      },
      { timeoutMs: 15_000, what: 'the refused records in the status' },
    );
    expect(bad.last).toMatchObject({
      source: 'products.source',
      reason: expect.stringMatching(/^field "price": expected an integer, got number (10\.5|2\.25)$/),
    });
    expect(Date.parse(bad.last!.at)).toBeGreaterThan(Date.now() - 60_000);
    // The refused update is row 42's current state: the endpoint no longer holds the value PostgreSQL replaced (once
    // the commit after the refusal landed: the status counts a refusal as it reads it).
    await waitFor(async () => (await served(caches, 'products', [42])) === undefined, {
      timeoutMs: 15_000,
      what: 'row 42 to be gone from the endpoint',
    });
    expect(await served(caches, 'products', [41])).toMatchObject({ name: 'p41', price: 410 });
    expect(await served(caches, 'products', [999999])).toBeUndefined();
    await pipeline.stop();
  });

  it('types follow the columns through select renames and a filter, and for query sources', async () => {
    await using fx = await pgFixture('sluice_pipeline_pgtypes', false);
    const { client, caches } = fx;
    await client.query(`CREATE TABLE things (
        id bigint PRIMARY KEY, small int2, n4 int4, f4 real, f8 double precision, money numeric(10,2),
        flag boolean, label varchar(20), code char(3), u uuid, doc jsonb, j json, tags text[], nums int4[],
        at timestamp, atz timestamptz, note text, rev bigserial)`);
    await client.query(`INSERT INTO things (id, small, n4, f4, f8, money, flag, label, code, u, doc, j, tags,
          nums, at, atz, note)
        SELECT g, g, g, g, g, g, g % 2 = 0, 'l' || g, 'c' || g % 10, gen_random_uuid(), jsonb_build_object('g', g),
          json_build_array(g), ARRAY['t' || g], ARRAY[g], '2026-01-01 10:00:00', '2026-01-01 10:00:00+00', NULL
        FROM generate_series(1, 20) g`);
    const connections = { db: { type: 'postgres' as const, url: fx.url } };
    const table = await startEndpointPipeline(
      {
        name: 'things',
        source: { type: 'postgres', connection: 'db', table: 'things', cursor: 'rev' },
        primaryKey: ['key'],
        indexes: [['cost']],
        filter: { flag: true },
        select: {
          key: 'id',
          cost: 'money',
          ratio: 'f4',
          label: 'label',
          when: 'atz',
          doc: 'doc',
          tags: 'tags',
        },
      },
      { caches, events, connections, commitEveryMs: 50 },
    );
    await table.whenServing();
    expect(await servedFields(caches, 'things')).toEqual({
      key: 'integer',
      cost: 'number',
      ratio: 'number',
      label: 'string',
      when: 'timestamp',
      doc: 'json',
      tags: 'json',
    });
    // numeric(10,2) reads 10.50 as the number 10.5 (not the text "10.50"), so the `number` field takes it.
    await client.query(
      `UPDATE things SET money = 10.50, f4 = 0.25, rev = nextval('things_rev_seq') WHERE id = 2`,
    );
    await waitFor(async () => (await served(caches, 'things', [2]))?.cost === 10.5, {
      timeoutMs: 15_000,
      what: 'the fractional numeric(10,2) update',
    });
    expect(await served(caches, 'things', [2])).toMatchObject({ key: 2, ratio: 0.25, tags: ['t2'] });
    expect(table.status().badRecords.count).toBe(0);
    await table.stop();

    const query = await startEndpointPipeline(
      {
        name: 'things_q',
        source: {
          type: 'postgres',
          connection: 'db',
          query:
            'SELECT id, small, n4, f8, flag, code, u, j, nums, at, note, n4 * 2.0 AS computed FROM things',
          key: 'id',
        },
        primaryKey: ['id'],
        indexes: [],
      },
      { caches, events, connections, commitEveryMs: 50 },
    );
    await query.whenServing();
    expect(await servedFields(caches, 'things_q')).toEqual({
      id: 'integer',
      small: 'integer',
      n4: 'integer',
      f8: 'number',
      flag: 'boolean',
      code: 'string',
      u: 'string',
      j: 'json',
      nums: 'json',
      at: 'timestamp',
      note: 'string', // always NULL: typed by its column, not `json` for want of a value
      computed: 'number', // a numeric expression (n4 * 2.0: "6.0", whole values only)
    });
    expect(await served(caches, 'things_q', [3])).toMatchObject({
      computed: 6,
      at: '2026-01-01T10:00:00.000000Z', // a zoneless timestamp, stored as its UTC instant
    });
    expect(query.status().badRecords.count).toBe(0);
    await query.stop();
  });

  it('a serving generation typed integer from whole values is rebuilt with the column type on restart', async () => {
    await using fx = await pgFixture('sluice_pipeline_retype');
    const { client, caches } = fx;
    const { ctx } = fx;
    // What an earlier version inferred from whole prices (configured here to get the same generation).
    const sampled = {
      id: 'integer',
      name: 'string',
      price: 'integer',
      cat: 'string',
      updated_at: 'string',
    } as const;
    const first = await startEndpointPipeline(products({ fields: sampled }), ctx);
    const blue = await first.whenServing();
    await first.stop();
    for (const sql of FRACTIONAL_UPDATE) await client.query(sql);

    const second = await startEndpointPipeline(products(), ctx);
    expect(second.decision.decision).toBe('from-scratch');
    expect(second.decision.reason).toMatch(/schema, key or indexes changed/);
    const green = await second.whenServing();
    expect(green).not.toBe(blue);
    expect((await servedFields(caches, 'products'))?.price).toBe('number');
    expect(await served(caches, 'products', [42])).toMatchObject({ name: 'frac', price: 10.5 });
    expect(await served(caches, 'products', [999999])).toMatchObject({ price: 2.25 });
    await second.stop();

    // A serving schema that holds every column's values (here: its own) is kept: no rebuild on the next start.
    const third = await startEndpointPipeline(products(), ctx);
    expect(third.decision.decision).toBe('resume');
    await third.stop();
  });
});

describe('PostgreSQL column types as the pipeline reads them', () => {
  it('numeric is a number whenever a double holds it exactly, whatever its spelling; else its text', () => {
    const numeric = textParser(1700);
    expect(numeric('10.50')).toBe(10.5);
    expect(numeric('420')).toBe(420);
    expect(numeric('-0.000000125')).toBe(-1.25e-7);
    expect(numeric('1000000000000000000000')).toBe(1e21);
    expect(numeric('0.1000000000000000055511151231257827')).toBe('0.1000000000000000055511151231257827');
    expect(numeric('12345678901234567890')).toBe('12345678901234567890');
    expect(numeric('NaN')).toBe('NaN');
    expect(textParser(20)('9007199254740993')).toBe('9007199254740993');
  });

  it('maps each type OID to the field type of the values its parser returns', () => {
    const types = Object.fromEntries(
      Object.entries({ bool: 16, int8: 20, int2: 21, int4: 23, float4: 700, float8: 701, numeric: 1700 })
        .concat(Object.entries({ text: 25, varchar: 1043, bpchar: 1042, uuid: 2950, time: 1083, name: 19 }))
        .concat(Object.entries({ timestamp: 1114, timestamptz: 1184, json: 114, jsonb: 3802 }))
        .concat(Object.entries({ int4_array: 1007, text_array: 1009, bytea: 17, date: 1082, interval: 1186 }))
        .map(([name, oid]) => [name, fieldTypeOfPg(oid)]),
    );
    expect(types).toEqual({
      bool: 'boolean',
      int8: 'integer',
      int2: 'integer',
      int4: 'integer',
      float4: 'number',
      float8: 'number',
      numeric: 'number',
      text: 'string',
      varchar: 'string',
      bpchar: 'string',
      uuid: 'string',
      time: 'string',
      name: 'string',
      timestamp: 'timestamp',
      timestamptz: 'timestamp',
      json: 'json',
      jsonb: 'json',
      int4_array: 'json',
      text_array: 'json',
      bytea: 'string', // its hex text, \x…
      date: 'string', // its text, 2024-03-01
      interval: 'string', // its text, 1 day 02:03:04
    });
  });
});
