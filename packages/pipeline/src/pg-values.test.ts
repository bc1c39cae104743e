import { fileURLToPath } from 'node:url';
import { createTestDatabase, spawnTs, type TestDatabase } from '@sluice/testkit';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createPgValueTypes,
  expectedPgValues,
  PG_TEXTS_SQL,
  PG_VALUE_CASES,
  PG_VALUES_SQL,
} from '../test/pg-values.js';
import { connectPostgres, fieldTypeOfPg, textParser } from './pg.js';
import { parsePgArray } from './pg-parsers.js';
import { typeMismatch } from './schema.js';

const CHILD = fileURLToPath(new URL('../test/fixtures/pg-values-child.ts', import.meta.url));

let db: TestDatabase;
let client: pg.Client;
beforeAll(async () => {
  db = await createTestDatabase('sluice_pipeline_pgvalues');
  client = await connectPostgres(db.url);
  await createPgValueTypes((statement) => client.query(statement));
});
afterAll(async () => {
  await client?.end();
  await db?.[Symbol.asyncDispose]();
});

/** Reads the cases in a child process with `TZ` set: what a polled source and a replication stream read there. */
async function readInTimeZone(tz: string) {
  await using child = spawnTs(CHILD, [db.url], { env: { ...process.env, TZ: tz } });
  const exit = await child.exited;
  expect(exit, child.output()).toEqual({ code: 0, signal: null });
  const line = child.lines.find((l) => l.startsWith('{'));
  expect(line, child.output()).toBeDefined();
  return JSON.parse(line!) as { offsetMinutes: number; polled: unknown; parsed: unknown };
}

describe('PostgreSQL values as the pipeline reads them', () => {
  it('defect: a PostgreSQL date arrived as the previous day’s instant in a time zone east of UTC (TZ=Asia/Tokyo); it is read as its own text, by queries and by the replication parser alike', async () => {
    const { offsetMinutes, polled, parsed } = await readInTimeZone('Asia/Tokyo');
    expect(offsetMinutes).toBe(-540); // the child really ran in Tokyo time
    // Was "2024-02-29T15:00:00.000Z": the driver's Date at local midnight, serialized in UTC.
    expect(polled).toMatchObject({ d: '2024-03-01', d_a: ['2024-03-01', null, 'infinity', '0044-03-15 BC'] });
    expect(parsed).toMatchObject({ d: '2024-03-01' });
    expect(polled).toEqual(expectedPgValues());
    expect(parsed).toEqual(expectedPgValues());
  });

  it('defect: timestamp and date arrays arrived as arrays of Dates (microseconds lost), bytea as a Buffer, interval as an object; a query reads every type as a JSON value', async () => {
    const result = await client.query(PG_VALUES_SQL);
    const row = result.rows[0] as Record<string, unknown>;
    expect(row).toEqual(expectedPgValues());
    // Nothing a JSON round trip changes: no Date, Buffer, NaN or driver object is left.
    expect(JSON.parse(JSON.stringify(row))).toEqual(row);
  });

  it('textParser reads PostgreSQL’s text of each type (what pgoutput streams) exactly as a query reads the value', async () => {
    const values = await client.query(PG_VALUES_SQL);
    const texts = await client.query<Record<string, string>>(PG_TEXTS_SQL);
    for (const c of PG_VALUE_CASES) {
      const oid = c.oid ?? values.fields.find((f) => f.name === c.name)!.dataTypeID;
      expect(textParser(oid)(texts.rows[0]![c.name]!), `${c.name} (${c.type})`).toEqual(c.value);
    }
  });

  it('fieldTypeOfPg agrees with the parsers: each column’s field type is the type of the values it reads', async () => {
    const result = await client.query(PG_VALUES_SQL);
    const fields = Object.fromEntries(result.fields.map((f) => [f.name, fieldTypeOfPg(f.dataTypeID)]));
    expect(fields).toEqual(Object.fromEntries(PG_VALUE_CASES.map((c) => [c.name, c.field])));
    for (const c of PG_VALUE_CASES) {
      if (c.oid !== null) expect(fieldTypeOfPg(c.oid), c.name).toBe(c.field);
      // The documented refusals: numbers a double cannot hold stay text, which number and integer fields refuse.
      const fits = typeMismatch(c.value, c.field) === null;
      expect(fits, `${c.name}: ${String(c.value)} as ${c.field}`).toBe(!c.refused);
    }
  });
});

describe('parsePgArray', () => {
  const id = (text: string) => text;

  it('reads PostgreSQL array literals: quoting, escapes, NULL, nesting, bounds, empty arrays', () => {
    expect(parsePgArray('{}', id)).toEqual([]);
    expect(parsePgArray('{a,NULL,"NULL",""}', id)).toEqual(['a', null, 'NULL', '']);
    expect(parsePgArray('{"a,b","c\\"d","e\\\\f"," g "}', id)).toEqual(['a,b', 'c"d', 'e\\f', ' g ']);
    expect(parsePgArray('{{1,2},{3,NULL}}', Number)).toEqual([
      [1, 2],
      [3, null],
    ]);
    expect(parsePgArray('[0:1]={7,8}', Number)).toEqual([7, 8]);
    expect(parsePgArray('{{"{}",x}}', id)).toEqual([['{}', 'x']]);
  });

  it('refuses text that is not an array literal rather than guessing', () => {
    expect(() => parsePgArray('1,2', id)).toThrow(/not a PostgreSQL array/);
    expect(() => parsePgArray('{1,2', id)).toThrow(/not a PostgreSQL array/);
  });
});
